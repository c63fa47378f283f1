//! Intel Processor Trace decoding with libipt, Intel's reference decoder (feature `intel-pt`).
//!
//! What EXIST reads back from a per-core AUX buffer, in three levels:
//!
//! * [`packet`]: the packets of a raw PT stream ([`packet::Packet`], with offsets), and
//!   [`packet::dump`] — the packet listing `ptdump` prints (its `--lastip`, `--exec-mode`,
//!   `--no-offset`, `--raw`, `--no-cyc` options; its time-tracking columns are not produced).
//! * [`flow`]: the instruction flow — every executed instruction's address and class, with
//!   the trace events (enabled, disabled, overflow, paging, TSX, power, ...) and decode errors
//!   at their stream offsets — from the stream and the code image it ran ([`flow::Image`]);
//!   [`flow::listing`] prints it as `ptxed --no-inst` does.
//! * [`flow::calls`]: function calls and returns (and far transfers) taken from the
//!   instruction flow — the product EXIST weaves into request spans.
//!
//! libipt is the C library (2.1.2, built from source by `libipt-sys` with cmake; its bindings
//! need libclang). It is used through its raw bindings, not the `libipt` crate's wrapper, which
//! panics on packet and event kinds it does not know (the event-trace packets); here every
//! kind libipt 2.1 returns is typed and an unknown one is an error, never a panic.
//!
//! Tested against libipt's own test vectors (`tests/it/intel_pt.rs`).

pub mod flow;
pub mod packet;

use std::ffi::CStr;

use libipt_sys as sys;

/// A libipt error: its code and what was being done.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what}: {}", errstr(*code))]
pub struct PtError {
    /// libipt's `pt_error_code` (positive).
    pub code: u32,
    /// What failed (`packet decoder`, `sync`, ...).
    pub what: &'static str,
}

impl PtError {
    fn from_status(status: i32, what: &'static str) -> Self {
        PtError { code: status.unsigned_abs(), what }
    }

    /// The stream ended (`pte_eos`).
    pub fn is_eos(&self) -> bool {
        self.code == sys::pt_error_code_pte_eos
    }
}

/// libipt's text for an error code (`"end of stream"`, `"no memory mapped at this address"`).
pub fn errstr(code: u32) -> String {
    // SAFETY: pt_errstr returns a pointer to a static NUL-terminated string for any code.
    let p = unsafe { sys::pt_errstr(code) };
    if p.is_null() {
        return format!("error {code}");
    }
    // SAFETY: non-null, static, NUL-terminated (see above).
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// A power-state entry request (PWRE packet and event): the target C-state, hardware or not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pwre {
    /// Target C-state minus one (MWAIT hint encoding).
    pub state: u8,
    /// Target sub-state minus one.
    pub sub_state: u8,
    /// Hardware-initiated.
    pub hw: bool,
}

/// A power-state exit (PWRX packet and event): the last and deepest C-state and the wake
/// reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pwrx {
    /// Last core C-state minus one.
    pub last: u8,
    /// Deepest core C-state minus one.
    pub deepest: u8,
    /// Woken by an interrupt.
    pub interrupt: bool,
    /// Woken by a store to the monitored address.
    pub store: bool,
    /// Woken autonomously (hardware).
    pub autonomous: bool,
}

/// Our [`Pwre`]/[`Pwrx`] from libipt's packet or event payload (distinct C types with the
/// same fields).
macro_rules! power_state {
    (pwre $p:expr) => {
        $crate::intel_pt::Pwre { state: $p.state, sub_state: $p.sub_state, hw: $p.hw() != 0 }
    };
    (pwrx $p:expr) => {
        $crate::intel_pt::Pwrx {
            last: $p.last,
            deepest: $p.deepest,
            interrupt: $p.interrupt() != 0,
            store: $p.store() != 0,
            autonomous: $p.autonomous() != 0,
        }
    };
}
pub(crate) use power_state;

/// One address range of the trace's IP filter (`IA32_RTIT_ADDRn_A/B` and `ADDRn_CFG`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AddrFilter {
    /// 1 = trace only inside (filter), 2 = stop tracing when reached (TraceStop).
    pub cfg: u8,
    /// First address of the range.
    pub from: u64,
    /// Last address of the range.
    pub to: u64,
}

/// How the trace was recorded: what the decoder must know beyond the stream itself.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DecoderConfig {
    /// The recording CPU (family, model): libipt applies that CPU's errata workarounds.
    pub cpu: Option<(u16, u8)>,
    /// `IA32_RTIT_CTL.MTCFreq`.
    pub mtc_freq: u8,
    /// The nominal core:bus ratio (`MSR_PLATFORM_INFO`).
    pub nom_freq: u8,
    /// CPUID leaf 0x15 EAX (TSC : core crystal clock ratio, denominator).
    pub cpuid_0x15_eax: u32,
    /// CPUID leaf 0x15 EBX (numerator).
    pub cpuid_0x15_ebx: u32,
    /// Report interrupt-flag changes as events.
    pub iflags_events: bool,
    /// Report timing packets as `tick` events.
    pub tick_events: bool,
    /// Keep the time calibration across an overflow.
    pub keep_tcal_on_ovf: bool,
    /// The IP filter ranges 0..=3 the trace was recorded with (`None`: unused).
    pub addr_filter: [Option<AddrFilter>; 4],
}

impl DecoderConfig {
    /// libipt's `pt_config` for `trace` (the decoder copies it; `trace` must outlive it).
    fn raw(&self, trace: &[u8]) -> Result<sys::pt_config, PtError> {
        // SAFETY: pt_config is plain data (integers, pointers, unions of integers): all-zero
        // is its documented initial state (pt_config_init does the same).
        let mut c: sys::pt_config = unsafe { std::mem::zeroed() };
        c.size = std::mem::size_of::<sys::pt_config>();
        let range = trace.as_ptr_range();
        // libipt reads the buffer only; its API takes `uint8_t *`.
        c.begin = range.start.cast_mut();
        c.end = range.end.cast_mut();
        if let Some((family, model)) = self.cpu {
            c.cpu = sys::pt_cpu { vendor: sys::pt_cpu_vendor_pcv_intel, family, model, stepping: 0 };
            // SAFETY: both pointers are to live, properly typed values.
            let st = unsafe { sys::pt_cpu_errata(&mut c.errata, &c.cpu) };
            if st < 0 {
                return Err(PtError::from_status(st, "cpu errata"));
            }
        }
        c.mtc_freq = self.mtc_freq;
        c.nom_freq = self.nom_freq;
        c.cpuid_0x15_eax = self.cpuid_0x15_eax;
        c.cpuid_0x15_ebx = self.cpuid_0x15_ebx;
        // SAFETY: writing the insn variant of a union of plain bitfield structs.
        unsafe {
            let f = &mut c.flags.variant.insn;
            f.set_enable_iflags_events(u32::from(self.iflags_events));
            f.set_enable_tick_events(u32::from(self.tick_events));
            f.set_keep_tcal_on_ovf(u32::from(self.keep_tcal_on_ovf));
        }
        let mut cfg = 0u64;
        for (i, r) in self.addr_filter.iter().enumerate() {
            let Some(r) = r else { continue };
            cfg |= u64::from(r.cfg & 0xf) << (4 * i);
            let (a, b) = match i {
                0 => (&mut c.addr_filter.addr0_a, &mut c.addr_filter.addr0_b),
                1 => (&mut c.addr_filter.addr1_a, &mut c.addr_filter.addr1_b),
                2 => (&mut c.addr_filter.addr2_a, &mut c.addr_filter.addr2_b),
                _ => (&mut c.addr_filter.addr3_a, &mut c.addr_filter.addr3_b),
            };
            (*a, *b) = (r.from, r.to);
        }
        c.addr_filter.config.addr_cfg = cfg;
        Ok(c)
    }
}
