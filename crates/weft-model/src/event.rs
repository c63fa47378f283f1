//! Low-level events: what sources emit and weavers turn into spans.
//!
//! Events are normalized **per component kind** (Columbo's type-specific event streams): two
//! host simulators (gem5, QEMU) emit the same [`HostEvent`]s, every NIC model the same
//! [`NicEvent`]s, every network simulator the same [`NetEvent`]s. Kernel capture (perf_event,
//! LTTng kernel) emits [`KernelEvent`]s; generic tracepoints (LTTng-UST/CTF, tracefs by name,
//! weft-probe points) are [`TracepointEvent`]s.
//!
//! Names ([`Event::type_name`]) are Columbo's event type names (`HostMmioR`, `NicDmaEx`,
//! `NetworkEnqueue`, ...) so logs and replay files stay recognisable to Columbo users.
//!
//! Every event keeps its raw timestamp in the source's unit (`raw_time`, e.g. simulated ps)
//! next to the converted `time_ns`; exact-timestamp rules (a posted MMIO write completes at the
//! *identical* tick) compare `raw_time`.
//!
//! Events travel between pipeline stages in `Vec<Event>` batches. Variable-size payloads use
//! `Arc<str>` (interned symbol and tracepoint names), so cloning an event never copies text.

use std::fmt;
use std::sync::Arc;

use crate::value::{Attributes, Value};

/// Index of a source in its topology (or capture), stable for one run.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, serde::Serialize, serde::Deserialize,
)]
pub struct SourceId(pub u32);

impl fmt::Display for SourceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// One low-level event.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// Time in ns since the UNIX epoch (through the source's [`crate::Clock`]).
    pub time_ns: u64,
    /// Time in the source's own unit (simulated ps, TSC ticks, ...).
    pub raw_time: u64,
    /// Which source produced it.
    pub source: SourceId,
    /// What happened.
    pub kind: EventKind,
}

/// The component kind an event belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ComponentKind {
    /// A host (gem5, QEMU): CPU, memory, PCI.
    Host,
    /// A NIC model (SimBricks nicbm/i40e, QEMU e1000e).
    Nic,
    /// A network (ns-3, SimBricks switch).
    Network,
    /// An operating-system kernel (perf_event, LTTng kernel).
    Kernel,
    /// An application (weft-probe, LTTng-UST, OTLP/Zipkin tracers).
    App,
}

impl ComponentKind {
    /// Lower-case name (`host`, `nic`, `network`, `kernel`, `app`).
    pub fn as_str(self) -> &'static str {
        match self {
            ComponentKind::Host => "host",
            ComponentKind::Nic => "nic",
            ComponentKind::Network => "network",
            ComponentKind::Kernel => "kernel",
            ComponentKind::App => "app",
        }
    }
}

/// What happened.
#[derive(Debug, Clone, PartialEq)]
pub enum EventKind {
    /// Simulator synchronization bookkeeping (any simulator).
    Sync(SyncEvent),
    /// Host events.
    Host(HostEvent),
    /// NIC events.
    Nic(NicEvent),
    /// Network events.
    Net(NetEvent),
    /// Kernel events.
    Kernel(KernelEvent),
    /// A named tracepoint with typed fields (CTF/LTTng, tracefs, weft-probe).
    Tracepoint(TracepointEvent),
}

/// Simulator synchronization events (SimBricks); usually filtered out right after parsing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncEvent {
    /// `simbricks: sending sync message`.
    SendSync,
    /// `simbricks: processInEvent`.
    ProcInEvent,
}

/// Host events (Columbo's host event types).
#[derive(Debug, Clone, PartialEq)]
#[allow(missing_docs)] // fields are described in each variant's doc
pub enum HostEvent {
    /// An executed instruction at `pc`. `macro_op` is true for an instruction's start (gem5
    /// macro-op line, QEMU translation-block entry) — what a call-detecting symbolizer looks
    /// at — and false for a gem5 micro-op line (Columbo's `HostInstr`).
    Instr { pc: u64, macro_op: bool },
    /// First instruction at a function's entry address (symbolized PC).
    Call { pc: u64, func: Arc<str>, comp: Arc<str> },
    /// MMIO read issued by the host: request `id` (recycled!), physical `addr`, `size`,
    /// `bar`, `offset` within the BAR.
    MmioR { id: u64, addr: u64, size: u32, bar: u8, offset: u64 },
    /// MMIO write issued by the host; `posted` defaults to false when the log lacks it.
    MmioW { id: u64, addr: u64, size: u32, bar: u8, offset: u64, posted: bool },
    /// Immediate response for a posted write (same tick as the write).
    MmioImRespPoW,
    /// Read completion for request `id`.
    MmioCR { id: u64 },
    /// Write completion for request `id`.
    MmioCW { id: u64 },
    /// Device DMA read of host memory; `id` is the NIC's DMA op id.
    DmaR { id: u64, addr: u64, size: u64 },
    /// Device DMA write to host memory.
    DmaW { id: u64, addr: u64, size: u64 },
    /// DMA completion (`id 0` = the adapter's own MSI-X delivery write).
    DmaC { id: u64 },
    /// MSI-X interrupt received.
    MsiX { vec: u32 },
    /// MSI (not MSI-X) interrupt received (gem5 `received MSI intr vec`; Columbo ignores it).
    Msi { vec: u32 },
    /// PCI config-space access by the adapter.
    Conf { dev: u32, func: u32, reg: u64, bytes: u32, data: u64, is_read: bool },
    /// PCI config access by the host bridge.
    PciRW { offset: u64, size: u64, is_read: bool },
    /// Legacy INTx asserted.
    PostInt,
    /// Legacy INTx cleared.
    ClearInt,
}

/// NIC events (Columbo's NIC event types).
#[derive(Debug, Clone, PartialEq)]
#[allow(missing_docs)] // fields are described in each variant's doc
pub enum NicEvent {
    /// Register read: BAR offset, length, value.
    MmioR { off: u64, len: u32, val: u64 },
    /// Register write; `posted` is `None` when the log predates the `posted=` field.
    MmioW { off: u64, len: u32, val: u64, posted: Option<bool> },
    /// DMA op issued (`op` = the op's address, the host-side DMA id).
    DmaI { op: u64, addr: u64, len: u64 },
    /// DMA op queued (too many pending).
    DmaEn { op: u64, addr: u64, len: u64 },
    /// DMA op sent to the host.
    DmaEx { op: u64, addr: u64, len: u64 },
    /// DMA read completed.
    DmaCR { op: u64, addr: u64, len: u64 },
    /// DMA write completed.
    DmaCW { op: u64, addr: u64, len: u64 },
    /// MSI-X (`is_x`) or MSI interrupt issued.
    Msix { vec: u32, is_x: bool },
    /// Legacy interrupt level set.
    SetIntx { level: u32 },
    /// Ethernet frame sent to the network.
    Tx { len: u32 },
    /// Ethernet frame received from the network.
    Rx { port: u32, len: u32 },
    /// A transmit descriptor processed (QEMU e1000e `e1000e_tx_descr`): buffer address and the
    /// descriptor's two 32-bit words. Legacy layout: length in bits 0–15, CMD in bits 24–31
    /// (bit 24 = EOP, the frame's last descriptor).
    TxDescr { addr: u64, lower: u32, upper: u32 },
    /// A receive descriptor fetched (QEMU e1000e `e1000e_rx_descr`): ring, descriptor address,
    /// descriptor length.
    RxDescr { ring: u32, addr: u64, len: u32 },
    /// A received frame was written to guest memory (QEMU e1000e
    /// `e1000e_rx_written_to_guest`), with the interrupt cause bits it raises (ICR).
    RxWritten { icr: u32 },
}

impl NicEvent {
    /// For [`NicEvent::TxDescr`]: the descriptor's data length and whether it ends the frame.
    pub fn tx_descr_len_eop(lower: u32) -> (u32, bool) {
        (lower & 0xffff, lower & (1 << 24) != 0)
    }
}

/// What a network event does to a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NetOp {
    /// `+` enqueue (or receive into a device).
    Enqueue,
    /// `-` dequeue (or transmit out of a device).
    Dequeue,
    /// `d` drop.
    Drop,
    /// `r` MAC receive (stock ns-3 AsciiTraceHelper only).
    Receive,
}

/// Where a network event sits relative to the simulator boundary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Boundary {
    /// Inside the network simulator.
    #[default]
    Within,
    /// The packet entered the network from a NIC simulator.
    FromAdapter,
    /// The packet leaves the network towards a NIC simulator.
    ToAdapter,
}

/// ns-3 device type of a network event.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum DeviceType {
    /// `ns3::SimpleNetDevice`.
    Simple,
    /// `ns3::CosimNetDevice` (SimBricks adapter).
    Cosim,
    /// `ns3::PointToPointNetDevice`.
    PointToPoint,
    /// `ns3::CsmaNetDevice`.
    Csma,
    /// `ns3::BridgeNetDevice`.
    Bridge,
    /// Anything else (the type name without `ns3::`).
    Other(Arc<str>),
}

/// Ethernet header fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EthHeader {
    /// length/type field.
    pub length_type: u16,
    /// Source MAC.
    pub src: [u8; 6],
    /// Destination MAC.
    pub dst: [u8; 6],
}

/// ARP header fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ArpHeader {
    /// Request (true) or reply.
    pub is_request: bool,
    /// Sender IPv4.
    pub src_ip: [u8; 4],
    /// Target IPv4.
    pub dst_ip: [u8; 4],
}

/// IPv4 header fields (plus the transport ports when the trace shows them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv4Header {
    /// Total length.
    pub length: u16,
    /// Source address.
    pub src_ip: [u8; 4],
    /// Destination address.
    pub dst_ip: [u8; 4],
    /// IP protocol (6 TCP, 17 UDP), 0 if unknown.
    pub protocol: u8,
    /// Identification field (tells packets of one flow apart where no packet uid exists).
    pub ident: u16,
    /// Transport source port, 0 if unknown.
    pub src_port: u16,
    /// Transport destination port, 0 if unknown.
    pub dst_port: u16,
    /// TCP sequence number, 0 if unknown or not TCP.
    pub tcp_seq: u32,
    /// TCP acknowledgement number, 0 if unknown or not TCP.
    pub tcp_ack: u32,
}

/// A network event (Columbo's NetworkEnqueue/Dequeue/Drop, plus stock ns-3's receive).
#[derive(Debug, Clone, PartialEq)]
pub struct NetEvent {
    /// What happened.
    pub op: NetOp,
    /// ns-3 node index.
    pub node: u32,
    /// Device index on the node.
    pub device: u32,
    /// Device type.
    pub device_type: DeviceType,
    /// Trace source name (`TxQueue/Enqueue`, `RxPacketFromAdapter`, ...).
    pub trace_source: Arc<str>,
    /// ns-3 packet uid (absent in stock ns-3 and the 2023 fork format).
    pub packet_uid: Option<u64>,
    /// The fork's `Intersting=` flag (absent in stock ns-3 and the 2023 fork format).
    pub interesting: Option<bool>,
    /// `Payload (size=N)`, 0 if absent.
    pub payload_size: u32,
    /// Boundary relative to the simulator.
    pub boundary: Boundary,
    /// Ethernet header, when the line shows a trustworthy one.
    pub eth: Option<EthHeader>,
    /// ARP header.
    pub arp: Option<ArpHeader>,
    /// IPv4 header.
    pub ipv4: Option<Ipv4Header>,
}

/// Kernel events (perf_event / tracefs / LTTng kernel). `pid` is the process (tgid), `tid`
/// the thread, as user space sees them.
#[derive(Debug, Clone, PartialEq)]
#[allow(missing_docs)] // fields are described in each variant's doc
pub enum KernelEvent {
    /// `sched:sched_switch` on `cpu`: `prev_tid` leaves (in `prev_state`), `next_tid` enters.
    /// EXIST keeps exactly (time, cpu, pid, tid, in/out) per switch; both halves are here.
    SchedSwitch {
        cpu: u32,
        prev_pid: u32,
        prev_tid: u32,
        prev_comm: Arc<str>,
        /// Kernel task state of the leaving task (0 = runnable/preempted, 1 = interruptible
        /// sleep, 2 = uninterruptible, ...).
        prev_state: i64,
        next_pid: u32,
        next_tid: u32,
        next_comm: Arc<str>,
    },
    /// `sched:sched_wakeup`: `tid` became runnable on `target_cpu`.
    SchedWakeup { cpu: u32, pid: u32, tid: u32, target_cpu: u32 },
    /// `raw_syscalls:sys_enter`.
    SyscallEnter { cpu: u32, pid: u32, tid: u32, nr: i64, args: [u64; 6] },
    /// `raw_syscalls:sys_exit`.
    SyscallExit { cpu: u32, pid: u32, tid: u32, nr: i64, ret: i64 },
    /// Uprobe hit at a function entry (`probe` = `binary:function`); `args` are the first six
    /// integer argument registers (x86_64 SysV: rdi, rsi, rdx, rcx, r8, r9; zeros when not
    /// captured).
    UprobeEntry { cpu: u32, pid: u32, tid: u32, probe: Arc<str>, ip: u64, args: [u64; 6] },
    /// Uretprobe hit at the function's return (`ip` = the return address in the caller);
    /// `ret` is the integer return register (rax; 0 when not captured).
    UprobeReturn { cpu: u32, pid: u32, tid: u32, probe: Arc<str>, ip: u64, ret: i64 },
}

/// A named tracepoint with typed fields.
#[derive(Debug, Clone, PartialEq)]
pub struct TracepointEvent {
    /// `provider:event` (LTTng), `subsystem:event` (tracefs), or a weft-probe name.
    pub name: Arc<str>,
    /// CPU, when known.
    pub cpu: Option<u32>,
    /// Process id, when known.
    pub pid: Option<u32>,
    /// Thread id, when known.
    pub tid: Option<u32>,
    /// Payload fields (and context fields, prefixed `context.`).
    pub fields: Attributes,
}

impl Event {
    /// The component kind this event belongs to (`None` for sync bookkeeping).
    pub fn component(&self) -> Option<ComponentKind> {
        match &self.kind {
            EventKind::Sync(_) => None,
            EventKind::Host(_) => Some(ComponentKind::Host),
            EventKind::Nic(_) => Some(ComponentKind::Nic),
            EventKind::Net(_) => Some(ComponentKind::Network),
            EventKind::Kernel(_) => Some(ComponentKind::Kernel),
            EventKind::Tracepoint(_) => Some(ComponentKind::App),
        }
    }

    /// Columbo's type name (`HostMmioR`, `NicDmaEx`, `NetworkEnqueue`, ...); kernel events
    /// use the tracepoint names (`sched_switch`, `sys_enter`, ...); generic tracepoints
    /// return `"Tracepoint"` (their own name is [`Event::name`]).
    pub fn type_name(&self) -> &'static str {
        match &self.kind {
            EventKind::Sync(SyncEvent::SendSync) => "SimSendSync",
            EventKind::Sync(SyncEvent::ProcInEvent) => "SimProcInEvent",
            EventKind::Host(h) => match h {
                HostEvent::Instr { .. } => "HostInstr",
                HostEvent::Call { .. } => "HostCall",
                HostEvent::MmioR { .. } => "HostMmioR",
                HostEvent::MmioW { .. } => "HostMmioW",
                HostEvent::MmioImRespPoW => "HostMmioImRespPoW",
                HostEvent::MmioCR { .. } => "HostMmioCR",
                HostEvent::MmioCW { .. } => "HostMmioCW",
                HostEvent::DmaR { .. } => "HostDmaR",
                HostEvent::DmaW { .. } => "HostDmaW",
                HostEvent::DmaC { .. } => "HostDmaC",
                HostEvent::MsiX { .. } => "HostMsiX",
                HostEvent::Msi { .. } => "HostMsi",
                HostEvent::Conf { is_read: true, .. } => "HostConfRead",
                HostEvent::Conf { is_read: false, .. } => "HostConfWrite",
                HostEvent::PciRW { is_read: true, .. } => "HostPciR",
                HostEvent::PciRW { is_read: false, .. } => "HostPciW",
                HostEvent::PostInt => "HostPostInt",
                HostEvent::ClearInt => "HostClearInt",
            },
            EventKind::Nic(n) => match n {
                NicEvent::MmioR { .. } => "NicMmioR",
                NicEvent::MmioW { .. } => "NicMmioW",
                NicEvent::DmaI { .. } => "NicDmaI",
                NicEvent::DmaEn { .. } => "NicDmaEn",
                NicEvent::DmaEx { .. } => "NicDmaEx",
                NicEvent::DmaCR { .. } => "NicDmaCR",
                NicEvent::DmaCW { .. } => "NicDmaCW",
                NicEvent::Msix { is_x: true, .. } => "NicMsix",
                NicEvent::Msix { is_x: false, .. } => "NicMsi",
                NicEvent::SetIntx { .. } => "SetIX",
                NicEvent::Tx { .. } => "NicTx",
                NicEvent::Rx { .. } => "NicRx",
                NicEvent::TxDescr { .. } => "NicTxDescr",
                NicEvent::RxDescr { .. } => "NicRxDescr",
                NicEvent::RxWritten { .. } => "NicRxWritten",
            },
            EventKind::Net(n) => match n.op {
                NetOp::Enqueue => "NetworkEnqueue",
                NetOp::Dequeue => "NetworkDequeue",
                NetOp::Drop => "NetworkDrop",
                NetOp::Receive => "NetworkReceive",
            },
            EventKind::Kernel(k) => match k {
                KernelEvent::SchedSwitch { .. } => "sched_switch",
                KernelEvent::SchedWakeup { .. } => "sched_wakeup",
                KernelEvent::SyscallEnter { .. } => "sys_enter",
                KernelEvent::SyscallExit { .. } => "sys_exit",
                KernelEvent::UprobeEntry { .. } => "uprobe_entry",
                KernelEvent::UprobeReturn { .. } => "uprobe_return",
            },
            EventKind::Tracepoint(_) => "Tracepoint",
        }
    }

    /// The event's name: a generic tracepoint's own (`provider:event`), else [`Event::type_name`].
    pub fn name(&self) -> &str {
        match &self.kind {
            EventKind::Tracepoint(t) => &t.name,
            _ => self.type_name(),
        }
    }

    /// The CPU the event happened on, when known (kernel events, tracepoints).
    pub fn cpu(&self) -> Option<u32> {
        match &self.kind {
            EventKind::Kernel(k) => Some(match k {
                KernelEvent::SchedSwitch { cpu, .. }
                | KernelEvent::SchedWakeup { cpu, .. }
                | KernelEvent::SyscallEnter { cpu, .. }
                | KernelEvent::SyscallExit { cpu, .. }
                | KernelEvent::UprobeEntry { cpu, .. }
                | KernelEvent::UprobeReturn { cpu, .. } => *cpu,
            }),
            EventKind::Tracepoint(t) => t.cpu,
            _ => None,
        }
    }

    /// The process and thread ids the event names, when it has them (a switch has two pairs
    /// and names neither here; a wakeup names the task woken).
    pub fn pid_tid(&self) -> (Option<u32>, Option<u32>) {
        match &self.kind {
            EventKind::Kernel(k) => match k {
                KernelEvent::SchedSwitch { .. } => (None, None),
                KernelEvent::SchedWakeup { pid, tid, .. }
                | KernelEvent::SyscallEnter { pid, tid, .. }
                | KernelEvent::SyscallExit { pid, tid, .. }
                | KernelEvent::UprobeEntry { pid, tid, .. }
                | KernelEvent::UprobeReturn { pid, tid, .. } => (Some(*pid), Some(*tid)),
            },
            EventKind::Tracepoint(t) => (t.pid, t.tid),
            _ => (None, None),
        }
    }

    /// The event as one JSON object (what `--events-to`/`--events-out` files hold, one per
    /// line): `time_ns`, `raw_time`, `source`, `component`, `type`, `name`, `cpu`, `pid`, `tid`
    /// (null when unknown) and `fields` ([`Event::fields`]), which never hide the others.
    pub fn to_json(&self) -> serde_json::Value {
        let fields: serde_json::Map<String, serde_json::Value> =
            self.fields().iter().map(|kv| (kv.key.to_string(), kv.value.to_json())).collect();
        let (pid, tid) = self.pid_tid();
        serde_json::json!({
            "time_ns": self.time_ns,
            "raw_time": self.raw_time,
            "source": self.source.0,
            "component": self.component().map(|c| c.as_str()),
            "type": self.type_name(),
            "name": self.name(),
            "cpu": self.cpu(),
            "pid": pid,
            "tid": tid,
            "fields": fields,
        })
    }

    /// The event's payload as attributes — used for span events (every event a span groups
    /// becomes one), the store's `events` table and text dumps. Addresses, offsets and values
    /// are integers; MACs and IPs are their usual text forms. A tracepoint's payload is its
    /// fields alone: its name, CPU, pid and tid are the event's own ([`Event::name`],
    /// [`Event::cpu`], [`Event::pid_tid`]), so a payload field called `name` or `pid` never
    /// collides with them.
    pub fn fields(&self) -> Attributes {
        let mut a = Attributes::new();
        let u = |v: u64| Value::I64(v as i64);
        match &self.kind {
            EventKind::Sync(_) => {}
            EventKind::Host(h) => match h {
                HostEvent::Instr { pc, macro_op } => {
                    a.push("pc", u(*pc));
                    a.push("macro_op", *macro_op);
                }
                HostEvent::Call { pc, func, comp } => {
                    a.push("pc", u(*pc));
                    a.push("func", func.as_ref());
                    a.push("comp", comp.as_ref());
                }
                HostEvent::MmioR { id, addr, size, bar, offset } => {
                    a.push("id", u(*id));
                    a.push("addr", u(*addr));
                    a.push("size", u(*size as u64));
                    a.push("bar", u(*bar as u64));
                    a.push("offset", u(*offset));
                }
                HostEvent::MmioW { id, addr, size, bar, offset, posted } => {
                    a.push("id", u(*id));
                    a.push("addr", u(*addr));
                    a.push("size", u(*size as u64));
                    a.push("bar", u(*bar as u64));
                    a.push("offset", u(*offset));
                    a.push("posted", *posted);
                }
                HostEvent::MmioImRespPoW | HostEvent::PostInt | HostEvent::ClearInt => {}
                HostEvent::MmioCR { id } | HostEvent::MmioCW { id } | HostEvent::DmaC { id } => {
                    a.push("id", u(*id))
                }
                HostEvent::DmaR { id, addr, size } | HostEvent::DmaW { id, addr, size } => {
                    a.push("id", u(*id));
                    a.push("addr", u(*addr));
                    a.push("size", u(*size));
                }
                HostEvent::MsiX { vec } | HostEvent::Msi { vec } => a.push("vec", u(*vec as u64)),
                HostEvent::Conf { dev, func, reg, bytes, data, is_read } => {
                    a.push("dev", u(*dev as u64));
                    a.push("func", u(*func as u64));
                    a.push("reg", u(*reg));
                    a.push("bytes", u(*bytes as u64));
                    a.push("data", u(*data));
                    a.push("is_read", *is_read);
                }
                HostEvent::PciRW { offset, size, is_read } => {
                    a.push("offset", u(*offset));
                    a.push("size", u(*size));
                    a.push("is_read", *is_read);
                }
            },
            EventKind::Nic(n) => match n {
                NicEvent::MmioR { off, len, val } => {
                    a.push("off", u(*off));
                    a.push("len", u(*len as u64));
                    a.push("val", u(*val));
                }
                NicEvent::MmioW { off, len, val, posted } => {
                    a.push("off", u(*off));
                    a.push("len", u(*len as u64));
                    a.push("val", u(*val));
                    if let Some(p) = posted {
                        a.push("posted", *p);
                    }
                }
                NicEvent::DmaI { op, addr, len }
                | NicEvent::DmaEn { op, addr, len }
                | NicEvent::DmaEx { op, addr, len }
                | NicEvent::DmaCR { op, addr, len }
                | NicEvent::DmaCW { op, addr, len } => {
                    a.push("op", u(*op));
                    a.push("addr", u(*addr));
                    a.push("len", u(*len));
                }
                NicEvent::Msix { vec, is_x } => {
                    a.push("vec", u(*vec as u64));
                    a.push("is_x", *is_x);
                }
                NicEvent::SetIntx { level } => a.push("level", u(*level as u64)),
                NicEvent::Tx { len } => a.push("len", u(*len as u64)),
                NicEvent::Rx { port, len } => {
                    a.push("port", u(*port as u64));
                    a.push("len", u(*len as u64));
                }
                NicEvent::TxDescr { addr, lower, upper } => {
                    a.push("addr", u(*addr));
                    a.push("lower", u(*lower as u64));
                    a.push("upper", u(*upper as u64));
                }
                NicEvent::RxDescr { ring, addr, len } => {
                    a.push("ring", u(*ring as u64));
                    a.push("addr", u(*addr));
                    a.push("len", u(*len as u64));
                }
                NicEvent::RxWritten { icr } => a.push("icr", u(*icr as u64)),
            },
            EventKind::Net(n) => {
                a.push("node", u(n.node as u64));
                a.push("device", u(n.device as u64));
                a.push("device_type", n.device_type.name());
                a.push("trace_source", n.trace_source.as_ref());
                if let Some(uid) = n.packet_uid {
                    a.push("packet_uid", u(uid));
                }
                if let Some(i) = n.interesting {
                    a.push("interesting", i);
                }
                a.push("payload_size", u(n.payload_size as u64));
                a.push("boundary", n.boundary.as_str());
                if let Some(e) = &n.eth {
                    a.push("eth.length_type", u(e.length_type as u64));
                    a.push("eth.src", fmt_mac(&e.src));
                    a.push("eth.dst", fmt_mac(&e.dst));
                }
                if let Some(arp) = &n.arp {
                    a.push("arp.is_request", arp.is_request);
                    a.push("arp.src_ip", fmt_ip(&arp.src_ip));
                    a.push("arp.dst_ip", fmt_ip(&arp.dst_ip));
                }
                if let Some(ip) = &n.ipv4 {
                    a.push("ip.length", u(ip.length as u64));
                    a.push("ip.src", fmt_ip(&ip.src_ip));
                    a.push("ip.dst", fmt_ip(&ip.dst_ip));
                    a.push("ip.id", u(ip.ident as u64));
                    if ip.protocol != 0 {
                        a.push("ip.protocol", u(ip.protocol as u64));
                    }
                    if ip.src_port != 0 || ip.dst_port != 0 {
                        a.push("l4.src_port", u(ip.src_port as u64));
                        a.push("l4.dst_port", u(ip.dst_port as u64));
                    }
                }
            }
            EventKind::Kernel(k) => match k {
                KernelEvent::SchedSwitch {
                    cpu,
                    prev_pid,
                    prev_tid,
                    prev_comm,
                    prev_state,
                    next_pid,
                    next_tid,
                    next_comm,
                } => {
                    a.push("cpu", u(*cpu as u64));
                    a.push("prev_pid", u(*prev_pid as u64));
                    a.push("prev_tid", u(*prev_tid as u64));
                    a.push("prev_comm", prev_comm.as_ref());
                    a.push("prev_state", *prev_state);
                    a.push("next_pid", u(*next_pid as u64));
                    a.push("next_tid", u(*next_tid as u64));
                    a.push("next_comm", next_comm.as_ref());
                }
                KernelEvent::SchedWakeup { cpu, pid, tid, target_cpu } => {
                    a.push("cpu", u(*cpu as u64));
                    a.push("pid", u(*pid as u64));
                    a.push("tid", u(*tid as u64));
                    a.push("target_cpu", u(*target_cpu as u64));
                }
                KernelEvent::SyscallEnter { cpu, pid, tid, nr, args } => {
                    a.push("cpu", u(*cpu as u64));
                    a.push("pid", u(*pid as u64));
                    a.push("tid", u(*tid as u64));
                    a.push("nr", *nr);
                    a.push("args", Value::Array(args.iter().map(|x| u(*x)).collect()));
                }
                KernelEvent::SyscallExit { cpu, pid, tid, nr, ret } => {
                    a.push("cpu", u(*cpu as u64));
                    a.push("pid", u(*pid as u64));
                    a.push("tid", u(*tid as u64));
                    a.push("nr", *nr);
                    a.push("ret", *ret);
                }
                KernelEvent::UprobeEntry { cpu, pid, tid, probe, ip, args } => {
                    a.push("cpu", u(*cpu as u64));
                    a.push("pid", u(*pid as u64));
                    a.push("tid", u(*tid as u64));
                    a.push("probe", probe.as_ref());
                    a.push("ip", u(*ip));
                    a.push("args", Value::Array(args.iter().map(|x| u(*x)).collect()));
                }
                KernelEvent::UprobeReturn { cpu, pid, tid, probe, ip, ret } => {
                    a.push("cpu", u(*cpu as u64));
                    a.push("pid", u(*pid as u64));
                    a.push("tid", u(*tid as u64));
                    a.push("probe", probe.as_ref());
                    a.push("ip", u(*ip));
                    a.push("ret", *ret);
                }
            },
            EventKind::Tracepoint(t) => a.0.extend(t.fields.iter().cloned()),
        }
        a
    }
}

impl DeviceType {
    /// The ns-3 type name without `ns3::` (`SimpleNetDevice`, ...).
    pub fn name(&self) -> &str {
        match self {
            DeviceType::Simple => "SimpleNetDevice",
            DeviceType::Cosim => "CosimNetDevice",
            DeviceType::PointToPoint => "PointToPointNetDevice",
            DeviceType::Csma => "CsmaNetDevice",
            DeviceType::Bridge => "BridgeNetDevice",
            DeviceType::Other(s) => s,
        }
    }
    /// From the ns-3 type name (with or without `ns3::`).
    pub fn from_name(s: &str) -> DeviceType {
        match s.strip_prefix("ns3::").unwrap_or(s) {
            "SimpleNetDevice" => DeviceType::Simple,
            "CosimNetDevice" => DeviceType::Cosim,
            "PointToPointNetDevice" => DeviceType::PointToPoint,
            "CsmaNetDevice" => DeviceType::Csma,
            "BridgeNetDevice" => DeviceType::Bridge,
            other => DeviceType::Other(Arc::from(other)),
        }
    }
}

impl Boundary {
    /// Columbo's names: `kWithinSimulator`, `kFromAdapter`, `kToAdapter`.
    pub fn as_str(self) -> &'static str {
        match self {
            Boundary::Within => "kWithinSimulator",
            Boundary::FromAdapter => "kFromAdapter",
            Boundary::ToAdapter => "kToAdapter",
        }
    }
}

/// `aa:bb:cc:dd:ee:ff`.
pub fn fmt_mac(m: &[u8; 6]) -> String {
    format!("{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}", m[0], m[1], m[2], m[3], m[4], m[5])
}

/// Dotted quad.
pub fn fmt_ip(ip: &[u8; 4]) -> String {
    format!("{}.{}.{}.{}", ip[0], ip[1], ip[2], ip[3])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_fields() {
        let e = Event {
            time_ns: 1,
            raw_time: 1000,
            source: SourceId(3),
            kind: EventKind::Host(HostEvent::MmioW {
                id: 7,
                addr: 0xc040_0010,
                size: 4,
                bar: 0,
                offset: 0x10,
                posted: true,
            }),
        };
        assert_eq!(e.type_name(), "HostMmioW");
        assert_eq!(e.component(), Some(ComponentKind::Host));
        let f = e.fields();
        assert_eq!(f.get("addr"), Some(&Value::I64(0xc040_0010)));
        assert_eq!(f.get("posted"), Some(&Value::Bool(true)));
        assert_eq!(DeviceType::from_name("ns3::CosimNetDevice"), DeviceType::Cosim);
        assert_eq!(DeviceType::from_name("ns3::WifiNetDevice").name(), "WifiNetDevice");
        assert_eq!(fmt_mac(&[0xb0, 0x9a, 0xac, 0x67, 0x3c, 0x98]), "b0:9a:ac:67:3c:98");
    }

    #[test]
    fn tracepoint_payload_never_hides_the_event_s_own_name_and_ids() {
        let mut fields = Attributes::new();
        for k in ["name", "type", "cpu", "pid", "tid", "time_ns"] {
            fields.push(k, format!("payload {k}"));
        }
        let e = Event {
            time_ns: 5,
            raw_time: 6,
            source: SourceId(1),
            kind: EventKind::Tracepoint(TracepointEvent {
                name: "app:request".into(),
                cpu: Some(2),
                pid: Some(300),
                tid: Some(301),
                fields,
            }),
        };
        assert_eq!(
            (e.name(), e.type_name(), e.cpu(), e.pid_tid()),
            ("app:request", "Tracepoint", Some(2), (Some(300), Some(301)))
        );
        let f = e.fields();
        assert_eq!(f.len(), 6, "the payload alone: {f:?}");
        assert_eq!(f.get("name"), Some(&Value::from("payload name")));
        let j = e.to_json();
        assert_eq!((j["name"].as_str(), j["type"].as_str()), (Some("app:request"), Some("Tracepoint")));
        assert_eq!(
            (j["cpu"].as_u64(), j["pid"].as_u64(), j["tid"].as_u64()),
            (Some(2), Some(300), Some(301))
        );
        assert_eq!((j["time_ns"].as_u64(), j["fields"]["name"].as_str()), (Some(5), Some("payload name")));
        assert_eq!(j["fields"]["pid"], "payload pid");
        // Kernel events: typed ids, and their fields are unchanged.
        let k = Event {
            time_ns: 1,
            raw_time: 1,
            source: SourceId(0),
            kind: EventKind::Kernel(KernelEvent::SyscallExit { cpu: 1, pid: 2, tid: 3, nr: 0, ret: 0 }),
        };
        assert_eq!((k.name(), k.cpu(), k.pid_tid()), ("sys_exit", Some(1), (Some(2), Some(3))));
        assert_eq!(k.fields().get("pid"), Some(&Value::I64(2)));
    }

    #[test]
    fn event_stays_small() {
        // Events travel by the million in batches: keep them small (the largest variant is a
        // network event with its optional Ethernet/ARP/IPv4 headers inline, 144 bytes today).
        assert!(std::mem::size_of::<Event>() <= 160, "{}", std::mem::size_of::<Event>());
    }
}
