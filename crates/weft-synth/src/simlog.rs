//! Coherent multi-simulator logs for tests and benchmarks: a SimBricks-style ping between a
//! client and a server host (gem5 + i40e nicbm each) through two switches in ns-3 — the
//! experiment Columbo was built for, which the public fixtures only show in unrelated pieces.
//!
//! Every line copies the layout of a real line in the fixtures (gem5 `simbricks-pci:` and
//! `Exec` lines, nicbm records, the SimBricks ns-3 fork's trace lines with CosimNetDevices);
//! what is synthetic is the *scenario*: timestamps, ids, addresses and the causal order of a
//! ping, following SimBricks' behaviour (a posted doorbell write, descriptor and data DMAs
//! whose gem5 ids are the nicbm op pointers, an MSI-X whose delivery is gem5's DMA id 0, a
//! frame through a CosimNetDevice, the kernel answering the echo request in its softirq).
//!
//! Per round (times from the round's start, in ns; `q` = queueing in sw0, varying per round):
//!
//! | when | client gem5 / nicbm | ns-3 (sw0 = node 0, sw1 = node 1) | server gem5 / nicbm |
//! |---|---|---|---|
//! | 0–1.2 | `sendto` syscall down to `i40e_lan_xmit_frame`, doorbell MMIO write | | |
//! | 1.7–5.6 | NIC: MMIO, descriptor + data DMA reads, `eth tx`, write-back DMA, MSI-X | | |
//! | 4.4–5.4+q | | sw0 adapter → sw0/dev1 queue → sw1/dev1 → sw1 adapter | |
//! | 5.9–8.7 (+q) | | | NIC: `eth rx`, data + write-back DMA writes, MSI-X |
//! | 9.0–11.0 (+q) | | | softirq: `i40e_napi_poll`, `netif_receive_skb_list_internal`, `icmp_rcv`, reply down to the doorbell |
//! | then | the same the other way: reply frame, client NIC RX, client softirq receives | | |
//!
//! [`Scenario::noise`] adds gem5 instruction lines after every call (gem5 logs are dominated
//! by them; they exercise the symbolizer and the type filter).

use std::fmt::Write as _;

/// The logs of one scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Log {
    /// Client host (gem5).
    ClientGem5,
    /// Client NIC (nicbm).
    ClientNic,
    /// The network (ns-3, SimBricks fork layout).
    Ns3,
    /// Server NIC (nicbm).
    ServerNic,
    /// Server host (gem5).
    ServerGem5,
}

impl Log {
    /// All logs.
    pub const ALL: [Log; 5] = [Log::ClientGem5, Log::ClientNic, Log::Ns3, Log::ServerNic, Log::ServerGem5];

    /// The file name [`Scenario::topology`] expects.
    pub fn file_name(self) -> &'static str {
        match self {
            Log::ClientGem5 => "client.gem5.log",
            Log::ClientNic => "client.nicbm.log",
            Log::Ns3 => "ns3.tr",
            Log::ServerNic => "server.nicbm.log",
            Log::ServerGem5 => "server.gem5.log",
        }
    }
}

/// A ping scenario (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scenario {
    /// Ping rounds.
    pub rounds: u64,
    /// Simulated time of the first round (ps).
    pub start_ps: u64,
    /// Time between rounds (ps).
    pub period_ps: u64,
    /// gem5 instruction lines after each call line.
    pub noise: usize,
    /// gem5 with `ExecSymbol` (`@func` on each line) instead of bare PCs resolved through
    /// symbol tables.
    pub exec_symbols: bool,
}

impl Default for Scenario {
    fn default() -> Self {
        Scenario {
            rounds: 3,
            start_ps: 2_000_000_000_000,
            period_ps: 50_000_000,
            noise: 0,
            exec_symbols: false,
        }
    }
}

/// Kernel functions the scenario calls, with their (synthetic) addresses.
const KERNEL: &[(&str, u64)] = &[
    ("entry_SYSCALL_64", 0xffff_ffff_81c0_0080),
    ("error_entry", 0xffff_ffff_81c0_1240),
    ("__x64_sys_sendto", 0xffff_ffff_817b_2920),
    ("__sys_sendto", 0xffff_ffff_817b_27b0),
    ("__x64_sys_recvfrom", 0xffff_ffff_817b_2b40),
    ("dev_queue_xmit", 0xffff_ffff_817d_d1d0),
    ("dev_hard_start_xmit", 0xffff_ffff_817d_cc10),
    ("net_rx_action", 0xffff_ffff_817e_0730),
    ("netif_receive_skb_list_internal", 0xffff_ffff_817d_f9d0),
    ("icmp_rcv", 0xffff_ffff_818c_3ae0),
    ("icmp_reply", 0xffff_ffff_818c_2f10),
    ("ping_rcv", 0xffff_ffff_818d_e1a0),
];

/// i40e functions with their offsets in `i40e.ko`'s `.text` (from the i40e symbol dump in the
/// fixtures); loaded at [`I40E_BASE`].
const I40E: &[(&str, u64)] =
    &[("i40e_msix_clean_rings", 0x1b9b), ("i40e_napi_poll", 0x2406e), ("i40e_lan_xmit_frame", 0x25015)];

/// Load address of the i40e module (the first module without KASLR).
pub const I40E_BASE: u64 = 0xffff_ffff_a000_0000;

fn addr_of(func: &str) -> u64 {
    KERNEL
        .iter()
        .find(|(f, _)| *f == func)
        .map(|(_, a)| *a)
        .or_else(|| I40E.iter().find(|(f, _)| *f == func).map(|(_, o)| I40E_BASE + o))
        .unwrap_or(0xffff_ffff_8100_0000)
}

/// `objdump --syms` text of the synthetic kernel's functions.
pub fn kernel_syms() -> String {
    let mut s = String::from("\nvmlinux:     file format elf64-x86-64\n\nSYMBOL TABLE:\n");
    for (f, a) in KERNEL {
        let _ = writeln!(s, "{a:016x} g     F .text\t0000000000000100 {f}");
    }
    s
}

/// `objdump --syms` text of the i40e functions (module-relative, as for `i40e.ko`).
pub fn i40e_syms() -> String {
    let mut s = String::from("\ni40e.ko:     file format elf64-x86-64\n\nSYMBOL TABLE:\n");
    for (f, o) in I40E {
        let _ = writeln!(s, "{o:016x} g     F .text\t0000000000000400 {f}");
    }
    s
}

/// A symbolizer over both tables ([`kernel_syms`] as `linux`, [`i40e_syms`] as `i40e` at
/// [`I40E_BASE`]), as a topology naming them would load it.
pub fn symbolizer() -> Result<weft_sources::symbols::Symbolizer, String> {
    use weft_sources::symbols::{LoadOptions, SymbolTable, Symbolizer};
    let k = SymbolTable::from_bytes(kernel_syms().as_bytes(), "linux", &LoadOptions::default())?;
    let i = SymbolTable::from_bytes(
        i40e_syms().as_bytes(),
        "i40e",
        &LoadOptions { offset: I40E_BASE, ..LoadOptions::default() },
    )?;
    Ok(Symbolizer::new(vec![k, i]))
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    Client,
    Server,
}

/// Lines of one round, per log, with their times (ps); sorted stably before writing.
struct Round {
    lines: [Vec<(u64, String)>; 5],
}

impl Round {
    fn push(&mut self, log: Log, t: u64, line: String) {
        let i = Log::ALL.iter().position(|l| *l == log).unwrap_or(0);
        self.lines[i].push((t, line));
    }
}

const NS: u64 = 1000;

fn host(side: Side) -> Log {
    match side {
        Side::Client => Log::ClientGem5,
        Side::Server => Log::ServerGem5,
    }
}

fn nic(side: Side) -> Log {
    match side {
        Side::Client => Log::ClientNic,
        Side::Server => Log::ServerNic,
    }
}

impl Scenario {
    /// All logs, generated in memory.
    pub fn generate(&self) -> Vec<(Log, Vec<u8>)> {
        let mut out: Vec<(Log, Vec<u8>)> = Log::ALL.iter().map(|l| (*l, Vec::new())).collect();
        for i in 0..self.rounds {
            let r = self.round(i);
            for (k, lines) in r.lines.iter().enumerate() {
                for (_, l) in lines {
                    out[k].1.extend_from_slice(l.as_bytes());
                    out[k].1.push(b'\n');
                }
            }
        }
        out
    }

    /// Appends round `i` of `log` to `out` (for streaming generators: call it for
    /// `i = 0, 1, ...`).
    pub fn write_round(&self, log: Log, i: u64, out: &mut Vec<u8>) {
        let r = self.round(i);
        let k = Log::ALL.iter().position(|l| *l == log).unwrap_or(0);
        for (_, l) in &r.lines[k] {
            out.extend_from_slice(l.as_bytes());
            out.push(b'\n');
        }
    }

    /// A topology for the logs in `dir` (named by [`Log::file_name`]), with the symbol files
    /// `kernel.syms` and `i40e.syms` there too unless `exec_symbols`, and no sinks.
    pub fn topology(&self, dir: &str) -> String {
        let syms = if self.exec_symbols {
            String::new()
        } else {
            format!(
                "symbols = [{{ path = \"{dir}/kernel.syms\", id = \"linux\" }}, {{ path = \"{dir}/i40e.syms\", id = \"i40e\", offset = \"{I40E_BASE:#x}\" }}]\n"
            )
        };
        let mut t = String::new();
        let _ = write!(
            t,
            r#"[functions]
sys_entry = ["entry_SYSCALL_64", "error_entry"]

[[source]]
name = "client"
kind = "gem5"
path = "{dir}/{}"
{syms}
[[source]]
name = "client-nic"
kind = "nicbm"
path = "{dir}/{}"

[[source]]
name = "ns3"
kind = "ns3"
path = "{dir}/{}"
nodes = {{ 0 = "sw0", 1 = "sw1" }}

[[source]]
name = "server-nic"
kind = "nicbm"
path = "{dir}/{}"

[[source]]
name = "server"
kind = "gem5"
path = "{dir}/{}"
{syms}
[[link]]
kind = "pcie"
host = "client"
nic = "client-nic"

[[link]]
kind = "pcie"
host = "server"
nic = "server-nic"

[[link]]
kind = "eth"
nic = "client-nic"
net = "ns3"
node = 0
device = 2

[[link]]
kind = "eth"
nic = "server-nic"
net = "ns3"
node = 1
device = 2
"#,
            Log::ClientGem5.file_name(),
            Log::ClientNic.file_name(),
            Log::Ns3.file_name(),
            Log::ServerNic.file_name(),
            Log::ServerGem5.file_name(),
        );
        t
    }

    fn round(&self, i: u64) -> Round {
        let mut r = Round { lines: Default::default() };
        let t0 = self.start_ps + i * self.period_ps;
        let q = (i % 4) * 250 * NS; // queueing in sw0's uplink
        // Request: client syscall → NIC → network → server NIC → server softirq.
        let calls = [
            "entry_SYSCALL_64",
            "__x64_sys_sendto",
            "__sys_sendto",
            "dev_queue_xmit",
            "dev_hard_start_xmit",
            "i40e_lan_xmit_frame",
        ];
        self.calls(&mut r, Side::Client, t0, &calls);
        let tx_done = self.tx_path(&mut r, Side::Client, i, t0 + 1200 * NS);
        let arrive = self.net_path(&mut r, Side::Client, i, 2 * i, tx_done, q);
        let rx_done = self.rx_path(&mut r, Side::Server, i, arrive + 500 * NS);
        // The server's kernel answers in its softirq and transmits the reply.
        let s = rx_done + 300 * NS;
        let calls = [
            "error_entry",
            "i40e_msix_clean_rings",
            "net_rx_action",
            "i40e_napi_poll",
            "netif_receive_skb_list_internal",
            "icmp_rcv",
            "icmp_reply",
            "dev_queue_xmit",
            "dev_hard_start_xmit",
            "i40e_lan_xmit_frame",
        ];
        self.calls(&mut r, Side::Server, s, &calls);
        let tx_done = self.tx_path(&mut r, Side::Server, i, s + 2000 * NS);
        let arrive = self.net_path(&mut r, Side::Server, i, 2 * i + 1, tx_done, 0);
        let rx_done = self.rx_path(&mut r, Side::Client, i, arrive + 500 * NS);
        let c = rx_done + 300 * NS;
        let calls = [
            "error_entry",
            "i40e_msix_clean_rings",
            "net_rx_action",
            "i40e_napi_poll",
            "netif_receive_skb_list_internal",
            "icmp_rcv",
            "ping_rcv",
        ];
        self.calls(&mut r, Side::Client, c, &calls);
        let calls = ["entry_SYSCALL_64", "__x64_sys_recvfrom"];
        self.calls(&mut r, Side::Client, c + 3000 * NS, &calls);
        for l in &mut r.lines {
            l.sort_by_key(|(t, _)| *t);
        }
        r
    }

    /// Function-entry lines 200 ns apart from `t`, each followed by the noise lines.
    fn calls(&self, r: &mut Round, side: Side, t: u64, funcs: &[&str]) {
        for (k, f) in funcs.iter().enumerate() {
            let at = t + k as u64 * 200 * NS;
            let pc = addr_of(f);
            let line = if self.exec_symbols {
                format!(
                    "{at}: system.switch_cpus: A0 T0 : {pc:#x} @{f} : push rbp : IntAlu :  D=0x0000000000000000"
                )
            } else {
                format!(
                    "{at}: system.switch_cpus: A0 T0 : {pc:#x}    : push rbp : IntAlu :  D=0x0000000000000000"
                )
            };
            r.push(host(side), at, line);
            for n in 0..self.noise {
                let nt = at + (n as u64 + 1) * 200;
                let npc = pc + 4 + n as u64 * 3;
                let line = match (n % 2 == 0, self.exec_symbols) {
                    (true, false) => format!(
                        "{nt}: system.switch_cpus: A0 T0 : {npc:#x}.{} :   MOV_R_M : ld   rax, DS:[rdi + 0x8] : MemRead :  D=0x000000000000001a A=0xffff888003a1c008",
                        n % 3
                    ),
                    (false, false) => format!(
                        "{nt}: system.switch_cpus: A0 T0 : {npc:#x}    : mov rax, qword ptr [rdi + 0x8] : MemRead :  D=0x000000000000001a A=0xffff888003a1c008"
                    ),
                    (true, true) => format!(
                        "{nt}: system.switch_cpus: A0 T0 : {npc:#x} @{f}+{}. {} :   MOV_R_M : ld   rax, DS:[rdi + 0x8] : MemRead :  D=0x000000000000001a A=0xffff888003a1c008",
                        npc - pc,
                        n % 3
                    ),
                    (false, true) => format!(
                        "{nt}: system.switch_cpus: A0 T0 : {npc:#x} @{f}+{} : mov rax, qword ptr [rdi + 0x8] : MemRead :  D=0x000000000000001a A=0xffff888003a1c008",
                        npc - pc
                    ),
                };
                r.push(host(side), nt, line);
            }
        }
    }

    fn op(side: Side, i: u64, k: u64) -> u64 {
        let base = match side {
            Side::Client => 0x55d6_864e_0000u64,
            Side::Server => 0x5612_a3c0_0000u64,
        };
        base + ((i * 8 + k) % 0x10_0000) * 0x40
    }

    /// Doorbell at `t` → frame on the wire; returns when the frame left the NIC.
    fn tx_path(&self, r: &mut Round, side: Side, i: u64, t: u64) -> u64 {
        let h = host(side);
        let n = nic(side);
        let mmio_id = 94_469_376_954_304u64;
        r.push(h, t, format!("{t}: system.pc.simbricks_0: simbricks-pci: sending write addr c0400430 size 4 id {mmio_id} bar 0 offs 430 posted 1"));
        r.push(
            h,
            t,
            format!(
                "{t}: system.pc.simbricks_0.pio: simbricks-pci: sending immediate response for posted write"
            ),
        );
        let desc = 0x0002_368c_6000_u64 + (i % 256) * 0x10;
        let data = 0x0002_368b_a0c0_u64 + (i % 256) * 0x800;
        let mut at = t + 500 * NS;
        r.push(
            n,
            at,
            format!(
                "info: main_time = {at}: nicbm: write(off=0x430, len=4, val={:#x}, posted=1)",
                (i * 2) % 512
            ),
        );
        let dma = |at: u64, k: u64, addr: u64, len: u64, write: bool, r: &mut Round| -> u64 {
            let op = Self::op(side, i, k);
            r.push(
                n,
                at,
                format!(
                    "info: main_time = {at}: nicbm: issuing dma op {op:#x} addr {addr:x} len {len} pending 1"
                ),
            );
            r.push(n, at, format!("info: main_time = {at}: nicbm: executing dma op {op:#x} addr {addr:x} len {len} pending 2"));
            let h1 = at + 500 * NS;
            let dir = if write { "write" } else { "read" };
            r.push(h, h1, format!("{h1}: system.pc.simbricks_0: simbricks-pci: received DMA {dir} id {op} addr {addr:x} size {len:x}"));
            let h2 = h1 + 100 * NS;
            r.push(h, h2, format!("{h2}: system.pc.simbricks_0: simbricks-pci: completed DMA id {op}"));
            let done = h2 + 500 * NS;
            r.push(
                n,
                done,
                format!(
                    "info: main_time = {done}: nicbm: completed dma {dir} op {op:#x} addr {addr:x} len {len}"
                ),
            );
            done
        };
        at = dma(at, 0, desc, 16, false, r);
        at = dma(at, 1, data, 98, false, r);
        let sent = at;
        r.push(n, at, format!("info: main_time = {at}: nicbm: eth tx: len 98"));
        at = dma(at, 2, desc, 16, true, r);
        r.push(n, at, format!("info: main_time = {at}: nicbm: issue MSI-X interrupt vec 1"));
        let hi = at + 500 * NS;
        r.push(h, hi, format!("{hi}: system.pc.simbricks_0: simbricks-pci: received MSI-X intr vec 1"));
        let hd = hi + 100 * NS;
        r.push(h, hd, format!("{hd}: system.pc.simbricks_0: simbricks-pci: completed DMA id 0"));
        sent
    }

    /// Frame received at `t` → written to host memory, interrupt; returns the interrupt's end.
    fn rx_path(&self, r: &mut Round, side: Side, i: u64, t: u64) -> u64 {
        let h = host(side);
        let n = nic(side);
        r.push(n, t, format!("info: main_time = {t}: nicbm: eth rx: port 0 len 98"));
        let buf = 0x0002_368d_00a0_u64 + (i % 256) * 0x800;
        let desc = 0x0002_368d_10a0_u64 + (i % 256) * 0x10;
        let mut at = t;
        for (k, (addr, len)) in [(buf, 98u64), (desc, 32)].into_iter().enumerate() {
            let op = Self::op(side, i, 4 + k as u64);
            r.push(n, at, format!("info: main_time = {at}: nicbm: issuing dma op {op:#x} addr {addr:x} len {len} pending {k}"));
            r.push(n, at, format!("info: main_time = {at}: nicbm: executing dma op {op:#x} addr {addr:x} len {len} pending {}", k + 1));
            let h1 = at + 500 * NS;
            r.push(h, h1, format!("{h1}: system.pc.simbricks_0: simbricks-pci: received DMA write id {op} addr {addr:x} size {len:x}"));
            let h2 = h1 + 100 * NS;
            r.push(h, h2, format!("{h2}: system.pc.simbricks_0: simbricks-pci: completed DMA id {op}"));
            at = h2 + 500 * NS;
            r.push(
                n,
                at,
                format!(
                    "info: main_time = {at}: nicbm: completed dma write op {op:#x} addr {addr:x} len {len}"
                ),
            );
        }
        r.push(n, at, format!("info: main_time = {at}: nicbm: issue MSI-X interrupt vec 1"));
        let hi = at + 500 * NS;
        r.push(h, hi, format!("{hi}: system.pc.simbricks_0: simbricks-pci: received MSI-X intr vec 1"));
        let hd = hi + 100 * NS;
        r.push(h, hd, format!("{hd}: system.pc.simbricks_0: simbricks-pci: completed DMA id 0"));
        hd
    }

    /// The frame sent by `from`'s NIC at `t` crosses sw0 and sw1; returns when it leaves the
    /// network towards the other NIC.
    fn net_path(&self, r: &mut Round, from: Side, i: u64, uid: u64, t: u64, q: u64) -> u64 {
        let (first, second) = match from {
            Side::Client => (0u32, 1u32),
            Side::Server => (1, 0),
        };
        let (src, dst, smac, dmac) = match from {
            Side::Client => ("10.0.0.1", "10.0.0.2", "b0:9a:ac:67:3c:98", "98:59:72:d0:60:b3"),
            Side::Server => ("10.0.0.2", "10.0.0.1", "98:59:72:d0:60:b3", "b0:9a:ac:67:3c:98"),
        };
        let ident = (i * 2 + (from == Side::Server) as u64) % 65_536;
        let ip = format!(
            "ns3::Ipv4Header (tos 0x0 DSCP Default ECN Not-ECT ttl 64 id {ident} protocol 1 offset (bytes) 0 flags [DF] length: 84 {src} > {dst})"
        );
        let eth_raw = format!("ns3::EthernetHeader( length/type=0x800, source={smac}, destination={dmac})");
        let eth_garbage = "ns3::EthernetHeader( length/type=0xc0a8, source=40:00:40:01:13:99, destination=45:00:00:54:25:be)";
        let path = |node: u32, dev: u32, ty: &str, src: &str| {
            format!("/$ns3::NodeListPriv/NodeList/{node}/$ns3::Node/DeviceList/{dev}/$ns3::{ty}/{src}")
        };
        let tail = "Payload (size=98)";
        let at = t + 500 * NS;
        let mut line = |k: &str, at: u64, node: u32, dev: u32, ty: &str, s: &str, hdr: &str| {
            r.push(
                Log::Ns3,
                at,
                format!("{k}  {at} {} Packet-Uid={uid} Intersting=true {hdr} {tail}", path(node, dev, ty, s)),
            );
        };
        line("+", at, first, 2, "CosimNetDevice", "RxPacketFromAdapter", &eth_raw);
        line("-", at, first, 2, "CosimNetDevice", "TxPacketToNetwork", &eth_raw);
        let simple = format!("{eth_garbage} {ip}");
        line("+", at, first, 1, "SimpleNetDevice", "TxQueue/Enqueue", &simple);
        let deq = at + q;
        line("-", deq, first, 1, "SimpleNetDevice", "TxQueue/Dequeue", &simple);
        let rx = deq + 1000 * NS;
        line("+", rx, second, 1, "SimpleNetDevice", "RxPacketFromNetwork", &simple);
        line("-", rx, second, 1, "SimpleNetDevice", "TxPacketToAttachedDevice", &simple);
        line("+", rx, second, 2, "CosimNetDevice", "RxPacketFromNetwork", &simple);
        let out_hdr =
            format!("ns3::EthernetHeader ( length/type=0x800, source={smac}, destination={dmac}) {ip}");
        line("-", rx, second, 2, "CosimNetDevice", "TxPacketToAdapter", &out_hdr);
        rx
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logs_are_time_ordered_and_rounds_stream() {
        let s = Scenario { rounds: 2, noise: 3, ..Scenario::default() };
        let logs = s.generate();
        for (log, bytes) in &logs {
            let text = String::from_utf8_lossy(bytes);
            let mut last = 0u64;
            for l in text.lines() {
                let t: u64 = match log {
                    Log::ClientNic | Log::ServerNic => {
                        l["info: main_time = ".len()..].split(':').next().unwrap().parse().unwrap()
                    }
                    Log::Ns3 => l.split_whitespace().nth(1).unwrap().parse().unwrap(),
                    _ => l.split(':').next().unwrap().parse().unwrap(),
                };
                assert!(t >= last, "{log:?}: {l}");
                last = t;
            }
            let mut streamed = Vec::new();
            for i in 0..2 {
                s.write_round(*log, i, &mut streamed);
            }
            assert_eq!(&streamed, bytes);
        }
    }
}
