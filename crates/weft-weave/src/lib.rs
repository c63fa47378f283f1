//! # weft-weave
//!
//! Events become spans here, and only here. Weaves simulator logs (gem5, SimBricks nicbm,
//! ns-3, QEMU) into end-to-end traces — weft's implementation of Columbo; offline (files) and
//! online (named pipes written while the simulation runs) are the same code. It also holds the
//! other event → span assemblies: BlkKin's LTTng events ([`blkin`]), kernel events
//! ([`kernel`]) and weft-probe records ([`probe`], from an agent's rings or a capture file).
//! One runtime ([`pipeline`]) runs them all — `weft weave`, `weft import` and `weft record`:
//!
//! ```text
//!  source threads                         merge thread            weave thread          sink threads
//!  simulator logs: read → parse → ──▶     k-way merge by time ──▶ one stage: simulator  ──▶ files, OTLP/HTTP,
//!    filter → symbolize                   (per-source watermarks)  weavers, BlkKin,         memory, a caller's
//!  CTF streams, capture files,            or arrival order         kernel, probe records    (the store)
//!    a kernel capture
//!  (bounded channels of batches)
//! ```
//!
//! * [`topology`]: the experiment as a TOML file — sources, links, filters, sinks.
//! * [`actor`]: per-source actors run right after parsing: event filters and the symbolizer
//!   (PCs → functions, gem5 macro-op `HostInstr` → `HostCall`).
//! * [`merge`]: the timestamp-ordered k-way merge advanced by per-source watermarks.
//! * [`weaver`]: the weavers (host, NIC, network), the cross-component queues, and the
//!   [`weaver::Weave`] stage that owns them.
//! * [`assemble`]: span ids, parent-first export and trace-id resolution.
//! * [`pipeline`]: the threads and bounded channels; sources ([`pipeline::EventSource`]) and
//!   weave stages ([`pipeline::WeaveStage`]) plug in; [`pipeline::Run`] with live counters
//!   and the final [`pipeline::RunReport`].
//! * [`sink`]: span sinks — files (OTLP JSON, Zipkin JSON, Chrome trace, ...), OTLP/HTTP,
//!   memory, and a caller's own ([`sink::SpanSink`]).
//! * [`export`]: the OTLP/HTTP client and retry policy every weft sender uses (this crate's
//!   OTLP sink, the agent's shipping, `weft import --server`, `weft loadgen`).
//! * [`render`]: a compact text rendering of woven traces (trees with names, components,
//!   durations and links) used by golden tests and `weft weave --tree`.
//! * [`blkin`]: BlkKin's `zipkin:*` LTTng events (from the CTF reader) → Zipkin-style spans;
//!   the weaver is `weft import ctf`'s stage.
//! * [`kernel`]: kernel events (`weft record`'s perf_event capture) → per-thread kernel spans;
//!   [`kernel::KernelStage`] keeps the whole capture (bounded) and weaves at its end;
//!   [`kernel::nest_calls`] places function-call spans (EXIST's captures) inside the request
//!   spans that ran them.
//! * [`probe`]: weft-probe records → application spans (the agent's drain, and `weft import
//!   probe`'s capture-file source and stage).
//!
//! # Span conventions
//!
//! The UI, `weft breakdown` (weft-analyze) and the case study rely on these; they are stable.
//! Attribute keys are constants in [`weft_model::conv`] (given here by value).
//!
//! **Resource** (one per topology component):
//!
//! | key | value |
//! |---|---|
//! | `service.name` | the component's name in the topology: the source's `name` (`client`, `client-nic`, `ns3`); a QEMU source's NIC is the source's `nic` name (default `<name>-nic`) |
//! | `weft.component.kind` | `host`, `nic` or `network` |
//! | `weft.source.tool` | `gem5`, `nicbm`, `ns-3` or `qemu` |
//! | `service.instance.id` | the source's `name` (the same for a QEMU source's host and NIC) |
//!
//! **Scope**: `weft.weave.host`, `weft.weave.nic`, `weft.weave.network`, with the crate version.
//!
//! **Every span**: kind `Internal`; start/end = first/last event's time through the source's
//! clock (ns since the UNIX epoch; simulated time starts at the clock's epoch);
//!
//! | key | value |
//! |---|---|
//! | `weft.span.type` | Columbo's span type: `HostCall`, `HostMmio`, `HostDma`, `HostMsix`, `HostInt`, `HostPci`, `NicMmio`, `NicDma`, `NicEth`, `NicMsix`, `NetDevice` |
//! | `weft.component` | the finest component: `<service>` for host and NIC spans; `<network>/<node>` for network hops, `<node>` being the topology's name for that ns-3 node (`ns3/sw1`) or `node<N>` (`ns3/node2`) |
//! | `weft.raw.start`, `weft.raw.end` | first/last event's raw time in the source's unit (simulated ps for gem5/nicbm/ns-3, µs for QEMU) |
//! | `weft.incomplete` | `true` only on spans closed without their closing event (log ended, a bound was hit, the completion never came) |
//!
//! Every event a span groups becomes a span event named by its event type (`HostMmioR`,
//! `NicDmaEx`, `NetworkEnqueue`, ...) with `weft.raw.time` (and `func` for `HostCall` events);
//! with `span_events = "full"` it carries all the event's fields. At most 64 per span (the
//! rest are counted in `dropped_events_count`).
//!
//! **Span names** are the span type, except `HostCall`: a HostCall span is one unit of kernel
//! work — from one entry function (`entry_SYSCALL_64`, ...) to the next — and is named after the
//! syscall it serves when one is recognisable (`sendto` from `__x64_sys_sendto`, `__sys_sendto`,
//! `__se_sys_*`, `__do_sys_*`, `ksys_*`), else after its first non-entry function, else after its
//! entry function. `weft.span.type` always says `HostCall`.
//!
//! | type | extra attributes |
//! |---|---|
//! | `HostCall` | `weft.host.entry` (entry function), `weft.host.calls` (function entries seen), `weft.host.kernel_tx`, `weft.host.kernel_rx`, `weft.host.driver_tx`, `weft.host.driver_rx` (booleans, from the topology's function lists) |
//! | `HostMmio`, `NicMmio` | `weft.mmio.write`, `weft.mmio.bar` (host), `weft.mmio.offset`, `weft.mmio.size`, `weft.mmio.addr` (host), `weft.mmio.posted`, `weft.mmio.value` (NIC) |
//! | `HostDma`, `NicDma` | `weft.dma.write` (device writes host memory), `weft.dma.addr`, `weft.dma.size`, `weft.dma.id` (gem5 id = nicbm op) |
//! | `HostMsix`, `NicMsix` | `weft.msix.vector` |
//! | `NicEth` | `weft.eth.direction` (`tx`/`rx`), `weft.eth.length`, `weft.eth.port` (rx) |
//! | `HostPci`, `HostInt` | `weft.pci.write` (HostPci) |
//! | `NetDevice` | see below |
//!
//! **Network hops.** One `NetDevice` span per device a packet passes in each direction: an
//! *ingress* hop (the device receives it: `RxPacketFromNetwork` on a SimpleNetDevice,
//! `RxPacketFromAdapter` on a CosimNetDevice, stock ns-3's `MacRx`) or an *egress* hop (it is
//! queued for sending: `TxQueue/Enqueue` … `Dequeue`, a CosimNetDevice's `RxPacketFromNetwork`
//! … `TxPacketToAdapter`). A hop starts at its enqueue-side event and ends at the matching
//! dequeue or drop (stock `MacRx` hops are instants). Attributes: `weft.net.node`,
//! `weft.net.device`, `weft.net.device_type`, `weft.net.port` (`<node>/dev<D>`),
//! `weft.net.direction` (`ingress`/`egress`), `weft.net.packet_uid`, `weft.net.interesting`
//! (when the log has them), `weft.net.drop` (`true` on drops), `weft.net.boundary`
//! (`from_adapter`/`to_adapter`), `weft.net.payload_size`, `weft.net.ip_length`,
//! `source.address`, `destination.address`, `source.port`, `destination.port`,
//! `network.transport` (`udp`/`tcp`/`icmp`/number), `network.protocol.name` (`ipv4`/`arp`).
//!
//! A packet is one journey: its hops chain parent → child along its path (an egress hop's
//! parent is the packet's latest ingress hop on the same node; an ingress hop's parent is its
//! latest egress hop on another node that did not leave towards a NIC simulator), so one
//! packet's network journey is one trace. The trace starts at the sending host's HostCall
//! when the topology has hosts and NICs linked to the network (NIC TX → first hop), at the
//! packet's first hop otherwise. Packets are identified by ns-3's packet uid plus their IPv4
//! header (addresses, protocol, ports, IP id, TCP seq/ack) or ARP addresses — an echo server
//! that sends the received packet object back, or TCP segments cut from one buffered packet,
//! keep the uid but are new packets — and where the log has no uid by that header (or the
//! size) and, in stock ns-3 logs, by where the packet is (`weaver::net`). A dequeue closes
//! the oldest open hop of its packet on that device (queues are FIFO), however long it waited.
//!
//! **Inside a component** (Columbo's rules, spec §6): host MMIO/interrupt/PCI spans are
//! children of the current HostCall span; NIC DMA, TX and MSI-X spans are children of the
//! NIC's latest MMIO write or RX span (`last_causing`).
//!
//! **Across components** (along the links the topology declares; spec §7): the effect span's
//! parent is the cause span, and the effect also carries a `Link` with relation `caused_by`
//! (OTLP link attribute `weft.link.relation = caused_by`) to it:
//!
//! | cause → effect | matching |
//! |---|---|
//! | host `HostMmio` (BAR 0, not an MSI-X table write) → NIC `NicMmio` | oldest pending with the same direction and BAR offset; else oldest of that direction |
//! | NIC `NicDma` (at `NicDmaEx`) → host `HostDma` | nicbm `op` pointer = gem5 DMA id (exact); else oldest pending |
//! | NIC `NicMsix` → host `HostMsix` | oldest pending (same vector preferred) |
//! | NIC `NicEth` tx → network first hop (`RxPacketFromAdapter` on the linked device) | oldest pending (same frame length preferred) |
//! | network last hop (`TxPacketToAdapter` on a linked device) → NIC `NicEth` rx | oldest pending (same length preferred) |
//! | NIC `NicEth` rx → the receiving host's next HostCall that calls a kernel-receive function | oldest pending; the HostCall (and everything under it) joins the sender's trace; further pending RX causes that started before it become extra `caused_by` links |
//! | host driver-transmit HostCall → NIC TX, QEMU only (no MMIO ids in its logs) | order |
//!
//! Causes nobody consumed and effects that found no cause are counted per link kind in the
//! run report ("unmatched cross-component causes"), never silently dropped.

#![warn(missing_docs)]

pub mod actor;
pub mod assemble;
pub mod blkin;
pub mod export;
pub mod kernel;
pub mod merge;
pub mod pipeline;
pub mod probe;
pub mod sink;
pub mod topology;
pub mod weaver;

pub use pipeline::{Run, RunReport, WeaveError};
pub use topology::Topology;
pub mod render;
