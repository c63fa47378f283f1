//! Timeline attribution: every instant of a unit goes to one group or wire (see the module
//! docs of [`super`]); self times; row names.

use std::collections::BinaryHeap;

use super::WIRE;
use super::options::{RowKind, WireMode};
use super::tree::{Groups, Item, Tree};

/// Where a stretch of time goes: a group, or the wire between two groups.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) enum Slot {
    Group(u32),
    Wire(u32, u32),
}

/// Attributes `[first start, last end]` of `members` to slots (see the [`breakdown`](super)
/// docs); returns that interval. `add` gets each stretch of time with its slot and its offset
/// from the start (groups that appear get their presence from their spans, not from here).
pub(super) fn timeline(
    items: &[Item],
    members: &[usize],
    depth: &[u32],
    mut add: impl FnMut(Slot, u64, u64),
) -> (u64, u64) {
    // (time, 0 end | 1 zero-length | 2 start, depth, group, index): everything the sweep
    // needs, so it never touches `items` in time order (cache misses on big traces).
    let mut pts: Vec<(u64, u8, u32, u32, u32)> = Vec::with_capacity(members.len() * 2);
    for &i in members {
        let it = &items[i];
        let (d, g, k) = (depth[i], it.group, i as u32);
        if it.end > it.start {
            pts.push((it.start, 2, d, g, k));
            pts.push((it.end, 0, d, g, k));
        } else {
            pts.push((it.start, 1, d, g, k));
        }
    }
    if pts.is_empty() {
        return (0, 0);
    }
    pts.sort_unstable();
    let t0 = pts[0].0;
    let t_end = pts.iter().map(|p| p.0).max().unwrap_or(t0);
    // Active spans (start, depth, index, group), innermost on top; ended ones pop lazily.
    let mut active: BinaryHeap<(u64, u32, u32, u32)> = BinaryHeap::with_capacity(members.len());
    let mut ended = vec![false; items.len()];
    let mut last: Option<u32> = None;
    let mut prev = t0;
    let mut k = 0;
    while k < pts.len() {
        let t = pts[k].0;
        if t > prev {
            let dt = t - prev;
            let off = prev - t0;
            if let Some(&(_, _, _, g)) = active.peek() {
                add(Slot::Group(g), dt, off);
            } else {
                let next = pts[k..]
                    .iter()
                    .take_while(|p| p.0 == t)
                    .filter(|p| p.1 != 0)
                    .min_by_key(|p| (p.2, p.4))
                    .map(|p| p.3);
                match (last, next) {
                    (Some(a), Some(b)) if a != b => add(Slot::Wire(a, b), dt, off),
                    (Some(a), _) | (None, Some(a)) => add(Slot::Group(a), dt, off),
                    (None, None) => {}
                }
            }
        }
        if let Some(&(_, _, _, g)) = active.peek() {
            last = Some(g);
        }
        while k < pts.len() && pts[k].0 == t {
            let (_, ty, d, g, i) = pts[k];
            match ty {
                0 => ended[i as usize] = true,
                1 => last = Some(g),
                _ => active.push((t, d, i, g)),
            }
            k += 1;
        }
        while active.peek().is_some_and(|&(_, _, i, _)| ended[i as usize]) {
            active.pop();
        }
        prev = t;
    }
    (t0, t_end)
}

/// Self time of each item: its duration minus the union of its children's intervals clipped
/// to it.
pub(super) fn self_times(items: &[Item], tree: &Tree) -> Vec<u64> {
    let mut out = Vec::with_capacity(items.len());
    let mut iv: Vec<(u64, u64)> = Vec::new();
    for (i, it) in items.iter().enumerate() {
        iv.clear();
        for &c in tree.children(i) {
            let c = c as usize;
            let (s, e) = (items[c].start.max(it.start), items[c].end.min(it.end));
            if e > s {
                iv.push((s, e));
            }
        }
        iv.sort_unstable();
        let mut covered = 0u64;
        let mut cur: Option<(u64, u64)> = None;
        for &(s, e) in &iv {
            match cur {
                Some((cs, ce)) if s <= ce => cur = Some((cs, ce.max(e))),
                Some((cs, ce)) => {
                    covered += ce - cs;
                    cur = Some((s, e));
                }
                None => cur = Some((s, e)),
            }
        }
        if let Some((cs, ce)) = cur {
            covered += ce - cs;
        }
        out.push((it.end - it.start).saturating_sub(covered));
    }
    out
}

pub(super) fn row_name(slot: Slot, groups: &Groups, wire: WireMode) -> (String, RowKind, Option<String>) {
    match slot {
        Slot::Group(g) => {
            (groups.names[g as usize].clone(), RowKind::Group, groups.kinds[g as usize].clone())
        }
        Slot::Wire(a, b) => match wire {
            WireMode::Total => (WIRE.to_owned(), RowKind::Wire, None),
            WireMode::PerLink => (
                format!("{WIRE} {}→{}", groups.names[a as usize], groups.names[b as usize]),
                RowKind::Wire,
                None,
            ),
        },
    }
}

pub(super) fn collapse(slot: Slot, wire: WireMode) -> Slot {
    match (slot, wire) {
        (Slot::Wire(..), WireMode::Total) => Slot::Wire(u32::MAX, u32::MAX),
        _ => slot,
    }
}

pub(super) fn share(part: u64, whole: u64) -> f64 {
    if whole == 0 { 0.0 } else { part as f64 / whole as f64 }
}
