//! Where to enable the next tracepoint inside a critical-path edge.
//!
//! The edge `A → B` of a group's path is located in the potential path the group matches
//! ([`SearchSpace::match_path`]); the records strictly between `A` and `B` there belong to
//! tracepoints that were off. Of those (in path order, each once):
//!
//! * **hierarchical**: keep the outermost (the smallest depth in the span hierarchy: the
//!   children of the span enclosing the edge, before their own children) and take the middle
//!   one — a binary search among a span's children, descending a level once the variance is
//!   pinned to one child's entry → exit;
//! * **flat**: take the middle one of all of them — a binary search among the tracepoints
//!   ordered by happens-before between the edge's ends.
//!
//! No tracepoint left between the ends means the edge is as narrow as the search space allows:
//! the problem is localized there.

use crate::space::{SearchSpace, unit_of};

/// The search strategy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    /// Outermost first, the middle child.
    #[default]
    Hierarchical,
    /// The middle tracepoint between the ends.
    Flat,
}

/// What the strategy says about an edge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pick {
    /// Enable this tracepoint.
    Enable(String),
    /// Nothing is left between the ends: localized.
    Localized,
    /// The group's path matches no potential path of its request type.
    Unmatched,
}

impl Strategy {
    /// Picks inside edge `edge` (index into `path`, a group's record names) of a group of
    /// `request_type`; `is_on` says which tracepoints already are.
    pub fn pick(
        self,
        space: &SearchSpace,
        request_type: &str,
        path: &[&str],
        edge: usize,
        is_on: impl Fn(&str) -> bool,
    ) -> Pick {
        let Some((potential, pos)) = space.match_path(request_type, path) else { return Pick::Unmatched };
        let (Some(&a), Some(&b)) = (pos.get(edge), pos.get(edge + 1)) else { return Pick::Unmatched };
        let mut units: Vec<&str> = Vec::new();
        for r in &potential.records[a + 1..b] {
            let u = unit_of(r);
            if !is_on(u) && space.tracepoint(u).is_some() && !units.contains(&u) {
                units.push(u);
            }
        }
        if self == Strategy::Hierarchical
            && let Some(outer) = units.iter().map(|u| space.depth(u)).min()
        {
            units.retain(|u| space.depth(u) == outer);
        }
        match units.get(units.len().saturating_sub(1) / 2) {
            Some(u) => Pick::Enable((*u).to_owned()),
            None => Pick::Localized,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::space::Learner;
    use crate::test_support::span;
    use weft_model::Span;

    /// root ⊃ s ⊃ (a ⊃ (a0, a1, a2), b, c), sequential.
    fn trace() -> Vec<Span> {
        let s = |id, parent, name, start, end| span(1, id, parent, name, start, end);
        vec![
            s(1, 0, "root", 0, 100),
            s(2, 1, "s", 1, 99),
            s(3, 2, "a", 2, 40),
            s(4, 3, "a0", 3, 10),
            s(5, 3, "a1", 11, 20),
            s(6, 3, "a2", 21, 39),
            s(7, 2, "b", 41, 60),
            s(8, 2, "c", 61, 98),
        ]
    }

    #[test]
    fn hierarchical_and_flat() {
        let mut l = Learner::default();
        l.add(&trace()).unwrap();
        let space = l.finish().unwrap();
        let path = ["root:entry", "s:entry", "s:exit", "root:exit"];
        let off = |_: &str| false;
        let h = Strategy::Hierarchical;
        // Between s's entry and exit: children a, b, c → the middle, b.
        assert_eq!(h.pick(&space, "root", &path, 1, off), Pick::Enable("b".into()));
        // Flat: a a0 a1 a2 b c → the middle (lower), a1.
        assert_eq!(Strategy::Flat.pick(&space, "root", &path, 1, off), Pick::Enable("a1".into()));
        // With b on, the edge s:entry → b:entry holds a and its children: a first.
        let path = ["root:entry", "s:entry", "b:entry", "b:exit", "s:exit", "root:exit"];
        assert_eq!(h.pick(&space, "root", &path, 1, |u| u == "b"), Pick::Enable("a".into()));
        // b's own edge has nothing inside: localized.
        assert_eq!(h.pick(&space, "root", &path, 2, |u| u == "b"), Pick::Localized);
        assert_eq!(h.pick(&space, "other", &path, 2, off), Pick::Unmatched);
        assert_eq!(h.pick(&space, "root", &path, 9, off), Pick::Unmatched);
    }
}
