//! Compact span records and the trace tree they form.

use std::collections::HashMap;

use weft_model::{Span, SpanId, conv};

use super::options::GroupBy;
use super::rules::Classifier;

#[derive(Debug, Clone, Copy)]
pub(super) struct Item {
    pub(super) id: SpanId,
    pub(super) parent: Option<SpanId>,
    pub(super) start: u64,
    pub(super) end: u64,
    pub(super) group: u32,
    pub(super) span_mask: u64,
    pub(super) root_mask: u64,
    /// The span is marked `weft.incomplete=true` (its opening or closing event is missing).
    pub(super) incomplete: bool,
}

#[derive(Debug, Default, Clone)]
pub(super) struct Groups {
    ids: HashMap<String, u32>,
    pub(super) names: Vec<String>,
    pub(super) kinds: Vec<Option<String>>,
}

impl Groups {
    fn intern(&mut self, span: &Span, by: &GroupBy) -> u32 {
        let key = by.key(span);
        if let Some(&i) = self.ids.get(key.as_ref()) {
            return i;
        }
        let i = self.names.len() as u32;
        self.ids.insert(key.to_string(), i);
        self.names.push(key.into_owned());
        self.kinds.push(span.resource.attributes.get_str(conv::COMPONENT_KIND).map(str::to_owned));
        i
    }
}

pub(super) fn item(span: &Span, groups: &mut Groups, by: &GroupBy, cls: &Classifier) -> Item {
    Item {
        id: span.span_id,
        parent: span.parent_span_id,
        start: span.start_ns,
        // A span ending before it starts is taken as zero-length.
        end: span.end_ns.max(span.start_ns),
        group: groups.intern(span, by),
        span_mask: if cls.rules.is_empty() { 0 } else { cls.span_mask(span) },
        root_mask: if cls.rules.is_empty() { 0 } else { cls.root_mask(span) },
        incomplete: span.attributes.get(conv::INCOMPLETE).and_then(|v| v.as_bool()).unwrap_or(false),
    }
}

/// Parent links, children, depths and a parents-first order of one trace. Spans whose parent
/// is absent are roots; a parent cycle is broken at one edge (that member becomes a root).
pub(super) struct Tree {
    pub(super) parent: Vec<Option<usize>>,
    /// Children of `i`: `child[child_at[i]..child_at[i + 1]]`.
    child_at: Vec<u32>,
    child: Vec<u32>,
    pub(super) depth: Vec<u32>,
    pub(super) order: Vec<usize>,
    pub(super) duplicates: u64,
}

impl Tree {
    pub(super) fn new(items: &[Item]) -> Tree {
        let n = items.len();
        // Span id → index of the first span with it (sorted pairs: fewer allocations and
        // faster than a hash map for the small traces that dominate).
        let mut ids: Vec<(SpanId, u32)> = items.iter().enumerate().map(|(i, it)| (it.id, i as u32)).collect();
        ids.sort_unstable();
        let duplicates = ids.windows(2).filter(|w| w[0].0 == w[1].0).count() as u64;
        let find = |id: SpanId| {
            let k = ids.partition_point(|e| e.0 < id);
            ids.get(k).filter(|e| e.0 == id).map(|e| e.1 as usize)
        };
        let mut parent: Vec<Option<usize>> =
            items.iter().enumerate().map(|(i, it)| it.parent.and_then(find).filter(|&p| p != i)).collect();
        // Break cycles: walk up from each span; an edge back into the current walk closes one.
        let mut state = vec![0u8; n]; // 0 unseen, 1 on the current walk, 2 done
        let mut walk = Vec::new();
        for i in 0..n {
            let mut cur = i;
            while state[cur] == 0 {
                state[cur] = 1;
                walk.push(cur);
                match parent[cur] {
                    Some(p) if state[p] == 1 => parent[cur] = None,
                    Some(p) => cur = p,
                    None => {}
                }
            }
            for &k in &walk {
                state[k] = 2;
            }
            walk.clear();
        }
        let mut child_at = vec![0u32; n + 1];
        for p in parent.iter().flatten() {
            child_at[p + 1] += 1;
        }
        for k in 1..=n {
            child_at[k] += child_at[k - 1];
        }
        let mut fill = child_at.clone();
        let mut child = vec![0u32; child_at[n] as usize];
        for (i, p) in parent.iter().enumerate() {
            if let Some(p) = *p {
                child[fill[p] as usize] = i as u32;
                fill[p] += 1;
            }
        }
        let mut depth = vec![0u32; n];
        let mut order: Vec<usize> = (0..n).filter(|&i| parent[i].is_none()).collect();
        let mut k = 0;
        while k < order.len() {
            let i = order[k];
            k += 1;
            for &c in &child[child_at[i] as usize..child_at[i + 1] as usize] {
                depth[c as usize] = depth[i].saturating_add(1);
                order.push(c as usize);
            }
        }
        Tree { parent, child_at, child, depth, order, duplicates }
    }

    pub(super) fn children(&self, i: usize) -> &[u32] {
        &self.child[self.child_at[i] as usize..self.child_at[i + 1] as usize]
    }
}
