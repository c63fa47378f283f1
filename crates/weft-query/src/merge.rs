//! Merging partial results into windows, and finishing a window into rows (with top-N).

use crate::plan::{LivePlan, OutCol};
use std::collections::BTreeMap;
use weft_probe::agg::{AggKind, KeyValue, Output, Partial, ShapeError};

/// Partials merged per window (window start in ns since the Unix epoch). Bounded: at most
/// `max_windows` windows are kept (the oldest are finished first by the caller; older ones
/// beyond the bound are dropped and counted).
#[derive(Debug, Clone)]
pub struct Windows {
    pub windows: BTreeMap<u64, Partial>,
    pub max_windows: usize,
    /// Partials dropped because their window was older than every kept one and the bound was
    /// reached.
    pub late: u64,
}

impl Windows {
    pub fn new(max_windows: usize) -> Windows {
        Windows { windows: BTreeMap::new(), max_windows: max_windows.max(1), late: 0 }
    }

    /// Merge one agent's (or thread's) partial into its window.
    pub fn add(&mut self, window_start: u64, p: &Partial) -> Result<(), ShapeError> {
        if !self.windows.contains_key(&window_start) && self.windows.len() >= self.max_windows {
            match self.windows.keys().next() {
                Some(oldest) if *oldest < window_start => {
                    let oldest = *oldest;
                    self.windows.remove(&oldest);
                }
                _ => {
                    self.late += 1;
                    return Ok(());
                }
            }
        }
        self.windows.entry(window_start).or_default().merge(p)
    }

    /// Remove and return every window that started before `before`.
    pub fn take_before(&mut self, before: u64) -> Vec<(u64, Partial)> {
        let keep = self.windows.split_off(&before);
        std::mem::replace(&mut self.windows, keep).into_iter().collect()
    }
}

/// One result cell.
#[derive(Debug, Clone, PartialEq)]
pub enum Cell {
    Key(KeyValue),
    Value(Output),
}

/// A window's rows: the output columns of every group, ordered and cut by the plan's top-N
/// (groups in key order otherwise).
pub fn rows(plan: &LivePlan, p: &Partial) -> Vec<Vec<Cell>> {
    let kinds: Vec<AggKind> = plan.kinds();
    let mut groups: Vec<(&Vec<KeyValue>, &Vec<weft_probe::agg::State>)> = p.groups.iter().collect();
    if let Some((col, desc)) = plan.order {
        let key_of = |g: &(&Vec<KeyValue>, &Vec<weft_probe::agg::State>)| -> f64 {
            match plan.outputs[col].1 {
                OutCol::Agg(i) => g.1.get(i).map_or(f64::NEG_INFINITY, |s| s.sort_key(&kinds[i])),
                OutCol::Key(_) => 0.0,
            }
        };
        match plan.outputs[col].1 {
            OutCol::Key(i) => groups.sort_by(|a, b| a.0.get(i).cmp(&b.0.get(i))),
            OutCol::Agg(_) => groups.sort_by(|a, b| key_of(a).total_cmp(&key_of(b))),
        }
        if desc {
            groups.reverse();
        }
    }
    if let Some(n) = plan.limit {
        groups.truncate(n);
    }
    groups
        .into_iter()
        .map(|(key, states)| {
            plan.outputs
                .iter()
                .map(|(_, c)| match c {
                    OutCol::Key(i) => Cell::Key(key.get(*i).cloned().unwrap_or(KeyValue::Bool(false))),
                    OutCol::Agg(i) => {
                        Cell::Value(states.get(*i).map_or(Output::Null, |s| s.finish(&kinds[*i])))
                    }
                })
                .collect()
        })
        .collect()
}
