//! The direction rule language: `LABEL: key=value, root.key=value, from=group, to=group`
//! (see [`Rule`]), parsed into a [`Classifier`] that tests spans against it.

use weft_model::{Span, Value};

use super::{ALL, MAX_RULES, attr};

/// A classification rule could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("direction rule {rule:?}: {reason}")]
pub struct RuleError {
    /// The rule text.
    pub rule: String,
    /// What is wrong.
    pub reason: String,
}

/// A value pattern: alternatives separated by `|`, each exact or a prefix ending in `*`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern(Vec<(String, bool)>);

impl Pattern {
    /// Parses `a|b|pre*`.
    pub fn parse(s: &str) -> Pattern {
        Pattern(
            s.split('|')
                .map(|alt| match alt.strip_suffix('*') {
                    Some(p) => (p.to_owned(), true),
                    None => (alt.to_owned(), false),
                })
                .collect(),
        )
    }
    /// True when `text` matches one alternative.
    pub fn matches(&self, text: &str) -> bool {
        self.0.iter().any(|(p, prefix)| if *prefix { text.starts_with(p.as_str()) } else { text == p })
    }
}

/// One condition of a [`Rule`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Condition {
    /// Span condition: the span's attribute `key` (else its resource's; the pseudo-key `name`
    /// is the span name when no such attribute exists) matches, in its text form.
    Attr {
        /// Attribute key.
        key: String,
        /// Value pattern.
        value: Pattern,
    },
    /// Trace condition: a root span's attribute (or resource attribute) `key` matches.
    Root {
        /// Attribute key.
        key: String,
        /// Value pattern.
        value: Pattern,
    },
    /// Trace condition: the group of the trace's first-starting span matches.
    From(Pattern),
    /// Trace condition: the group of the trace's last-ending span matches.
    To(Pattern),
}

impl Condition {
    fn is_span_level(&self) -> bool {
        matches!(self, Condition::Attr { .. })
    }
}

/// A labelled set of conditions that must all hold.
///
/// Text form: `LABEL: COND, COND, ...` where a condition is
///
/// * `key=value` — span condition on a span or resource attribute (`net.peer.ip=10.0.0.2`,
///   `service.name=client`, `name=hop`);
/// * `root.key=value` — the trace's root span has it;
/// * `from=group` / `to=group` — the trace's first-starting / last-ending span is in that
///   group (a service or component pair);
///
/// and a value is `a|b` (alternatives) with an optional trailing `*` per alternative (prefix).
/// Example: `response: ip.src=10.0.0.2, ip.dst=10.0.0.1, udp.src_port=123`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// Direction label.
    pub label: String,
    /// All must hold.
    pub conditions: Vec<Condition>,
}

impl Rule {
    /// Parses the text form (see the type docs).
    pub fn parse(text: &str) -> Result<Rule, RuleError> {
        let err = |reason: &str| RuleError { rule: text.to_owned(), reason: reason.to_owned() };
        let (label, conds) = text.split_once(':').ok_or_else(|| err("expected 'LABEL: key=value, ...'"))?;
        let label = label.trim();
        if label.is_empty() {
            return Err(err("empty label"));
        }
        let mut conditions = Vec::new();
        for c in conds.split(',').map(str::trim).filter(|c| !c.is_empty()) {
            let (k, v) =
                c.split_once('=').ok_or_else(|| err(&format!("condition {c:?} is not key=value")))?;
            let (k, v) = (k.trim(), v.trim());
            if k.is_empty() {
                return Err(err(&format!("condition {c:?} has an empty key")));
            }
            let value = Pattern::parse(v);
            conditions.push(match k {
                "from" => Condition::From(value),
                "to" => Condition::To(value),
                _ => match k.strip_prefix("root.") {
                    Some("") => return Err(err(&format!("condition {c:?} has an empty key"))),
                    Some(key) => Condition::Root { key: key.to_owned(), value },
                    None => Condition::Attr { key: k.to_owned(), value },
                },
            });
        }
        if conditions.is_empty() {
            return Err(err("no conditions"));
        }
        Ok(Rule { label: label.to_owned(), conditions })
    }

    pub(super) fn has_span_conditions(&self) -> bool {
        self.conditions.iter().any(Condition::is_span_level)
    }
}

/// Ordered classification rules (see the [`breakdown`](super) docs). Several rules may share
/// a label.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Classifier {
    pub(super) rules: Vec<Rule>,
    labels: Vec<String>,
    pub(super) label_of: Vec<usize>,
}

impl Classifier {
    /// No rules: every span is in direction [`ALL`].
    pub fn none() -> Classifier {
        Classifier::default()
    }

    /// From rules, in priority order.
    pub fn new(rules: Vec<Rule>) -> Result<Classifier, RuleError> {
        if rules.len() > MAX_RULES {
            return Err(RuleError {
                rule: rules.get(MAX_RULES).map(|r| r.label.clone()).unwrap_or_default(),
                reason: format!("at most {MAX_RULES} rules"),
            });
        }
        let mut labels: Vec<String> = Vec::new();
        let mut label_of = Vec::with_capacity(rules.len());
        for r in &rules {
            let i = match labels.iter().position(|l| *l == r.label) {
                Some(i) => i,
                None => {
                    labels.push(r.label.clone());
                    labels.len() - 1
                }
            };
            label_of.push(i);
        }
        Ok(Classifier { rules, labels, label_of })
    }

    /// Parses each rule's text form.
    pub fn parse<S: AsRef<str>>(rules: &[S]) -> Result<Classifier, RuleError> {
        Classifier::new(rules.iter().map(|r| Rule::parse(r.as_ref())).collect::<Result<_, _>>()?)
    }

    /// The rules.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// Direction labels in first-rule order ([`ALL`] alone without rules).
    pub fn labels(&self) -> Vec<&str> {
        if self.rules.is_empty() { vec![ALL] } else { self.labels.iter().map(String::as_str).collect() }
    }

    /// Bit r: all span conditions of rule r hold for `span`.
    pub(super) fn span_mask(&self, span: &Span) -> u64 {
        self.mask(span, |c| match c {
            Condition::Attr { key, value } => Some((key, value)),
            _ => None,
        })
    }

    /// Bit r: all root conditions of rule r hold for `span` (as a root).
    pub(super) fn root_mask(&self, span: &Span) -> u64 {
        self.mask(span, |c| match c {
            Condition::Root { key, value } => Some((key, value)),
            _ => None,
        })
    }

    fn mask(&self, span: &Span, pick: impl Fn(&Condition) -> Option<(&String, &Pattern)>) -> u64 {
        let mut m = 0u64;
        for (r, rule) in self.rules.iter().enumerate() {
            let ok = rule.conditions.iter().filter_map(&pick).all(|(k, p)| cond_holds(span, k, p));
            if ok {
                m |= 1 << r;
            }
        }
        m
    }
}

fn cond_holds(span: &Span, key: &str, p: &Pattern) -> bool {
    match attr(span, key) {
        Some(Value::Str(s)) => p.matches(s),
        Some(v) => p.matches(&v.to_string()),
        None if key == "name" => p.matches(&span.name),
        None => false,
    }
}
