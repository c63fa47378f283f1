//! A recursive-descent parser for TSDL (CTF 1.8's Trace Stream Description Language).
//!
//! Supported: `typealias`, `typedef` (with array declarators), named and anonymous `struct`,
//! `variant` and `enum` declarations (scoped: a declaration inside a block or struct body is
//! visible only there), `integer`, `floating_point` and `string` specifiers with every CTF 1.8
//! attribute, multi-word type names (`unsigned long`), arrays (`x[3][4]`) and sequences
//! (`x[len]`, `x[event.fields.len]`), `align(N)`, and the `trace`, `env`, `clock`, `stream`,
//! `event` blocks. Unknown blocks (`callsite`) and unknown attributes are skipped, as CTF
//! readers must for forward compatibility.

use std::collections::HashMap;
use std::sync::Arc;

use super::error::MetaErr;
use super::lex::{Tok, Token, tokenize};
use super::meta::*;

/// Deepest type nesting accepted (guards the recursion against hostile metadata).
const MAX_DEPTH: u32 = 64;

/// Parses TSDL text.
pub(crate) fn parse(text: &str) -> Result<Metadata, MetaErr> {
    let toks = tokenize(text)?;
    let mut p = Parser { toks, i: 0, scopes: vec![HashMap::new()], depth: 0 };
    p.top()
}

/// A value on the right of `=`.
#[derive(Debug, Clone)]
enum Val {
    Int(i128),
    Str(String),
    /// An identifier or dotted path (`le`, `true`, `clock.monotonic.value`).
    Path(Vec<String>),
}

struct Parser {
    toks: Vec<Token>,
    i: usize,
    /// Declared type names, innermost scope last. Struct/variant/enum tags are stored as
    /// `struct NAME` etc.
    scopes: Vec<HashMap<String, TypeDecl>>,
    depth: u32,
}

impl Parser {
    fn peek(&self) -> &Tok {
        &self.toks[self.i.min(self.toks.len() - 1)].tok
    }
    fn peek_at(&self, k: usize) -> &Tok {
        &self.toks[(self.i + k).min(self.toks.len() - 1)].tok
    }
    fn pos(&self) -> Pos {
        let t = &self.toks[self.i.min(self.toks.len() - 1)];
        Pos { line: t.line, col: t.col }
    }
    fn err_here(&self, msg: impl Into<String>) -> MetaErr {
        let p = self.pos();
        MetaErr::new(p.line, p.col, msg)
    }
    fn err_at(p: Pos, msg: impl Into<String>) -> MetaErr {
        MetaErr::new(p.line, p.col, msg)
    }
    fn bump(&mut self) -> Tok {
        let t = self.peek().clone();
        if self.i < self.toks.len() - 1 {
            self.i += 1;
        }
        t
    }
    fn is_punct(&self, c: char) -> bool {
        *self.peek() == Tok::Punct(c)
    }
    fn is_ident(&self, s: &str) -> bool {
        matches!(self.peek(), Tok::Ident(x) if x == s)
    }
    fn eat_punct(&mut self, c: char) -> bool {
        if self.is_punct(c) {
            self.bump();
            true
        } else {
            false
        }
    }
    fn expect_punct(&mut self, c: char, what: &str) -> Result<(), MetaErr> {
        if self.eat_punct(c) {
            Ok(())
        } else {
            Err(self.err_here(format!("expected '{c}' {what}, found {}", self.peek().describe())))
        }
    }
    fn expect_ident(&mut self, what: &str) -> Result<String, MetaErr> {
        match self.bump() {
            Tok::Ident(s) => Ok(s),
            t => {
                self.i -= 1;
                Err(self.err_here(format!("expected {what}, found {}", t.describe())))
            }
        }
    }

    fn lookup(&self, name: &str) -> Option<&TypeDecl> {
        self.scopes.iter().rev().find_map(|s| s.get(name))
    }
    fn declare(&mut self, name: String, ty: TypeDecl) {
        if let Some(s) = self.scopes.last_mut() {
            s.insert(name, ty);
        }
    }

    // ---- top level ---------------------------------------------------------------------

    fn top(&mut self) -> Result<Metadata, MetaErr> {
        let mut md = Metadata {
            major: None,
            minor: None,
            uuid: None,
            byte_order: ByteOrder::Le,
            packet_header: None,
            env: Vec::new(),
            clocks: Vec::new(),
            streams: Vec::new(),
            events: Vec::new(),
        };
        let mut trace_seen = false;
        loop {
            let pos = self.pos();
            match self.peek().clone() {
                Tok::Eof => break,
                Tok::Punct(';') => {
                    self.bump();
                }
                Tok::Ident(kw) => match kw.as_str() {
                    "trace" if matches!(self.peek_at(1), Tok::Punct('{')) => {
                        if trace_seen {
                            return Err(Self::err_at(pos, "second trace block"));
                        }
                        trace_seen = true;
                        self.trace_block(&mut md)?;
                    }
                    "env" if matches!(self.peek_at(1), Tok::Punct('{')) => self.env_block(&mut md)?,
                    "clock" if matches!(self.peek_at(1), Tok::Punct('{')) => {
                        let c = self.clock_block()?;
                        if md.clocks.iter().any(|x| x.name == c.name) {
                            return Err(Self::err_at(pos, format!("clock '{}' declared twice", c.name)));
                        }
                        md.clocks.push(c);
                    }
                    "stream" if matches!(self.peek_at(1), Tok::Punct('{')) => {
                        let s = self.stream_block()?;
                        if md.streams.iter().any(|x| x.id == s.id) {
                            return Err(Self::err_at(pos, format!("stream class {:?} declared twice", s.id)));
                        }
                        md.streams.push(s);
                    }
                    "event" if matches!(self.peek_at(1), Tok::Punct('{')) => {
                        let e = self.event_block(pos)?;
                        md.events.push(e);
                    }
                    _ if matches!(self.peek_at(1), Tok::Punct('{'))
                        && !matches!(
                            kw.as_str(),
                            "struct" | "variant" | "enum" | "integer" | "floating_point" | "string"
                        ) =>
                    {
                        // An unknown block (`callsite { ... };`): skipped.
                        tracing::debug!(block = %kw, line = pos.line, "skipping unknown TSDL block");
                        self.bump();
                        self.skip_braced()?;
                        self.eat_punct(';');
                    }
                    _ => self.declaration()?,
                },
                t => return Err(self.err_here(format!("unexpected {} at top level", t.describe()))),
            }
        }
        Ok(md)
    }

    /// Skips a `{ ... }` group (the current token is `{`).
    fn skip_braced(&mut self) -> Result<(), MetaErr> {
        let start = self.pos();
        self.expect_punct('{', "to open the block")?;
        let mut depth = 1u32;
        while depth > 0 {
            match self.bump() {
                Tok::Punct('{') => depth += 1,
                Tok::Punct('}') => depth -= 1,
                Tok::Eof => return Err(Self::err_at(start, "unterminated block")),
                _ => {}
            }
        }
        Ok(())
    }

    /// A declaration in any scope: typealias, typedef, or a type specifier (a named struct,
    /// variant or enum) optionally followed by declarators (ignored outside structs).
    fn declaration(&mut self) -> Result<(), MetaErr> {
        if self.is_ident("typealias") {
            self.bump();
            let ty = self.type_spec()?;
            // `typealias integer {...} := name;` — also accept a declarator-style target with
            // array suffixes after the name.
            if !matches!(self.peek(), Tok::Assign) {
                return Err(
                    self.err_here(format!("expected ':=' in typealias, found {}", self.peek().describe()))
                );
            }
            self.bump();
            let mut words = Vec::new();
            while let Tok::Ident(w) = self.peek().clone() {
                words.push(w);
                self.bump();
            }
            while self.eat_punct('*') {}
            if words.is_empty() {
                return Err(self.err_here("expected a type name after ':='"));
            }
            let (name, ty) = self.declarator_suffix(words.join(" "), ty)?;
            self.declare(name, ty);
            self.expect_punct(';', "after typealias")?;
            return Ok(());
        }
        if self.is_ident("typedef") {
            self.bump();
            let base = self.type_spec_before_declarator()?;
            loop {
                let name = self.expect_ident("a typedef name")?;
                let (name, ty) = self.declarator_suffix(name, base.clone())?;
                self.declare(name, ty);
                if !self.eat_punct(',') {
                    break;
                }
            }
            self.expect_punct(';', "after typedef")?;
            return Ok(());
        }
        let pos = self.pos();
        match self.peek() {
            Tok::Ident(k) if matches!(k.as_str(), "struct" | "variant" | "enum") => {
                self.type_spec()?;
                // `struct x { ... } y;` at top level or in a block: `y` declares nothing useful.
                while !self.is_punct(';') {
                    if *self.peek() == Tok::Eof {
                        return Err(Self::err_at(pos, "declaration is not terminated by ';'"));
                    }
                    self.bump();
                }
                self.bump();
                Ok(())
            }
            t => Err(self.err_here(format!("expected a declaration, found {}", t.describe()))),
        }
    }

    // ---- blocks ------------------------------------------------------------------------

    /// Parses `NAME { items };` calling `item` for each `key = value` / `key := type`.
    fn block(
        &mut self,
        mut item: impl FnMut(&mut Parser, Pos, Vec<String>, Item) -> Result<(), MetaErr>,
    ) -> Result<(), MetaErr> {
        self.bump(); // block keyword
        self.expect_punct('{', "to open the block")?;
        self.scopes.push(HashMap::new());
        let r = (|| {
            loop {
                if self.eat_punct('}') {
                    break;
                }
                if self.eat_punct(';') {
                    continue;
                }
                if *self.peek() == Tok::Eof {
                    return Err(self.err_here("unterminated block"));
                }
                if matches!(self.peek(), Tok::Ident(k) if matches!(k.as_str(), "typealias" | "typedef" | "struct" | "variant" | "enum"))
                {
                    self.declaration()?;
                    continue;
                }
                let pos = self.pos();
                let mut key = vec![self.expect_ident("an attribute name")?];
                while self.eat_punct('.') {
                    key.push(self.expect_ident("an attribute name after '.'")?);
                }
                match self.bump() {
                    Tok::Punct('=') => {
                        let v = self.value()?;
                        item(self, pos, key, Item::Val(v))?;
                    }
                    Tok::Assign => {
                        let ty = self.type_spec()?;
                        let ty = if let Tok::Ident(_) = self.peek() {
                            // `fields := struct {...} name;` is not CTF but tolerate a name.
                            self.bump();
                            ty
                        } else {
                            ty
                        };
                        item(self, pos, key, Item::Type(ty))?;
                    }
                    t => {
                        self.i -= 1;
                        return Err(self.err_here(format!(
                            "expected '=' or ':=' after '{}', found {}",
                            key.join("."),
                            t.describe()
                        )));
                    }
                }
                self.expect_punct(';', "after the attribute")?;
            }
            Ok(())
        })();
        self.scopes.pop();
        r?;
        self.eat_punct(';');
        Ok(())
    }

    fn value(&mut self) -> Result<Val, MetaErr> {
        let neg = self.eat_punct('-');
        if !neg {
            self.eat_punct('+');
        }
        match self.bump() {
            Tok::Int(v) => Ok(Val::Int(if neg { -(v as i128) } else { v as i128 })),
            Tok::Str(s) if !neg => Ok(Val::Str(s)),
            Tok::Ident(s) if !neg => {
                let mut path = vec![s];
                while self.eat_punct('.') {
                    path.push(self.expect_ident("a name after '.'")?);
                }
                Ok(Val::Path(path))
            }
            t => {
                self.i -= 1;
                Err(self.err_here(format!("expected a value, found {}", t.describe())))
            }
        }
    }

    fn trace_block(&mut self, md: &mut Metadata) -> Result<(), MetaErr> {
        self.block(|p, pos, key, item| {
            match (key.join(".").as_str(), item) {
                ("major", Item::Val(v)) => md.major = Some(p.uint(pos, &v, "major")?),
                ("minor", Item::Val(v)) => md.minor = Some(p.uint(pos, &v, "minor")?),
                ("uuid", Item::Val(v)) => md.uuid = Some(uuid(pos, &v)?),
                ("byte_order", Item::Val(v)) => {
                    md.byte_order = match byte_order(pos, &v)? {
                        ByteOrder::Native => {
                            return Err(Parser::err_at(pos, "the trace's byte_order cannot be 'native'"));
                        }
                        bo => bo,
                    }
                }
                ("packet.header", Item::Type(t)) => md.packet_header = Some(t),
                (k, _) => tracing::debug!(key = k, line = pos.line, "ignoring trace attribute"),
            }
            Ok(())
        })
    }

    fn env_block(&mut self, md: &mut Metadata) -> Result<(), MetaErr> {
        self.block(|_, pos, key, item| {
            let v = match item {
                Item::Val(Val::Int(v)) => EnvValue::Int(
                    i64::try_from(v).map_err(|_| Parser::err_at(pos, "env integer out of 64-bit range"))?,
                ),
                Item::Val(Val::Str(s)) => EnvValue::Str(s),
                Item::Val(Val::Path(p)) => EnvValue::Str(p.join(".")),
                Item::Type(_) => return Err(Parser::err_at(pos, "a type in the env block")),
            };
            md.env.push((key.join("."), v));
            Ok(())
        })
    }

    fn clock_block(&mut self) -> Result<ClockDecl, MetaErr> {
        let start = self.pos();
        let mut c = ClockDecl {
            name: Arc::from(""),
            uuid: None,
            description: None,
            freq: 1_000_000_000,
            offset_s: 0,
            offset: 0,
            precision: 0,
            absolute: false,
        };
        self.block(|p, pos, key, item| {
            let Item::Val(v) = item else { return Err(Parser::err_at(pos, "a type in a clock block")) };
            match key.join(".").as_str() {
                "name" => c.name = Arc::from(p.text(pos, &v, "name")?.as_str()),
                "uuid" => c.uuid = Some(uuid(pos, &v)?),
                "description" => c.description = Some(p.text(pos, &v, "description")?),
                "freq" => {
                    c.freq = p.uint(pos, &v, "freq")?;
                    if c.freq == 0 {
                        return Err(Parser::err_at(pos, "clock freq is 0"));
                    }
                }
                "offset_s" => c.offset_s = p.int(pos, &v, "offset_s")?,
                "offset" => c.offset = p.int(pos, &v, "offset")?,
                "precision" => c.precision = p.uint(pos, &v, "precision")?,
                "absolute" => c.absolute = boolean(pos, &v)?,
                k => tracing::debug!(key = k, line = pos.line, "ignoring clock attribute"),
            }
            Ok(())
        })?;
        if c.name.is_empty() {
            return Err(Self::err_at(start, "clock block without a name"));
        }
        Ok(c)
    }

    fn stream_block(&mut self) -> Result<StreamDecl, MetaErr> {
        let mut s = StreamDecl::default();
        self.block(|p, pos, key, item| {
            match (key.join(".").as_str(), item) {
                ("id", Item::Val(v)) => s.id = Some(p.uint(pos, &v, "id")?),
                ("packet.context", Item::Type(t)) => s.packet_context = Some(t),
                ("event.header", Item::Type(t)) => s.event_header = Some(t),
                ("event.context", Item::Type(t)) => s.event_context = Some(t),
                (k, _) => tracing::debug!(key = k, line = pos.line, "ignoring stream attribute"),
            }
            Ok(())
        })?;
        Ok(s)
    }

    fn event_block(&mut self, start: Pos) -> Result<EventDecl, MetaErr> {
        let mut e = EventDecl { pos: start, ..EventDecl::default() };
        let mut named = false;
        self.block(|p, pos, key, item| {
            match (key.join(".").as_str(), item) {
                ("name", Item::Val(v)) => {
                    e.name = p.text(pos, &v, "name")?;
                    named = true;
                }
                ("id", Item::Val(v)) => e.id = Some(p.uint(pos, &v, "id")?),
                ("stream_id", Item::Val(v)) => e.stream_id = Some(p.uint(pos, &v, "stream_id")?),
                ("loglevel", Item::Val(v)) => e.loglevel = Some(p.int(pos, &v, "loglevel")?),
                ("model.emf.uri", Item::Val(v)) => {
                    e.model_emf_uri = Some(p.text(pos, &v, "model.emf.uri")?)
                }
                ("context", Item::Type(t)) => e.context = Some(t),
                ("fields", Item::Type(t)) => e.fields = Some(t),
                (k, _) => tracing::debug!(key = k, line = pos.line, "ignoring event attribute"),
            }
            Ok(())
        })?;
        if !named {
            return Err(Self::err_at(start, "event block without a name"));
        }
        Ok(e)
    }

    fn uint(&self, pos: Pos, v: &Val, what: &str) -> Result<u64, MetaErr> {
        match v {
            Val::Int(i) => u64::try_from(*i)
                .map_err(|_| Self::err_at(pos, format!("{what}: {i} is not a 64-bit unsigned integer"))),
            _ => Err(Self::err_at(pos, format!("{what}: expected an integer"))),
        }
    }
    fn int(&self, pos: Pos, v: &Val, what: &str) -> Result<i64, MetaErr> {
        match v {
            Val::Int(i) => i64::try_from(*i)
                .map_err(|_| Self::err_at(pos, format!("{what}: {i} is out of 64-bit range"))),
            _ => Err(Self::err_at(pos, format!("{what}: expected an integer"))),
        }
    }
    fn text(&self, pos: Pos, v: &Val, what: &str) -> Result<String, MetaErr> {
        match v {
            Val::Str(s) => Ok(s.clone()),
            Val::Path(p) => Ok(p.join(".")),
            Val::Int(_) => Err(Self::err_at(pos, format!("{what}: expected a string"))),
        }
    }

    // ---- types -------------------------------------------------------------------------

    /// A type specifier followed by a declarator: named types take every identifier but the
    /// last (`unsigned long x`).
    fn type_spec_before_declarator(&mut self) -> Result<TypeDecl, MetaErr> {
        match self.peek() {
            Tok::Ident(k) if is_type_keyword(k) => self.type_spec(),
            Tok::Ident(_) => {
                let pos = self.pos();
                let mut words = Vec::new();
                while let (Tok::Ident(w), Tok::Ident(_)) = (self.peek().clone(), self.peek_at(1).clone()) {
                    words.push(w);
                    self.bump();
                }
                if words.is_empty() {
                    return Err(self.err_here(format!("expected a type, found {}", self.peek().describe())));
                }
                self.named(pos, &words.join(" "))
            }
            t => Err(self.err_here(format!("expected a type, found {}", t.describe()))),
        }
    }

    fn named(&self, pos: Pos, name: &str) -> Result<TypeDecl, MetaErr> {
        self.lookup(name).cloned().ok_or_else(|| Self::err_at(pos, format!("unknown type '{name}'")))
    }

    /// A type specifier (not followed by a declarator: a named type takes all identifiers).
    fn type_spec(&mut self) -> Result<TypeDecl, MetaErr> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self.err_here(format!("types nested deeper than {MAX_DEPTH}")));
        }
        let r = self.type_spec_inner();
        self.depth -= 1;
        r
    }

    fn type_spec_inner(&mut self) -> Result<TypeDecl, MetaErr> {
        let pos = self.pos();
        let kw = match self.peek() {
            Tok::Ident(k) => k.clone(),
            t => return Err(self.err_here(format!("expected a type, found {}", t.describe()))),
        };
        match kw.as_str() {
            "integer" => {
                self.bump();
                Ok(TypeDecl::Int(Arc::new(self.integer(pos)?)))
            }
            "floating_point" => {
                self.bump();
                Ok(TypeDecl::Float(Arc::new(self.floating(pos)?)))
            }
            "string" => {
                self.bump();
                let mut enc = Encoding::Utf8;
                if self.is_punct('{') {
                    self.attrs(|p, apos, key, v| {
                        match key {
                            "encoding" => enc = encoding(apos, &v)?,
                            k => tracing::debug!(key = k, line = apos.line, "ignoring string attribute"),
                        }
                        let _ = p;
                        Ok(())
                    })?;
                }
                Ok(TypeDecl::String(enc))
            }
            "struct" => {
                self.bump();
                self.structure(pos)
            }
            "variant" => {
                self.bump();
                self.variant(pos)
            }
            "enum" => {
                self.bump();
                self.enumeration(pos)
            }
            _ => {
                let mut words = Vec::new();
                while let Tok::Ident(w) = self.peek().clone() {
                    words.push(w);
                    self.bump();
                }
                self.named(pos, &words.join(" "))
            }
        }
    }

    /// `{ key = value; ... }` of integer/floating_point/string.
    fn attrs(
        &mut self,
        mut f: impl FnMut(&Parser, Pos, &str, Val) -> Result<(), MetaErr>,
    ) -> Result<(), MetaErr> {
        self.expect_punct('{', "to open the attributes")?;
        loop {
            if self.eat_punct('}') {
                return Ok(());
            }
            if self.eat_punct(';') {
                continue;
            }
            let pos = self.pos();
            let key = self.expect_ident("an attribute name")?;
            self.expect_punct('=', &format!("after '{key}'"))?;
            let v = self.value()?;
            f(self, pos, &key, v)?;
            if !self.eat_punct(';') && !self.is_punct('}') {
                return Err(
                    self.err_here(format!("expected ';' after '{key}', found {}", self.peek().describe()))
                );
            }
        }
    }

    fn integer(&mut self, pos: Pos) -> Result<IntDecl, MetaErr> {
        let mut d = IntDecl {
            size: 0,
            align: 0,
            signed: false,
            byte_order: ByteOrder::Native,
            base: 10,
            encoding: Encoding::None,
            map: None,
            pos,
        };
        let mut sized = false;
        self.attrs(|p, apos, key, v| {
            match key {
                "size" => {
                    let s = p.uint(apos, &v, "size")?;
                    if s == 0 || s > 64 {
                        return Err(Parser::err_at(
                            apos,
                            format!("integer size {s} is not supported (1 to 64 bits)"),
                        ));
                    }
                    d.size = s as u32;
                    sized = true;
                }
                "align" => d.align = alignment(p, apos, &v)?,
                "signed" => d.signed = boolean(apos, &v)?,
                "byte_order" => d.byte_order = byte_order(apos, &v)?,
                "base" => {
                    d.base = match &v {
                        Val::Int(2) => 2,
                        Val::Int(8) => 8,
                        Val::Int(10) => 10,
                        Val::Int(16) => 16,
                        Val::Path(w) if w.len() == 1 => match w[0].as_str() {
                            "decimal" | "dec" | "d" | "i" | "u" => 10,
                            "hexadecimal" | "hex" | "x" | "X" | "p" => 16,
                            "octal" | "oct" | "o" => 8,
                            "binary" | "bin" | "b" => 2,
                            other => return Err(Parser::err_at(apos, format!("unknown base '{other}'"))),
                        },
                        _ => return Err(Parser::err_at(apos, "base must be 2, 8, 10 or 16")),
                    }
                }
                "encoding" => d.encoding = encoding(apos, &v)?,
                "map" => match &v {
                    Val::Path(w) if w.len() == 3 && w[0] == "clock" && w[2] == "value" => {
                        d.map = Some(Arc::from(w[1].as_str()))
                    }
                    _ => return Err(Parser::err_at(apos, "map must be 'clock.NAME.value'")),
                },
                k => tracing::debug!(key = k, line = apos.line, "ignoring integer attribute"),
            }
            Ok(())
        })?;
        if !sized {
            return Err(Self::err_at(pos, "integer without a size"));
        }
        if d.align == 0 {
            d.align = if d.size.is_multiple_of(8) { 8 } else { 1 };
        }
        Ok(d)
    }

    fn floating(&mut self, pos: Pos) -> Result<FloatDecl, MetaErr> {
        let mut d = FloatDecl { exp_dig: 0, mant_dig: 0, byte_order: ByteOrder::Native, align: 0, pos };
        self.attrs(|p, apos, key, v| {
            match key {
                "exp_dig" => d.exp_dig = p.uint(apos, &v, "exp_dig")?.min(u32::MAX as u64) as u32,
                "mant_dig" => d.mant_dig = p.uint(apos, &v, "mant_dig")?.min(u32::MAX as u64) as u32,
                "byte_order" => d.byte_order = byte_order(apos, &v)?,
                "align" => d.align = alignment(p, apos, &v)?,
                k => tracing::debug!(key = k, line = apos.line, "ignoring floating_point attribute"),
            }
            Ok(())
        })?;
        if !matches!((d.exp_dig, d.mant_dig), (8, 24) | (11, 53)) {
            return Err(Self::err_at(
                pos,
                format!(
                    "floating_point with exp_dig = {}, mant_dig = {} is not supported (binary32: 8/24, binary64: 11/53)",
                    d.exp_dig, d.mant_dig
                ),
            ));
        }
        if d.align == 0 {
            d.align = 8;
        }
        Ok(d)
    }

    fn structure(&mut self, pos: Pos) -> Result<TypeDecl, MetaErr> {
        let name = match self.peek() {
            Tok::Ident(n) => {
                let n = n.clone();
                self.bump();
                Some(n)
            }
            _ => None,
        };
        let ty = if self.is_punct('{') {
            let fields = self.members()?;
            let mut min_align = 1;
            if self.is_ident("align") {
                self.bump();
                self.expect_punct('(', "after 'align'")?;
                let apos = self.pos();
                let v = self.value()?;
                min_align = alignment(self, apos, &v)?;
                self.expect_punct(')', "to close 'align('")?;
            }
            let t = TypeDecl::Struct(Arc::new(StructDecl { fields, min_align }));
            if let Some(n) = &name {
                self.declare(format!("struct {n}"), t.clone());
            }
            t
        } else {
            let Some(n) = name else {
                return Err(Self::err_at(pos, "'struct' needs a name or a body"));
            };
            let t = self.named(pos, &format!("struct {n}"))?;
            if self.is_ident("align") {
                // `struct name align(N)`: raise the alignment of a declared struct.
                self.bump();
                self.expect_punct('(', "after 'align'")?;
                let apos = self.pos();
                let v = self.value()?;
                let a = alignment(self, apos, &v)?;
                self.expect_punct(')', "to close 'align('")?;
                if let TypeDecl::Struct(s) = &t {
                    let mut s2 = (**s).clone();
                    s2.min_align = s2.min_align.max(a);
                    return Ok(TypeDecl::Struct(Arc::new(s2)));
                }
            }
            t
        };
        Ok(ty)
    }

    fn variant(&mut self, pos: Pos) -> Result<TypeDecl, MetaErr> {
        let name = match self.peek() {
            Tok::Ident(n) => {
                let n = n.clone();
                self.bump();
                Some(n)
            }
            _ => None,
        };
        let tag = if self.eat_punct('<') {
            let mut path = vec![self.expect_ident("the variant tag")?];
            while self.eat_punct('.') {
                path.push(self.expect_ident("a name after '.'")?);
            }
            self.expect_punct('>', "to close the variant tag")?;
            Some(path)
        } else {
            None
        };
        if self.is_punct('{') {
            let options = self.members()?;
            let decl = VariantDecl { tag: tag.clone(), options, pos };
            if let Some(n) = &name {
                self.declare(
                    format!("variant {n}"),
                    TypeDecl::Variant(Arc::new(VariantDecl { tag: None, ..decl.clone() })),
                );
            }
            return Ok(TypeDecl::Variant(Arc::new(decl)));
        }
        let Some(n) = name else {
            return Err(Self::err_at(pos, "'variant' needs a name or a body"));
        };
        match self.named(pos, &format!("variant {n}"))? {
            TypeDecl::Variant(v) => {
                let mut v2 = (*v).clone();
                if tag.is_some() {
                    v2.tag = tag;
                }
                Ok(TypeDecl::Variant(Arc::new(v2)))
            }
            _ => Err(Self::err_at(pos, format!("'{n}' is not a variant"))),
        }
    }

    fn enumeration(&mut self, pos: Pos) -> Result<TypeDecl, MetaErr> {
        let name = match self.peek() {
            Tok::Ident(n) => {
                let n = n.clone();
                self.bump();
                Some(n)
            }
            _ => None,
        };
        let container = if self.eat_punct(':') {
            let cpos = self.pos();
            let t = match self.peek() {
                Tok::Ident(k) if is_type_keyword(k) => self.type_spec()?,
                _ => {
                    let mut words = Vec::new();
                    while let Tok::Ident(w) = self.peek().clone() {
                        words.push(w);
                        self.bump();
                    }
                    if words.is_empty() {
                        return Err(self.err_here("expected the enum's container type after ':'"));
                    }
                    self.named(cpos, &words.join(" "))?
                }
            };
            match t {
                TypeDecl::Int(i) => Some(i),
                _ => return Err(Self::err_at(cpos, "an enum's container must be an integer")),
            }
        } else {
            None
        };
        if !self.is_punct('{') {
            let Some(n) = name else { return Err(Self::err_at(pos, "'enum' needs a name or a body")) };
            return self.named(pos, &format!("enum {n}"));
        }
        let container = match container {
            Some(c) => c,
            None => match self.lookup("int") {
                Some(TypeDecl::Int(i)) => i.clone(),
                _ => return Err(Self::err_at(pos, "enum without a container type and no 'int' typealias")),
            },
        };
        self.bump(); // '{'
        let mut entries = Vec::new();
        let mut next: i128 = 0;
        loop {
            if self.eat_punct('}') {
                break;
            }
            let epos = self.pos();
            let label = match self.bump() {
                Tok::Str(s) | Tok::Ident(s) => s,
                t => {
                    self.i -= 1;
                    return Err(self.err_here(format!("expected an enum label, found {}", t.describe())));
                }
            };
            let (lo, hi) = if self.eat_punct('=') {
                let lo = self.enum_value()?;
                let hi = if matches!(self.peek(), Tok::Ellipsis) {
                    self.bump();
                    self.enum_value()?
                } else {
                    lo
                };
                (lo, hi)
            } else {
                (next, next)
            };
            if hi < lo {
                return Err(Self::err_at(epos, format!("enum range {lo} ... {hi} is empty")));
            }
            next = hi + 1;
            entries.push(EnumEntry { label: Arc::from(label.as_str()), lo, hi });
            if !self.eat_punct(',') {
                self.expect_punct('}', "to close the enum")?;
                break;
            }
        }
        let t = TypeDecl::Enum(Arc::new(EnumDecl { container, entries }));
        if let Some(n) = name {
            self.declare(format!("enum {n}"), t.clone());
        }
        Ok(t)
    }

    fn enum_value(&mut self) -> Result<i128, MetaErr> {
        let pos = self.pos();
        match self.value()? {
            Val::Int(v) => Ok(v),
            _ => Err(Self::err_at(pos, "enum value must be an integer")),
        }
    }

    /// `{ members }` of a struct or variant, in a scope of their own.
    fn members(&mut self) -> Result<Vec<FieldDecl>, MetaErr> {
        self.expect_punct('{', "to open the members")?;
        self.scopes.push(HashMap::new());
        let r = self.members_inner();
        self.scopes.pop();
        r
    }

    fn members_inner(&mut self) -> Result<Vec<FieldDecl>, MetaErr> {
        let mut fields: Vec<FieldDecl> = Vec::new();
        loop {
            if self.eat_punct('}') {
                return Ok(fields);
            }
            if self.eat_punct(';') {
                continue;
            }
            if *self.peek() == Tok::Eof {
                return Err(self.err_here("unterminated struct or variant body"));
            }
            if self.is_ident("typealias") || self.is_ident("typedef") {
                self.declaration()?;
                continue;
            }
            let base = self.type_spec_before_declarator()?;
            if self.eat_punct(';') {
                continue; // a nested named declaration without a member
            }
            loop {
                let pos = self.pos();
                let name = self.expect_ident("a member name")?;
                // `variant name <tag> member;`-style tag after the member name is not CTF; a
                // tag given as `variant <tag> { } name` is handled in `variant`.
                let (name, ty) = self.declarator_suffix(name, base.clone())?;
                if fields.iter().any(|f| f.name == name) {
                    return Err(Self::err_at(pos, format!("duplicate member '{name}'")));
                }
                fields.push(FieldDecl { name, ty, pos });
                if !self.eat_punct(',') {
                    break;
                }
            }
            self.expect_punct(';', "after the member")?;
        }
    }

    /// Array/sequence suffixes after a declarator name: `name[3][len]`.
    fn declarator_suffix(&mut self, name: String, base: TypeDecl) -> Result<(String, TypeDecl), MetaErr> {
        enum Dim {
            Fixed(u64),
            Seq(Vec<String>, Pos),
        }
        let mut dims = Vec::new();
        while self.eat_punct('[') {
            let pos = self.pos();
            match self.peek().clone() {
                Tok::Int(n) => {
                    self.bump();
                    dims.push(Dim::Fixed(n));
                }
                Tok::Ident(_) => {
                    let mut path = vec![self.expect_ident("a length field")?];
                    while self.eat_punct('.') {
                        path.push(self.expect_ident("a name after '.'")?);
                    }
                    dims.push(Dim::Seq(path, pos));
                }
                t => return Err(self.err_here(format!("expected a length in '[ ]', found {}", t.describe()))),
            }
            self.expect_punct(']', "to close the length")?;
            if dims.len() > MAX_DEPTH as usize {
                return Err(Self::err_at(pos, "too many array dimensions"));
            }
        }
        let mut ty = base;
        for d in dims.into_iter().rev() {
            ty = match d {
                Dim::Fixed(len) => TypeDecl::Array { elem: Arc::new(ty), len },
                Dim::Seq(len, pos) => TypeDecl::Sequence { elem: Arc::new(ty), len, pos },
            };
        }
        Ok((name, ty))
    }
}

enum Item {
    Val(Val),
    Type(TypeDecl),
}

fn is_type_keyword(k: &str) -> bool {
    matches!(k, "integer" | "floating_point" | "string" | "struct" | "variant" | "enum")
}

fn boolean(pos: Pos, v: &Val) -> Result<bool, MetaErr> {
    match v {
        Val::Int(0) => Ok(false),
        Val::Int(1) => Ok(true),
        Val::Path(w) if w.len() == 1 => match w[0].as_str() {
            "true" | "TRUE" => Ok(true),
            "false" | "FALSE" => Ok(false),
            o => Err(MetaErr::new(pos.line, pos.col, format!("expected a boolean, found '{o}'"))),
        },
        _ => Err(MetaErr::new(pos.line, pos.col, "expected a boolean")),
    }
}

fn byte_order(pos: Pos, v: &Val) -> Result<ByteOrder, MetaErr> {
    match v {
        Val::Path(w) if w.len() == 1 => match w[0].as_str() {
            "native" => Ok(ByteOrder::Native),
            "le" | "little_endian" => Ok(ByteOrder::Le),
            "be" | "network" | "big_endian" => Ok(ByteOrder::Be),
            o => Err(MetaErr::new(pos.line, pos.col, format!("unknown byte_order '{o}'"))),
        },
        _ => Err(MetaErr::new(pos.line, pos.col, "byte_order must be le, be, network or native")),
    }
}

fn encoding(pos: Pos, v: &Val) -> Result<Encoding, MetaErr> {
    match v {
        Val::Path(w) if w.len() == 1 => match w[0].as_str() {
            "none" => Ok(Encoding::None),
            "UTF8" | "utf8" => Ok(Encoding::Utf8),
            "ASCII" | "ascii" => Ok(Encoding::Ascii),
            o => Err(MetaErr::new(pos.line, pos.col, format!("unknown encoding '{o}'"))),
        },
        _ => Err(MetaErr::new(pos.line, pos.col, "encoding must be none, UTF8 or ASCII")),
    }
}

fn alignment(p: &Parser, pos: Pos, v: &Val) -> Result<u32, MetaErr> {
    let a = p.uint(pos, v, "align")?;
    if a == 0 || !a.is_power_of_two() || a > 1 << 16 {
        return Err(Parser::err_at(pos, format!("alignment {a} is not a power of two up to 65536 bits")));
    }
    Ok(a as u32)
}

fn uuid(pos: Pos, v: &Val) -> Result<[u8; 16], MetaErr> {
    let Val::Str(s) = v else { return Err(MetaErr::new(pos.line, pos.col, "uuid must be a string")) };
    let hex: Vec<u8> = s.bytes().filter(|c| *c != b'-').collect();
    let bad = || MetaErr::new(pos.line, pos.col, format!("bad uuid {s:?}"));
    if hex.len() != 32 {
        return Err(bad());
    }
    let mut out = [0u8; 16];
    for (i, pair) in hex.chunks(2).enumerate() {
        let hi = (pair[0] as char).to_digit(16).ok_or_else(bad)?;
        let lo = (pair[1] as char).to_digit(16).ok_or_else(bad)?;
        out[i] = (hi * 16 + lo) as u8;
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
