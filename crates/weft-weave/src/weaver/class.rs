//! Host function classes (Columbo's indicator lists, spec §8): the lists that name the
//! functions ([`FunctionLists`]) and the bit flags a function gets from them.

use std::collections::HashMap;

/// Starts a new HostCall span (`entry_SYSCALL_64`, ...).
pub const SYS_ENTRY: u8 = 1;
/// Kernel transmit path.
pub const KERNEL_TX: u8 = 2;
/// Kernel receive path: a HostCall calling it joins the trace of the packet received.
pub const KERNEL_RX: u8 = 4;
/// Driver transmit.
pub const DRIVER_TX: u8 = 8;
/// Driver receive.
pub const DRIVER_RX: u8 = 16;
/// Writes the MSI-X table: the next MMIO does not reach the NIC.
pub const PCI_WRITE: u8 = 32;

/// The function lists that classify host calls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FunctionLists {
    /// Entry functions: each call starts a new HostCall span.
    pub sys_entry: Vec<String>,
    /// Kernel transmit functions.
    pub kernel_tx: Vec<String>,
    /// Kernel receive functions.
    pub kernel_rx: Vec<String>,
    /// Driver transmit functions.
    pub driver_tx: Vec<String>,
    /// Driver receive functions.
    pub driver_rx: Vec<String>,
    /// MSI-X table writers.
    pub pci_write: Vec<String>,
}

impl Default for FunctionLists {
    /// Columbo's configuration (its `trace-env-config.yaml`), which targets Linux with the
    /// i40e driver.
    fn default() -> Self {
        let v = |xs: &[&str]| xs.iter().map(|s| s.to_string()).collect();
        FunctionLists {
            sys_entry: v(&["entry_SYSCALL_64", "error_entry", "entry_SYSCALL_64_safe_stack"]),
            kernel_tx: v(&[
                "__sys_sendto",
                "__sys_sendmsg",
                "dev_hard_start_xmit",
                "netdev_start_xmit",
                "dev_queue_xmit",
            ]),
            kernel_rx: v(&["netif_receive_skb_list_internal"]),
            driver_tx: v(&["i40e_lan_xmit_frame"]),
            driver_rx: v(&["i40e_napi_poll", "i40e_finalize_xdp_rx"]),
            pci_write: v(&["pci_msix_write_vector_ctrl", "__pci_write_msi_msg"]),
        }
    }
}

impl FunctionLists {
    pub(crate) fn classes(&self) -> HashMap<Box<str>, u8> {
        let mut m: HashMap<Box<str>, u8> = HashMap::new();
        for (list, c) in [
            (&self.sys_entry, SYS_ENTRY),
            (&self.kernel_tx, KERNEL_TX),
            (&self.kernel_rx, KERNEL_RX),
            (&self.driver_tx, DRIVER_TX),
            (&self.driver_rx, DRIVER_RX),
            (&self.pci_write, PCI_WRITE),
        ] {
            for f in list {
                *m.entry(f.as_str().into()).or_default() |= c;
            }
        }
        m
    }
}
