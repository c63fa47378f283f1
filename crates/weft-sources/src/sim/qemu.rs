//! QEMU logs (`-D <file>`) as the project's `run_qemu_trace.sh` produces them → host and NIC
//! events from one file.
//!
//! **Trace events** (`-trace <name>` with `-msg timestamp=on`): `<pid>@<sec>.<usec>:<event> <text>`.
//! The time is the *host's* wall clock in µs (QEMU under TCG has no simulated clock in its
//! logs); raw time is µs since the epoch, so the natural clock is
//! `Clock { unit: Micros, epoch_ns: 0, raw_origin: 0 }`.
//!
//! | event | text | weft event |
//! |---|---|---|
//! | `e1000e_core_read` | `Read from register 0x<r>, <n> byte(s), value: 0x<v>` | `NicMmioR` |
//! | `e1000e_core_write` | `Write to register 0x<r>, <n> byte(s), value: 0x<v>` | `NicMmioW { posted: None }` |
//! | `e1000e_tx_descr` | `0x<buf> : <lower> <upper>` (hex words) | `NicTxDescr` |
//! | `e1000e_rx_descr` | `Next RX descriptor: ring #<n>, PA: 0x<a>, length: <n>` | `NicRxDescr` |
//! | `e1000e_rx_written_to_guest` | `Received packet written to guest (ICR causes <n>)` | `NicRxWritten` |
//! | `e1000e_irq_msix_notify_vec` | `MSI-X notify vector 0x<v>` | `NicMsix { is_x: true }` |
//!
//! Other trace events are skipped (counted under their own reason).
//!
//! **Executed translation blocks** (`-d exec,nochain -dfilter <entry>+0x1,…`):
//! `Trace <cpu>: <host addr> [<cs base>/<guest pc>/<flags>/<cflags>] ` → `HostInstr { pc,
//! macro_op: true }`: with `-dfilter` on function entry addresses each such line is one
//! execution of a function's first instruction, which a symbolizer (guest `/proc/kallsyms`)
//! turns into a `HostCall`. These lines carry **no timestamp**: they take the time of the
//! latest timestamped line before them (their order in the file is the only order there is).
//! Lines before the file's first timestamp are held back (at most [`MAX_UNTIMED`]) and get
//! that first timestamp; past the bound, or at the end of a file without any timestamp, they
//! are released at raw time 0. `Stopped execution of TB chain …` lines are skipped.

use weft_model::event::{EventKind, HostEvent, NicEvent};
use weft_model::{Clock, Event, SourceId, TimeUnit};

use crate::parse::{Cursor, LineOutcome, LineParser, Stamp, dec_prefix, is_blank};

/// Untimed exec lines held back before the first timestamp.
pub const MAX_UNTIMED: usize = 65_536;

/// The natural clock of QEMU trace timestamps: µs since the UNIX epoch.
pub const QEMU_CLOCK: Clock = Clock { unit: TimeUnit::Micros, epoch_ns: 0, raw_origin: 0 };

/// The QEMU parser (see the module docs).
pub struct QemuParser {
    stamp: Stamp,
    last: Option<u64>,
    untimed: Vec<EventKind>,
}

type R<T> = Result<T, &'static str>;

impl QemuParser {
    /// A parser for `source` with `clock` (normally [`QEMU_CLOCK`]).
    pub fn new(source: SourceId, clock: Clock) -> Self {
        QemuParser { stamp: Stamp::new(source, clock), last: None, untimed: Vec::new() }
    }

    fn release_untimed(&mut self, raw: u64, out: &mut Vec<Event>) {
        for k in self.untimed.drain(..) {
            out.push(self.stamp.event(raw, k));
        }
    }
}

impl LineParser for QemuParser {
    fn format(&self) -> &'static str {
        "qemu"
    }

    fn parse_line(&mut self, line: &[u8], out: &mut Vec<Event>) -> LineOutcome {
        if is_blank(line) {
            return LineOutcome::Skipped("blank line");
        }
        if let Some(rest) = line.strip_prefix(b"Trace ") {
            let pc = match exec_pc(rest) {
                Ok(pc) => pc,
                Err(r) => return LineOutcome::Rejected(r),
            };
            let kind = EventKind::Host(HostEvent::Instr { pc, macro_op: true });
            match self.last {
                Some(t) => out.push(self.stamp.event(t, kind)),
                None => {
                    self.untimed.push(kind);
                    if self.untimed.len() >= MAX_UNTIMED {
                        self.release_untimed(0, out);
                    }
                }
            }
            return LineOutcome::Parsed;
        }
        if line.starts_with(b"Stopped execution of TB chain") || line.starts_with(b"Linking TBs") {
            return LineOutcome::Skipped("QEMU exec-log bookkeeping");
        }
        let (raw, name, text) = match trace_event(line) {
            Ok(x) => x,
            Err(r) => return LineOutcome::Rejected(r),
        };
        if self.last.is_none() {
            self.release_untimed(raw, out);
        }
        self.last = Some(raw);
        let ev = match e1000e(name, text) {
            Ok(Some(ev)) => ev,
            Ok(None) => return LineOutcome::Skipped("QEMU trace event without a weft mapping"),
            Err(r) => return LineOutcome::Rejected(r),
        };
        out.push(self.stamp.event(raw, EventKind::Nic(ev)));
        LineOutcome::Parsed
    }

    fn finish(&mut self, out: &mut Vec<Event>) {
        let t = self.last.unwrap_or(0);
        self.release_untimed(t, out);
    }
}

/// `<cpu>: <host addr> [<cs base>/<pc>/<flags>/<cflags>]` or `[<pc>]`.
fn exec_pc(rest: &[u8]) -> R<u64> {
    let open = memchr::memchr(b'[', rest).ok_or("exec line without '['")?;
    let close = memchr::memchr(b']', &rest[open..]).ok_or("exec line without ']'")? + open;
    let inner = &rest[open + 1..close];
    let mut fields = inner.split(|&b| b == b'/');
    let first = fields.next().unwrap_or_default();
    let pc = match fields.next() {
        Some(pc) => pc,
        None => first,
    };
    match crate::parse::hex_prefix(pc) {
        Some((v, n)) if n == pc.len() => Ok(v),
        _ => Err("bad guest pc in exec line (hex expected)"),
    }
}

/// `<pid>@<sec>.<usec>:<name> <text>` → (µs, name, text).
fn trace_event(line: &[u8]) -> R<(u64, &[u8], &[u8])> {
    let mut c = Cursor::new(line);
    c.dec().ok_or("not a QEMU log line (expected '<pid>@<sec>.<usec>:' or 'Trace ')")?;
    if !c.lit(b"@") {
        return Err("not a QEMU log line (expected '<pid>@<sec>.<usec>:' or 'Trace ')");
    }
    let sec = c.dec().ok_or("bad timestamp seconds")?;
    if !c.lit(b".") {
        return Err("bad timestamp (expected '<sec>.<usec>')");
    }
    let (usec, n) = dec_prefix(c.rest).ok_or("bad timestamp microseconds")?;
    if n != 6 {
        return Err("bad timestamp microseconds (6 digits expected)");
    }
    c.skip(n);
    if !c.lit(b":") {
        return Err("expected ':' after the timestamp");
    }
    let raw = sec.checked_mul(1_000_000).and_then(|s| s.checked_add(usec)).ok_or("timestamp out of range")?;
    let name = c.token();
    if name.is_empty() {
        return Err("trace event without a name");
    }
    c.spaces();
    Ok((raw, name, c.rest))
}

fn small(v: u64, what: &'static str) -> R<u32> {
    u32::try_from(v).map_err(|_| what)
}

fn e1000e(name: &[u8], text: &[u8]) -> R<Option<NicEvent>> {
    let mut c = Cursor::new(text);
    Ok(Some(match name {
        b"e1000e_core_read" | b"e1000e_core_write" => {
            let read = name == b"e1000e_core_read";
            if !c.lit(if read { b"Read from register " } else { b"Write to register " }) {
                return Err("bad e1000e register access text");
            }
            let off = c.hex().ok_or("bad register offset (hex expected)")?;
            c.lit(b",");
            c.spaces();
            let len = small(c.dec().ok_or("bad access size")?, "bad access size")?;
            if !c.lit(b" byte(s), value: ") {
                return Err("expected ' byte(s), value: '");
            }
            let val = c.hex().ok_or("bad register value (hex expected)")?;
            if read {
                NicEvent::MmioR { off, len, val }
            } else {
                NicEvent::MmioW { off, len, val, posted: None }
            }
        }
        b"e1000e_tx_descr" => {
            let addr = c.hex().ok_or("bad tx descriptor buffer address")?;
            c.spaces();
            if !c.lit(b":") {
                return Err("expected ':' in tx descriptor");
            }
            c.spaces();
            let lower =
                small(c.hex().ok_or("bad tx descriptor lower word")?, "bad tx descriptor lower word")?;
            c.spaces();
            let upper =
                small(c.hex().ok_or("bad tx descriptor upper word")?, "bad tx descriptor upper word")?;
            NicEvent::TxDescr { addr, lower, upper }
        }
        b"e1000e_rx_descr" => {
            if !c.lit(b"Next RX descriptor: ring #") {
                return Err("bad rx descriptor text");
            }
            let ring = small(c.dec().ok_or("bad rx ring")?, "bad rx ring")?;
            c.lit(b",");
            c.spaces();
            let addr = c.field(b"PA: ", Cursor::hex).ok_or("bad rx descriptor 'PA'")?;
            c.lit(b",");
            c.spaces();
            let len = small(
                c.field(b"length: ", Cursor::dec).ok_or("bad rx descriptor 'length'")?,
                "bad rx length",
            )?;
            NicEvent::RxDescr { ring, addr, len }
        }
        b"e1000e_rx_written_to_guest" => {
            if !c.past(b"ICR causes ") {
                return Err("bad rx-written text ('ICR causes' missing)");
            }
            NicEvent::RxWritten { icr: small(c.dec().ok_or("bad ICR causes")?, "bad ICR causes")? }
        }
        b"e1000e_irq_msix_notify_vec" => {
            if !c.lit(b"MSI-X notify vector ") {
                return Err("bad MSI-X notify text");
            }
            NicEvent::Msix { vec: small(c.hex().ok_or("bad MSI-X vector")?, "bad MSI-X vector")?, is_x: true }
        }
        _ => return Ok(None),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(lines: &[&str]) -> (Vec<LineOutcome>, Vec<Event>) {
        let mut p = QemuParser::new(SourceId(4), QEMU_CLOCK);
        let mut out = Vec::new();
        let o = lines.iter().map(|l| p.parse_line(l.as_bytes(), &mut out)).collect();
        p.finish(&mut out);
        (o, out)
    }

    #[test]
    fn trace_events() {
        let (o, ev) = run(&[
            "8087@1795303211.077764:e1000e_core_write Write to register 0xd8, 4 byte(s), value: 0xffffffff",
            "8087@1795303211.077853:e1000e_core_read Read from register 0x8, 4 byte(s), value: 0x80283",
            "8087@1795303214.725341:e1000e_tx_descr 0x6453002 : 8b00005a 0",
            "8087@1795303216.353015:e1000e_rx_descr Next RX descriptor: ring #0, PA: 0x632a000, length: 16",
            "8087@1795303216.353020:e1000e_rx_written_to_guest Received packet written to guest (ICR causes 1048576)",
            "8087@1795303216.353023:e1000e_irq_msix_notify_vec MSI-X notify vector 0x2",
            "8087@1795303216.353024:pci_cfg_write e1000e 02:0 @0x4 <- 0x7",
        ]);
        assert!(o[..6].iter().all(|o| *o == LineOutcome::Parsed), "{o:?}");
        assert_eq!(o[6], LineOutcome::Skipped("QEMU trace event without a weft mapping"));
        assert_eq!(ev[0].raw_time, 1_795_303_211_077_764);
        assert_eq!(ev[0].time_ns, 1_795_303_211_077_764_000);
        let k: Vec<_> = ev.iter().map(|e| e.kind.clone()).collect();
        assert_eq!(
            k[0],
            EventKind::Nic(NicEvent::MmioW { off: 0xd8, len: 4, val: 0xffff_ffff, posted: None })
        );
        assert_eq!(k[1], EventKind::Nic(NicEvent::MmioR { off: 0x8, len: 4, val: 0x80283 }));
        assert_eq!(k[2], EventKind::Nic(NicEvent::TxDescr { addr: 0x6453002, lower: 0x8b00005a, upper: 0 }));
        assert_eq!(NicEvent::tx_descr_len_eop(0x8b00005a), (0x5a, true));
        assert_eq!(k[3], EventKind::Nic(NicEvent::RxDescr { ring: 0, addr: 0x632a000, len: 16 }));
        assert_eq!(k[4], EventKind::Nic(NicEvent::RxWritten { icr: 1_048_576 }));
        assert_eq!(k[5], EventKind::Nic(NicEvent::Msix { vec: 2, is_x: true }));
    }

    #[test]
    fn exec_lines_take_neighbouring_times() {
        let (o, ev) = run(&[
            "Trace 0: 0x7fab3a51fb80 [0000000000000000/ffffffff81c00080/0040c2b0/ff000200] ",
            "8129@1795303249.951387:e1000e_irq_msix_notify_vec MSI-X notify vector 0x2",
            "Trace 0: 0x7fab3a51fb80 [0000000000000000/ffffffff817b27b0/0040c2b0/ff000200] ",
            "Stopped execution of TB chain before 0x7fab3a51fb80 [ffffffff81c00080] ",
            "Trace 0: 0x7f [ffffffff81c00080]",
        ]);
        assert_eq!(o[3], LineOutcome::Skipped("QEMU exec-log bookkeeping"));
        assert_eq!(ev.len(), 4);
        // The leading exec line is held back and released with the first timestamp.
        assert_eq!(
            ev[0].kind,
            EventKind::Host(HostEvent::Instr { pc: 0xffff_ffff_81c0_0080, macro_op: true })
        );
        assert_eq!(ev[0].raw_time, 1_795_303_249_951_387);
        assert_eq!(ev[2].raw_time, 1_795_303_249_951_387);
        assert_eq!(
            ev[2].kind,
            EventKind::Host(HostEvent::Instr { pc: 0xffff_ffff_817b_27b0, macro_op: true })
        );
        assert_eq!(
            ev[3].kind,
            EventKind::Host(HostEvent::Instr { pc: 0xffff_ffff_81c0_0080, macro_op: true })
        );
        // No timestamp at all: released at 0 at the end.
        let (_, ev) = run(&["Trace 0: 0x1 [0/10/0/0]"]);
        assert_eq!(ev[0].raw_time, 0);
    }

    #[test]
    fn rejects() {
        let (o, _) = run(&[
            "garbage",
            "8087@1795303211.07:e1000e_core_read Read from register 0x8, 4 byte(s), value: 0x1",
            "8087@1795303211.077764:e1000e_core_read Read from register zz",
            "Trace 0: 0x7f [nothex]",
        ]);
        assert_eq!(
            o[0],
            LineOutcome::Rejected("not a QEMU log line (expected '<pid>@<sec>.<usec>:' or 'Trace ')")
        );
        assert_eq!(o[1], LineOutcome::Rejected("bad timestamp microseconds (6 digits expected)"));
        assert_eq!(o[2], LineOutcome::Rejected("bad register offset (hex expected)"));
        assert_eq!(o[3], LineOutcome::Rejected("bad guest pc in exec line (hex expected)"));
    }
}
