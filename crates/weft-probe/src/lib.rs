//! # weft-probe
//!
//! In-process instrumentation for Rust (and, through `weft-probe-c`, C and C++): static
//! tracepoints switchable at run time, per-thread lock-free rings in shared memory, spans with
//! context propagation, and a `tracing` layer.
//!
//! ```
//! use weft_probe::{tracepoint, event, span, Level};
//!
//! tracepoint!(static WRITE = "blocker.write", Debug, group = "blocker", fields = [offset: u64, len: u64]);
//! tracepoint!(static REQUEST = "gateway.request", Info, fields = [path: str], flags = [span, always_on]);
//!
//! fn handle(path: &str) {
//!     let s = span!(REQUEST, path = path);      // always on: recorded
//!     s.annotate(weft_probe::annotation::SR);
//!     event!(WRITE, offset = 4096u64, len = 512u64); // off until enabled: one load + branch
//! }
//!
//! weft_probe::enable(&"group:blocker".parse().unwrap()); // switch on at run time
//! handle("/v1/obj");
//! ```
//!
//! ## Pieces
//!
//! * [`tracepoint!`] declares a `static` [`Tracepoint`] (name, [`Level`], optional group, field
//!   spec, flags). Every tracepoint linked into the process is listed by the [`registry`]
//!   (linker section `weft_tracepoints`; see its docs), enabled or not.
//! * Switches: [`enable`], [`disable`], [`force_disable`] over a [`Selector`] (exact name, glob,
//!   group, level). Always-on tracepoints (`flags = [always_on]`) ignore plain disables. At
//!   start, `WEFT_PROBE_ENABLE` / `WEFT_PROBE_DISABLE` (comma-separated selectors) apply.
//! * Disabled cost: [`Tracepoint::active`] (enabled, or a live query installed) is one relaxed
//!   load of a byte and a branch; the recording path is a separate `#[cold]` function, so
//!   nothing else is inlined at the site but a live query's pre-filter (one word of the
//!   tracepoint, checked only when it is active; see [`query`]).
//! * Enabled events go into the calling thread's ring ([`layout`]) without locks or allocation,
//!   timestamped from the TSC ([`clock`]). A full ring drops the record and counts it.
//! * Spans ([`Span`], [`span!`]): begin/end records, per-thread parent/child context, Zipkin
//!   annotations (`cs`/`sr`/`ss`/`cr`), key/value annotations, [`Endpoint`]s; propagation with
//!   [`Context`] (W3C `traceparent`, B3, binary).
//! * The segment is a file under `/dev/shm/weft-<uid>/` that the agent maps; its layout is the
//!   process↔agent contract ([`layout`]); the agent side is [`consumer`]. Without an agent, the
//!   rings live in private memory and [`capture`] drains them to a file in-process.
//! * Live queries ([`query`]): a plan installed on a tracepoint filters, groups and aggregates
//!   its events in-process into bounded per-thread tables; [`agg`] holds the mergeable
//!   aggregate states every level of a query shares (counts, sums, extremes, averages, log2 and
//!   linear histograms, a quantile sketch) and their compact serialized form. An agent installs,
//!   removes and collects them through the segment's [`mailbox`], answered by the process's
//!   control thread. A plan may also carry fields into the request's [`baggage`], which
//!   travels with the context to other processes and groups a downstream plan's aggregate
//!   (Pivot Tracing's happened-before join).
//! * Feature `tracing`: [`tracing_layer::WeftLayer`] records `tracing` spans and events.

pub mod agg;
pub mod baggage;
pub mod capture;
pub mod clock;
pub mod consumer;
pub mod context;
pub mod layout;
pub mod mailbox;
mod mem;
pub mod query;
pub mod registry;
pub mod segment;
pub mod select;
pub mod span;
mod thread;
pub mod tracepoint;
#[cfg(feature = "tracing")]
pub mod tracing_layer;
pub mod value;

pub use context::{Context, ContextError};
pub use registry::{Op, Switched, TracepointInfo};
pub use segment::{Config, Mode};
pub use select::{Selector, SelectorError};
pub use span::{ContextGuard, Endpoint, Span, SpanKind, annotation};
pub use thread::{random_id, tid};
pub use tracepoint::{Level, Tracepoint};
pub use value::{Fields, KeyedValue, Value};

impl std::str::FromStr for Selector {
    type Err = SelectorError;
    fn from_str(s: &str) -> Result<Selector, SelectorError> {
        Selector::parse(s)
    }
}

/// Configure and start the probe runtime: walks the registry and creates the segment (so an
/// agent sees the process before its first event). Optional — everything starts lazily — but a
/// configuration only takes effect before the segment exists; returns `false` when it was too
/// late for `config`.
pub fn init(config: Config) -> bool {
    let fresh = segment::configure(config);
    registry::init();
    segment::get_or_create();
    fresh
}

/// [`init`] with [`Config::from_env`].
pub fn init_from_env() {
    init(Config::from_env());
}

/// Mark the process as ending normally (sets the segment's exited flag; the records stay
/// drainable). Call before `exit` if you like; a crash simply leaves the flag clear.
pub fn shutdown() {
    if let Some(s) = segment::get() {
        s.mark_exited();
    }
}

/// Enable every tracepoint `sel` matches.
pub fn enable(sel: &Selector) -> Switched {
    registry::enable(sel)
}

/// Disable every tracepoint `sel` matches, except always-on ones.
pub fn disable(sel: &Selector) -> Switched {
    registry::disable(sel)
}

/// Disable every matching tracepoint, always-on ones included.
pub fn force_disable(sel: &Selector) -> Switched {
    registry::force_disable(sel)
}

/// Every tracepoint in the process (enabled or not).
pub fn list() -> Vec<TracepointInfo> {
    registry::list()
}

#[doc(hidden)]
pub mod __private {
    pub use crate::span::{begin, emit};
    pub use crate::tracepoint::{FLAG_ALWAYS_ON, FLAG_DEFAULT_ON, FLAG_SPAN};

    #[macro_export]
    #[doc(hidden)]
    macro_rules! __weft_flag {
        (always_on) => {
            $crate::__private::FLAG_ALWAYS_ON
        };
        (default_on) => {
            $crate::__private::FLAG_DEFAULT_ON
        };
        (span) => {
            $crate::__private::FLAG_SPAN
        };
    }

    #[macro_export]
    #[doc(hidden)]
    macro_rules! __weft_group {
        () => {
            "\0"
        };
        ($g:literal) => {
            concat!($g, "\0")
        };
    }
}

/// Declare a tracepoint `static`:
///
/// ```
/// weft_probe::tracepoint!(pub static TP = "mapper.lookup", Debug,
///     group = "mapper", fields = [volume: str, block: u64], flags = [default_on]);
/// ```
///
/// The level is a [`Level`] variant. `group`, `fields` and `flags` are optional and come in
/// this order. Field types (`i64 u64 f64 bool str bytes`) are documentation for readers of the
/// registry; records carry their own type tags. Flags: `always_on` (on at start and immune to
/// plain disables), `default_on` (on at start), `span` (the tracepoint opens spans).
#[macro_export]
macro_rules! tracepoint {
    ($(#[$m:meta])* $vis:vis static $id:ident = $name:literal, $level:ident
        $(, group = $group:literal)?
        $(, fields = [$($fname:ident $(: $fty:ident)?),* $(,)?])?
        $(, flags = [$($flag:ident),* $(,)?])? $(,)?) => {
        $(#[$m])*
        $vis static $id: $crate::Tracepoint = $crate::Tracepoint::new(
            concat!($name, "\0"),
            $crate::Level::$level,
            $crate::__weft_group!($($group)?),
            concat!($($(stringify!($fname), $(":", stringify!($fty),)? ",",)*)? "\0"),
            0 $($(| $crate::__weft_flag!($flag))*)?,
            concat!(file!(), "\0"),
            line!(),
        );
        const _: () = {
            #[used]
            #[unsafe(link_section = "weft_tracepoints")]
            static ENTRY: &$crate::Tracepoint = &$id;
        };
    };
}

/// Record an event at a tracepoint if it is enabled: `event!(TP, a = x, b = y)`. Values are
/// matched to the tracepoint's fields by position (the names are for the reader); they are
/// evaluated only when the tracepoint is enabled or a live query ([`query`]) is installed on it.
#[macro_export]
macro_rules! event {
    ($tp:expr $(, $k:ident = $v:expr)* $(,)?) => {
        if $tp.active() {
            // a match, not a let: temporaries in the arguments live until the event is emitted
            match ($($v,)*) {
                __weft_fields => {
                    if $tp.prefilter_pass(&__weft_fields) {
                        $crate::__private::emit(&$tp, __weft_fields);
                    }
                }
            }
        }
    };
}

/// Begin a span at a tracepoint (internal kind, parent = the thread's current span) with
/// optional start fields: `let s = span!(TP, path = p);`. Disabled → a no-op [`Span`].
#[macro_export]
macro_rules! span {
    ($tp:expr $(, $k:ident = $v:expr)* $(,)?) => {
        if $tp.enabled() {
            $crate::__private::begin(&$tp, $crate::SpanKind::Internal, None, ($($v,)*))
        } else {
            $crate::Span::disabled()
        }
    };
}

/// One-shot tracepoint + event: `probe!("cache.miss", Debug, key = k)` declares the static in
/// place (it is listed in the registry like any other).
#[macro_export]
macro_rules! probe {
    ($name:literal, $level:ident $(, $k:ident = $v:expr)* $(,)?) => {{
        $crate::tracepoint!(static __WEFT_TP = $name, $level, fields = [$($k),*]);
        $crate::event!(__WEFT_TP $(, $k = $v)*);
    }};
}
