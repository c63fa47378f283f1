//! Breakdown options: what a row stands for and how wire time is reported.

use std::borrow::Cow;

use weft_model::{Span, conv};

use super::{UNKNOWN, attr};

/// What a breakdown row stands for.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum GroupBy {
    /// `weft.component`, else `service.name` (the default).
    #[default]
    Component,
    /// The resource's `service.name`.
    Service,
    /// `service.name` and span name: `"<service> <name>"`.
    Operation,
    /// A span attribute, else a resource attribute of that key (text form of the value).
    Attribute(String),
}

impl GroupBy {
    /// From a command-line word: `component`, `service`, `operation`, or `attr:KEY`.
    pub fn parse(s: &str) -> Option<GroupBy> {
        Some(match s {
            "component" => GroupBy::Component,
            "service" => GroupBy::Service,
            "operation" | "op" => GroupBy::Operation,
            _ => {
                let key = s.strip_prefix("attr:").or_else(|| s.strip_prefix("attribute:"))?;
                if key.is_empty() {
                    return None;
                }
                GroupBy::Attribute(key.to_owned())
            }
        })
    }

    /// The group of `span` ([`UNKNOWN`] when the key is absent or empty).
    pub fn key<'a>(&self, span: &'a Span) -> Cow<'a, str> {
        let nonempty = |s: &'a str| Some(s).filter(|s| !s.is_empty());
        match self {
            GroupBy::Component => span
                .attributes
                .get_str(conv::COMPONENT)
                .and_then(nonempty)
                .or_else(|| nonempty(span.service_name()))
                .map(Cow::Borrowed)
                .unwrap_or(Cow::Borrowed(UNKNOWN)),
            GroupBy::Service => Cow::Borrowed(nonempty(span.service_name()).unwrap_or(UNKNOWN)),
            GroupBy::Operation => {
                Cow::Owned(format!("{} {}", nonempty(span.service_name()).unwrap_or(UNKNOWN), span.name))
            }
            GroupBy::Attribute(k) => match attr(span, k) {
                Some(v) => {
                    let t = v.to_string();
                    if t.is_empty() { Cow::Borrowed(UNKNOWN) } else { Cow::Owned(t) }
                }
                None => Cow::Borrowed(UNKNOWN),
            },
        }
    }
}

/// How gaps between groups are reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WireMode {
    /// One [`WIRE`](super::WIRE) row with all wire time.
    #[default]
    Total,
    /// One row per link: `wire <from>→<to>`.
    PerLink,
}

/// Breakdown options.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Options {
    /// Row key.
    pub group_by: GroupBy,
    /// Wire rows.
    pub wire: WireMode,
}

/// Whether a row is a group of spans or wire (gap) time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RowKind {
    /// Spans of one group.
    Group,
    /// Time between spans of different groups.
    Wire,
}
