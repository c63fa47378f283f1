//! What a trace looks like with only some tracepoints on: a disabled span vanishes with its
//! attributes and its children hang under the nearest enabled ancestor; a disabled
//! annotation vanishes. The root (the request type's tracepoint) always stays.
//!
//! The replay backend shows each epoch's traces this way, and the loop views every trace of
//! a request type through that type's own tracepoints (stripping those enabled on behalf of
//! other request types, as VAIF's hypothesis trees require).

use std::collections::{BTreeSet, HashMap};

use weft_model::Span;

use crate::space::matches_any;

/// Which tracepoints are on: the always-on globs and an enabled set.
#[derive(Debug, Clone, Copy)]
pub struct Visibility<'a> {
    /// Always-on globs.
    pub always_on: &'a [String],
    /// Enabled tracepoints (exact names).
    pub enabled: &'a BTreeSet<String>,
}

impl Visibility<'_> {
    /// Whether tracepoint `name` is on.
    pub fn shows(&self, name: &str) -> bool {
        self.enabled.contains(name) || matches_any(self.always_on, name)
    }

    /// The trace as these tracepoints record it (see the module docs). Broken traces (a
    /// parent missing, a parent cycle) are passed through for the critical-path search to
    /// report.
    pub fn project(&self, spans: &[Span]) -> Vec<Span> {
        let mut shown: HashMap<&str, bool> = HashMap::new();
        let keep: Vec<bool> = spans
            .iter()
            .map(|s| {
                s.parent_span_id.is_none()
                    || *shown.entry(s.name.as_str()).or_insert_with(|| self.shows(&s.name))
            })
            .collect();
        let index: HashMap<_, usize> = spans.iter().enumerate().map(|(i, s)| (s.span_id, i)).collect();
        let mut out = Vec::with_capacity(keep.iter().filter(|&&k| k).count());
        for (s, _) in spans.iter().zip(&keep).filter(|(_, k)| **k) {
            let mut parent = s.parent_span_id;
            let mut steps = 0;
            while let Some(p) = parent {
                match index.get(&p) {
                    Some(&j) if !keep[j] && steps < spans.len() => {
                        parent = spans[j].parent_span_id;
                        steps += 1;
                    }
                    _ => break,
                }
            }
            let mut c = s.clone();
            c.parent_span_id = parent;
            c.events.retain(|e| self.shows(&format!("{}/{}", s.name, e.name)));
            out.push(c);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_model::{KeyValue, SpanEvent, SpanId, Value};

    fn span(id: u64, parent: u64, name: &str) -> Span {
        crate::test_support::span(1, id, parent, name, 0, 0)
    }

    #[test]
    fn disabled_spans_vanish_and_children_move_up() {
        let mut t = vec![span(1, 0, "root"), span(2, 1, "mid"), span(3, 2, "inner"), span(4, 3, "leaf")];
        t[1].attributes.0.push(KeyValue { key: "k".into(), value: Value::I64(1) });
        t[2].events.push(SpanEvent { name: "e".into(), ..SpanEvent::default() });
        t[2].events.push(SpanEvent { name: "f".into(), ..SpanEvent::default() });
        let enabled: BTreeSet<String> = ["leaf".to_owned(), "inner/f".to_owned()].into();
        let always = ["inne[r]".to_owned()];
        let v = Visibility { always_on: &always, enabled: &enabled };
        let p = v.project(&t);
        let names: Vec<&str> = p.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["root", "inner", "leaf"]);
        assert_eq!(p[1].parent_span_id, Some(SpanId::from_u64(1)), "inner re-parented past mid");
        assert_eq!(p[2].parent_span_id, Some(SpanId::from_u64(3)));
        assert_eq!(p[1].events.iter().map(|e| e.name.as_str()).collect::<Vec<_>>(), ["f"]);
        // Nothing on: the root alone. A parent cycle does not loop.
        let none = BTreeSet::new();
        let v = Visibility { always_on: &[], enabled: &none };
        assert_eq!(v.project(&t).len(), 1);
        let cyc = vec![span(1, 0, "root"), span(2, 3, "a"), span(3, 2, "b"), span(4, 2, "c")];
        let on: BTreeSet<String> = ["c".to_owned()].into();
        assert_eq!(Visibility { always_on: &[], enabled: &on }.project(&cyc).len(), 2);
    }
}
