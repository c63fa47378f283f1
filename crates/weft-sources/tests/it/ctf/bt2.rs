//! babeltrace2 as the reference reader: runs it on a trace, parses its text output
//! (`--no-delta -n all`, one line per event), and compares it field by field with weft's
//! decoded events.
//!
//! The comparison maps babeltrace2's values with the mapping weft documents in
//! `weft_sources::ctf::record` (structs flattened to `a.b`, enums as label + `.value`, text
//! arrays as strings, variants as their option's value), so it checks that mapping too.

use std::path::Path;
use std::process::Command;

use weft_model::{Event, EventKind, Value};

/// A value as babeltrace2 prints it.
#[derive(Debug, Clone, PartialEq)]
pub enum Bt {
    Int(i128),
    /// An integer printed in hex: babeltrace2 prints a negative signed field's two's
    /// complement bits, so only the low bits can be compared.
    Hex(u128),
    Float(f64),
    Str(String),
    Struct(Vec<(String, Bt)>),
    /// A variant (printed `{ value }`, without its option name).
    Variant(Box<Bt>),
    Array(Vec<Bt>),
    Enum {
        labels: Vec<String>,
        value: i128,
    },
}

/// One printed event.
#[derive(Debug, Clone, PartialEq)]
pub struct BtEvent {
    /// `timestamp = ...`: cycles (`--clock-cycles`) or ns (`--clock-seconds`, converted).
    pub timestamp: Option<u128>,
    pub name: String,
    /// `stream.packet.context`, `stream.event.context`, `event.context`, `event.fields`.
    pub sections: Vec<(String, Bt)>,
}

impl BtEvent {
    pub fn section(&self, name: &str) -> Option<&Bt> {
        self.sections.iter().find(|(k, _)| k == name).map(|(_, v)| v)
    }
}

/// The babeltrace2 binary; fails naming `.ci/test` when it is missing.
pub fn babeltrace2() -> &'static str {
    let ok =
        Command::new("babeltrace2").arg("--version").output().map(|o| o.status.success()).unwrap_or(false);
    assert!(ok, "babeltrace2 is not installed: run .ci/test (it installs .ci/apt-packages)");
    "babeltrace2"
}

/// Runs babeltrace2 on `dir` with `clock` = `--clock-cycles` or `--clock-seconds`.
pub fn run(dir: &Path, clock: &str) -> Vec<BtEvent> {
    let out = Command::new(babeltrace2())
        .args([clock, "--no-delta", "-n", "all"])
        .arg(dir)
        .output()
        .expect("run babeltrace2");
    assert!(
        out.status.success(),
        "babeltrace2 failed on {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("babeltrace2 output is UTF-8");
    text.lines()
        .filter(|l| !l.is_empty())
        .enumerate()
        .map(|(i, l)| parse_line(l).unwrap_or_else(|e| panic!("babeltrace2 line {}: {e}: {l}", i + 1)))
        .collect()
}

const TOP_KEYS: [&str; 9] = [
    "timestamp",
    "trace:hostname",
    "trace:domain",
    "trace:procname",
    "trace:vpid",
    "name",
    "loglevel",
    "model.emf.uri",
    "trace",
];
const SECTION_KEYS: [&str; 4] =
    ["stream.packet.context", "stream.event.context", "event.context", "event.fields"];

/// Parses one line of `babeltrace2 --no-delta -n all` output.
pub fn parse_line(line: &str) -> Result<BtEvent, String> {
    let mut ev = BtEvent { timestamp: None, name: String::new(), sections: Vec::new() };
    let mut rest = line;
    while !rest.is_empty() {
        let eq = rest.find(" = ").ok_or("expected 'key = value'")?;
        let key = &rest[..eq];
        let after = &rest[eq + 3..];
        if SECTION_KEYS.contains(&key) {
            let mut p = P { s: after.as_bytes(), i: 0 };
            let v = p.value()?;
            ev.sections.push((key.to_owned(), v));
            rest = &after[p.i..];
        } else if TOP_KEYS.contains(&key) {
            // Plain text up to the next ", KEY = ".
            let mut end = after.len();
            for k in TOP_KEYS.iter().chain(SECTION_KEYS.iter()) {
                if let Some(p) = after.find(&format!(", {k} = ")) {
                    end = end.min(p);
                }
            }
            let val = &after[..end];
            let val = val.strip_suffix(", ").unwrap_or(val);
            match key {
                "timestamp" => ev.timestamp = Some(parse_ts(val)?),
                "name" => ev.name = val.to_owned(),
                _ => {}
            }
            rest = &after[end..];
        } else {
            return Err(format!("unknown key '{key}'"));
        }
        rest = rest.strip_prefix(", ").unwrap_or(rest);
    }
    Ok(ev)
}

fn parse_ts(v: &str) -> Result<u128, String> {
    match v.split_once('.') {
        Some((s, frac)) => {
            let s: u128 = s.parse().map_err(|_| format!("bad timestamp {v}"))?;
            let mut f = frac.to_owned();
            while f.len() < 9 {
                f.push('0');
            }
            let ns: u128 = f[..9].parse().map_err(|_| format!("bad timestamp {v}"))?;
            Ok(s * 1_000_000_000 + ns)
        }
        None => v.parse().map_err(|_| format!("bad timestamp {v}")),
    }
}

struct P<'a> {
    s: &'a [u8],
    i: usize,
}

impl P<'_> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }
    fn lit(&mut self, l: &str) -> bool {
        if self.s[self.i..].starts_with(l.as_bytes()) {
            self.i += l.len();
            true
        } else {
            false
        }
    }
    fn expect(&mut self, l: &str) -> Result<(), String> {
        if self.lit(l) { Ok(()) } else { Err(format!("expected {l:?} at {}", self.i)) }
    }
    fn value(&mut self) -> Result<Bt, String> {
        match self.peek() {
            Some(b'{') => {
                self.i += 1;
                let mut fields = Vec::new();
                if self.lit(" }") {
                    return Ok(Bt::Struct(fields));
                }
                loop {
                    self.expect(" ")?;
                    // A named member `name = v`, or a variant's bare value.
                    let start = self.i;
                    while matches!(self.peek(), Some(c) if c.is_ascii_alphanumeric() || c == b'_') {
                        self.i += 1;
                    }
                    if self.i > start && self.lit(" = ") {
                        let name = String::from_utf8_lossy(&self.s[start..self.i - 3]).into_owned();
                        let v = self.value()?;
                        fields.push((name, v));
                    } else {
                        self.i = start;
                        let v = self.value()?;
                        self.expect(" }")?;
                        return Ok(Bt::Variant(Box::new(v)));
                    }
                    if self.lit(",") {
                        continue;
                    }
                    self.expect(" }")?;
                    return Ok(Bt::Struct(fields));
                }
            }
            Some(b'[') => {
                self.i += 1;
                let mut elems = Vec::new();
                if self.lit(" ]") {
                    return Ok(Bt::Array(elems));
                }
                loop {
                    self.expect(" [")?;
                    while matches!(self.peek(), Some(c) if c.is_ascii_digit()) {
                        self.i += 1;
                    }
                    self.expect("] = ")?;
                    elems.push(self.value()?);
                    if self.lit(",") {
                        continue;
                    }
                    self.expect(" ]")?;
                    return Ok(Bt::Array(elems));
                }
            }
            Some(b'(') => {
                self.i += 1;
                self.expect(" ")?;
                let mut labels = Vec::new();
                if self.lit("<unknown>") {
                } else {
                    loop {
                        labels.push(self.string()?);
                        if !self.lit(", ") {
                            break;
                        }
                    }
                }
                self.expect(" : container = ")?;
                let Bt::Int(value) = self.number()? else {
                    return Err("enum container is not an integer".into());
                };
                self.expect(" )")?;
                Ok(Bt::Enum { labels, value })
            }
            Some(b'"') => Ok(Bt::Str(self.string()?)),
            _ => self.number(),
        }
    }
    fn string(&mut self) -> Result<String, String> {
        self.expect("\"")?;
        let mut out = Vec::new();
        loop {
            let c = self.peek().ok_or("unterminated string")?;
            self.i += 1;
            match c {
                b'"' => break,
                b'\\' => {
                    let e = self.peek().ok_or("unterminated escape")?;
                    self.i += 1;
                    out.push(match e {
                        b'n' => b'\n',
                        b't' => b'\t',
                        b'r' => b'\r',
                        b'a' => 7,
                        b'b' => 8,
                        b'f' => 12,
                        b'v' => 11,
                        other => other,
                    });
                }
                c => out.push(c),
            }
        }
        Ok(String::from_utf8_lossy(&out).into_owned())
    }
    fn number(&mut self) -> Result<Bt, String> {
        let start = self.i;
        while matches!(self.peek(), Some(c) if !matches!(c, b',' | b' ' | b'}' | b']' | b')')) {
            self.i += 1;
        }
        let t = std::str::from_utf8(&self.s[start..self.i]).map_err(|e| e.to_string())?;
        if let Some(h) = t.strip_prefix("0x") {
            return u128::from_str_radix(h, 16).map(Bt::Hex).map_err(|_| format!("bad hex {t}"));
        }
        if let Some(h) = t.strip_prefix("-0x") {
            return i128::from_str_radix(h, 16).map(|v| Bt::Int(-v)).map_err(|_| format!("bad hex {t}"));
        }
        if let Ok(v) = t.parse::<i128>() {
            return Ok(Bt::Int(v));
        }
        t.parse::<f64>().map(Bt::Float).map_err(|_| format!("bad number {t:?} at {start}"))
    }
}

/// babeltrace2's view of a section, mapped the way weft flattens fields.
pub fn flatten(prefix: &str, v: &Bt, out: &mut Vec<(String, Value)>) {
    match v {
        Bt::Struct(fields) => {
            for (k, fv) in fields {
                let key = format!("{prefix}{k}");
                member(&key, fv, out);
            }
        }
        other => out.push((prefix.trim_end_matches('.').to_owned(), value(other))),
    }
}

fn member(key: &str, v: &Bt, out: &mut Vec<(String, Value)>) {
    match v {
        Bt::Struct(_) => flatten(&format!("{key}."), v, out),
        Bt::Variant(inner) => member(key, inner, out),
        Bt::Enum { labels, value } => {
            out.push((key.to_owned(), Value::Str(labels.join(",").into())));
            out.push((format!("{key}.value"), Value::I64(*value as i64)));
        }
        other => out.push((key.to_owned(), value(other))),
    }
}

/// Marks a hex integer in the mapped values (compared on its printed bits by [`same`]).
const HEX: &str = "\0hex";

fn value(v: &Bt) -> Value {
    match v {
        Bt::Int(i) => Value::I64(*i as u64 as i64),
        Bt::Hex(h) => Value::Map(vec![weft_model::KeyValue::new(HEX, Value::I64(*h as u64 as i64))]),
        Bt::Float(f) => Value::F64(*f),
        Bt::Str(s) => Value::Str(s.clone().into()),
        Bt::Array(a) => Value::Array(a.iter().map(value).collect()),
        Bt::Struct(f) => {
            Value::Map(f.iter().map(|(k, v)| weft_model::KeyValue::new(k.clone(), value(v))).collect())
        }
        Bt::Variant(inner) => value(inner),
        Bt::Enum { labels, .. } => Value::Str(labels.join(",").into()),
    }
}

/// Values equal, floats within `rel` relative error (babeltrace2 prints floats rounded).
pub fn same(a: &Value, b: &Value, rel: f64) -> bool {
    match (a, b) {
        // Hex: babeltrace2 printed the field's bits; compare as many low bits as it printed
        // (rounded up to a whole integer size).
        (Value::I64(ours), Value::Map(m)) | (Value::Map(m), Value::I64(ours))
            if m.len() == 1 && m[0].key == HEX =>
        {
            let Value::I64(bits) = m[0].value else { return false };
            let bits = bits as u64;
            let width = [8u32, 16, 32, 64].into_iter().find(|w| *w == 64 || bits >> w == 0).unwrap_or(64);
            let mask = if width == 64 { u64::MAX } else { (1u64 << width) - 1 };
            (*ours as u64) & mask == bits && (*ours >= 0 || width < 64 || bits == *ours as u64)
        }
        // babeltrace2 prints integral floats without a point ("2222"): compare numerically.
        (Value::F64(x), Value::I64(y)) | (Value::I64(y), Value::F64(x)) => *x == *y as f64,
        (Value::F64(x), Value::F64(y)) => {
            (x.is_nan() && y.is_nan()) || x == y || ((x - y).abs() <= rel * x.abs().max(y.abs()))
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| same(p, q, rel))
        }
        (Value::Map(x), Value::Map(y)) => {
            x.len() == y.len()
                && x.iter().zip(y).all(|(p, q)| p.key == q.key && same(&p.value, &q.value, rel))
        }
        _ => a == b,
    }
}

/// What a comparison found.
#[derive(Debug, Default)]
pub struct Comparison {
    pub events: usize,
    pub fields: usize,
    pub mismatches: Vec<String>,
    /// Empty strings babeltrace2 2.0.4 showed with an earlier value of the same field (its
    /// bug; the bytes hold an empty string — see `lttng.rs`).
    pub stale_empty_strings: usize,
}

/// An event reduced to what both sides show: time, name, flattened fields, CPU, and for
/// babeltrace2 whether each field's value was shown before (same CPU, event class and field).
type Flat = (u128, String, Vec<(String, Value)>, Option<u32>, Vec<bool>);

/// Compares weft's events with babeltrace2's, field by field. `ts_ns`: babeltrace2 was run
/// with `--clock-seconds` (compare `time_ns`), else `--clock-cycles` (compare `raw_time`).
pub fn compare(weft: &[Event], bt: &[BtEvent], ts_ns: bool) -> Comparison {
    let mut c = Comparison { events: weft.len(), ..Comparison::default() };
    if weft.len() != bt.len() {
        c.mismatches.push(format!("{} events from weft, {} from babeltrace2", weft.len(), bt.len()));
        return c;
    }
    // Both are time ordered; order events of equal time (and name) by their fields so that
    // ties between streams compare deterministically.
    let mut w: Vec<Flat> = weft
        .iter()
        .map(|e| {
            let EventKind::Tracepoint(t) = &e.kind else { panic!("not a tracepoint event: {e:?}") };
            let ts = if ts_ns { e.time_ns as u128 } else { e.raw_time as u128 };
            (
                ts,
                t.name.to_string(),
                t.fields.iter().map(|kv| (kv.key.to_string(), kv.value.clone())).collect(),
                t.cpu,
                Vec::new(),
            )
        })
        .collect();
    let mut seen: std::collections::HashSet<(Option<u32>, String, String, String)> = Default::default();
    let mut b: Vec<Flat> = bt
        .iter()
        .map(|e| {
            let mut f = Vec::new();
            if let Some(s) = e.section("stream.event.context") {
                flatten("context.", s, &mut f);
            }
            if let Some(s) = e.section("event.context") {
                flatten("context.", s, &mut f);
            }
            if let Some(s) = e.section("event.fields") {
                flatten("", s, &mut f);
            }
            let cpu = match e.section("stream.packet.context") {
                Some(Bt::Struct(p)) => p.iter().find(|(k, _)| k == "cpu_id").and_then(|(_, v)| match v {
                    Bt::Int(i) => Some(*i as u32),
                    Bt::Hex(i) => Some(*i as u32),
                    _ => None,
                }),
                _ => None,
            };
            let prev = f
                .iter()
                .map(|(k, v)| !seen.insert((cpu, e.name.clone(), k.clone(), format!("{v:?}"))))
                .collect();
            (e.timestamp.unwrap_or(0), e.name.clone(), f, cpu, prev)
        })
        .collect();
    let key = |x: &Flat| (x.0, x.1.clone(), format!("{:?}", x.2));
    w.sort_by_key(key);
    b.sort_by_key(key);
    for (i, (we, be)) in w.iter().zip(&b).enumerate() {
        let mut bad = |m: String| {
            if c.mismatches.len() < 20 {
                c.mismatches.push(format!("event {i} ({}): {m}", we.1));
            }
        };
        if be.0 != 0 && we.0 != be.0 {
            bad(format!("timestamp {} vs babeltrace2 {}", we.0, be.0));
        }
        if we.1 != be.1 {
            bad(format!("name {:?} vs babeltrace2 {:?}", we.1, be.1));
        }
        if be.3.is_some() && we.3 != be.3 {
            bad(format!("cpu {:?} vs babeltrace2 {:?}", we.3, be.3));
        }
        if we.2.len() != be.2.len() {
            bad(format!("{} fields vs babeltrace2 {}: {:?} / {:?}", we.2.len(), be.2.len(), we.2, be.2));
            continue;
        }
        for (j, ((wk, wv), (bk, bv))) in we.2.iter().zip(&be.2).enumerate() {
            c.fields += 1;
            if wk == bk
                && *wv == Value::Str(String::new().into())
                && matches!(bv, Value::Str(s) if !s.is_empty())
                && be.4.get(j) == Some(&true)
            {
                c.stale_empty_strings += 1;
                continue;
            }
            // babeltrace2 prints floating point with 6 significant digits (%g).
            if wk != bk || !same(wv, bv, 1e-5) {
                bad(format!("field {wk} = {wv:?} vs babeltrace2 {bk} = {bv:?}"));
            }
        }
    }
    c
}

#[test]
fn parses_babeltrace2_lines() {
    let l = r#"timestamp = 1795494806.157374762, trace:hostname = vm, name = weft_test:all_types, stream.packet.context = { cpu_id = 0 }, stream.event.context = { vtid = 23211, procname = "app" }, event.fields = { i8 = -5, u32x = 0xDEADBEEF, f = 1.5, s = "a\"b\\", col = ( "GREEN" : container = 3 ), e2 = ( "A", "B" : container = 1 ), e3 = ( <unknown> : container = 9 ), arr = [ [0] = -1, [1] = 2 ], seq = [ ], st = { a = 1, b = [ ] }, var = { "x" }, empty = { } }"#;
    let e = parse_line(l).unwrap();
    assert_eq!(e.timestamp, Some(1_795_494_806_157_374_762));
    assert_eq!(e.name, "weft_test:all_types");
    let Some(Bt::Struct(f)) = e.section("event.fields") else { panic!() };
    assert_eq!(f[0], ("i8".into(), Bt::Int(-5)));
    assert_eq!(f[1].1, Bt::Hex(0xDEADBEEF));
    assert_eq!(f[2].1, Bt::Float(1.5));
    assert_eq!(f[3].1, Bt::Str("a\"b\\".into()));
    assert_eq!(f[4].1, Bt::Enum { labels: vec!["GREEN".into()], value: 3 });
    assert_eq!(f[5].1, Bt::Enum { labels: vec!["A".into(), "B".into()], value: 1 });
    assert_eq!(f[6].1, Bt::Enum { labels: vec![], value: 9 });
    assert_eq!(f[7].1, Bt::Array(vec![Bt::Int(-1), Bt::Int(2)]));
    assert_eq!(f[9].1, Bt::Struct(vec![("a".into(), Bt::Int(1)), ("b".into(), Bt::Array(vec![]))]));
    assert_eq!(f[10].1, Bt::Variant(Box::new(Bt::Str("x".into()))));
    let e = parse_line("name = sequence event, event.fields = { v = 1 }").unwrap();
    assert_eq!(e.name, "sequence event");
    assert!(parse_line("name = x, event.fields = { v = ").is_err());
}
