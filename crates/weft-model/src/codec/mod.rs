//! Codecs: every trace format weft reads and writes, to and from [`crate::Span`].
//!
//! | module | format | read | write |
//! |---|---|---|---|
//! | [`otlp`] | OTLP protobuf (`ExportTraceServiceRequest`) and OTLP/JSON | yes | yes |
//! | [`zipkin`] | Zipkin v2 JSON, Zipkin v2 proto3 | yes | yes |
//! | [`zipkin`] | Zipkin v1 JSON (BlkKin) | yes | — |
//! | [`jaeger`] | Jaeger JSON (UI upload, API v1) | yes | yes |
//! | [`chrome`] | Chrome Trace Event JSON (Perfetto, chrome://tracing) | — | yes |
//!
//! [`stream`] reads and writes files of any size in bounded memory; [`transcode`] converts a
//! whole input between two formats on top of it (what `weft convert` runs).
//!
//! Every decoder returns a [`CodecError`] that names the format, the position (byte offset
//! or line and column), the field and the problem — never panics, never returns an empty
//! result for input it did not understand. Decoders come in a strict form (the first bad span
//! fails the call) and a lenient form that skips bad spans and counts them in [`Rejected`].

/// Implements `serde::Deserialize` through a one-off visitor (the serde plumbing the
/// hand-written JSON decoders share): `$what` completes serde's "expected …", `$method` is the
/// deserializer hint (`deserialize_any`, `deserialize_str`, ...), the braces hold the visitor's
/// `visit_*` methods. An impl that borrows from the input names its generics and the visitor's
/// value: `[<'de: 'a, 'a>] JId<'a> => JId<'de>`.
macro_rules! deserialize_by_visitor {
    ([$($generics:tt)*] $t:ty => $value:ty, $what:expr, $method:ident, { $($body:tt)* }) => {
        impl $($generics)* serde::Deserialize<'de> for $t {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct V;
                impl<'de> serde::de::Visitor<'de> for V {
                    type Value = $value;
                    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                        f.write_str($what)
                    }
                    $($body)*
                }
                d.$method(V)
            }
        }
    };
    (<'de> $t:ty, $what:expr, $method:ident, { $($body:tt)* }) => {
        deserialize_by_visitor!([<'de>] $t => $t, $what, $method, { $($body)* });
    };
}

pub mod chrome;
mod error;
#[cfg(test)]
mod fixture;
pub mod jaeger;
pub(crate) mod jsonscan;
pub(crate) mod jsonw;
pub mod otlp;
pub mod stream;
pub mod transcode;
pub mod zipkin;

pub use error::{CodecError, ErrorDetails, ErrorKind, Position, Rejected};

/// What an encoder could not carry into its target format, counted per kind of loss (e.g.
/// "links dropped", "non-string attributes stringified"). Lossless targets leave it empty.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Losses(std::collections::BTreeMap<&'static str, u64>);

impl Losses {
    /// Counts `n` losses of kind `what` (`n == 0` records nothing).
    pub fn add(&mut self, what: &'static str, n: u64) {
        if n > 0 {
            *self.0.entry(what).or_insert(0) += n;
        }
    }
    /// How many losses of kind `what` were counted.
    pub fn get(&self, what: &str) -> u64 {
        self.0.get(what).copied().unwrap_or(0)
    }
    /// True when nothing was lost.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    /// Each kind of loss with its count, in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        self.0.iter().map(|(k, v)| (*k, *v))
    }
    /// Adds another tally to this one.
    pub fn merge(&mut self, other: &Losses) {
        for (k, v) in other.iter() {
            self.add(k, v);
        }
    }
}

impl std::fmt::Display for Losses {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.0.is_empty() {
            return f.write_str("nothing lost");
        }
        for (i, (k, v)) in self.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{v} {k}")?;
        }
        Ok(())
    }
}
