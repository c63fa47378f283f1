//! Compiles parsed metadata into what the decoder walks: one arena of type nodes with
//! alignments, byte orders and sizes resolved, dynamic references (sequence lengths, variant
//! tags) resolved to value slots, the special fields the decoder needs (magic, stream id,
//! packet/content size, clock fields, event id) marked, and per-stream event tables.

use std::collections::HashMap;
use std::sync::Arc;

use super::error::{CtfError, MetaErr};
use super::meta::*;

/// "No node" / "no slot".
pub(crate) const NONE: u32 = u32::MAX;
/// Type nodes a trace may expand to (aliases can nest exponentially).
const MAX_NODES: usize = 1 << 20;
/// Deepest nesting of compiled types.
const MAX_DEPTH: u32 = 128;

/// The six dynamic scopes of CTF 1.8, in decoding order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Scope {
    /// `trace.packet.header`.
    PacketHeader = 0,
    /// `stream.packet.context`.
    PacketContext = 1,
    /// `stream.event.header`.
    EventHeader = 2,
    /// `stream.event.context`.
    StreamEventContext = 3,
    /// `event.context`.
    EventContext = 4,
    /// `event.fields`.
    Payload = 5,
}

/// Number of scopes.
pub const SCOPES: usize = 6;

const SCOPE_PATHS: [&[&str]; SCOPES] = [
    &["trace", "packet", "header"],
    &["stream", "packet", "context"],
    &["stream", "event", "header"],
    &["stream", "event", "context"],
    &["event", "context"],
    &["event", "fields"],
];

/// Fields the decoder acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Special {
    None = 0,
    Magic,
    StreamId,
    StreamInstanceId,
    ContentSize,
    PacketSize,
    TsBegin,
    TsEnd,
    Discarded,
    SeqNum,
    CpuId,
    EventId,
}
pub(crate) const NSPECIAL: usize = 12;

/// A reference to an integer's latest value: scope and slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ref {
    pub scope: u8,
    pub slot: u32,
}

#[derive(Debug, Clone)]
pub(crate) struct IntNode {
    pub size: u32,
    pub align: u32,
    pub signed: bool,
    pub le: bool,
    /// Slot the value is stored in (NONE when nothing refers to it).
    pub slot: u32,
    /// The clock (index into the metadata's clocks) this integer updates.
    pub clock: Option<u16>,
    pub special: Special,
    /// Index into [`Program::enums`] for enumerations.
    pub enum_id: u32,
    /// Display base (2, 8, 10, 16), for printers.
    #[allow(dead_code)]
    pub base: u8,
    pub encoding: Encoding,
}

#[derive(Debug, Clone)]
pub(crate) enum Node {
    Int(IntNode),
    Float {
        double: bool,
        align: u32,
        le: bool,
    },
    Str,
    Struct {
        fields: Box<[u32]>,
        align: u32,
    },
    Array {
        elem: u32,
        len: u64,
        align: u32,
        text: bool,
        uuid: bool,
    },
    Seq {
        elem: u32,
        len: Ref,
        align: u32,
        text: bool,
    },
    /// Options as `(lo, hi, node)` tag ranges, sorted by `lo`.
    Variant {
        tag: Ref,
        tag_signed: bool,
        options: Box<[(i128, i128, u32)]>,
    },
}

impl Node {
    /// Alignment in bits a parent struct takes into account.
    pub fn align(&self) -> u32 {
        match self {
            Node::Int(i) => i.align,
            Node::Float { align, .. } => *align,
            Node::Str => 8,
            Node::Struct { align, .. } | Node::Array { align, .. } | Node::Seq { align, .. } => *align,
            Node::Variant { .. } => 1,
        }
    }
}

/// The compiled type arena.
#[derive(Debug, Default)]
pub(crate) struct Program {
    pub nodes: Vec<Node>,
    /// Display name of each node as a member (one leading `_` removed, as CTF 1.8 says);
    /// empty for array elements and scope roots.
    pub names: Vec<Arc<str>>,
    /// Declared name (for path lookups).
    pub decl: Vec<Arc<str>>,
    /// Scope each node was compiled in.
    pub scope: Vec<u8>,
    /// Enumerations, by `IntNode::enum_id`.
    pub enums: Vec<Arc<EnumDecl>>,
    /// The attribute key of each node's value in a weft event (see `record`): `name`,
    /// `outer.inner`, `context.name`; empty for array elements and scope roots.
    pub keys: Vec<Box<str>>,
    /// For enumerations: the key of the integer value (`key.value`); empty otherwise.
    pub value_keys: Vec<Box<str>>,
}

/// LTTng's event header layouts (`compact`: 5-bit id + 27-bit timestamp; `large`: 16-bit id +
/// 32-bit timestamp; the all-ones id selects `extended`: 32-bit id + 64-bit timestamp),
/// recognised so the decoder reads them in straight-line code instead of walking the struct,
/// enum and variant nodes. Same fields, same values, same order.
#[derive(Debug, Clone)]
pub(crate) struct LttngHeader {
    pub align: u32,
    pub id_node: u32,
    pub id: IntNode,
    pub ext: u64,
    pub compact_opt: u32,
    pub compact_align: u32,
    pub ts_node: u32,
    pub ts: IntNode,
    pub ext_opt: u32,
    pub ext_align: u32,
    pub ext_id_node: u32,
    pub ext_id: IntNode,
    pub ext_ts_node: u32,
    pub ext_ts: IntNode,
}

/// A stream class.
#[derive(Debug)]
pub struct StreamClass {
    /// Its id (0 when the metadata omits it).
    pub id: u64,
    pub(crate) packet_context: u32,
    pub(crate) event_header: u32,
    pub(crate) event_context: u32,
    /// Index into [`Compiled::events`] by event id (dense part).
    pub(crate) by_id: Vec<u32>,
    /// Sparse event ids.
    pub(crate) by_id_sparse: HashMap<u64, u32>,
    /// The clock its timestamps count (index into the metadata's clocks).
    pub clock: Option<usize>,
    /// For a 1 GHz clock: ns of clock value 0 since the origin (time = this + cycles).
    pub(crate) clock_base_ns: Option<i128>,
    /// The event header, when it is one of LTTng's layouts.
    pub(crate) lttng_header: Option<LttngHeader>,
}

impl StreamClass {
    #[inline]
    pub(crate) fn event(&self, id: u64) -> Option<u32> {
        match self.by_id.get(id as usize) {
            Some(&e) if e != NONE => Some(e),
            Some(_) => None,
            None => self.by_id_sparse.get(&id).copied(),
        }
    }
}

/// An event class.
#[derive(Debug)]
pub struct EventClass {
    /// Id within its stream class.
    pub id: u64,
    /// Name (`provider:event` in LTTng).
    pub name: Arc<str>,
    /// Index of its stream class in [`Compiled::streams`].
    pub stream: usize,
    /// Log level.
    pub loglevel: Option<i64>,
    pub(crate) context: u32,
    pub(crate) payload: u32,
    /// Attributes its weft events have (with variants: at most).
    pub(crate) attrs_hint: usize,
}

/// Metadata compiled for decoding.
#[derive(Debug)]
pub struct Compiled {
    /// The parsed metadata.
    pub meta: Metadata,
    pub(crate) prog: Program,
    pub(crate) packet_header: u32,
    /// Stream classes.
    pub streams: Vec<StreamClass>,
    /// Event classes.
    pub events: Vec<EventClass>,
    /// Slots per scope the decoder must provide.
    pub(crate) slot_counts: [u32; SCOPES],
    /// Whether the packet header has a `uuid` to check.
    pub(crate) has_uuid: bool,
}

impl Compiled {
    /// The stream class with `id`.
    pub(crate) fn stream_index(&self, id: u64) -> Option<usize> {
        self.streams.iter().position(|s| s.id == id)
    }

    /// A clock value of stream class `stream` (an index into [`Compiled::streams`]) in ns since
    /// the clock's origin (0 without a clock).
    #[inline]
    pub fn cycles_to_ns(&self, stream: usize, cycles: u64) -> u64 {
        let Some(sc) = self.streams.get(stream) else { return 0 };
        match (sc.clock_base_ns, sc.clock) {
            (Some(base), _) => (base + cycles as i128).clamp(0, u64::MAX as i128) as u64,
            (None, Some(ci)) => self.meta.clocks[ci].to_ns(cycles),
            (None, None) => 0,
        }
    }

    /// The index in [`Compiled::streams`] of the stream class with `id`.
    pub fn stream_class(&self, id: u64) -> Option<usize> {
        self.stream_index(id)
    }
}

struct Frame {
    fields: Vec<(Arc<str>, u32)>,
}

struct Compiler<'m> {
    md: &'m Metadata,
    prog: Program,
    slot_counts: [u32; SCOPES],
    /// Root node of each scope compiled so far for the current stream/event.
    roots: [u32; SCOPES],
    frames: Vec<Frame>,
    scope: Scope,
    depth: u32,
    enum_ids: HashMap<*const EnumDecl, u32>,
    has_uuid: bool,
}

/// Compiles metadata (errors name `path` with the declaration's line:column).
pub fn compile(md: Metadata, path: &std::path::Path) -> Result<Compiled, CtfError> {
    let mut c = Compiler {
        md: &md,
        prog: Program::default(),
        slot_counts: [0; SCOPES],
        roots: [NONE; SCOPES],
        frames: Vec::new(),
        scope: Scope::PacketHeader,
        depth: 0,
        enum_ids: HashMap::new(),
        has_uuid: false,
    };
    let r = c.run();
    let (packet_header, streams, events) = r.map_err(|e| e.with_path(path))?;
    let Compiler { prog, slot_counts, has_uuid, .. } = c;
    Ok(Compiled { meta: md, prog, packet_header, streams, events, slot_counts, has_uuid })
}

fn strip(name: &str) -> &str {
    name.strip_prefix('_').unwrap_or(name)
}

impl Compiler<'_> {
    #[allow(clippy::type_complexity)]
    fn run(&mut self) -> Result<(u32, Vec<StreamClass>, Vec<EventClass>), MetaErr> {
        let md = self.md;
        let packet_header = self.scope_root(Scope::PacketHeader, md.packet_header.as_ref())?;
        let mut streams = Vec::new();
        let stream_decls: Vec<StreamDecl> =
            if md.streams.is_empty() { vec![StreamDecl::default()] } else { md.streams.clone() };
        if stream_decls.len() > 1 && stream_decls.iter().any(|s| s.id.is_none()) {
            return Err(MetaErr::new(0, 0, "several stream classes, not all with an id"));
        }
        let mut events = Vec::new();
        for sd in &stream_decls {
            self.roots[1..].fill(NONE);
            let pc = self.scope_root(Scope::PacketContext, sd.packet_context.as_ref())?;
            let eh = self.scope_root(Scope::EventHeader, sd.event_header.as_ref())?;
            let ec = self.scope_root(Scope::StreamEventContext, sd.event_context.as_ref())?;
            let clock = self.stream_clock(pc, eh);
            let clock_base_ns = clock
                .map(|c| &md.clocks[c])
                .filter(|c| c.freq == 1_000_000_000)
                .map(|c| c.offset_s as i128 * 1_000_000_000 + c.offset as i128);
            let sid = sd.id.unwrap_or(0);
            let si = streams.len();
            let mut sc = StreamClass {
                id: sid,
                packet_context: pc,
                event_header: eh,
                event_context: ec,
                by_id: Vec::new(),
                by_id_sparse: HashMap::new(),
                clock,
                clock_base_ns,
                lttng_header: self.lttng_header(eh),
            };
            let evs: Vec<&EventDecl> = md
                .events
                .iter()
                .filter(|e| {
                    e.stream_id.unwrap_or(0) == sid || (stream_decls.len() == 1 && e.stream_id.is_none())
                })
                .collect();
            let single = evs.len() == 1;
            for ed in evs {
                let id = match ed.id {
                    Some(id) => id,
                    None if single => 0,
                    None => {
                        return Err(MetaErr::new(
                            ed.pos.line,
                            ed.pos.col,
                            format!("event '{}' has no id", ed.name),
                        ));
                    }
                };
                if sc.event(id).is_some() {
                    return Err(MetaErr::new(
                        ed.pos.line,
                        ed.pos.col,
                        format!("event id {id} used twice in stream class {sid}"),
                    ));
                }
                self.roots[4..].fill(NONE);
                let ctx = self.scope_root(Scope::EventContext, ed.context.as_ref())?;
                let payload = self.scope_root(Scope::Payload, ed.fields.as_ref())?;
                let ei = events.len() as u32;
                let attrs_hint = self.leaves(ec) + self.leaves(ctx) + self.leaves(payload);
                events.push(EventClass {
                    attrs_hint,
                    id,
                    name: Arc::from(ed.name.as_str()),
                    stream: si,
                    loglevel: ed.loglevel,
                    context: ctx,
                    payload,
                });
                if id < 1 << 16 {
                    let i = id as usize;
                    if sc.by_id.len() <= i {
                        sc.by_id.resize(i + 1, NONE);
                    }
                    sc.by_id[i] = ei;
                } else {
                    sc.by_id_sparse.insert(id, ei);
                }
            }
            streams.push(sc);
        }
        if let Some(e) = md.events.iter().find(|e| {
            let sid = e.stream_id.unwrap_or(0);
            !(streams.iter().any(|s| s.id == sid) || stream_decls.len() == 1 && e.stream_id.is_none())
        }) {
            return Err(MetaErr::new(
                e.pos.line,
                e.pos.col,
                format!("event '{}' names stream class {:?}, which is not declared", e.name, e.stream_id),
            ));
        }
        Ok((packet_header, streams, events))
    }

    /// The clock of a stream: the first clock-mapped integer of its packet context or event
    /// header, else the trace's only clock.
    fn stream_clock(&self, pc: u32, eh: u32) -> Option<usize> {
        fn find(prog: &Program, n: u32) -> Option<usize> {
            if n == NONE {
                return None;
            }
            match &prog.nodes[n as usize] {
                Node::Int(i) => i.clock.map(usize::from),
                Node::Struct { fields, .. } => fields.iter().find_map(|f| find(prog, *f)),
                Node::Variant { options, .. } => options.iter().find_map(|(_, _, o)| find(prog, *o)),
                _ => None,
            }
        }
        find(&self.prog, pc)
            .or_else(|| find(&self.prog, eh))
            .or_else(|| (self.md.clocks.len() == 1).then_some(0))
    }

    fn scope_root(&mut self, scope: Scope, ty: Option<&TypeDecl>) -> Result<u32, MetaErr> {
        self.scope = scope;
        self.frames.clear();
        self.depth = 0;
        let root = match ty {
            None => NONE,
            Some(t) => {
                if !matches!(t, TypeDecl::Struct(_)) {
                    return Err(MetaErr::new(
                        0,
                        0,
                        format!("{} is not a struct", SCOPE_PATHS[scope as usize].join(".")),
                    ));
                }
                self.node(t, "", 1)?
            }
        };
        self.roots[scope as usize] = root;
        let prefix = match scope {
            Scope::StreamEventContext | Scope::EventContext => "context.",
            _ => "",
        };
        if root != NONE {
            self.assign_keys(root, prefix);
        }
        Ok(root)
    }

    /// Recognises LTTng's event header layouts (see [`LttngHeader`]).
    fn lttng_header(&self, eh: u32) -> Option<LttngHeader> {
        let nodes = &self.prog.nodes;
        let node = |n: u32| nodes.get(n as usize);
        let int = |n: u32| match node(n) {
            Some(Node::Int(i)) => Some(i.clone()),
            _ => None,
        };
        let Some(Node::Struct { fields, align }) = node(eh) else { return None };
        let [idn, vn] = **fields else { return None };
        let id = int(idn)?;
        if id.enum_id == NONE || id.signed || id.special != Special::EventId || !matches!(id.size, 5 | 16) {
            return None;
        }
        let Some(Node::Variant { tag, options, .. }) = node(vn) else { return None };
        if tag.scope != Scope::EventHeader as u8 || tag.slot != id.slot {
            return None;
        }
        let ext = (1u64 << id.size) - 1;
        let [(0, chi, copt), (elo, ehi, eopt)] = **options else { return None };
        if chi != ext as i128 - 1 || elo != ext as i128 || ehi != ext as i128 {
            return None;
        }
        let Some(Node::Struct { fields: cf, align: calign }) = node(copt) else { return None };
        let Some(Node::Struct { fields: ef, align: ealign }) = node(eopt) else { return None };
        let [tsn] = **cf else { return None };
        let [eidn, etsn] = **ef else { return None };
        let (ts, ext_id, ext_ts) = (int(tsn)?, int(eidn)?, int(etsn)?);
        let plain = |i: &IntNode| i.slot == NONE && i.enum_id == NONE;
        let ok = plain(&ts)
            && ts.clock.is_some()
            && plain(&ext_id)
            && ext_id.special == Special::EventId
            && ext_id.size == 32
            && plain(&ext_ts)
            && ext_ts.clock.is_some()
            && ext_ts.size == 64;
        ok.then_some(LttngHeader {
            align: *align,
            id_node: idn,
            id,
            ext,
            compact_opt: copt,
            compact_align: *calign,
            ts_node: tsn,
            ts,
            ext_opt: eopt,
            ext_align: *ealign,
            ext_id_node: eidn,
            ext_id,
            ext_ts_node: etsn,
            ext_ts,
        })
    }

    /// How many attributes the members below `n` flatten to (variants: their largest option).
    fn leaves(&self, n: u32) -> usize {
        if n == NONE {
            return 0;
        }
        match &self.prog.nodes[n as usize] {
            Node::Struct { fields, .. } => fields.iter().map(|f| self.leaves(*f)).sum(),
            Node::Variant { options, .. } => {
                options.iter().map(|(_, _, o)| self.leaves(*o)).max().unwrap_or(0)
            }
            Node::Int(i) if i.enum_id != NONE => 2,
            _ => 1,
        }
    }

    /// Fills [`Program::keys`] below struct `n` (members get `prefix` + their name; nested
    /// structs extend the prefix; a variant's options take the variant's key).
    fn assign_keys(&mut self, n: u32, prefix: &str) {
        let p = &mut self.prog;
        p.keys.resize(p.nodes.len(), Box::from(""));
        p.value_keys.resize(p.nodes.len(), Box::from(""));
        let mut stack: Vec<(u32, String)> = Vec::new();
        if let Node::Struct { fields, .. } = &p.nodes[n as usize] {
            for f in fields.iter() {
                stack.push((*f, format!("{prefix}{}", p.names[*f as usize])));
            }
        }
        while let Some((f, key)) = stack.pop() {
            match &p.nodes[f as usize] {
                Node::Struct { fields, .. } => {
                    for c in fields.iter() {
                        stack.push((*c, format!("{key}.{}", p.names[*c as usize])));
                    }
                }
                Node::Variant { options, .. } => {
                    for (_, _, o) in options.iter() {
                        stack.push((*o, key.clone()));
                    }
                }
                Node::Int(i) if i.enum_id != NONE => p.value_keys[f as usize] = format!("{key}.value").into(),
                _ => {}
            }
            p.keys[f as usize] = key.into();
        }
    }

    fn push(&mut self, n: Node, decl: &str) -> Result<u32, MetaErr> {
        if self.prog.nodes.len() >= MAX_NODES {
            return Err(MetaErr::new(0, 0, format!("metadata expands to more than {MAX_NODES} type nodes")));
        }
        self.prog.nodes.push(n);
        self.prog.names.push(Arc::from(strip(decl)));
        self.prog.decl.push(Arc::from(decl));
        self.prog.scope.push(self.scope as u8);
        Ok((self.prog.nodes.len() - 1) as u32)
    }

    fn le(&self, bo: ByteOrder) -> bool {
        match bo {
            ByteOrder::Le => true,
            ByteOrder::Be => false,
            ByteOrder::Native => self.md.byte_order != ByteOrder::Be,
        }
    }

    /// Compiles `t`, a member named `decl` at nesting `level` (1 = a member of the scope's
    /// root struct).
    fn node(&mut self, t: &TypeDecl, decl: &str, level: u32) -> Result<u32, MetaErr> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(MetaErr::new(0, 0, format!("types nested deeper than {MAX_DEPTH}")));
        }
        let r = self.node_inner(t, decl, level);
        self.depth -= 1;
        r
    }

    fn int_node(&mut self, d: &IntDecl, decl: &str, level: u32, enum_id: u32) -> Result<Node, MetaErr> {
        let name = strip(decl);
        let top = level == 2; // member of the scope's root struct
        let special = match self.scope {
            Scope::PacketHeader if top => match name {
                "magic" => Special::Magic,
                "stream_id" => Special::StreamId,
                "stream_instance_id" => Special::StreamInstanceId,
                _ => Special::None,
            },
            Scope::PacketContext if top => match name {
                "content_size" => Special::ContentSize,
                "packet_size" => Special::PacketSize,
                "timestamp_begin" => Special::TsBegin,
                "timestamp_end" => Special::TsEnd,
                "events_discarded" => Special::Discarded,
                "packet_seq_num" => Special::SeqNum,
                "cpu_id" => Special::CpuId,
                _ => Special::None,
            },
            Scope::EventHeader if name == "id" => Special::EventId,
            _ => Special::None,
        };
        let mut clock = None;
        if let Some(c) = &d.map {
            let Some(i) = self.md.clocks.iter().position(|x| &x.name == c) else {
                return Err(MetaErr::new(
                    d.pos.line,
                    d.pos.col,
                    format!("integer maps to unknown clock '{c}'"),
                ));
            };
            clock = Some(i as u16);
        } else if self.md.clocks.len() == 1
            && ((self.scope == Scope::EventHeader && name == "timestamp")
                || (self.scope == Scope::PacketContext && top && name == "timestamp_begin"))
        {
            clock = Some(0);
        }
        if special == Special::TsEnd {
            clock = None;
        }
        Ok(Node::Int(IntNode {
            size: d.size,
            align: d.align,
            signed: d.signed,
            le: self.le(d.byte_order),
            slot: NONE,
            clock,
            special,
            enum_id,
            base: d.base,
            encoding: d.encoding,
        }))
    }

    fn node_inner(&mut self, t: &TypeDecl, decl: &str, level: u32) -> Result<u32, MetaErr> {
        match t {
            TypeDecl::Int(d) => {
                let n = self.int_node(d, decl, level, NONE)?;
                self.push(n, decl)
            }
            TypeDecl::Enum(e) => {
                let key = Arc::as_ptr(e);
                let id = match self.enum_ids.get(&key) {
                    Some(id) => *id,
                    None => {
                        let id = self.prog.enums.len() as u32;
                        self.prog.enums.push(e.clone());
                        self.enum_ids.insert(key, id);
                        id
                    }
                };
                let n = self.int_node(&e.container, decl, level, id)?;
                self.push(n, decl)
            }
            TypeDecl::Float(f) => {
                let n = Node::Float { double: f.mant_dig == 53, align: f.align, le: self.le(f.byte_order) };
                self.push(n, decl)
            }
            TypeDecl::String(_) => self.push(Node::Str, decl),
            TypeDecl::Struct(s) => {
                self.frames.push(Frame { fields: Vec::with_capacity(s.fields.len()) });
                let mut align = s.min_align.max(1);
                let r = (|| {
                    for f in &s.fields {
                        let id = self.node(&f.ty, &f.name, level + 1).map_err(|e| locate(e, f.pos))?;
                        align = align.max(self.prog.nodes[id as usize].align());
                        if let Some(fr) = self.frames.last_mut() {
                            fr.fields.push((Arc::from(f.name.as_str()), id));
                        }
                    }
                    Ok(())
                })();
                let frame = self.frames.pop();
                r?;
                let fields: Box<[u32]> =
                    frame.map(|f| f.fields.into_iter().map(|(_, id)| id).collect()).unwrap_or_default();
                self.push(Node::Struct { fields, align }, decl)
            }
            TypeDecl::Array { elem, len } => {
                let e = self.node(elem, "", level + 1)?;
                let en = &self.prog.nodes[e as usize];
                let align = en.align();
                let text = is_text(en);
                let uuid = self.scope == Scope::PacketHeader
                    && level == 2
                    && strip(decl) == "uuid"
                    && *len == 16
                    && matches!(en, Node::Int(i) if i.size == 8 && i.align == 8);
                if uuid {
                    self.has_uuid = true;
                }
                self.push(Node::Array { elem: e, len: *len, align, text, uuid }, decl)
            }
            TypeDecl::Sequence { elem, len, pos } => {
                if len.first().map(String::as_str) == Some("env") && len.len() == 2 {
                    // A length taken from the env block is a constant.
                    let v = match self.md.env(&len[1]) {
                        Some(EnvValue::Int(v)) if *v >= 0 => *v as u64,
                        _ => {
                            return Err(MetaErr::new(
                                pos.line,
                                pos.col,
                                format!("env.{} is not a non-negative integer", len[1]),
                            ));
                        }
                    };
                    let e = self.node(elem, "", level + 1)?;
                    let en = &self.prog.nodes[e as usize];
                    let (align, text) = (en.align(), is_text(en));
                    return self.push(Node::Array { elem: e, len: v, align, text, uuid: false }, decl);
                }
                let (r, _) = self.resolve(len, *pos)?;
                let e = self.node(elem, "", level + 1)?;
                let en = &self.prog.nodes[e as usize];
                let (align, text) = (en.align(), is_text(en));
                self.push(Node::Seq { elem: e, len: r, align, text }, decl)
            }
            TypeDecl::Variant(v) => {
                let Some(tag) = &v.tag else {
                    return Err(MetaErr::new(v.pos.line, v.pos.col, "variant without a tag"));
                };
                let (r, tag_node) = self.resolve(tag, v.pos)?;
                let (enum_id, tag_signed) = match &self.prog.nodes[tag_node as usize] {
                    Node::Int(i) if i.enum_id != NONE => (i.enum_id, i.signed),
                    _ => {
                        return Err(MetaErr::new(
                            v.pos.line,
                            v.pos.col,
                            format!("variant tag '{}' is not an enumeration", tag.join(".")),
                        ));
                    }
                };
                let en = self.prog.enums[enum_id as usize].clone();
                let mut opts: Vec<u32> = Vec::with_capacity(v.options.len());
                for o in &v.options {
                    opts.push(self.node(&o.ty, &o.name, level + 1).map_err(|e| locate(e, o.pos))?);
                }
                let mut options = Vec::new();
                for entry in &en.entries {
                    // Option names match labels; a leading `_` on either side is ignored, as
                    // LTTng prefixes option names that way.
                    let found = v
                        .options
                        .iter()
                        .position(|o| o.name == *entry.label)
                        .or_else(|| v.options.iter().position(|o| strip(&o.name) == strip(&entry.label)));
                    if let Some(i) = found {
                        options.push((entry.lo, entry.hi, opts[i]));
                    }
                }
                options.sort_by_key(|o| o.0);
                self.push(Node::Variant { tag: r, tag_signed, options: options.into_boxed_slice() }, decl)
            }
        }
    }

    /// Resolves a length/tag path to a slot (assigning one to the target integer).
    fn resolve(&mut self, path: &[String], pos: Pos) -> Result<(Ref, u32), MetaErr> {
        let err = |m: String| MetaErr::new(pos.line, pos.col, m);
        if path.is_empty() {
            return Err(err("empty field path".into()));
        }
        // Relative: the innermost enclosing struct that declared the first component.
        let mut start: Option<u32> = None;
        for fr in self.frames.iter().rev() {
            if let Some((_, id)) = fr.fields.iter().rev().find(|(n, _)| **n == *path[0]) {
                start = Some(*id);
                break;
            }
        }
        let node = if let Some(first) = start {
            self.walk(first, &path[1..]).ok_or_else(|| err(format!("no field '{}'", path.join("."))))?
        } else {
            // Absolute: a scope prefix, then members from that scope's root.
            let (si, rest) = SCOPE_PATHS
                .iter()
                .enumerate()
                .find(|(_, p)| path.len() > p.len() && p.iter().zip(path).all(|(a, b)| *a == b))
                .map(|(i, p)| (i, &path[p.len()..]))
                .ok_or_else(|| err(format!("'{}' names no field declared before it", path.join("."))))?;
            if si > self.scope as usize {
                return Err(err(format!("'{}' refers to a scope decoded later", path.join("."))));
            }
            let first = if si == self.scope as usize {
                self.frames
                    .first()
                    .and_then(|fr| fr.fields.iter().find(|(n, _)| **n == *rest[0]).map(|(_, id)| *id))
            } else {
                let root = self.roots[si];
                if root == NONE { None } else { self.child(root, &rest[0]) }
            };
            let first = first.ok_or_else(|| err(format!("no field '{}'", path.join("."))))?;
            self.walk(first, &rest[1..]).ok_or_else(|| err(format!("no field '{}'", path.join("."))))?
        };
        let scope = self.prog.scope[node as usize];
        let Node::Int(i) = &mut self.prog.nodes[node as usize] else {
            return Err(err(format!("'{}' is not an integer", path.join("."))));
        };
        if i.slot == NONE {
            i.slot = self.slot_counts[scope as usize];
            self.slot_counts[scope as usize] += 1;
        }
        Ok((Ref { scope, slot: i.slot }, node))
    }

    fn child(&self, n: u32, name: &str) -> Option<u32> {
        match &self.prog.nodes[n as usize] {
            Node::Struct { fields, .. } => {
                fields.iter().copied().find(|f| &*self.prog.decl[*f as usize] == name)
            }
            _ => None,
        }
    }

    fn walk(&self, mut n: u32, rest: &[String]) -> Option<u32> {
        for comp in rest {
            n = self.child(n, comp)?;
        }
        Some(n)
    }
}

fn is_text(elem: &Node) -> bool {
    matches!(elem, Node::Int(i) if i.size == 8 && i.align == 8 && i.encoding != Encoding::None && i.enum_id == NONE)
}

/// Gives errors without a position (from deeper compile steps) the member's position.
fn locate(mut e: MetaErr, pos: Pos) -> MetaErr {
    if e.line == 0 {
        e.line = pos.line;
        e.col = pos.col;
    }
    e
}
