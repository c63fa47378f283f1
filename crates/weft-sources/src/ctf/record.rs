//! The current event of a decoder, and its conversion into a weft [`Event`].
//!
//! # Mapping to `EventKind::Tracepoint`
//!
//! | CTF | weft |
//! |---|---|
//! | event class name (`provider:event`) | `TracepointEvent::name` (shared `Arc<str>`) |
//! | clock value of the event header | `Event::raw_time` (cycles); `time_ns` = clock offset + cycles / freq |
//! | packet context `cpu_id` | `cpu` |
//! | context `vpid`/`pid`, `vtid`/`tid` | `pid`, `tid` (and kept as `context.*` fields) |
//! | payload members | `fields`, by name (one leading `_` removed, as CTF 1.8 says) |
//! | stream and event context members | `fields` as `context.NAME` |
//! | integers (any size, signed or not) | `I64` (unsigned 64-bit values keep their bits: above `i64::MAX` they read negative) |
//! | enumerations | `NAME` = the label (several: joined by `,`; none: empty) and `NAME.value` = the integer |
//! | floating point | `F64` |
//! | strings, text arrays/sequences (8-bit UTF-8/ASCII integers) | `Str` (lossy UTF-8, up to the first NUL) |
//! | other arrays and sequences | `Array` of the element values |
//! | nested structs | flattened: `outer.inner` (inside arrays: `Map`) |
//! | variants | the selected option's value under the variant's name |

use std::sync::Arc;

use weft_model::event::TracepointEvent;
use weft_model::{Attributes, Event, EventKind, KeyValue, SourceId, Value};

use super::compile::{EventClass, NONE, Node, Program, Scope, Special};
use super::decode::{StreamDecoder, Val};

/// The event a [`StreamDecoder`] is positioned on.
#[derive(Clone, Copy)]
pub struct EventRecord<'a> {
    pub(crate) dec: &'a StreamDecoder,
}

impl<'a> EventRecord<'a> {
    /// Its class.
    pub fn class(&self) -> &'a EventClass {
        &self.dec.trace().events[self.dec.event as usize]
    }
    /// Its name.
    pub fn name(&self) -> &'a Arc<str> {
        &self.class().name
    }
    /// Clock value (cycles).
    pub fn timestamp(&self) -> u64 {
        self.dec.timestamp()
    }
    /// ns since the clock's origin (the UNIX epoch for LTTng).
    pub fn time_ns(&self) -> u64 {
        self.dec.time_ns()
    }
    /// The packet's `cpu_id`.
    pub fn cpu(&self) -> Option<u32> {
        self.dec.packet_reg(Special::CpuId).map(|v| v as u32)
    }
    /// Values of one scope, in pre-order of its type (see [`Val`]).
    pub fn values(&self, scope: Scope) -> &'a [Val] {
        &self.dec.vals[scope as usize]
    }

    /// Converts to a weft event (see the module docs for the mapping).
    pub fn to_event(&self, source: SourceId) -> Event {
        let trace = self.dec.trace();
        let prog = &trace.prog;
        let buf = &self.dec.cur.buf;
        let sc = &trace.streams[self.dec.stream];
        let ec = self.class();
        let mut fields = Attributes(Vec::with_capacity(ec.attrs_hint));
        let mut ids = Ids::default();
        let w = Walker { prog, buf };
        if sc.event_context != NONE {
            w.flatten(
                sc.event_context,
                &self.dec.vals[Scope::StreamEventContext as usize],
                &mut fields,
                Some(&mut ids),
            );
        }
        if ec.context != NONE {
            w.flatten(ec.context, &self.dec.vals[Scope::EventContext as usize], &mut fields, Some(&mut ids));
        }
        if ec.payload != NONE {
            w.flatten(ec.payload, &self.dec.vals[Scope::Payload as usize], &mut fields, None);
        }
        Event {
            time_ns: self.time_ns(),
            raw_time: self.timestamp(),
            source,
            kind: EventKind::Tracepoint(TracepointEvent {
                name: ec.name.clone(),
                cpu: self.cpu(),
                pid: ids.pid,
                tid: ids.tid,
                fields,
            }),
        }
    }
}

#[derive(Default)]
struct Ids {
    pid: Option<u32>,
    tid: Option<u32>,
}

struct Walker<'p> {
    prog: &'p Program,
    buf: &'p [u8],
}

impl Walker<'_> {
    fn text(&self, off: u32, len: u32) -> String {
        let b = self.buf.get(off as usize..(off as usize + len as usize)).unwrap_or(&[]);
        String::from_utf8_lossy(b).into_owned()
    }

    fn enum_label(&self, n: u32, v: u64) -> Option<String> {
        let Node::Int(i) = &self.prog.nodes[n as usize] else { return None };
        if i.enum_id == NONE {
            return None;
        }
        let e = &self.prog.enums[i.enum_id as usize];
        let t: i128 = if i.signed { v as i64 as i128 } else { v as i128 };
        let mut labels = e.labels(t);
        let mut s = labels.next().map(|l| l.to_string()).unwrap_or_default();
        for l in labels {
            s.push(',');
            s.push_str(l);
        }
        Some(s)
    }

    /// Adds the members of struct `root` (its values are `vals`) as flattened attributes, under
    /// the keys the compiler prepared.
    fn flatten(&self, root: u32, vals: &[Val], out: &mut Attributes, ids: Option<&mut Ids>) {
        let mut i = 0usize;
        let mut ids = ids;
        if let Node::Struct { fields, .. } = &self.prog.nodes[root as usize] {
            for f in fields.iter() {
                self.member(*f, vals, &mut i, out, &mut ids);
            }
        }
    }

    fn member(&self, f: u32, vals: &[Val], i: &mut usize, out: &mut Attributes, ids: &mut Option<&mut Ids>) {
        let key = || self.prog.keys[f as usize].to_string();
        match &self.prog.nodes[f as usize] {
            Node::Struct { fields, .. } => {
                for c in fields.iter() {
                    self.member(*c, vals, i, out, ids);
                }
            }
            Node::Variant { .. } => {
                let Some(Val::Opt(o)) = vals.get(*i).copied() else {
                    *i += 1;
                    return;
                };
                *i += 1;
                self.member(o, vals, i, out, ids);
            }
            Node::Int(int) if int.enum_id != NONE => {
                let v = match vals.get(*i) {
                    Some(Val::Int(v)) => *v,
                    _ => 0,
                };
                *i += 1;
                let label = self.enum_label(f, v).unwrap_or_default();
                out.0.push(KeyValue { key: key().into(), value: Value::Str(label.into()) });
                out.0.push(KeyValue {
                    key: self.prog.value_keys[f as usize].to_string().into(),
                    value: Value::I64(v as i64),
                });
            }
            Node::Int(_) => {
                let v = match vals.get(*i) {
                    Some(Val::Int(v)) => *v,
                    _ => 0,
                };
                *i += 1;
                if let Some(ids) = ids.as_deref_mut() {
                    match &*self.prog.names[f as usize] {
                        "vpid" | "pid" => ids.pid = ids.pid.or(Some(v as u32)),
                        "vtid" | "tid" => ids.tid = ids.tid.or(Some(v as u32)),
                        _ => {}
                    }
                }
                out.0.push(KeyValue { key: key().into(), value: Value::I64(v as i64) });
            }
            _ => {
                let v = self.value(f, vals, i);
                out.0.push(KeyValue { key: key().into(), value: v });
            }
        }
    }

    /// The value of node `n` as one attribute value (structs as maps).
    fn value(&self, n: u32, vals: &[Val], i: &mut usize) -> Value {
        let here = vals.get(*i).copied();
        match &self.prog.nodes[n as usize] {
            Node::Int(int) => {
                *i += 1;
                let v = match here {
                    Some(Val::Int(v)) => v,
                    _ => 0,
                };
                if int.enum_id != NONE {
                    return Value::Str(self.enum_label(n, v).unwrap_or_default().into());
                }
                Value::I64(v as i64)
            }
            Node::Float { .. } => {
                *i += 1;
                match here {
                    Some(Val::Float(f)) => Value::F64(f),
                    _ => Value::Empty,
                }
            }
            Node::Str => {
                *i += 1;
                match here {
                    Some(Val::Str { off, len }) => Value::Str(self.text(off, len).into()),
                    _ => Value::Empty,
                }
            }
            Node::Array { elem, text, .. } | Node::Seq { elem, text, .. } => {
                *i += 1;
                match here {
                    Some(Val::Str { off, len }) if *text => Value::Str(self.text(off, len).into()),
                    Some(Val::Len(len)) => {
                        let mut a = Vec::with_capacity(len as usize);
                        for _ in 0..len {
                            a.push(self.value(*elem, vals, i));
                        }
                        Value::Array(a)
                    }
                    _ => Value::Empty,
                }
            }
            Node::Struct { fields, .. } => {
                let mut m = Vec::with_capacity(fields.len());
                for f in fields.iter() {
                    let v = self.value(*f, vals, i);
                    m.push(KeyValue { key: self.prog.names[*f as usize].to_string().into(), value: v });
                }
                Value::Map(m)
            }
            Node::Variant { .. } => {
                *i += 1;
                match here {
                    Some(Val::Opt(o)) => self.value(o, vals, i),
                    _ => Value::Empty,
                }
            }
        }
    }
}
