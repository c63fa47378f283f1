//! SimBricks `nicbm` behavioural-model log (the i40e model and every other nicbm NIC) →
//! [`NicEvent`]s.
//!
//! Event records: `[info: ]main_time = <ps>: nicbm: <message>` (the `info: ` prefix comes from
//! newer SimBricks' logger; very old logs lack it):
//!
//! | message | event |
//! |---|---|
//! | `read(off=0x<o>, len=<n>, val=0x<v>)` | `NicMmioR` |
//! | `write(off=0x<o>, len=<n>, val=0x<v>[, posted=<0/1>])` | `NicMmioW` (`posted: None` in 2022-era logs that print no `posted=`) |
//! | `issuing` / `enqueuing` / `executing dma op <P> addr <A> len <n> pending <k>` | `NicDmaI` / `NicDmaEn` / `NicDmaEx` |
//! | `completed dma read` / `write op <P> addr <A> len <n>` | `NicDmaCR` / `NicDmaCW` |
//! | `issue MSI-X interrupt vec <v>` / `issue MSI interrupt vec <v>` | `NicMsix { is_x }` |
//! | `set intx interrupt <level>` | `NicSetIntx` |
//! | `eth tx: len <n>` / `eth rx: port <p> len <n>` | `NicTx` / `NicRx` |
//!
//! `<P>` is the DMA op's address printed with `%p` (`0x55d6864e9dd0`, or `(nil)` for 0) — the
//! same number gem5 prints in decimal as the DMA id; `<A>` is hex with or without `0x`.
//!
//! **The DMA-data quirk.** After `dma write data: ` nicbm prints every payload byte through a
//! separate logger call (`info: 9C info: 51 …`) and no newline after the last one, so the next
//! record is glued to the end of that physical line. The parser therefore splits each
//! physical line at every `main_time = ` and parses each record on its own; the payload bytes
//! before the first record are skipped (they are not events).
//!
//! Skipped on purpose: blank lines; the payload bytes; `dma write data:` itself; every other
//! `info:` line (`mac_addr=`, `sync_pci=`, `poll_h2d: peer terminated`, `exit main_time: …`,
//! the end-of-run statistics). Rejected: a record whose message is unknown or whose fields do
//! not parse (the reason names the field), and lines that are neither records nor `info:`
//! output.

use weft_model::event::{EventKind, NicEvent};
use weft_model::{Clock, Event, SourceId};

use crate::parse::{Cursor, LineOutcome, LineParser, Stamp, is_blank, trim_end};

/// The nicbm parser (see the module docs).
pub struct NicbmParser {
    stamp: Stamp,
}

const MARKER: &[u8] = b"main_time = ";
/// Where the `_` is in [`MARKER`].
const MARKER_UNDERSCORE: usize = 4;

/// The first `main_time = ` in `line` at or after `from`. Records rarely hold a `_` other
/// than the marker's, so a `memchr` for `_` and a check around each hit beats a substring
/// search (whose set-up costs more than the short scan).
#[inline]
fn find_marker(line: &[u8], from: usize) -> Option<usize> {
    let mut at = from + MARKER_UNDERSCORE;
    while at < line.len() {
        let u = at + memchr::memchr(b'_', &line[at..])?;
        let start = u - MARKER_UNDERSCORE;
        if line[start..].starts_with(MARKER) {
            return Some(start);
        }
        at = u + 1;
    }
    None
}

impl NicbmParser {
    /// A parser for `source`, converting `main_time` through `clock` (normally
    /// [`Clock::simulated_picos`]).
    pub fn new(source: SourceId, clock: Clock) -> Self {
        NicbmParser { stamp: Stamp::new(source, clock) }
    }
}

type R<T> = Result<T, &'static str>;

impl LineParser for NicbmParser {
    fn format(&self) -> &'static str {
        "nicbm"
    }

    fn parse_line(&mut self, line: &[u8], out: &mut Vec<Event>) -> LineOutcome {
        let Some(first) = find_marker(line, 0) else {
            return if is_blank(line) {
                LineOutcome::Skipped("blank line")
            } else if line.starts_with(b"info:") {
                LineOutcome::Skipped("nicbm informational output (not an event)")
            } else {
                LineOutcome::Rejected("not a nicbm record ('main_time = ' missing)")
            };
        };
        // The last rejection wins; else any event makes the line parsed; else it held only
        // the DMA payload dump.
        let mut rejected = None;
        let mut parsed = false;
        let mut at = first;
        loop {
            let start = at + MARKER.len();
            let next = find_marker(line, start);
            let rec = &line[start..next.unwrap_or(line.len())];
            match record(rec) {
                Ok(Some((t, kind))) => {
                    out.push(self.stamp.event(t, kind));
                    parsed = true;
                }
                Ok(None) => {}
                Err(r) => rejected = Some(r),
            }
            match next {
                Some(n) => at = n,
                None => break,
            }
        }
        match (rejected, parsed) {
            (Some(r), _) => LineOutcome::Rejected(r),
            (None, true) => LineOutcome::Parsed,
            (None, false) => LineOutcome::Skipped("nicbm dma payload dump (not an event)"),
        }
    }
}

/// One record after `main_time = `: `<ps>: nicbm: <message>`. A glued record may be followed
/// by the next record's `info: ` prefix, which is trimmed.
fn record(rec: &[u8]) -> R<Option<(u64, EventKind)>> {
    let mut c = Cursor::new(rec);
    let t = c.dec().ok_or("bad 'main_time' (decimal expected)")?;
    if !c.lit(b": nicbm: ") {
        return Err("expected ': nicbm: ' after the time");
    }
    let mut msg = trim_end(c.rest);
    if let Some(m) = msg.strip_suffix(b"info:") {
        msg = trim_end(m);
    }
    message(msg).map(|k| k.map(|k| (t, EventKind::Nic(k))))
}

fn message(msg: &[u8]) -> R<Option<NicEvent>> {
    let mut c = Cursor::new(msg);
    let ev = if c.lit(b"read(") {
        let (off, len, val) = mmio(&mut c)?;
        if !c.lit(b")") {
            return Err("expected ')' after 'val'");
        }
        NicEvent::MmioR { off, len, val }
    } else if c.lit(b"write(") {
        let (off, len, val) = mmio(&mut c)?;
        let posted = if c.lit(b")") {
            None
        } else {
            c.lit(b",");
            c.spaces();
            let p = match c.field(b"posted=", Cursor::dec) {
                Some(p @ 0..=1) => p == 1,
                _ => return Err("bad 'posted' (0 or 1 expected)"),
            };
            if !c.lit(b")") {
                return Err("expected ')' after 'posted'");
            }
            Some(p)
        };
        NicEvent::MmioW { off, len, val, posted }
    } else if c.lit(b"issuing dma op ") {
        let (op, addr, len) = dma(&mut c, true)?;
        NicEvent::DmaI { op, addr, len }
    } else if c.lit(b"enqueuing dma op ") {
        let (op, addr, len) = dma(&mut c, true)?;
        NicEvent::DmaEn { op, addr, len }
    } else if c.lit(b"executing dma op ") {
        let (op, addr, len) = dma(&mut c, true)?;
        NicEvent::DmaEx { op, addr, len }
    } else if c.lit(b"completed dma read op ") {
        let (op, addr, len) = dma(&mut c, false)?;
        NicEvent::DmaCR { op, addr, len }
    } else if c.lit(b"completed dma write op ") {
        let (op, addr, len) = dma(&mut c, false)?;
        NicEvent::DmaCW { op, addr, len }
    } else if c.lit(b"issue MSI-X interrupt ") {
        NicEvent::Msix { vec: vec(&mut c)?, is_x: true }
    } else if c.lit(b"issue MSI interrupt ") {
        NicEvent::Msix { vec: vec(&mut c)?, is_x: false }
    } else if c.lit(b"set intx interrupt ") {
        NicEvent::SetIntx {
            level: u32::try_from(c.dec().ok_or("bad intx level")?).map_err(|_| "bad intx level")?,
        }
    } else if c.lit(b"eth tx: ") {
        NicEvent::Tx { len: small(c.field(b"len ", Cursor::dec).ok_or("bad 'len' (decimal expected)")?)? }
    } else if c.lit(b"eth rx: ") {
        let port = c.field(b"port ", Cursor::dec).ok_or("bad 'port' (decimal expected)")?;
        c.spaces();
        let len = c.field(b"len ", Cursor::dec).ok_or("bad 'len' (decimal expected)")?;
        NicEvent::Rx { port: small(port)?, len: small(len)? }
    } else if c.lit(b"dma write data:") {
        return Ok(None);
    } else {
        return Err("unknown nicbm message");
    };
    Ok(Some(ev))
}

fn small(v: u64) -> R<u32> {
    u32::try_from(v).map_err(|_| "number out of range")
}

fn vec(c: &mut Cursor<'_>) -> R<u32> {
    small(c.field(b"vec ", Cursor::dec).ok_or("bad 'vec' (decimal expected)")?)
}

fn mmio(c: &mut Cursor<'_>) -> R<(u64, u32, u64)> {
    let off = c.field(b"off=", Cursor::hex).ok_or("bad 'off' (hex expected)")?;
    c.lit(b",");
    c.spaces();
    let len = c.field(b"len=", Cursor::dec).ok_or("bad 'len' (decimal expected)")?;
    c.lit(b",");
    c.spaces();
    let val = c.field(b"val=", Cursor::hex).ok_or("bad 'val' (hex expected)")?;
    Ok((off, small(len)?, val))
}

fn dma(c: &mut Cursor<'_>, pending: bool) -> R<(u64, u64, u64)> {
    let op = if c.lit(b"(nil)") { 0 } else { c.hex().ok_or("bad dma 'op' (pointer expected)")? };
    c.spaces();
    let addr = c.field(b"addr ", Cursor::hex).ok_or("bad 'addr' (hex expected)")?;
    c.spaces();
    let len = c.field(b"len ", Cursor::dec).ok_or("bad 'len' (decimal expected)")?;
    if pending {
        c.spaces();
        c.field(b"pending ", Cursor::dec).ok_or("bad 'pending' (decimal expected)")?;
    }
    Ok((op, addr, len))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(line: &str) -> (LineOutcome, Vec<NicEvent>, Vec<u64>) {
        let mut p = NicbmParser::new(SourceId(2), Clock::simulated_picos(0));
        let mut out = Vec::new();
        let o = p.parse_line(line.as_bytes(), &mut out);
        let t = out.iter().map(|e| e.raw_time).collect();
        let k = out
            .into_iter()
            .map(|e| match e.kind {
                EventKind::Nic(n) => n,
                k => panic!("{k:?}"),
            })
            .collect();
        (o, k, t)
    }

    #[test]
    fn records() {
        let (o, ev, t) =
            parse("info: main_time = 1478350392250: nicbm: read(off=0xbe494, len=4, val=0x41f8)");
        assert_eq!(o, LineOutcome::Parsed);
        assert_eq!(t, vec![1_478_350_392_250]);
        assert_eq!(ev, vec![NicEvent::MmioR { off: 0xbe494, len: 4, val: 0x41f8 }]);
        assert_eq!(
            parse("info: main_time = 1: nicbm: write(off=0x34800, len=4, val=0x18)").1,
            vec![NicEvent::MmioW { off: 0x34800, len: 4, val: 0x18, posted: None }]
        );
        assert_eq!(
            parse("main_time = 1: nicbm: write(off=0x34800, len=4, val=0x18, posted=1)").1,
            vec![NicEvent::MmioW { off: 0x34800, len: 4, val: 0x18, posted: Some(true) }]
        );
        assert_eq!(
            parse(
                "info: main_time = 5: nicbm: issuing dma op 0x55d6864e9dd0 addr 2368ba0c0 len 98 pending 0"
            )
            .1,
            vec![NicEvent::DmaI { op: 0x55d6864e9dd0, addr: 0x2368ba0c0, len: 98 }]
        );
        assert_eq!(
            parse("info: main_time = 5: nicbm: enqueuing dma op (nil) addr 0x10 len 8 pending 64").1,
            vec![NicEvent::DmaEn { op: 0, addr: 0x10, len: 8 }]
        );
        assert_eq!(
            parse("info: main_time = 5: nicbm: completed dma read op 0x55d6864ec5d0 addr 2368d10a0 len 32").1,
            vec![NicEvent::DmaCR { op: 0x55d6864ec5d0, addr: 0x2368d10a0, len: 32 }]
        );
        assert_eq!(
            parse("info: main_time = 5: nicbm: issue MSI-X interrupt vec 1").1,
            vec![NicEvent::Msix { vec: 1, is_x: true }]
        );
        assert_eq!(
            parse("info: main_time = 5: nicbm: issue MSI interrupt vec 0").1,
            vec![NicEvent::Msix { vec: 0, is_x: false }]
        );
        assert_eq!(
            parse("info: main_time = 5: nicbm: set intx interrupt 1").1,
            vec![NicEvent::SetIntx { level: 1 }]
        );
        assert_eq!(parse("info: main_time = 5: nicbm: eth tx: len 60").1, vec![NicEvent::Tx { len: 60 }]);
        assert_eq!(
            parse("info: main_time = 5: nicbm: eth rx: port 0 len 98").1,
            vec![NicEvent::Rx { port: 0, len: 98 }]
        );
    }

    #[test]
    fn glued_records_and_payload() {
        let (o, ev, t) = parse(
            "info: 07 info: 00 info: 00 info: 00 info: main_time = 5734963257000: nicbm: completed dma write op 0x55d6864e9dd0 addr 2368c6000 len 4",
        );
        assert_eq!(o, LineOutcome::Parsed);
        assert_eq!(t, vec![5_734_963_257_000]);
        assert_eq!(ev, vec![NicEvent::DmaCW { op: 0x55d6864e9dd0, addr: 0x2368c6000, len: 4 }]);
        let (o, ev, _) = parse("info: main_time = 5734962244000: nicbm: dma write data: ");
        assert_eq!(o, LineOutcome::Skipped("nicbm dma payload dump (not an event)"));
        assert!(ev.is_empty());
        // Two records on one physical line, the first with a payload dump.
        let (o, ev, t) = parse(
            "info: main_time = 1: nicbm: eth tx: len 60 info: main_time = 2: nicbm: eth rx: port 0 len 98",
        );
        assert_eq!(o, LineOutcome::Parsed);
        assert_eq!(t, vec![1, 2]);
        assert_eq!(ev, vec![NicEvent::Tx { len: 60 }, NicEvent::Rx { port: 0, len: 98 }]);
        // A bad record next to a good one: the good one is kept, the line counts as rejected.
        let (o, ev, _) =
            parse("info: main_time = 1: nicbm: eth tx: len x info: main_time = 2: nicbm: eth tx: len 5");
        assert_eq!(o, LineOutcome::Rejected("bad 'len' (decimal expected)"));
        assert_eq!(ev, vec![NicEvent::Tx { len: 5 }]);
    }

    proptest::proptest! {
        #[test]
        fn marker_search_matches_substring_search(
            parts in proptest::collection::vec(proptest::prop_oneof![
                proptest::strategy::Just("main_time = "), proptest::strategy::Just("main_time"),
                proptest::strategy::Just("_"), proptest::strategy::Just("ain_time = "),
                proptest::strategy::Just("x"), proptest::strategy::Just("main_"),
            ], 0..12),
            from in 0usize..40,
        ) {
            let line = parts.concat();
            let from = from.min(line.len());
            let want = memchr::memmem::find(&line.as_bytes()[from..], MARKER).map(|i| from + i);
            proptest::prop_assert_eq!(find_marker(line.as_bytes(), from), want);
        }
    }

    #[test]
    fn other_lines() {
        assert_eq!(
            parse("info: mac_addr=d1e88c64519c").0,
            LineOutcome::Skipped("nicbm informational output (not an event)")
        );
        assert_eq!(
            parse("info: exit main_time: 5744482826000").0,
            LineOutcome::Skipped("nicbm informational output (not an event)")
        );
        assert_eq!(parse("").0, LineOutcome::Skipped("blank line"));
        assert_eq!(parse("garbage").0, LineOutcome::Rejected("not a nicbm record ('main_time = ' missing)"));
        assert_eq!(
            parse("info: main_time = 12").0,
            LineOutcome::Rejected("expected ': nicbm: ' after the time")
        );
        assert_eq!(
            parse("info: main_time = 1: nicbm: frob").0,
            LineOutcome::Rejected("unknown nicbm message")
        );
        assert_eq!(
            parse("info: main_time = 1: nicbm: read(off=0x1, len=4, val=0x").0,
            LineOutcome::Rejected("bad 'val' (hex expected)")
        );
    }
}
