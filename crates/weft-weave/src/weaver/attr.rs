//! Attribute keys of woven spans that are specific to weft-weave (the shared ones are in
//! [`weft_model::conv`]).

/// HostCall: the entry function that opened it.
pub const HOST_ENTRY: &str = "weft.host.entry";
/// HostCall: function entries seen in it.
pub const HOST_CALLS: &str = "weft.host.calls";
/// HostCall: called a kernel-transmit function.
pub const HOST_KERNEL_TX: &str = "weft.host.kernel_tx";
/// HostCall: called a kernel-receive function.
pub const HOST_KERNEL_RX: &str = "weft.host.kernel_rx";
/// HostCall: called a driver-transmit function.
pub const HOST_DRIVER_TX: &str = "weft.host.driver_tx";
/// HostCall: called a driver-receive function.
pub const HOST_DRIVER_RX: &str = "weft.host.driver_rx";
/// MMIO: a write.
pub const MMIO_WRITE: &str = "weft.mmio.write";
/// MMIO (host): BAR.
pub const MMIO_BAR: &str = "weft.mmio.bar";
/// MMIO: offset within the BAR.
pub const MMIO_OFFSET: &str = "weft.mmio.offset";
/// MMIO: access size in bytes.
pub const MMIO_SIZE: &str = "weft.mmio.size";
/// MMIO (host): physical address.
pub const MMIO_ADDR: &str = "weft.mmio.addr";
/// MMIO: posted write.
pub const MMIO_POSTED: &str = "weft.mmio.posted";
/// MMIO (NIC): value read or written.
pub const MMIO_VALUE: &str = "weft.mmio.value";
/// DMA: the device writes host memory.
pub const DMA_WRITE: &str = "weft.dma.write";
/// DMA: host address.
pub const DMA_ADDR: &str = "weft.dma.addr";
/// DMA: length.
pub const DMA_SIZE: &str = "weft.dma.size";
/// DMA: the op id (nicbm op pointer = gem5 DMA id).
pub const DMA_ID: &str = "weft.dma.id";
/// MSI-X: vector.
pub const MSIX_VECTOR: &str = "weft.msix.vector";
/// NicEth: `tx` or `rx`.
pub const ETH_DIRECTION: &str = "weft.eth.direction";
/// NicEth: frame length.
pub const ETH_LENGTH: &str = "weft.eth.length";
/// NicEth (rx): port.
pub const ETH_PORT: &str = "weft.eth.port";
/// HostPci: a write.
pub const PCI_WRITE: &str = "weft.pci.write";
/// Span event: the event's raw time.
pub const RAW_TIME: &str = "weft.raw.time";
