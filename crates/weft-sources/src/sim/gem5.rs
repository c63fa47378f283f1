//! gem5 debug log (`--debug-file`, SimBricks flags) → [`HostEvent`]s.
//!
//! Line grammar: `<tick>: <sim-object>: <message>`, tick = decimal ps (gem5's default tick
//! rate). What is recognised, by message shape rather than by exact object name (object names
//! vary: `system.cpu`, `system.switch_cpus1`, `system.pc.simbricks_0.pio`, ...):
//!
//! | message | event |
//! |---|---|
//! | `[A<n> ]T<n> : 0x<pc>[ @sym[+off]]. <uop> : …` | `HostInstr { macro_op: false }` |
//! | `[A<n> ]T<n> : 0x<pc>[ @sym[+off]] : <mnemonic> …` | `HostInstr { macro_op: true }`; with `@sym` and no `+off` (gem5's `ExecSymbol` at a function entry): `HostCall { func: sym, comp: "gem5" }`; mnemonics `NOP`, `MFENCE`, `LFENCE` are skipped (as Columbo does) |
//! | `simbricks-pci: sending read addr <hex> size <hex> id <dec> bar <dec> offs <hex>` | `HostMmioR` |
//! | `simbricks-pci: sending write … offs <hex>[ posted <0/1>]` | `HostMmioW` (`posted` false when absent: upstream gem5 prints no suffix) |
//! | `simbricks-pci: sending immediate response for posted write` | `HostMmioImRespPoW` |
//! | `simbricks-pci: received read\|write completion id <dec>` | `HostMmioCR` / `HostMmioCW` |
//! | `simbricks-pci: received DMA read\|write id <dec> addr <hex> size <hex>` | `HostDmaR` / `HostDmaW` (size is hex as gem5 prints `%x`; Columbo reads it as decimal) |
//! | `simbricks-pci: completed DMA id <dec>` | `HostDmaC` |
//! | `simbricks-pci: received MSI-X intr vec <dec>` / `received MSI intr vec <dec>` | `HostMsiX` / `HostMsi` |
//! | `readConfig:  dev <n> func <n> reg <n> <n> bytes: data = <n>` (and `writeConfig:`) | `HostConf` (numbers `0x`-hex or decimal) |
//! | object `…pci_host`: `<bb:dd.f>: read\|write: offset=0x<o>, size=0x<s>` | `HostPciRW` |
//! | object `…pci_host.interface[<bdf>]`: `postInt` / `clearInt` | `HostPostInt` / `HostClearInt` |
//! | object `global`: `simbricks: processInEvent` / `simbricks: sending sync message` | `SimProcInEvent` / `SimSendSync` |
//!
//! Skipped on purpose: blank lines; `simbricks-pci:` housekeeping (`device constructed`,
//! `device configured`, `MSI addr=…`, `MSI masked`); every other object's debug output
//! (other debug flags). Rejected: no tick, no object, an unknown `simbricks-pci:` message, or a
//! known message with a field that does not parse (the reason names the field).

use memchr::memmem::Finder;
use weft_model::event::{EventKind, HostEvent, SyncEvent};
use weft_model::{Clock, Event, SourceId};

use crate::parse::{Cursor, Interner, LineOutcome, LineParser, Stamp, dec_prefix, is_blank, trim_end};

/// `comp` of calls taken from gem5's own `ExecSymbol` output.
pub const EXEC_SYMBOL_COMP: &str = "gem5";

/// The gem5 parser (see the module docs).
pub struct Gem5Parser {
    stamp: Stamp,
    names: Interner,
    comp: std::sync::Arc<str>,
    colon: Finder<'static>,
}

impl Gem5Parser {
    /// A parser for `source`, whose ticks convert through `clock` (normally
    /// [`Clock::simulated_picos`]).
    pub fn new(source: SourceId, clock: Clock) -> Self {
        Gem5Parser {
            stamp: Stamp::new(source, clock),
            names: Interner::new(1 << 20),
            comp: std::sync::Arc::from(EXEC_SYMBOL_COMP),
            colon: Finder::new(b": "),
        }
    }
}

type R<T> = Result<T, &'static str>;

impl LineParser for Gem5Parser {
    fn format(&self) -> &'static str {
        "gem5"
    }

    fn parse_line(&mut self, line: &[u8], out: &mut Vec<Event>) -> LineOutcome {
        if is_blank(line) {
            return LineOutcome::Skipped("blank line");
        }
        let Some((tick, n)) = dec_prefix(line) else {
            return LineOutcome::Rejected("no tick (decimal number) at the start of the line");
        };
        let rest = &line[n..];
        if !rest.starts_with(b": ") {
            return LineOutcome::Rejected("expected ': ' after the tick");
        }
        let rest = &rest[2..];
        let (object, msg) = match self.colon.find(rest) {
            Some(i) => (&rest[..i], trim_end(&rest[i + 2..])),
            // `<tick>: <object>:` with an empty message.
            None => return LineOutcome::Skipped("gem5 output without a message"),
        };
        let r = if let Some(pc_at) = exec_pc_at(msg) {
            self.exec(msg, pc_at)
        } else if let Some(m) = msg.strip_prefix(b"simbricks-pci: ") {
            simbricks_pci(m)
        } else if msg.starts_with(b"readConfig:") || msg.starts_with(b"writeConfig:") {
            config(msg).map(Some)
        } else if object == b"global" {
            Ok(match msg {
                b"simbricks: processInEvent" => Some(EventKind::Sync(SyncEvent::ProcInEvent)),
                b"simbricks: sending sync message" => Some(EventKind::Sync(SyncEvent::SendSync)),
                _ => return LineOutcome::Skipped("other gem5 debug output"),
            })
        } else if object.ends_with(b"]") && memchr::memmem::find(object, b"pci_host.interface[").is_some() {
            match msg {
                b"postInt" => Ok(Some(EventKind::Host(HostEvent::PostInt))),
                b"clearInt" => Ok(Some(EventKind::Host(HostEvent::ClearInt))),
                _ => return LineOutcome::Skipped("other gem5 debug output"),
            }
        } else if object.ends_with(b"pci_host") {
            match pci_host(msg) {
                Ok(ev) => Ok(Some(ev)),
                Err(_) if !msg.contains(&b'=') => return LineOutcome::Skipped("other gem5 debug output"),
                Err(e) => Err(e),
            }
        } else {
            return LineOutcome::Skipped("other gem5 debug output");
        };
        match r {
            Ok(Some(kind)) => {
                out.push(self.stamp.event(tick, kind));
                LineOutcome::Parsed
            }
            Ok(None) => LineOutcome::Skipped(SKIP_HOUSEKEEPING),
            Err(reason) => LineOutcome::Rejected(reason),
        }
    }
}

const SKIP_HOUSEKEEPING: &str = "simbricks-pci housekeeping message or fence/nop instruction";

/// `[A<n> ]T<n> : 0x` — an instruction-trace line: the offset of its `: 0x` (the first in
/// `msg`, since nothing before it can hold a `:`), `None` for other lines.
#[inline]
fn exec_pc_at(msg: &[u8]) -> Option<usize> {
    let mut c = Cursor::new(msg);
    if c.lit(b"A") {
        if c.dec().is_none() || !c.lit(b" ") {
            return None;
        }
        c.spaces();
    }
    if c.lit(b"T") && c.dec().is_some() {
        c.spaces();
        if c.rest.starts_with(b": 0x") {
            return Some(msg.len() - c.rest.len());
        }
    }
    None
}

impl Gem5Parser {
    /// An instruction line whose `: 0x` is at `i`.
    fn exec(&mut self, msg: &[u8], i: usize) -> R<Option<EventKind>> {
        let mut c = Cursor::new(&msg[i + 2..]);
        let pc = c.hex().ok_or("bad 'pc' (hex expected)")?;
        let mut sym: Option<&[u8]> = None;
        let mut at_entry = false;
        if c.lit(b" @") {
            let n = memchr::memchr2(b'+', b' ', c.rest).unwrap_or(c.rest.len());
            let mut name = &c.rest[..n];
            c.skip(n);
            if name.ends_with(b".") && c.rest.first() == Some(&b' ') {
                // `@func. 2 :` — the micro-op marker follows the name directly.
                name = &name[..name.len() - 1];
                if name.is_empty() {
                    return Err("empty symbol name after '@'");
                }
                return Ok(Some(EventKind::Host(HostEvent::Instr { pc, macro_op: false })));
            }
            if name.is_empty() {
                return Err("empty symbol name after '@'");
            }
            if c.lit(b"+") {
                let off = c.dec().ok_or("bad symbol offset after '+'")?;
                at_entry = off == 0;
            } else {
                at_entry = true;
            }
            sym = Some(name);
        }
        if c.lit(b".") {
            return Ok(Some(EventKind::Host(HostEvent::Instr { pc, macro_op: false })));
        }
        c.spaces();
        if !c.lit(b":") {
            return Err("expected ':' or '.' after the PC");
        }
        c.spaces();
        let mnemonic = c.token();
        if mnemonic.eq_ignore_ascii_case(b"NOP")
            || mnemonic.eq_ignore_ascii_case(b"MFENCE")
            || mnemonic.eq_ignore_ascii_case(b"LFENCE")
        {
            return Ok(None);
        }
        Ok(Some(EventKind::Host(match (sym, at_entry) {
            (Some(name), true) => HostEvent::Call { pc, func: self.names.get(name), comp: self.comp.clone() },
            _ => HostEvent::Instr { pc, macro_op: true },
        })))
    }
}

fn simbricks_pci(m: &[u8]) -> R<Option<EventKind>> {
    let mut c = Cursor::new(m);
    let h = if c.lit(b"sending read ") {
        let (id, addr, size, bar, offset) = mmio_fields(&mut c)?;
        HostEvent::MmioR { id, addr, size, bar, offset }
    } else if c.lit(b"sending write ") {
        let (id, addr, size, bar, offset) = mmio_fields(&mut c)?;
        c.spaces();
        let posted = if c.is_empty() {
            false
        } else {
            match c.field(b"posted ", Cursor::dec) {
                Some(p @ 0..=1) => p == 1,
                _ => return Err("bad 'posted' (0 or 1 expected)"),
            }
        };
        HostEvent::MmioW { id, addr, size, bar, offset, posted }
    } else if c.lit(b"sending immediate response for posted write") {
        HostEvent::MmioImRespPoW
    } else if c.lit(b"received read completion ") {
        HostEvent::MmioCR { id: c.field(b"id ", Cursor::dec).ok_or("bad 'id' (decimal expected)")? }
    } else if c.lit(b"received write completion ") {
        HostEvent::MmioCW { id: c.field(b"id ", Cursor::dec).ok_or("bad 'id' (decimal expected)")? }
    } else if c.lit(b"received DMA read ") {
        let (id, addr, size) = dma_fields(&mut c)?;
        HostEvent::DmaR { id, addr, size }
    } else if c.lit(b"received DMA write ") {
        let (id, addr, size) = dma_fields(&mut c)?;
        HostEvent::DmaW { id, addr, size }
    } else if c.lit(b"completed DMA ") {
        HostEvent::DmaC { id: c.field(b"id ", Cursor::dec).ok_or("bad 'id' (decimal expected)")? }
    } else if c.lit(b"received MSI-X intr ") {
        HostEvent::MsiX { vec: vec_field(&mut c)? }
    } else if c.lit(b"received MSI intr ") {
        HostEvent::Msi { vec: vec_field(&mut c)? }
    } else if c.lit(b"device constructed")
        || c.lit(b"device configured")
        || c.lit(b"MSI addr=")
        || c.lit(b"MSI masked")
    {
        return Ok(None);
    } else {
        return Err("unknown simbricks-pci message");
    };
    Ok(Some(EventKind::Host(h)))
}

fn mmio_fields(c: &mut Cursor<'_>) -> R<(u64, u64, u32, u8, u64)> {
    let addr = c.field(b"addr ", Cursor::hex).ok_or("bad 'addr' (hex expected)")?;
    c.spaces();
    let size = c.field(b"size ", Cursor::hex).ok_or("bad 'size' (hex expected)")?;
    c.spaces();
    let id = c.field(b"id ", Cursor::dec).ok_or("bad 'id' (decimal expected)")?;
    c.spaces();
    let bar = c.field(b"bar ", Cursor::dec).ok_or("bad 'bar' (decimal expected)")?;
    c.spaces();
    let offset = c.field(b"offs ", Cursor::hex).ok_or("bad 'offs' (hex expected)")?;
    let size = u32::try_from(size).map_err(|_| "'size' out of range")?;
    let bar = u8::try_from(bar).map_err(|_| "'bar' out of range")?;
    Ok((id, addr, size, bar, offset))
}

fn dma_fields(c: &mut Cursor<'_>) -> R<(u64, u64, u64)> {
    let id = c.field(b"id ", Cursor::dec).ok_or("bad 'id' (decimal expected)")?;
    c.spaces();
    let addr = c.field(b"addr ", Cursor::hex).ok_or("bad 'addr' (hex expected)")?;
    c.spaces();
    let size = c.field(b"size ", Cursor::hex).ok_or("bad 'size' (hex expected)")?;
    Ok((id, addr, size))
}

fn vec_field(c: &mut Cursor<'_>) -> R<u32> {
    let v = c.field(b"vec ", Cursor::dec).ok_or("bad 'vec' (decimal expected)")?;
    u32::try_from(v).map_err(|_| "'vec' out of range")
}

/// `readConfig:  dev 0 func 0 reg 0x4 2 bytes: data = 0x6`
fn config(msg: &[u8]) -> R<EventKind> {
    let mut c = Cursor::new(msg);
    let is_read = c.lit(b"readConfig:");
    if !is_read && !c.lit(b"writeConfig:") {
        return Err("expected readConfig/writeConfig");
    }
    c.spaces();
    let dev = c.field(b"dev ", Cursor::num).ok_or("bad 'dev'")?;
    c.spaces();
    let func = c.field(b"func ", Cursor::num).ok_or("bad 'func'")?;
    c.spaces();
    let reg = c.field(b"reg ", Cursor::num).ok_or("bad 'reg'")?;
    c.spaces();
    let bytes = c.num().ok_or("bad byte count")?;
    c.spaces();
    if !c.lit(b"bytes:") {
        return Err("expected 'bytes:'");
    }
    c.spaces();
    if !c.lit(b"data =") {
        return Err("expected 'data ='");
    }
    c.spaces();
    let data = c.num().ok_or("bad 'data'")?;
    let dev = u32::try_from(dev).map_err(|_| "'dev' out of range")?;
    let func = u32::try_from(func).map_err(|_| "'func' out of range")?;
    let bytes = u32::try_from(bytes).map_err(|_| "byte count out of range")?;
    Ok(EventKind::Host(HostEvent::Conf { dev, func, reg, bytes, data, is_read }))
}

/// `00:04.0: read: offset=0x4, size=0x2`
fn pci_host(msg: &[u8]) -> R<EventKind> {
    let mut c = Cursor::new(msg);
    let i = memchr::memmem::find(c.rest, b": ").ok_or("expected '<bdf>: '")?;
    c.skip(i + 2);
    let is_read = c.lit(b"read:");
    if !is_read && !c.lit(b"write:") {
        return Err("expected 'read:' or 'write:'");
    }
    c.spaces();
    let offset = c.field(b"offset=", Cursor::hex).ok_or("bad 'offset' (hex expected)")?;
    c.lit(b",");
    c.spaces();
    let size = c.field(b"size=", Cursor::hex).ok_or("bad 'size' (hex expected)")?;
    Ok(EventKind::Host(HostEvent::PciRW { offset, size, is_read }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(line: &str) -> (LineOutcome, Vec<Event>) {
        let mut p = Gem5Parser::new(SourceId(1), Clock::simulated_picos(0));
        let mut out = Vec::new();
        let o = p.parse_line(line.as_bytes(), &mut out);
        (o, out)
    }

    fn host(line: &str) -> HostEvent {
        let (o, ev) = parse(line);
        assert_eq!(o, LineOutcome::Parsed, "{line}");
        assert_eq!(ev.len(), 1);
        match &ev[0].kind {
            EventKind::Host(h) => h.clone(),
            k => panic!("{k:?}"),
        }
    }

    #[test]
    fn simbricks_pci_lines() {
        let (_, ev) = parse(
            "1869691991749: system.pc.simbricks_0: simbricks-pci: sending read addr c0080300 size 4 id 94469181196688 bar 0 offs 80300",
        );
        assert_eq!(ev[0].raw_time, 1_869_691_991_749);
        assert_eq!(ev[0].time_ns, 1_869_691_991);
        assert_eq!(ev[0].source, SourceId(1));
        assert_eq!(
            ev[0].kind,
            EventKind::Host(HostEvent::MmioR {
                id: 94469181196688,
                addr: 0xc008_0300,
                size: 4,
                bar: 0,
                offset: 0x80300
            })
        );
        assert_eq!(
            host(
                "1967474526999: system.pc.simbricks_0: simbricks-pci: sending write addr c0400014 size 4 id 94469376954304 bar 0 offs 0 posted 0"
            ),
            HostEvent::MmioW {
                id: 94469376954304,
                addr: 0xc040_0014,
                size: 4,
                bar: 0,
                offset: 0,
                posted: false
            }
        );
        assert_eq!(
            host(
                "5: system.pc.simbricks_0: simbricks-pci: sending write addr c0400014 size 8 id 7 bar 3 offs 1c"
            ),
            HostEvent::MmioW { id: 7, addr: 0xc040_0014, size: 8, bar: 3, offset: 0x1c, posted: false },
            "upstream gem5 prints no posted suffix"
        );
        assert_eq!(
            host("5: system.pc.simbricks_0.pio: simbricks-pci: sending immediate response for posted write"),
            HostEvent::MmioImRespPoW
        );
        assert_eq!(
            host("5: system.pc.simbricks_0: simbricks-pci: received read completion id 94469181196688"),
            HostEvent::MmioCR { id: 94469181196688 }
        );
        assert_eq!(
            host("5: system.pc.simbricks_0: simbricks-pci: received write completion id 3"),
            HostEvent::MmioCW { id: 3 }
        );
        assert_eq!(
            host(
                "5: system.pc.simbricks_0: simbricks-pci: received DMA read id 94047491050960 addr 2368d10a0 size 20"
            ),
            HostEvent::DmaR { id: 94047491050960, addr: 0x2368d10a0, size: 0x20 }
        );
        assert_eq!(
            host("5: system.pc.simbricks_0: simbricks-pci: received DMA write id 1 addr 10 size 62"),
            HostEvent::DmaW { id: 1, addr: 0x10, size: 0x62 }
        );
        assert_eq!(
            host("5: system.pc.simbricks_0: simbricks-pci: completed DMA id 0"),
            HostEvent::DmaC { id: 0 }
        );
        assert_eq!(
            host("5: system.pc.simbricks_0: simbricks-pci: received MSI-X intr vec 1"),
            HostEvent::MsiX { vec: 1 }
        );
        assert_eq!(
            host("5: system.pc.simbricks_0: simbricks-pci: received MSI intr vec 2"),
            HostEvent::Msi { vec: 2 }
        );
        assert_eq!(
            parse("5: system.pc.simbricks_0: simbricks-pci: MSI addr=fee00000 val=4021 mask=0").0,
            LineOutcome::Skipped(SKIP_HOUSEKEEPING)
        );
        assert_eq!(
            parse("5: system.pc.simbricks_0: simbricks-pci: sending read addr zz size 4 id 9 bar 0 offs 0").0,
            LineOutcome::Rejected("bad 'addr' (hex expected)")
        );
        assert_eq!(
            parse("5: system.pc.simbricks_0: simbricks-pci: frobnicate").0,
            LineOutcome::Rejected("unknown simbricks-pci message")
        );
    }

    #[test]
    fn config_pci_interrupts_sync() {
        assert_eq!(
            host(
                "1369146219499: system.pc.simbricks_0: writeConfig: dev 0 func 0 reg 0x4 2 bytes: data = 0x6"
            ),
            HostEvent::Conf { dev: 0, func: 0, reg: 4, bytes: 2, data: 6, is_read: false }
        );
        assert_eq!(
            host("1: system.pc.south_bridge.ide: readConfig:  dev 0x4 func 0 reg 0 4 bytes: data = 0"),
            HostEvent::Conf { dev: 4, func: 0, reg: 0, bytes: 4, data: 0, is_read: true }
        );
        assert_eq!(
            host("1: system.pc.pci_host: 00:04.0: read: offset=0x4, size=0x2"),
            HostEvent::PciRW { offset: 4, size: 2, is_read: true }
        );
        assert_eq!(host("1473659826000: system.pc.pci_host.interface[00:04.0]: postInt"), HostEvent::PostInt);
        assert_eq!(host("1: system.pc.pci_host.interface[00:04.0]: clearInt"), HostEvent::ClearInt);
        let (o, ev) = parse("1: global: simbricks: processInEvent");
        assert_eq!(o, LineOutcome::Parsed);
        assert_eq!(ev[0].kind, EventKind::Sync(SyncEvent::ProcInEvent));
        assert_eq!(
            parse("1: system.pc.ethernet: some other flag").0,
            LineOutcome::Skipped("other gem5 debug output")
        );
    }

    #[test]
    fn exec_lines() {
        assert_eq!(
            host(
                "1473191502750: system.switch_cpus: A0 T0 : 0xffffffff81001bc0    : verw_Mw_or_Rv (unimplemented) : No_OpClass :"
            ),
            HostEvent::Instr { pc: 0xffff_ffff_8100_1bc0, macro_op: true }
        );
        assert_eq!(
            host(
                "1710532121125: system.switch_cpus: T0 : 0xffffffff814cf3cb. 0 :   CMPXCHG_M_R : ldst   t1, DS:[rdi] : MemRead :  D=0xfff"
            ),
            HostEvent::Instr { pc: 0xffff_ffff_814c_f3cb, macro_op: false }
        );
        assert_eq!(
            parse("1: system.switch_cpus: A0 T0 : 0xffffffff81001bc0    : NOP : IntAlu :").0,
            LineOutcome::Skipped(SKIP_HOUSEKEEPING)
        );
        match host("7: system.cpu: A0 T0 : 0xffffffff81600000 @entry_SYSCALL_64 : swapgs : IntAlu :") {
            HostEvent::Call { pc, func, comp } => {
                assert_eq!(pc, 0xffff_ffff_8160_0000);
                assert_eq!(&*func, "entry_SYSCALL_64");
                assert_eq!(&*comp, "gem5");
            }
            h => panic!("{h:?}"),
        }
        assert_eq!(
            host(
                "7: system.cpu: A0 T0 : 0xffffffff81600136 @syscall_return_via_sysret+71 : sysret : IntAlu :"
            ),
            HostEvent::Instr { pc: 0xffff_ffff_8160_0136, macro_op: true }
        );
        assert_eq!(
            host(
                "7: system.cpu: A0 T0 : 0xffffffff81600136 @slab_pre_alloc_hook.constprop.0+71. 2 : POP_R : IntAlu : flags=(IsInteger|IsMicroop|IsLastMicroop)"
            ),
            HostEvent::Instr { pc: 0xffff_ffff_8160_0136, macro_op: false }
        );
        assert_eq!(
            host("7: system.cpu: A0 T0 : 0xffffffff81600000 @entry_SYSCALL_64. 1 : MOV_R_R : IntAlu :"),
            HostEvent::Instr { pc: 0xffff_ffff_8160_0000, macro_op: false }
        );
        assert_eq!(
            parse("7: system.cpu: A0 T0 : 0xzz : x").0,
            LineOutcome::Rejected("bad 'pc' (hex expected)")
        );
        assert_eq!(
            parse("7: system.cpu: A0 T0 : 0x12 ! x").0,
            LineOutcome::Rejected("expected ':' or '.' after the PC")
        );
    }

    #[test]
    fn garbage() {
        assert_eq!(parse("").0, LineOutcome::Skipped("blank line"));
        assert_eq!(
            parse("hello").0,
            LineOutcome::Rejected("no tick (decimal number) at the start of the line")
        );
        assert_eq!(parse("12 system").0, LineOutcome::Rejected("expected ': ' after the tick"));
        assert_eq!(
            parse("99999999999999999999999: x: y").0,
            LineOutcome::Rejected("no tick (decimal number) at the start of the line")
        );
    }
}
