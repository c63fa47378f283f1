//! The instruction flow of an Intel PT stream (libipt's instruction decoder), its `ptxed`
//! listing, and the function calls and returns EXIST takes from it.

use std::ffi::CString;
use std::path::Path;
use std::ptr::NonNull;

use libipt_sys as sys;

use super::{DecoderConfig, PtError, Pwre, Pwrx, power_state};

/// The code the traced program ran: file ranges mapped at virtual addresses.
pub struct Image {
    raw: NonNull<sys::pt_image>,
}

impl Image {
    /// An empty image.
    pub fn new() -> Result<Self, PtError> {
        // SAFETY: a NULL name is allowed.
        let raw = unsafe { sys::pt_image_alloc(std::ptr::null()) };
        NonNull::new(raw)
            .map(|raw| Image { raw })
            .ok_or(PtError { code: sys::pt_error_code_pte_nomem, what: "image" })
    }

    /// Map `size` bytes of `path` from file offset `offset` at virtual address `vaddr`.
    pub fn add_file(&mut self, path: &Path, offset: u64, size: u64, vaddr: u64) -> Result<(), PtError> {
        let name = CString::new(path.as_os_str().as_encoded_bytes())
            .map_err(|_| PtError { code: sys::pt_error_code_pte_invalid, what: "image file name" })?;
        // SAFETY: a live image, a NUL-terminated name, NULL asid (the default address space).
        let st = unsafe {
            sys::pt_image_add_file(self.raw.as_ptr(), name.as_ptr(), offset, size, std::ptr::null(), vaddr)
        };
        if st < 0 { Err(PtError::from_status(st, "image add file")) } else { Ok(()) }
    }
}

impl Drop for Image {
    fn drop(&mut self) {
        // SAFETY: allocated by pt_image_alloc, freed once, after every decoder using it (the
        // decoder borrows the image).
        unsafe { sys::pt_image_free(self.raw.as_ptr()) }
    }
}

/// libipt's instruction class (what EXIST needs: calls, returns, jumps).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum InsnClass {
    Unknown,
    Other,
    Call,
    Return,
    Jump,
    CondJump,
    FarCall,
    FarReturn,
    FarJump,
    Ptwrite,
    Indirect,
}

impl InsnClass {
    fn from_raw(c: u32) -> Self {
        match c {
            sys::pt_insn_class_ptic_other => InsnClass::Other,
            sys::pt_insn_class_ptic_call => InsnClass::Call,
            sys::pt_insn_class_ptic_return => InsnClass::Return,
            sys::pt_insn_class_ptic_jump => InsnClass::Jump,
            sys::pt_insn_class_ptic_cond_jump => InsnClass::CondJump,
            sys::pt_insn_class_ptic_far_call => InsnClass::FarCall,
            sys::pt_insn_class_ptic_far_return => InsnClass::FarReturn,
            sys::pt_insn_class_ptic_far_jump => InsnClass::FarJump,
            sys::pt_insn_class_ptic_ptwrite => InsnClass::Ptwrite,
            sys::pt_insn_class_ptic_indirect => InsnClass::Indirect,
            _ => InsnClass::Unknown,
        }
    }
}

/// An execution mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum ExecMode {
    Unknown,
    Bits16,
    Bits32,
    Bits64,
}

impl ExecMode {
    fn from_raw(m: u32) -> Self {
        match m {
            sys::pt_exec_mode_ptem_16bit => ExecMode::Bits16,
            sys::pt_exec_mode_ptem_32bit => ExecMode::Bits32,
            sys::pt_exec_mode_ptem_64bit => ExecMode::Bits64,
            _ => ExecMode::Unknown,
        }
    }

    fn name(self) -> &'static str {
        match self {
            ExecMode::Unknown => "<unknown>",
            ExecMode::Bits16 => "16-bit",
            ExecMode::Bits32 => "32-bit",
            ExecMode::Bits64 => "64-bit",
        }
    }
}

/// One executed instruction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Insn {
    /// Its address.
    pub ip: u64,
    /// Its class.
    pub class: InsnClass,
    /// Its execution mode.
    pub mode: ExecMode,
    /// Its length in bytes (the first `size` bytes of `raw`).
    pub size: u8,
    /// Its bytes.
    pub raw: [u8; 15],
    /// Executed speculatively (inside a TSX transaction).
    pub speculative: bool,
}

impl Insn {
    fn from_raw(i: &sys::pt_insn) -> Self {
        Insn {
            ip: i.ip,
            class: InsnClass::from_raw(i.iclass),
            mode: ExecMode::from_raw(i.mode),
            size: i.size,
            raw: i.raw,
            speculative: i.speculative() != 0,
        }
    }

    /// The address after the instruction, or its direct branch target when it has a relative
    /// displacement (`call rel`, `jmp rel`, `jcc rel`, `loop`/`jcxz`): where a decode error
    /// after it is reported.
    fn next_ip(&self) -> u64 {
        let bytes = &self.raw[..usize::from(self.size).min(15)];
        let mut i = 0;
        while i < bytes.len()
            && (matches!(
                bytes[i],
                0x26 | 0x2e | 0x36 | 0x3e | 0x64 | 0x65 | 0x66 | 0x67 | 0xf0 | 0xf2 | 0xf3
            ) || (self.mode == ExecMode::Bits64 && (0x40..=0x4f).contains(&bytes[i])))
        {
            i += 1;
        }
        let disp_at = match bytes.get(i..) {
            Some([0xe8 | 0xe9 | 0xeb | 0x70..=0x7f | 0xe0..=0xe3, ..]) => Some(i + 1),
            Some([0x0f, 0x80..=0x8f, ..]) => Some(i + 2),
            _ => None,
        };
        let next = self.ip.wrapping_add(u64::from(self.size));
        let disp = disp_at.and_then(|at| {
            let d = bytes.get(at..)?;
            Some(match d.len() {
                1 => i64::from(d[0] as i8),
                2 => i64::from(i16::from_le_bytes([d[0], d[1]])),
                4 => i64::from(i32::from_le_bytes([d[0], d[1], d[2], d[3]])),
                _ => return None,
            })
        });
        next.wrapping_add_signed(disp.unwrap_or(0))
    }
}

/// A trace event (libipt's `pt_event`, the kinds of libipt 2.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(missing_docs)] // the fields are libipt's, named as there
pub enum EventKind {
    Enabled { ip: u64, resumed: bool },
    Disabled { ip: u64 },
    AsyncDisabled { at: u64, ip: u64 },
    AsyncBranch { from: u64, to: u64 },
    Paging { cr3: u64, non_root: bool },
    AsyncPaging { cr3: u64, non_root: bool, ip: u64 },
    Overflow { ip: u64 },
    ExecMode { mode: ExecMode, ip: u64 },
    Tsx { ip: u64, speculative: bool, aborted: bool },
    Stop,
    Vmcs { base: u64 },
    AsyncVmcs { base: u64, ip: u64 },
    Exstop { ip: u64 },
    Mwait { ip: u64, hints: u32, ext: u32 },
    Pwre(Pwre),
    Pwrx(Pwrx),
    Ptwrite { ip: u64, payload: u64 },
    Tick { ip: u64 },
    Cbr { ratio: u16 },
    Mnt { payload: u64 },
    Tip { ip: u64 },
    Tnt { size: u8, bits: u64 },
    Iflags { iflag: bool, ip: u64 },
    Interrupt { vector: u8, cr2: Option<u64>, ip: u64 },
    Iret { ip: u64 },
    Smi { ip: u64 },
    Rsm { ip: u64 },
    Sipi { vector: u8 },
    Init { ip: u64 },
    Vmentry { ip: u64 },
    Vmexit { vector: Option<u8>, vmxr: Option<u64>, vmxq: Option<u64>, ip: u64 },
    Shutdown { ip: u64 },
    Uintr { vector: u8, ip: u64 },
    Uiret { ip: u64 },
}

/// An event with libipt's flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Event {
    /// What happened.
    pub kind: EventKind,
    /// The event's IP is not known (its `ip` fields are meaningless).
    pub ip_suppressed: bool,
    /// A status update (a repeat of known state after a PSB), not a change.
    pub status_update: bool,
    /// Its time stamp, when the trace had timing.
    pub tsc: Option<u64>,
}

impl Event {
    fn from_raw(e: &sys::pt_event) -> Result<Self, PtError> {
        let v = &e.variant;
        // SAFETY: each arm reads the union member libipt wrote for that event type.
        let kind = unsafe {
            match e.type_ {
                sys::pt_event_type_ptev_enabled => {
                    EventKind::Enabled { ip: v.enabled.ip, resumed: v.enabled.resumed() != 0 }
                }
                sys::pt_event_type_ptev_disabled => EventKind::Disabled { ip: v.disabled.ip },
                sys::pt_event_type_ptev_async_disabled => {
                    EventKind::AsyncDisabled { at: v.async_disabled.at, ip: v.async_disabled.ip }
                }
                sys::pt_event_type_ptev_async_branch => {
                    EventKind::AsyncBranch { from: v.async_branch.from, to: v.async_branch.to }
                }
                sys::pt_event_type_ptev_paging => {
                    EventKind::Paging { cr3: v.paging.cr3, non_root: v.paging.non_root() != 0 }
                }
                sys::pt_event_type_ptev_async_paging => EventKind::AsyncPaging {
                    cr3: v.async_paging.cr3,
                    non_root: v.async_paging.non_root() != 0,
                    ip: v.async_paging.ip,
                },
                sys::pt_event_type_ptev_overflow => EventKind::Overflow { ip: v.overflow.ip },
                sys::pt_event_type_ptev_exec_mode => {
                    EventKind::ExecMode { mode: ExecMode::from_raw(v.exec_mode.mode), ip: v.exec_mode.ip }
                }
                sys::pt_event_type_ptev_tsx => EventKind::Tsx {
                    ip: v.tsx.ip,
                    speculative: v.tsx.speculative() != 0,
                    aborted: v.tsx.aborted() != 0,
                },
                sys::pt_event_type_ptev_stop => EventKind::Stop,
                sys::pt_event_type_ptev_vmcs => EventKind::Vmcs { base: v.vmcs.base },
                sys::pt_event_type_ptev_async_vmcs => {
                    EventKind::AsyncVmcs { base: v.async_vmcs.base, ip: v.async_vmcs.ip }
                }
                sys::pt_event_type_ptev_exstop => EventKind::Exstop { ip: v.exstop.ip },
                sys::pt_event_type_ptev_mwait => {
                    EventKind::Mwait { ip: v.mwait.ip, hints: v.mwait.hints, ext: v.mwait.ext }
                }
                sys::pt_event_type_ptev_pwre => EventKind::Pwre(power_state!(pwre v.pwre)),
                sys::pt_event_type_ptev_pwrx => EventKind::Pwrx(power_state!(pwrx v.pwrx)),
                sys::pt_event_type_ptev_ptwrite => {
                    EventKind::Ptwrite { ip: v.ptwrite.ip, payload: v.ptwrite.payload }
                }
                sys::pt_event_type_ptev_tick => EventKind::Tick { ip: v.tick.ip },
                sys::pt_event_type_ptev_cbr => EventKind::Cbr { ratio: v.cbr.ratio },
                sys::pt_event_type_ptev_mnt => EventKind::Mnt { payload: v.mnt.payload },
                sys::pt_event_type_ptev_tip => EventKind::Tip { ip: v.tip.ip },
                sys::pt_event_type_ptev_tnt => EventKind::Tnt { size: v.tnt.size, bits: v.tnt.bits },
                sys::pt_event_type_ptev_iflags => {
                    EventKind::Iflags { iflag: v.iflags.iflag() != 0, ip: v.iflags.ip }
                }
                sys::pt_event_type_ptev_interrupt => EventKind::Interrupt {
                    vector: v.interrupt.vector,
                    cr2: (v.interrupt.has_cr2() != 0).then_some(v.interrupt.cr2),
                    ip: v.interrupt.ip,
                },
                sys::pt_event_type_ptev_iret => EventKind::Iret { ip: v.iret.ip },
                sys::pt_event_type_ptev_smi => EventKind::Smi { ip: v.smi.ip },
                sys::pt_event_type_ptev_rsm => EventKind::Rsm { ip: v.rsm.ip },
                sys::pt_event_type_ptev_sipi => EventKind::Sipi { vector: v.sipi.vector },
                sys::pt_event_type_ptev_init => EventKind::Init { ip: v.init.ip },
                sys::pt_event_type_ptev_vmentry => EventKind::Vmentry { ip: v.vmentry.ip },
                sys::pt_event_type_ptev_vmexit => EventKind::Vmexit {
                    vector: (v.vmexit.has_vector() != 0).then_some(v.vmexit.vector),
                    vmxr: (v.vmexit.has_vmxr() != 0).then_some(v.vmexit.vmxr),
                    vmxq: (v.vmexit.has_vmxq() != 0).then_some(v.vmexit.vmxq),
                    ip: v.vmexit.ip,
                },
                sys::pt_event_type_ptev_shutdown => EventKind::Shutdown { ip: v.shutdown.ip },
                sys::pt_event_type_ptev_uintr => EventKind::Uintr { vector: v.uintr.vector, ip: v.uintr.ip },
                sys::pt_event_type_ptev_uiret => EventKind::Uiret { ip: v.uiret.ip },
                _ => return Err(PtError { code: sys::pt_error_code_pte_bad_context, what: "unknown event" }),
            }
        };
        Ok(Event {
            kind,
            ip_suppressed: e.ip_suppressed() != 0,
            status_update: e.status_update() != 0,
            tsc: (e.has_tsc() != 0).then_some(e.tsc),
        })
    }
}

/// Where a decode error happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// Finding a synchronization point (PSB) failed.
    Sync,
    /// Decoding the flow failed; decoding resumes at the next PSB.
    Decode,
}

/// One element of the instruction flow, in stream order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FlowItem {
    /// An executed instruction; `offset` is the stream offset of the decoder before it.
    Insn {
        /// Stream offset.
        offset: u64,
        /// The instruction.
        insn: Insn,
    },
    /// A trace event at stream offset `offset`.
    Event {
        /// Stream offset.
        offset: u64,
        /// The event.
        event: Event,
    },
    /// A decode error: at stream `offset` (when known) and instruction address `ip`.
    Error {
        /// Stream offset.
        offset: Option<u64>,
        /// The instruction address it concerns.
        ip: u64,
        /// Sync or decode.
        kind: ErrorKind,
        /// libipt's error.
        error: PtError,
    },
    /// The trace ended while tracing was enabled.
    EndOfTrace,
}

struct InsnDecoder<'a> {
    raw: NonNull<sys::pt_insn_decoder>,
    _borrow: std::marker::PhantomData<(&'a [u8], &'a Image)>,
}

impl Drop for InsnDecoder<'_> {
    fn drop(&mut self) {
        // SAFETY: allocated by pt_insn_alloc_decoder, freed once.
        unsafe { sys::pt_insn_free_decoder(self.raw.as_ptr()) }
    }
}

impl InsnDecoder<'_> {
    fn offset(&self) -> Result<u64, PtError> {
        let mut off = 0;
        // SAFETY: a live decoder and a valid out pointer.
        let st = unsafe { sys::pt_insn_get_offset(self.raw.as_ptr(), &mut off) };
        if st < 0 { Err(PtError::from_status(st, "offset")) } else { Ok(off) }
    }

    /// Drain pending events into `sink`; the last status (or error status).
    fn drain_events(&mut self, mut status: i32, sink: &mut impl FnMut(FlowItem)) -> Result<i32, i32> {
        while status as u32 & sys::pt_status_flag_pts_event_pending != 0 {
            let offset = self.offset().unwrap_or(0);
            // SAFETY: zeroed pt_event is valid plain data that libipt fills.
            let mut e: sys::pt_event = unsafe { std::mem::zeroed() };
            // SAFETY: a live decoder, a valid out pointer of the size given.
            status = unsafe {
                sys::pt_insn_event(self.raw.as_ptr(), &mut e, std::mem::size_of::<sys::pt_event>())
            };
            if status < 0 {
                return Err(status);
            }
            match Event::from_raw(&e) {
                Ok(event) => sink(FlowItem::Event { offset, event }),
                Err(_) => return Err(-(sys::pt_error_code_pte_bad_context as i32)),
            }
        }
        Ok(status)
    }
}

/// Decode the instruction flow of `trace` running `image`, handing every instruction, event
/// and error to `sink` in order. Errors inside the stream are items (decoding goes on at the
/// next PSB); only a decoder that cannot be set up is an `Err`.
pub fn decode(
    trace: &[u8],
    image: &Image,
    config: &DecoderConfig,
    mut sink: impl FnMut(FlowItem),
) -> Result<(), PtError> {
    let c = config.raw(trace)?;
    // SAFETY: `c` is valid and its buffer (`trace`) outlives the decoder (dropped below).
    let raw = unsafe { sys::pt_insn_alloc_decoder(&c) };
    let raw = NonNull::new(raw)
        .ok_or(PtError { code: sys::pt_error_code_pte_nomem, what: "instruction decoder" })?;
    let mut dec = InsnDecoder { raw, _borrow: std::marker::PhantomData };
    // SAFETY: both live; the image outlives the decoder (borrowed for this call).
    let st = unsafe { sys::pt_insn_set_image(dec.raw.as_ptr(), image.raw.as_ptr()) };
    if st < 0 {
        return Err(PtError::from_status(st, "set image"));
    }
    let eos = -(sys::pt_error_code_pte_eos as i32);
    let mut last_sync = 0u64;
    loop {
        // SAFETY: zeroed pt_insn is valid plain data; it names the errors' instruction.
        let mut insn: sys::pt_insn = unsafe { std::mem::zeroed() };
        // SAFETY: a live decoder.
        let status = unsafe { sys::pt_insn_sync_forward(dec.raw.as_ptr()) };
        if status < 0 {
            if status == eos {
                return Ok(());
            }
            let offset = dec.offset().ok();
            sink(FlowItem::Error {
                offset,
                ip: insn.ip,
                kind: ErrorKind::Sync,
                error: PtError::from_status(status, "sync error"),
            });
            // no progress: give up (reported once more than the last attempt, as ptxed does)
            match offset {
                Some(o) if o > last_sync => last_sync = o,
                _ => return Ok(()),
            }
            continue;
        }
        let mut status = status;
        let err = loop {
            status = match dec.drain_events(status, &mut sink) {
                Ok(s) => s,
                Err(e) => break e,
            };
            if status as u32 & sys::pt_status_flag_pts_eos != 0 {
                if status as u32 & sys::pt_status_flag_pts_ip_suppressed == 0 {
                    sink(FlowItem::EndOfTrace);
                }
                break eos;
            }
            let offset = dec.offset().unwrap_or(0);
            // SAFETY: a live decoder, a valid out pointer of the size given.
            status = unsafe {
                sys::pt_insn_next(dec.raw.as_ptr(), &mut insn, std::mem::size_of::<sys::pt_insn>())
            };
            if status < 0 {
                if status == -(sys::pt_error_code_pte_event_ignored as i32) {
                    status = sys::pt_status_flag_pts_event_pending as i32;
                    continue;
                }
                if insn.iclass == sys::pt_insn_class_ptic_unknown {
                    break status;
                }
            }
            sink(FlowItem::Insn { offset, insn: Insn::from_raw(&insn) });
            if status < 0 {
                break status;
            }
        };
        if err == eos {
            return Ok(());
        }
        let i = Insn::from_raw(&insn);
        let ip = if err == -(sys::pt_error_code_pte_bad_query as i32) || i.class == InsnClass::Unknown {
            i.ip
        } else {
            i.next_ip()
        };
        sink(FlowItem::Error {
            offset: dec.offset().ok(),
            ip,
            kind: ErrorKind::Decode,
            error: PtError::from_status(err, "error"),
        });
    }
}

/// Options of the flow listing (those of `ptxed`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ListingOptions {
    /// Print the IP of events (`--event:ip`).
    pub event_ip: bool,
    /// Print the time stamp of events that have one (`--event:time`).
    pub event_time: bool,
    /// Print only errors (and the statistics) (`--quiet`).
    pub quiet: bool,
    /// Print the number of instructions at the end (`--stat`).
    pub stat_insn: bool,
}

/// The flow as `ptxed --no-inst` prints it: one instruction address per line (`? ` before
/// speculative ones), events in brackets, errors as `[offset, ip: error: message]`.
pub fn listing(items: &[FlowItem], opts: ListingOptions) -> Vec<String> {
    let mut out = Vec::new();
    let mut insns = 0u64;
    for item in items {
        match item {
            FlowItem::Insn { insn, .. } => {
                insns += 1;
                if !opts.quiet {
                    out.push(format!("{}{:016x}", if insn.speculative { "? " } else { "" }, insn.ip));
                }
            }
            FlowItem::Event { event, .. } => {
                if !opts.quiet && !event.status_update {
                    out.push(event_line(event, opts));
                }
            }
            FlowItem::Error { offset, ip, kind, error } => {
                let what = match kind {
                    ErrorKind::Sync => "sync error",
                    ErrorKind::Decode => "error",
                };
                let msg = super::errstr(error.code);
                match offset {
                    Some(o) => out.push(format!("[{o:x}, {ip:x}: {what}: {msg}]")),
                    None => out.push(format!("[?, {ip:x}: {what}: {msg}]")),
                }
            }
            FlowItem::EndOfTrace => {
                if !opts.quiet {
                    out.push("[end of trace]".into());
                }
            }
        }
    }
    if opts.stat_insn {
        out.push(format!("insn: {insns}."));
    }
    out
}

fn event_line(e: &Event, opts: ListingOptions) -> String {
    let mut s = String::from("[");
    if opts.event_time
        && let Some(t) = e.tsc
    {
        s.push_str(&format!("{t:016x}  "));
    }
    let show_ip = opts.event_ip && !e.ip_suppressed;
    let ip = |ip: u64| if show_ip { format!(", ip: {ip:016x}") } else { String::new() };
    let text = match e.kind {
        EventKind::Enabled { ip: at, resumed } => {
            let ip = if opts.event_ip { format!(", ip: {at:016x}") } else { String::new() };
            format!("{}{ip}", if resumed { "resumed" } else { "enabled" })
        }
        EventKind::Disabled { ip: at } => format!("disabled{}", ip(at)),
        EventKind::AsyncDisabled { at, ip: to } => {
            if opts.event_ip {
                format!(
                    "disabled, at: {at:016x}{}",
                    if e.ip_suppressed { String::new() } else { format!(", ip: {to:016x}") }
                )
            } else {
                "disabled".into()
            }
        }
        EventKind::AsyncBranch { from, to } => {
            if opts.event_ip {
                format!(
                    "interrupt, from: {from:016x}{}",
                    if e.ip_suppressed { String::new() } else { format!(", to: {to:016x}") }
                )
            } else {
                "interrupt".into()
            }
        }
        EventKind::Paging { cr3, non_root } => {
            format!("paging, cr3: {cr3:016x}{}", if non_root { ", nr" } else { "" })
        }
        EventKind::AsyncPaging { cr3, non_root, ip: at } => format!(
            "paging, cr3: {cr3:016x}{}{}",
            if non_root { ", nr" } else { "" },
            if opts.event_ip { format!(", ip: {at:016x}") } else { String::new() }
        ),
        EventKind::Overflow { ip: at } => format!("overflow{}", ip(at)),
        EventKind::ExecMode { mode, ip: at } => format!("exec mode: {}{}", mode.name(), ip(at)),
        EventKind::Tsx { ip: at, speculative, aborted } => {
            let what = if aborted {
                "aborted"
            } else if speculative {
                "begin transaction"
            } else {
                "committed"
            };
            format!("{what}{}", ip(at))
        }
        EventKind::Stop => "stopped".into(),
        EventKind::Vmcs { base } => format!("vmcs, base: {base:016x}"),
        EventKind::AsyncVmcs { base, ip: at } => {
            format!(
                "vmcs, base: {base:016x}{}",
                if opts.event_ip { format!(", ip: {at:016x}") } else { String::new() }
            )
        }
        EventKind::Exstop { ip: at } => format!("exstop{}", ip(at)),
        EventKind::Mwait { ip: at, hints, ext } => format!("mwait {hints:x} {ext:x}{}", ip(at)),
        EventKind::Pwre(Pwre { state, sub_state, hw }) => format!(
            "pwre c{}.{}{}",
            state.wrapping_add(1) & 0xf,
            sub_state.wrapping_add(1) & 0xf,
            if hw { " hw" } else { "" }
        ),
        EventKind::Pwrx(Pwrx { last, deepest, interrupt, store, autonomous }) => format!(
            "pwrx {}{}{}c{} (c{})",
            if interrupt { "int: " } else { "" },
            if store { "st: " } else { "" },
            if autonomous { "hw: " } else { "" },
            last.wrapping_add(1) & 0xf,
            deepest.wrapping_add(1) & 0xf
        ),
        EventKind::Ptwrite { ip: at, payload } => format!("ptwrite: {payload:x}{}", ip(at)),
        EventKind::Tick { ip: at } => format!("tick{}", ip(at)),
        EventKind::Cbr { ratio } => format!("cbr: {ratio:x}"),
        EventKind::Mnt { payload } => format!("mnt: {payload:x}"),
        EventKind::Tip { ip: at } => format!("tip: {at:x}"),
        EventKind::Tnt { size, bits } => {
            let mut s = String::from("tnt: ");
            // ptxed walks a mask from `size` down (size is a bit mask's top bit here)
            let mut index = u64::from(size);
            while index != 0 {
                s.push(if bits & index != 0 { '!' } else { '.' });
                index >>= 1;
            }
            s
        }
        EventKind::Iflags { iflag, ip: at } => {
            format!("interrupts {}{}", if iflag { "enabled" } else { "disabled" }, ip(at))
        }
        EventKind::Interrupt { vector, cr2, ip: at } => format!(
            "interrupt {vector}{}{}",
            cr2.map(|c| format!(", cr2: {c:016x}")).unwrap_or_default(),
            ip(at)
        ),
        EventKind::Iret { ip: at } => format!("iret{}", ip(at)),
        EventKind::Smi { ip: at } => format!("smi{}", ip(at)),
        EventKind::Rsm { ip: at } => format!("rsm{}", ip(at)),
        EventKind::Sipi { vector } => format!("sipi: {vector:x}"),
        EventKind::Init { ip: at } => format!("init{}", ip(at)),
        EventKind::Vmentry { ip: at } => format!("vmentry{}", ip(at)),
        EventKind::Vmexit { vector, vmxr, vmxq, ip: at } => format!(
            "vmexit{}{}{}{}",
            vector.map(|v| format!(", intr: {v}")).unwrap_or_default(),
            vmxr.map(|v| format!(", vmxr: {v:016x}")).unwrap_or_default(),
            vmxq.map(|v| format!(", vmxq: {v:016x}")).unwrap_or_default(),
            ip(at)
        ),
        EventKind::Shutdown { ip: at } => format!("shutdown{}", ip(at)),
        EventKind::Uintr { vector, ip: at } => format!("uintr {vector}{}", ip(at)),
        EventKind::Uiret { ip: at } => format!("uiret{}", ip(at)),
    };
    s.push_str(&text);
    s.push(']');
    s
}

/// A control transfer between functions, taken from the instruction flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallKind {
    /// `call` (near): enter the function at `to`.
    Call,
    /// `ret` (near): back to `to`, after the call site.
    Return,
    /// A far call, far return or far jump (system calls, interrupts returns, ...).
    Far,
    /// An indirect jump or far transfer libipt classifies no further (`ptic_indirect`): a
    /// tail call or a jump table; its target comes from the trace.
    IndirectJump,
}

/// One function-level transfer: the instruction at `from` went to `to`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transfer {
    /// What kind.
    pub kind: CallKind,
    /// The address of the call/return/jump instruction.
    pub from: u64,
    /// The next instruction executed (the callee's entry, the return address).
    pub to: u64,
    /// Stream offset of the transfer instruction.
    pub offset: u64,
}

/// The calls, returns and far transfers of a flow: each call/return/far/indirect-jump
/// instruction paired with the next instruction executed. A transfer whose next instruction
/// is not in the flow (tracing disabled, an error, the end) is left out — its target is not
/// known.
pub fn calls(items: &[FlowItem]) -> Vec<Transfer> {
    let mut out = Vec::new();
    let mut pending: Option<(CallKind, u64, u64)> = None;
    for item in items {
        match item {
            FlowItem::Insn { offset, insn } => {
                if let Some((kind, from, off)) = pending.take() {
                    out.push(Transfer { kind, from, to: insn.ip, offset: off });
                }
                let kind = match insn.class {
                    InsnClass::Call => Some(CallKind::Call),
                    InsnClass::Return => Some(CallKind::Return),
                    InsnClass::FarCall | InsnClass::FarReturn | InsnClass::FarJump => Some(CallKind::Far),
                    InsnClass::Indirect => Some(CallKind::IndirectJump),
                    _ => None,
                };
                pending = kind.map(|k| (k, insn.ip, *offset));
            }
            FlowItem::Event { event, .. } => {
                if matches!(
                    event.kind,
                    EventKind::Disabled { .. }
                        | EventKind::AsyncDisabled { .. }
                        | EventKind::AsyncBranch { .. }
                        | EventKind::Overflow { .. }
                ) {
                    pending = None;
                }
            }
            FlowItem::Error { .. } | FlowItem::EndOfTrace => pending = None,
        }
    }
    out
}
