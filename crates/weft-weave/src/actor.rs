//! Actors: per-source stages that run on the source's thread right after parsing, before
//! events enter the merge (Columbo's filters and its symbol resolution, spec §1.3, §5, §8).
//!
//! In order:
//!
//! 1. **Symbolizer** (sources with symbol tables): an executed macro-op (`HostInstr` with
//!    `macro_op`, i.e. a gem5 macro-op line or a QEMU translation-block entry) whose PC is
//!    exactly a function's first address becomes `HostCall { func, comp = table id }` — the
//!    first instruction of a function, which is what Columbo calls a call. Lookups are exact
//!    (as Columbo's); tables are searched in order, the first that knows the PC wins.
//! 2. **Blacklist**: `HostCall`s of the listed hot helpers are dropped.
//! 3. **Type filter**: event types to drop (default `HostInstr`, `SimSendSync`,
//!    `SimProcInEvent`, as Columbo's `TypesToFilter`) — so unresolved instructions go here.
//! 4. **Time window** on converted time (ns) or raw time (the source's unit, like Columbo's
//!    `--ts-lower-bound/--ts-upper-bound` in ps).
//! 5. **Components**: keep only events of the listed components — source names, and for a
//!    network `<net>/<node>` or `<net>/<node>/dev<D>` (Columbo's ns-3 device filter); plus
//!    optionally only packets the ns-3 fork marked interesting.
//!
//! Every dropped event is counted per reason in [`ActorStats`].

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use weft_model::Event;
use weft_model::event::{EventKind, HostEvent};
use weft_sources::reject::ReasonCounts;
use weft_sources::symbols::Symbolizer;

/// Which events to keep (one filter for the whole topology).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilterSpec {
    /// Event type names to drop (`HostInstr`, `NicMmioR`, ...).
    pub drop_types: Vec<String>,
    /// Keep only events at or after this time (ns since the epoch).
    pub from_ns: Option<u64>,
    /// Keep only events before this time (ns).
    pub to_ns: Option<u64>,
    /// Keep only events at or after this raw time (the source's unit).
    pub from_raw: Option<u64>,
    /// Keep only events before this raw time.
    pub to_raw: Option<u64>,
    /// Keep only these components (empty: all).
    pub components: Vec<String>,
    /// Drop network events of packets the ns-3 fork did not mark interesting.
    pub only_interesting: bool,
    /// Calls of these functions are dropped.
    pub blacklist: Vec<String>,
}

impl Default for FilterSpec {
    fn default() -> Self {
        FilterSpec {
            drop_types: vec!["HostInstr".into(), "SimSendSync".into(), "SimProcInEvent".into()],
            from_ns: None,
            to_ns: None,
            from_raw: None,
            to_raw: None,
            components: Vec::new(),
            only_interesting: false,
            blacklist: Vec::new(),
        }
    }
}

/// What the actors of one source did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ActorStats {
    /// Instructions resolved to calls.
    pub symbolized: u64,
    /// Events dropped, per reason.
    pub dropped: ReasonCounts,
}

/// Which components of a source the component filter keeps.
#[derive(Debug, Clone)]
enum Keep {
    All,
    Nothing,
    /// Network: (node, None = all devices | Some(device)).
    Net(HashSet<(u32, Option<u32>)>),
}

/// A function name and the identifier of the table it came from.
type FuncAndTable = (Arc<str>, Arc<str>);

/// The actor chain of one source (see the module docs).
pub struct Actors {
    symbols: Option<HashMap<u64, FuncAndTable>>,
    blacklist: HashSet<Box<str>>,
    drop_types: HashSet<String>,
    /// `drop_types` decisions by type-name address: event type names are `&'static str`s
    /// from a fixed list, so after the first event of a type no string is hashed.
    drop_memo: Vec<(usize, usize, bool)>,
    spec: FilterSpec,
    keep: Keep,
    stats: ActorStats,
}

/// Whether `drop_types` holds `name`, memoized by the name's address and length (the same
/// address and length is the same text; a miss only costs a hash).
#[inline]
fn dropped_type(
    drop_types: &HashSet<String>,
    memo: &mut Vec<(usize, usize, bool)>,
    name: &'static str,
) -> bool {
    let key = (name.as_ptr() as usize, name.len());
    if let Some(&(_, _, d)) = memo.iter().find(|m| (m.0, m.1) == key) {
        return d;
    }
    let d = drop_types.contains(name);
    if memo.len() < 64 {
        memo.push((key.0, key.1, d));
    }
    d
}

impl Actors {
    /// The actors of source `name` (network node names in `nodes`), with `symbols` if it has
    /// symbol tables.
    pub fn new(
        name: &str,
        nodes: &BTreeMap<u32, String>,
        symbols: Option<&Symbolizer>,
        spec: &FilterSpec,
    ) -> Self {
        let symbols = symbols.map(|s| {
            let mut m = HashMap::new();
            for t in s.tables() {
                for sym in t.symbols() {
                    m.entry(sym.addr).or_insert_with(|| (sym.name.clone(), t.id().clone()));
                }
            }
            m
        });
        let keep = if spec.components.is_empty() || spec.components.iter().any(|c| c == name) {
            Keep::All
        } else {
            let mut set = HashSet::new();
            let prefix = format!("{name}/");
            for c in &spec.components {
                let Some(rest) = c.strip_prefix(&prefix) else { continue };
                let (node_name, dev) = match rest.split_once("/dev") {
                    Some((n, d)) => (n, d.parse::<u32>().ok()),
                    None => (rest, None),
                };
                let node = nodes
                    .iter()
                    .find(|(_, n)| n.as_str() == node_name)
                    .map(|(i, _)| *i)
                    .or_else(|| node_name.strip_prefix("node").and_then(|x| x.parse().ok()));
                if let Some(node) = node {
                    set.insert((node, dev));
                }
            }
            if set.is_empty() { Keep::Nothing } else { Keep::Net(set) }
        };
        Actors {
            symbols,
            blacklist: spec.blacklist.iter().map(|s| s.as_str().into()).collect(),
            drop_types: spec.drop_types.iter().cloned().collect(),
            drop_memo: Vec::new(),
            spec: spec.clone(),
            keep,
            stats: ActorStats::default(),
        }
    }

    /// Runs the chain over a batch in place.
    pub fn apply(&mut self, events: &mut Vec<Event>) {
        let Actors { symbols, blacklist, drop_types, drop_memo, spec, keep, stats } = self;
        events.retain_mut(|e| {
            if let Some(map) = symbols
                && let EventKind::Host(HostEvent::Instr { pc, macro_op: true }) = e.kind
                && let Some((func, comp)) = map.get(&pc)
            {
                e.kind = EventKind::Host(HostEvent::Call { pc, func: func.clone(), comp: comp.clone() });
                stats.symbolized += 1;
            }
            if !blacklist.is_empty()
                && let EventKind::Host(HostEvent::Call { func, .. }) = &e.kind
                && blacklist.contains(func.as_ref())
            {
                stats.dropped.add("blacklisted function", 1);
                return false;
            }
            if !drop_types.is_empty() && dropped_type(drop_types, drop_memo, e.type_name()) {
                stats.dropped.add(
                    if matches!(e.kind, EventKind::Host(HostEvent::Instr { .. })) {
                        "instruction (type filter; not a function entry)"
                    } else {
                        "type filter"
                    },
                    1,
                );
                return false;
            }
            if spec.from_ns.is_some_and(|t| e.time_ns < t)
                || spec.to_ns.is_some_and(|t| e.time_ns >= t)
                || spec.from_raw.is_some_and(|t| e.raw_time < t)
                || spec.to_raw.is_some_and(|t| e.raw_time >= t)
            {
                stats.dropped.add("outside the time window", 1);
                return false;
            }
            match keep {
                Keep::All => {}
                Keep::Nothing => {
                    stats.dropped.add("component filter", 1);
                    return false;
                }
                Keep::Net(set) => {
                    let ok = match &e.kind {
                        EventKind::Net(n) => {
                            set.contains(&(n.node, None)) || set.contains(&(n.node, Some(n.device)))
                        }
                        _ => false,
                    };
                    if !ok {
                        stats.dropped.add("component filter", 1);
                        return false;
                    }
                }
            }
            if spec.only_interesting
                && let EventKind::Net(n) = &e.kind
                && n.interesting == Some(false)
            {
                stats.dropped.add("packet not marked interesting", 1);
                return false;
            }
            true
        });
    }

    /// The statistics so far.
    pub fn stats(&self) -> &ActorStats {
        &self.stats
    }
}
