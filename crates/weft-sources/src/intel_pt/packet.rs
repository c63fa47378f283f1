//! The packets of an Intel PT stream, and the packet listing `ptdump` prints.

use std::fmt::{self, Write};
use std::ptr::NonNull;

use libipt_sys as sys;

use super::{DecoderConfig, PtError, Pwre, Pwrx, power_state};

/// How an IP packet's payload relates to the last IP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IpCompression {
    /// No IP (the IP is suppressed).
    Suppressed,
    /// The low 16 bits replace the last IP's.
    Update16,
    /// The low 32 bits replace the last IP's.
    Update32,
    /// 48 bits, sign-extended.
    Sext48,
    /// The low 48 bits replace the last IP's.
    Update48,
    /// The full 64-bit IP.
    Full,
}

/// An IP payload (FUP, TIP, TIP.PGE, TIP.PGD).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpPayload {
    /// How to combine it with the last IP.
    pub ipc: IpCompression,
    /// The payload bits, zero-extended.
    pub ip: u64,
}

/// One Intel PT packet (the kinds libipt 2.1 decodes).
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(missing_docs)] // the fields are the packet fields of the Intel SDM, named as there
pub enum Packet {
    /// Bytes that are no packet libipt knows (`ptdump`: `<invalid>`).
    Invalid,
    /// A packet of an unknown opcode handed to a decode callback (`ptdump`: `<unknown>`).
    Unknown,
    Pad,
    Psb,
    Psbend,
    Ovf,
    Stop,
    Fup(IpPayload),
    Tip(IpPayload),
    TipPge(IpPayload),
    TipPgd(IpPayload),
    /// Taken/not-taken bits, oldest first (TNT-8 when `wide` is false, TNT-64 otherwise).
    Tnt {
        wide: bool,
        bits: Vec<bool>,
    },
    ModeExec {
        csl: bool,
        csd: bool,
        iflag: bool,
    },
    ModeTsx {
        intx: bool,
        abrt: bool,
    },
    Pip {
        cr3: u64,
        nr: bool,
    },
    Vmcs {
        base: u64,
    },
    Tsc {
        tsc: u64,
    },
    Cbr {
        ratio: u8,
    },
    Tma {
        ctc: u16,
        fc: u16,
    },
    Mtc {
        ctc: u8,
    },
    Cyc {
        value: u64,
    },
    Mnt {
        payload: u64,
    },
    Exstop {
        ip: bool,
    },
    Mwait {
        hints: u32,
        ext: u32,
    },
    Pwre(Pwre),
    Pwrx(Pwrx),
    Ptw {
        plc: u8,
        payload: u64,
        ip: bool,
    },
    /// Control-flow event (event trace): `kind` is libipt's `pt_cfe_type`.
    Cfe {
        kind: u32,
        vector: u8,
        ip: bool,
    },
    /// Event data (event trace): `kind` is libipt's `pt_evd_type`.
    Evd {
        kind: u32,
        payload: u64,
    },
}

impl Packet {
    /// libipt's packet → ours; `None` for a type this version does not type (an error).
    fn from_raw(p: &sys::pt_packet) -> Option<Packet> {
        let ip_payload = |ip: sys::pt_packet_ip| -> Option<IpPayload> {
            let ipc = match ip.ipc {
                sys::pt_ip_compression_pt_ipc_suppressed => IpCompression::Suppressed,
                sys::pt_ip_compression_pt_ipc_update_16 => IpCompression::Update16,
                sys::pt_ip_compression_pt_ipc_update_32 => IpCompression::Update32,
                sys::pt_ip_compression_pt_ipc_sext_48 => IpCompression::Sext48,
                sys::pt_ip_compression_pt_ipc_update_48 => IpCompression::Update48,
                sys::pt_ip_compression_pt_ipc_full => IpCompression::Full,
                _ => return None,
            };
            Some(IpPayload { ipc, ip: ip.ip })
        };
        // SAFETY: each arm reads the union member libipt wrote for that packet type.
        unsafe {
            let u = &p.payload;
            Some(match p.type_ {
                sys::pt_packet_type_ppt_invalid => Packet::Invalid,
                sys::pt_packet_type_ppt_unknown => Packet::Unknown,
                sys::pt_packet_type_ppt_pad => Packet::Pad,
                sys::pt_packet_type_ppt_psb => Packet::Psb,
                sys::pt_packet_type_ppt_psbend => Packet::Psbend,
                sys::pt_packet_type_ppt_ovf => Packet::Ovf,
                sys::pt_packet_type_ppt_stop => Packet::Stop,
                sys::pt_packet_type_ppt_fup => Packet::Fup(ip_payload(u.ip)?),
                sys::pt_packet_type_ppt_tip => Packet::Tip(ip_payload(u.ip)?),
                sys::pt_packet_type_ppt_tip_pge => Packet::TipPge(ip_payload(u.ip)?),
                sys::pt_packet_type_ppt_tip_pgd => Packet::TipPgd(ip_payload(u.ip)?),
                t @ (sys::pt_packet_type_ppt_tnt_8 | sys::pt_packet_type_ppt_tnt_64) => {
                    let n = u.tnt.bit_size.min(64);
                    let bits = (0..n).rev().map(|i| u.tnt.payload & (1u64 << i) != 0).collect();
                    Packet::Tnt { wide: t == sys::pt_packet_type_ppt_tnt_64, bits }
                }
                sys::pt_packet_type_ppt_mode => match u.mode.leaf {
                    sys::pt_mode_leaf_pt_mol_exec => {
                        let e = u.mode.bits.exec;
                        Packet::ModeExec { csl: e.csl() != 0, csd: e.csd() != 0, iflag: e.iflag() != 0 }
                    }
                    sys::pt_mode_leaf_pt_mol_tsx => {
                        let t = u.mode.bits.tsx;
                        Packet::ModeTsx { intx: t.intx() != 0, abrt: t.abrt() != 0 }
                    }
                    _ => return None,
                },
                sys::pt_packet_type_ppt_pip => Packet::Pip { cr3: u.pip.cr3, nr: u.pip.nr() != 0 },
                sys::pt_packet_type_ppt_vmcs => Packet::Vmcs { base: u.vmcs.base },
                sys::pt_packet_type_ppt_tsc => Packet::Tsc { tsc: u.tsc.tsc },
                sys::pt_packet_type_ppt_cbr => Packet::Cbr { ratio: u.cbr.ratio },
                sys::pt_packet_type_ppt_tma => Packet::Tma { ctc: u.tma.ctc, fc: u.tma.fc },
                sys::pt_packet_type_ppt_mtc => Packet::Mtc { ctc: u.mtc.ctc },
                sys::pt_packet_type_ppt_cyc => Packet::Cyc { value: u.cyc.value },
                sys::pt_packet_type_ppt_mnt => Packet::Mnt { payload: u.mnt.payload },
                sys::pt_packet_type_ppt_exstop => Packet::Exstop { ip: u.exstop.ip() != 0 },
                sys::pt_packet_type_ppt_mwait => Packet::Mwait { hints: u.mwait.hints, ext: u.mwait.ext },
                sys::pt_packet_type_ppt_pwre => Packet::Pwre(power_state!(pwre u.pwre)),
                sys::pt_packet_type_ppt_pwrx => Packet::Pwrx(power_state!(pwrx u.pwrx)),
                sys::pt_packet_type_ppt_ptw => {
                    Packet::Ptw { plc: u.ptw.plc, payload: u.ptw.payload, ip: u.ptw.ip() != 0 }
                }
                sys::pt_packet_type_ppt_cfe => {
                    Packet::Cfe { kind: u.cfe.type_, vector: u.cfe.vector, ip: u.cfe.ip() != 0 }
                }
                sys::pt_packet_type_ppt_evd => Packet::Evd { kind: u.evd.type_, payload: u.evd.payload },
                _ => return None,
            })
        }
    }

    /// The packet's name as `ptdump` prints it (`tip.pge`, `mode.exec`, ...).
    pub fn name(&self) -> &'static str {
        match self {
            Packet::Invalid => "<invalid>",
            Packet::Unknown => "<unknown>",
            Packet::Pad => "pad",
            Packet::Psb => "psb",
            Packet::Psbend => "psbend",
            Packet::Ovf => "ovf",
            Packet::Stop => "stop",
            Packet::Fup(_) => "fup",
            Packet::Tip(_) => "tip",
            Packet::TipPge(_) => "tip.pge",
            Packet::TipPgd(_) => "tip.pgd",
            Packet::Tnt { wide: false, .. } => "tnt.8",
            Packet::Tnt { wide: true, .. } => "tnt.64",
            Packet::ModeExec { .. } => "mode.exec",
            Packet::ModeTsx { .. } => "mode.tsx",
            Packet::Pip { .. } => "pip",
            Packet::Vmcs { .. } => "vmcs",
            Packet::Tsc { .. } => "tsc",
            Packet::Cbr { .. } => "cbr",
            Packet::Tma { .. } => "tma",
            Packet::Mtc { .. } => "mtc",
            Packet::Cyc { .. } => "cyc",
            Packet::Mnt { .. } => "mnt",
            Packet::Exstop { .. } => "exstop",
            Packet::Mwait { .. } => "mwait",
            Packet::Pwre(_) => "pwre",
            Packet::Pwrx(_) => "pwrx",
            Packet::Ptw { .. } => "ptw",
            Packet::Cfe { .. } => "cfe",
            Packet::Evd { .. } => "evd",
        }
    }

    /// The IP payload of FUP and the TIP kinds.
    pub fn ip(&self) -> Option<IpPayload> {
        match self {
            Packet::Fup(p) | Packet::Tip(p) | Packet::TipPge(p) | Packet::TipPgd(p) => Some(*p),
            _ => None,
        }
    }
}

fn ipc_code(ipc: IpCompression) -> u8 {
    match ipc {
        IpCompression::Suppressed => 0,
        IpCompression::Update16 => 1,
        IpCompression::Update32 => 2,
        IpCompression::Sext48 => 3,
        IpCompression::Update48 => 4,
        IpCompression::Full => 6,
    }
}

fn sext48(v: u64) -> u64 {
    (((v << 16) as i64) >> 16) as u64
}

/// `ptdump`'s payload column of an IP packet (`3: 0000000000100000`, `1: ????????????0002`).
fn ip_column(p: &IpPayload) -> String {
    let c = ipc_code(p.ipc);
    match p.ipc {
        IpCompression::Suppressed => format!("{c}: ????????????????"),
        IpCompression::Update16 => format!("{c}: ????????????{:04x}", p.ip),
        IpCompression::Update32 => format!("{c}: ????????{:08x}", p.ip),
        IpCompression::Update48 => format!("{c}: ????{:012x}", p.ip),
        IpCompression::Sext48 => format!("{c}: {:016x}", sext48(p.ip)),
        IpCompression::Full => format!("{c}: {:016x}", p.ip),
    }
}

fn cfe_name(kind: u32) -> &'static str {
    match kind {
        sys::pt_cfe_type_pt_cfe_intr => "intr",
        sys::pt_cfe_type_pt_cfe_iret => "iret",
        sys::pt_cfe_type_pt_cfe_smi => "smi",
        sys::pt_cfe_type_pt_cfe_rsm => "rsm",
        sys::pt_cfe_type_pt_cfe_sipi => "sipi",
        sys::pt_cfe_type_pt_cfe_init => "init",
        sys::pt_cfe_type_pt_cfe_vmentry => "vmentry",
        sys::pt_cfe_type_pt_cfe_vmexit => "vmexit",
        sys::pt_cfe_type_pt_cfe_vmexit_intr => "vmexit_intr",
        sys::pt_cfe_type_pt_cfe_shutdown => "shutdown",
        sys::pt_cfe_type_pt_cfe_uintr => "uintr",
        sys::pt_cfe_type_pt_cfe_uiret => "uiret",
        _ => "unknown",
    }
}

fn evd_name(kind: u32) -> &'static str {
    match kind {
        sys::pt_evd_type_pt_evd_cr2 => "cr2",
        sys::pt_evd_type_pt_evd_vmxq => "vmxq",
        sys::pt_evd_type_pt_evd_vmxr => "vmxr",
        _ => "unknown",
    }
}

impl fmt::Display for Packet {
    /// The packet as `ptdump` prints it, without offset and tracking columns: name, payload.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (payload, _) = columns(self);
        if payload.is_empty() { f.write_str(self.name()) } else { write!(f, "{} {payload}", self.name()) }
    }
}

/// The payload column and the tracking column (`type iret`, `cr3 ...`) of `ptdump`.
fn columns(p: &Packet) -> (String, Option<String>) {
    let yes = |b: bool, s: &'static str| if b { s } else { "" };
    match p {
        Packet::Invalid
        | Packet::Unknown
        | Packet::Pad
        | Packet::Psb
        | Packet::Psbend
        | Packet::Ovf
        | Packet::Stop => (String::new(), None),
        Packet::Fup(ip) | Packet::Tip(ip) | Packet::TipPge(ip) | Packet::TipPgd(ip) => (ip_column(ip), None),
        Packet::Tnt { bits, .. } => (bits.iter().map(|&b| if b { '!' } else { '.' }).collect(), None),
        Packet::ModeExec { csl, csd, iflag } => {
            let s = [yes(*csd, "cs.d"), yes(*csl, "cs.l"), yes(*iflag, "if")];
            (s.iter().filter(|x| !x.is_empty()).copied().collect::<Vec<_>>().join(", "), None)
        }
        Packet::ModeTsx { intx, abrt } => {
            let s = [yes(*intx, "intx"), yes(*abrt, "abrt")]
                .iter()
                .filter(|x| !x.is_empty())
                .copied()
                .collect::<Vec<_>>()
                .join(", ");
            (s, None)
        }
        Packet::Pip { cr3, nr } => (format!("{cr3:x}{}", yes(*nr, ", nr")), Some(format!("cr3 {cr3:016x}"))),
        Packet::Vmcs { base } => (format!("{base:x}"), Some(format!("vmcs {base:016x}"))),
        Packet::Tsc { tsc } => (format!("{tsc:x}"), None),
        Packet::Cbr { ratio } => (format!("{ratio:x}"), None),
        Packet::Tma { ctc, fc } => (format!("{ctc:x}, {fc:x}"), None),
        Packet::Mtc { ctc } => (format!("{ctc:x}"), None),
        Packet::Cyc { value } => (format!("{value:x}"), None),
        Packet::Mnt { payload } => (format!("{payload:x}"), None),
        Packet::Exstop { ip } => (yes(*ip, "ip").to_owned(), None),
        Packet::Mwait { hints, ext } => (format!("{hints:08x}, {ext:08x}"), None),
        Packet::Pwre(Pwre { state, sub_state, hw }) => (
            format!(
                "c{}.{}{}",
                (state.wrapping_add(1)) & 0xf,
                (sub_state.wrapping_add(1)) & 0xf,
                yes(*hw, ", hw")
            ),
            None,
        ),
        Packet::Pwrx(Pwrx { last, deepest, interrupt, store, autonomous }) => {
            let wr = match (interrupt, store, autonomous) {
                (true, false, false) => "int",
                (false, true, false) => " st",
                (false, false, true) => " hw",
                _ => "bad",
            };
            (format!("{wr}: c{}, c{}", last.wrapping_add(1) & 0xf, deepest.wrapping_add(1) & 0xf), None)
        }
        Packet::Ptw { plc, payload, ip } => (format!("{plc:x}: {payload:x}{}", yes(*ip, ", ip")), None),
        Packet::Cfe { kind, vector, ip } => {
            let ip = yes(*ip, ", ip");
            let payload = match *kind {
                sys::pt_cfe_type_pt_cfe_intr
                | sys::pt_cfe_type_pt_cfe_vmexit_intr
                | sys::pt_cfe_type_pt_cfe_uintr => {
                    format!("{kind}: {vector}{ip}")
                }
                sys::pt_cfe_type_pt_cfe_sipi => format!("{kind}: {vector:x}{ip}"),
                _ => format!("{kind}{ip}"),
            };
            (payload, Some(format!("type {}", cfe_name(*kind))))
        }
        Packet::Evd { kind, payload } => {
            (format!("{kind}: {payload:x}"), Some(format!("type {}", evd_name(*kind))))
        }
    }
}

/// A packet decoder over one PT stream.
pub struct PacketDecoder<'a> {
    raw: NonNull<sys::pt_packet_decoder>,
    _trace: std::marker::PhantomData<&'a [u8]>,
}

impl<'a> PacketDecoder<'a> {
    /// A decoder over `trace`, not yet synchronized.
    pub fn new(trace: &'a [u8], config: &DecoderConfig) -> Result<Self, PtError> {
        let c = config.raw(trace)?;
        // SAFETY: `c` is a valid config whose buffer (`trace`) outlives the decoder ('a).
        let raw = unsafe { sys::pt_pkt_alloc_decoder(&c) };
        let raw = NonNull::new(raw)
            .ok_or(PtError { code: sys::pt_error_code_pte_nomem, what: "packet decoder" })?;
        Ok(PacketDecoder { raw, _trace: std::marker::PhantomData })
    }

    /// Move to the next PSB; false at the end of the stream.
    pub fn sync_forward(&mut self) -> Result<bool, PtError> {
        // SAFETY: a live decoder.
        let st = unsafe { sys::pt_pkt_sync_forward(self.raw.as_ptr()) };
        match st {
            s if s >= 0 => Ok(true),
            s if s.unsigned_abs() == sys::pt_error_code_pte_eos => Ok(false),
            s => Err(PtError::from_status(s, "sync error")),
        }
    }

    /// Start decoding at `offset` without looking for a PSB.
    pub fn sync_set(&mut self, offset: u64) -> Result<(), PtError> {
        // SAFETY: a live decoder.
        let st = unsafe { sys::pt_pkt_sync_set(self.raw.as_ptr(), offset) };
        if st < 0 { Err(PtError::from_status(st, "sync error")) } else { Ok(()) }
    }

    /// The current offset in the stream.
    pub fn offset(&self) -> Result<u64, PtError> {
        let mut off = 0u64;
        // SAFETY: a live decoder and a valid out pointer.
        let st = unsafe { sys::pt_pkt_get_offset(self.raw.as_ptr(), &mut off) };
        if st < 0 { Err(PtError::from_status(st, "error getting offset")) } else { Ok(off) }
    }

    /// The next packet with its offset and size in bytes; `Ok(None)` at the end of the stream.
    pub fn next_packet(&mut self) -> Result<Option<(u64, u8, Packet)>, PtError> {
        let offset = self.offset()?;
        // SAFETY: zeroed pt_packet is valid plain data; libipt fills it.
        let mut p: sys::pt_packet = unsafe { std::mem::zeroed() };
        // SAFETY: a live decoder, a valid out pointer of the size given.
        let st =
            unsafe { sys::pt_pkt_next(self.raw.as_ptr(), &mut p, std::mem::size_of::<sys::pt_packet>()) };
        if st < 0 {
            let e = PtError::from_status(st, "error decoding packet");
            return if e.is_eos() { Ok(None) } else { Err(e) };
        }
        let packet = Packet::from_raw(&p)
            .ok_or(PtError { code: sys::pt_error_code_pte_bad_packet, what: "unknown packet" })?;
        Ok(Some((offset, p.size, packet)))
    }
}

impl Drop for PacketDecoder<'_> {
    fn drop(&mut self) {
        // SAFETY: allocated by pt_pkt_alloc_decoder, freed once.
        unsafe { sys::pt_pkt_free_decoder(self.raw.as_ptr()) }
    }
}

/// Options of the packet listing (those of `ptdump`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DumpOptions {
    /// Print each packet's stream offset (on by default, like `ptdump`).
    pub offset: bool,
    /// Print each packet's raw bytes.
    pub raw: bool,
    /// Track the last IP and print it after each IP packet (`--lastip`).
    pub last_ip: bool,
    /// Print the execution mode of `mode.exec` packets (`--exec-mode`).
    pub exec_mode: bool,
    /// Leave out `cyc` packets (`--no-cyc`).
    pub no_cyc: bool,
}

impl Default for DumpOptions {
    fn default() -> Self {
        DumpOptions { offset: true, raw: false, last_ip: false, exec_mode: false, no_cyc: false }
    }
}

/// The last IP the IP packets compress against (reset at each PSB).
#[derive(Debug, Default, Clone, Copy)]
struct LastIp {
    ip: u64,
}

impl LastIp {
    fn update(&mut self, p: &IpPayload) -> String {
        let ip = match p.ipc {
            IpCompression::Suppressed => return "<suppressed>".into(),
            IpCompression::Update16 => (self.ip & !0xffff) | (p.ip & 0xffff),
            IpCompression::Update32 => (self.ip & !0xffff_ffff) | (p.ip & 0xffff_ffff),
            IpCompression::Update48 => (self.ip & !0xffff_ffff_ffff) | (p.ip & 0xffff_ffff_ffff),
            IpCompression::Sext48 => sext48(p.ip),
            IpCompression::Full => p.ip,
        };
        self.ip = ip;
        format!("{ip:016x}")
    }
}

/// The packet listing of `trace`, one line per packet as `ptdump` prints it (offset, packet,
/// payload, tracking column), with `[offset: error]` lines where decoding failed and resumed
/// at the next PSB.
pub fn dump(trace: &[u8], config: &DecoderConfig, opts: DumpOptions) -> Result<Vec<String>, PtError> {
    let mut out = Vec::new();
    let mut dec = PacketDecoder::new(trace, config)?;
    if !dec.sync_forward()? {
        return Ok(out);
    }
    let mut last_ip = LastIp::default();
    loop {
        match dec.next_packet() {
            Ok(None) => return Ok(out),
            Ok(Some((offset, size, p))) => {
                if matches!(p, Packet::Psb) {
                    last_ip = LastIp::default();
                }
                if opts.no_cyc && matches!(p, Packet::Cyc { .. }) {
                    continue;
                }
                out.push(dump_line(trace, offset, size, &p, opts, &mut last_ip));
            }
            Err(e) => {
                let offset = dec.offset().unwrap_or(0);
                out.push(format!("[{offset:x}: {e}]"));
                if !dec.sync_forward()? {
                    return Ok(out);
                }
                last_ip = LastIp::default();
            }
        }
    }
}

fn dump_line(
    trace: &[u8],
    offset: u64,
    size: u8,
    p: &Packet,
    opts: DumpOptions,
    last_ip: &mut LastIp,
) -> String {
    let mut line = String::new();
    if opts.offset {
        let _ = write!(line, "{offset:016x}  ");
    }
    if opts.raw {
        let start = usize::try_from(offset).unwrap_or(usize::MAX).min(trace.len());
        let end = start.saturating_add(usize::from(size)).min(trace.len());
        for b in &trace[start..end] {
            let _ = write!(line, "{b:02x}");
        }
        line.push_str("  ");
    }
    let (payload, mut tracking) = columns(p);
    line.push_str(p.name());
    if !payload.is_empty() {
        line.push(' ');
        line.push_str(&payload);
    }
    if opts.last_ip
        && let Some(ip) = p.ip()
    {
        tracking = Some(format!("ip {}", last_ip.update(&ip)));
    }
    if opts.exec_mode
        && let Packet::ModeExec { csl, csd, .. } = p
    {
        let em = match (csl, csd) {
            (true, false) => "64-bit",
            (false, true) => "32-bit",
            (false, false) => "16-bit",
            (true, true) => "unknown",
        };
        tracking = Some(format!("em {em}"));
    }
    if let Some(t) = tracking {
        line.push_str("  ");
        line.push_str(&t);
    }
    line
}
