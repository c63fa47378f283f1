//! # weft-query
//!
//! Fay's live query language (with Pivot Tracing's happened-before join): SQL over live
//! sources — weft-probe tracepoints, kernel tracepoints, uprobes/uretprobes — parsed with
//! sqlparser, typed against the sources' schemas, planned into three levels, printed by
//! `EXPLAIN`, and the merging of partial results. The language is documented in
//! `docs/queries.md`.
//!
//! ```
//! use weft_query::{ListCatalog, plan, explain};
//! let cat = ListCatalog::new().probe("blocker.write", "offset:u64,len:u64,path:str");
//! let p = plan("SELECT path, count(*), hist(len) FROM tp('blocker.write') WHERE len > 0 GROUP BY path INTERVAL 1s", &cat).unwrap();
//! assert!(explain(&p).contains("probe level"));
//! let probe = p.probe_plan().unwrap(); // what weft_probe::query::install takes
//! assert_eq!(probe.tracepoint, "blocker.write");
//! ```
//!
//! * [`plan()`]: SQL → [`LivePlan`] or a [`QueryError`] naming line, column and reason.
//! * The three levels: probe (filter, group-key projection, partial aggregation — weft-probe's
//!   in-process interpreter runs [`LivePlan::probe_plan`], or for a happened-before join of
//!   two tracepoints the pair [`LivePlan::join_plans`], whose upstream half packs the carried
//!   columns into the request's baggage for the downstream half to group by), machine (the agent merges
//!   per-thread or per-CPU partials each interval), cluster (the collector merges agents'
//!   partials per window and applies top-N). [`explain()`] prints them.
//! * [`merge`]: windows of merged partials and the final rows. The aggregate states and their
//!   compact wire form are `weft_probe::agg` (shared with the probe level).
//!
//! Not here: deploying plans (the agent and collector), the eBPF probe level, the `weft query`
//! command, and the baggage itself (`weft_probe::baggage`; the application forwards it with
//! its requests).

pub mod explain;
pub mod merge;
pub mod plan;
pub mod source;

pub use explain::explain;
pub use plan::{Agg, Col, Join, JoinPlans, LivePlan, OutCol, QueryError, Window, plan};
pub use source::{Catalog, ListCatalog, Source, Type};
