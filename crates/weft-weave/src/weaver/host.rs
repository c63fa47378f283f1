//! The host weaver (gem5, QEMU): HostCall, HostMmio, HostDma, HostMsix, HostInt, HostPci
//! spans (spec §6 "Host").
//!
//! * **HostCall** — one unit of kernel work: opened by a call to an entry function (the
//!   topology's `sys_entry` list) or by any call when none is open; closed by the next entry
//!   call (or the end). Named after its syscall (see the crate docs). When it called a
//!   kernel-receive function it takes the oldest NIC RX cause from its PCIe link and becomes
//!   its child — the receiving host joins the sender's trace. HostCall spans that saw nothing
//!   but their entry function and have no children are dropped unless `keep_bare_calls`
//!   (a syscall nobody traced; counted in the assembler's `discarded`).
//! * **HostMmio** — `HostMmioR`/`W` … completion: reads by `HostMmioCR` with the same id
//!   (ids are recycled: the oldest pending request with that id), non-posted writes by
//!   `HostMmioCW`, posted writes by `HostMmioImRespPoW` at the identical tick — or, when the
//!   log has no such line (upstream gem5), at their own tick. Reads of BARs other than 0 are
//!   answered inside the adapter and complete at once. BAR-0 accesses not preceded by an
//!   MSI-X-table helper call are announced to the NIC.
//! * **HostDma** — `HostDmaR`/`W` … `HostDmaC` (same id); caused by the NIC DMA whose op
//!   pointer equals the id (else the oldest pending NIC DMA).
//! * **HostMsix** — `HostMsiX` (or `HostMsi`) … `HostDmaC id 0` (the adapter's own delivery
//!   write, whose `HostDmaW id 0`, if logged, joins the span); caused by the NIC's MSI-X.
//! * **HostInt** — `HostPostInt` … `HostClearInt`.
//! * **HostPci** — `HostPciR`/`W` … `HostConfRead`/`Write` of the same direction (a new
//!   `HostPciRW` closes the pending one as incomplete); a config access with nothing pending is
//!   a span of its own.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use weft_model::Event;
use weft_model::event::HostEvent;

use super::links::{Ctx, PcieMode};
use super::{Building, Cx, Ident, attr, class, int};
use crate::assemble::LocalId;
use weft_model::id::IdMap;

struct Call {
    b: Building,
    entry: Option<Arc<str>>,
    first_other: Option<Arc<str>>,
    syscall: Option<String>,
    calls: u64,
    flags: u8,
    children: u32,
}

struct Mmio {
    b: Building,
    id: u64,
    write: bool,
    posted: bool,
}

struct Dma {
    b: Building,
    id: u64,
}

/// Function names whose class is memoized by address.
const MAX_CLASS_MEMO: usize = 1 << 16;

pub(crate) struct HostWeaver {
    who: Ident,
    classes: Arc<HashMap<Box<str>, u8>>,
    /// Classes by the address of the interned name (names come from symbol tables as shared
    /// `Arc<str>`s, so one call site's name is one address): no string hashing per call. The
    /// entry holds a clone, so the address cannot be reused by another name while cached.
    class_memo: IdMap<usize, (Arc<str>, u8)>,
    keep_bare: bool,
    pcie: Option<(usize, PcieMode)>,
    call: Option<Call>,
    mmio: VecDeque<Mmio>,
    dma: VecDeque<Dma>,
    msix: VecDeque<Building>,
    int: Option<Building>,
    pci: Option<(Building, bool)>,
    pci_write_before: bool,
}

/// The syscall a function serves, from the kernel's naming conventions.
pub fn syscall_name(func: &str) -> Option<&str> {
    for p in ["__x64_sys_", "__ia32_sys_", "__se_sys_", "__do_sys_", "__sys_", "ksys_", "sys_"] {
        if let Some(rest) = func.strip_prefix(p)
            && !rest.is_empty()
        {
            return Some(rest);
        }
    }
    None
}

impl HostWeaver {
    pub fn new(who: Ident, classes: Arc<HashMap<Box<str>, u8>>, keep_bare: bool) -> Self {
        HostWeaver {
            who,
            classes,
            class_memo: IdMap::default(),
            keep_bare,
            pcie: None,
            call: None,
            mmio: VecDeque::new(),
            dma: VecDeque::new(),
            msix: VecDeque::new(),
            int: None,
            pci: None,
            pci_write_before: false,
        }
    }

    pub fn set_pcie(&mut self, link: usize, mode: PcieMode) {
        self.pcie = Some((link, mode));
    }

    pub fn pcie(&self) -> Option<usize> {
        self.pcie.map(|p| p.0)
    }

    fn full_link(&self) -> Option<usize> {
        match self.pcie {
            Some((l, PcieMode::Full)) => Some(l),
            _ => None,
        }
    }

    fn call_parent(&mut self) -> Option<LocalId> {
        self.call.as_mut().map(|c| {
            c.children += 1;
            c.b.id
        })
    }

    fn close(&self, b: Building, cx: &mut Cx) {
        cx.close(b, &self.who, &self.who.component);
    }

    pub fn on(&mut self, ev: &Event, h: &HostEvent, cx: &mut Cx) {
        // Posted writes without an immediate-response line complete at their own tick.
        while let Some(i) = self.mmio.iter().position(|m| m.posted && m.b.start_raw < ev.raw_time) {
            if let Some(m) = self.mmio.remove(i) {
                self.close(m.b, cx);
            }
        }
        match h {
            HostEvent::Call { func, .. } => self.on_call(ev, func, cx),
            HostEvent::Instr { .. } => {
                cx.stats.not_woven.add("HostInstr (no symbol at this PC, or not a macro-op)", 1)
            }
            &HostEvent::MmioR { id, addr, size, bar, offset } => {
                self.on_mmio(ev, id, addr, size, bar, offset, false, false, cx)
            }
            &HostEvent::MmioW { id, addr, size, bar, offset, posted } => {
                self.on_mmio(ev, id, addr, size, bar, offset, true, posted, cx)
            }
            HostEvent::MmioImRespPoW => {
                match self.mmio.iter().rposition(|m| m.posted && m.b.start_raw == ev.raw_time) {
                    Some(i) => {
                        if let Some(mut m) = self.mmio.remove(i) {
                            m.b.add(ev, cx.max_events);
                            self.close(m.b, cx);
                        }
                    }
                    None => cx.anomaly("HostMmioImRespPoW without a posted write at the same tick"),
                }
            }
            &HostEvent::MmioCR { id } => self.complete_mmio(ev, id, false, cx),
            &HostEvent::MmioCW { id } => self.complete_mmio(ev, id, true, cx),
            &HostEvent::DmaR { id, addr, size } => self.on_dma(ev, id, addr, size, false, cx),
            &HostEvent::DmaW { id, addr, size } => self.on_dma(ev, id, addr, size, true, cx),
            &HostEvent::DmaC { id } => {
                if id == 0 {
                    match self.msix.pop_front() {
                        Some(mut b) => {
                            b.add(ev, cx.max_events);
                            self.close(b, cx);
                        }
                        None => cx.anomaly("HostDmaC id 0 without a pending interrupt"),
                    }
                } else {
                    match self.dma.iter().position(|d| d.id == id) {
                        Some(i) => {
                            if let Some(mut d) = self.dma.remove(i) {
                                d.b.add(ev, cx.max_events);
                                self.close(d.b, cx);
                            }
                        }
                        None => cx.anomaly("HostDmaC without a pending DMA of that id"),
                    }
                }
            }
            &HostEvent::MsiX { vec } | &HostEvent::Msi { vec } => {
                let cause = self
                    .full_link()
                    .and_then(|l| cx.links.pcie[l].msix.take(ev.time_ns, |c| c.key == vec as u64, true));
                let id = cx.asm.open(cause.map(|c| c.span));
                let mut b = Building::new(id, "HostMsix", ev);
                b.attr(attr::MSIX_VECTOR, int(vec as u64));
                b.causes.extend(cause.map(|c| c.span));
                self.msix.push_back(b);
                self.bound_msix(cx);
            }
            HostEvent::PostInt => match &mut self.int {
                Some(b) => b.add(ev, cx.max_events),
                None => {
                    let parent = self.call_parent();
                    let id = cx.asm.open(parent);
                    self.int = Some(Building::new(id, "HostInt", ev));
                }
            },
            HostEvent::ClearInt => match self.int.take() {
                Some(mut b) => {
                    b.add(ev, cx.max_events);
                    self.close(b, cx);
                }
                None => cx.anomaly("HostClearInt without HostPostInt"),
            },
            &HostEvent::PciRW { is_read, .. } => {
                if let Some((mut b, _)) = self.pci.take() {
                    b.incomplete = true;
                    self.close(b, cx);
                }
                let parent = self.call_parent();
                let id = cx.asm.open(parent);
                let mut b = Building::new(id, "HostPci", ev);
                b.attr(attr::PCI_WRITE, !is_read);
                self.pci = Some((b, is_read));
            }
            &HostEvent::Conf { is_read, .. } => match self.pci.take() {
                Some((mut b, r)) if r == is_read => {
                    b.add(ev, cx.max_events);
                    self.close(b, cx);
                }
                other => {
                    self.pci = other;
                    let parent = self.call_parent();
                    let id = cx.asm.open(parent);
                    let mut b = Building::new(id, "HostPci", ev);
                    b.attr(attr::PCI_WRITE, !is_read);
                    self.close(b, cx);
                }
            },
        }
    }

    fn on_call(&mut self, ev: &Event, func: &Arc<str>, cx: &mut Cx) {
        let c = self.class_of(func);
        if c & class::SYS_ENTRY != 0 {
            self.close_call(cx);
        }
        if self.call.is_none() {
            let id = cx.asm.open(None);
            let b = Building::new(id, "HostCall", ev);
            self.call = Some(Call {
                b,
                entry: (c & class::SYS_ENTRY != 0).then(|| func.clone()),
                first_other: None,
                syscall: None,
                calls: 0,
                flags: 0,
                children: 0,
            });
        } else if let Some(call) = &mut self.call {
            call.b.add(ev, cx.max_events);
        }
        let Some(call) = &mut self.call else { return };
        call.calls += 1;
        call.flags |= c;
        if c & class::SYS_ENTRY == 0 && call.first_other.is_none() {
            call.first_other = Some(func.clone());
        }
        if call.syscall.is_none()
            && let Some(s) = syscall_name(func)
        {
            call.syscall = Some(s.to_owned());
        }
        self.pci_write_before = c & class::PCI_WRITE != 0;
        if c & class::DRIVER_TX != 0
            && let Some((l, PcieMode::Order)) = self.pcie
        {
            let span = call.b.id;
            call.children += 1;
            cx.links.pcie[l].xmit.push(Ctx { span, time_ns: ev.time_ns, key: 0, aux: 0 });
        }
    }

    /// The function classes of `func` (0 for none).
    fn class_of(&mut self, func: &Arc<str>) -> u8 {
        let key = Arc::as_ptr(func) as *const u8 as usize;
        if let Some((_, c)) = self.class_memo.get(&key) {
            return *c;
        }
        let c = self.classes.get(func.as_ref()).copied().unwrap_or(0);
        if self.class_memo.len() < MAX_CLASS_MEMO {
            self.class_memo.insert(key, (func.clone(), c));
        }
        c
    }

    fn close_call(&mut self, cx: &mut Cx) {
        let Some(call) = self.call.take() else { return };
        let Call { mut b, entry, first_other, syscall, calls, flags, children } = call;
        if !self.keep_bare && first_other.is_none() && children == 0 {
            cx.asm.discard(b.id);
            cx.asm.drain(cx.out);
            return;
        }
        if flags & class::KERNEL_RX != 0
            && let Some((l, _)) = self.pcie
        {
            let q = &mut cx.links.pcie[l].recv;
            if let Some(c) = q.take(b.start_ns, |_| false, true) {
                cx.asm.set_parent(b.id, Some(c.span));
                b.causes.push(c.span);
                while let Some(more) = q.take_before(b.start_ns) {
                    b.causes.push(more.span);
                }
            }
        }
        b.name = Some(match (&syscall, &first_other, &entry) {
            (Some(s), _, _) => s.clone(),
            (None, Some(f), _) => f.to_string(),
            (None, None, Some(e)) => e.to_string(),
            (None, None, None) => "HostCall".to_owned(),
        });
        if let Some(e) = &entry {
            b.attr(attr::HOST_ENTRY, e.as_ref());
        }
        b.attr(attr::HOST_CALLS, int(calls));
        b.attr(attr::HOST_KERNEL_TX, flags & class::KERNEL_TX != 0);
        b.attr(attr::HOST_KERNEL_RX, flags & class::KERNEL_RX != 0);
        b.attr(attr::HOST_DRIVER_TX, flags & class::DRIVER_TX != 0);
        b.attr(attr::HOST_DRIVER_RX, flags & class::DRIVER_RX != 0);
        self.close(b, cx);
    }

    #[allow(clippy::too_many_arguments)]
    fn on_mmio(
        &mut self,
        ev: &Event,
        id: u64,
        addr: u64,
        size: u32,
        bar: u8,
        offset: u64,
        write: bool,
        posted: bool,
        cx: &mut Cx,
    ) {
        let parent = self.call_parent();
        let sid = cx.asm.open(parent);
        let mut b = Building::new(sid, "HostMmio", ev);
        b.attr(attr::MMIO_WRITE, write);
        b.attr(attr::MMIO_BAR, int(bar as u64));
        b.attr(attr::MMIO_OFFSET, int(offset));
        b.attr(attr::MMIO_SIZE, int(size as u64));
        b.attr(attr::MMIO_ADDR, int(addr));
        if write {
            b.attr(attr::MMIO_POSTED, posted);
        }
        if bar == 0
            && !self.pci_write_before
            && let Some(l) = self.full_link()
        {
            cx.links.pcie[l].mmio.push(Ctx {
                span: sid,
                time_ns: ev.time_ns,
                key: offset,
                aux: write as u64,
            });
        }
        if !write && bar != 0 {
            self.close(b, cx);
            return;
        }
        self.mmio.push_back(Mmio { b, id, write, posted });
        if self.mmio.len() > cx.max_open
            && let Some(mut old) = self.mmio.pop_front()
        {
            old.b.incomplete = true;
            cx.anomaly("too many pending host MMIO requests (oldest closed)");
            self.close(old.b, cx);
        }
    }

    fn complete_mmio(&mut self, ev: &Event, id: u64, write: bool, cx: &mut Cx) {
        match self.mmio.iter().position(|m| m.id == id && m.write == write && !m.posted) {
            Some(i) => {
                if let Some(mut m) = self.mmio.remove(i) {
                    m.b.add(ev, cx.max_events);
                    self.close(m.b, cx);
                }
            }
            None => cx.anomaly(if write {
                "HostMmioCW without a pending write of that id"
            } else {
                "HostMmioCR without a pending read of that id"
            }),
        }
    }

    fn on_dma(&mut self, ev: &Event, id: u64, addr: u64, size: u64, write: bool, cx: &mut Cx) {
        if id == 0 {
            // The adapter's own MSI/MSI-X delivery write.
            match self.msix.front_mut() {
                Some(b) => b.add(ev, cx.max_events),
                None => cx.anomaly("HostDma id 0 without a pending interrupt"),
            }
            return;
        }
        let cause =
            self.full_link().and_then(|l| cx.links.pcie[l].dma.take(ev.time_ns, |c| c.key == id, true));
        let sid = cx.asm.open(cause.map(|c| c.span));
        let mut b = Building::new(sid, "HostDma", ev);
        b.attr(attr::DMA_WRITE, write);
        b.attr(attr::DMA_ADDR, int(addr));
        b.attr(attr::DMA_SIZE, int(size));
        b.attr(attr::DMA_ID, int(id));
        b.causes.extend(cause.map(|c| c.span));
        self.dma.push_back(Dma { b, id });
        if self.dma.len() > cx.max_open
            && let Some(mut old) = self.dma.pop_front()
        {
            old.b.incomplete = true;
            cx.anomaly("too many pending host DMAs (oldest closed)");
            self.close(old.b, cx);
        }
    }

    fn bound_msix(&mut self, cx: &mut Cx) {
        if self.msix.len() > cx.max_open
            && let Some(mut old) = self.msix.pop_front()
        {
            old.incomplete = true;
            cx.anomaly("too many pending host interrupts (oldest closed)");
            self.close(old, cx);
        }
    }

    pub fn finish(&mut self, cx: &mut Cx) {
        // Children first, so the HostCall sees them counted; all still export after it.
        for m in std::mem::take(&mut self.mmio) {
            let mut b = m.b;
            b.incomplete = !m.posted;
            self.close(b, cx);
        }
        for d in std::mem::take(&mut self.dma) {
            let mut b = d.b;
            b.incomplete = true;
            self.close(b, cx);
        }
        for mut b in std::mem::take(&mut self.msix) {
            b.incomplete = true;
            self.close(b, cx);
        }
        if let Some(mut b) = self.int.take() {
            b.incomplete = true;
            self.close(b, cx);
        }
        if let Some((mut b, _)) = self.pci.take() {
            b.incomplete = true;
            self.close(b, cx);
        }
        self.close_call(cx);
    }
}

#[cfg(test)]
mod tests {
    use super::syscall_name;

    #[test]
    fn syscall_names() {
        assert_eq!(syscall_name("__x64_sys_sendto"), Some("sendto"));
        assert_eq!(syscall_name("__sys_recvmsg"), Some("recvmsg"));
        assert_eq!(syscall_name("ksys_write"), Some("write"));
        assert_eq!(syscall_name("entry_SYSCALL_64"), None);
        assert_eq!(syscall_name("sys_"), None);
    }
}
