//! The NIC weaver (nicbm, QEMU e1000e): NicMmio, NicDma, NicEth, NicMsix spans (spec §6
//! "NIC").
//!
//! * **NicMmio** — one register access (`NicMmioR`/`W`), caused by the host MMIO with the same
//!   direction and BAR offset (else the oldest host MMIO of that direction). A write becomes the
//!   NIC's `last_causing` span: doorbells cause DMA and transmissions (for at most the
//!   maximum cause age: a doorbell seconds ago caused nothing that happens now).
//! * **NicDma** — `NicDmaI` … `NicDmaEn` … `NicDmaEx` … `NicDmaCR`/`CW` (same op and
//!   address), a child of `last_causing`. At `NicDmaEx` (the request leaves the NIC) it is
//!   offered to the host as the cause of its DMA (key: the op pointer = gem5's DMA id). A
//!   completion whose issue is not in the log is a span of its own marked incomplete.
//! * **NicEth** — `NicTx` (child of `last_causing`; offered to the linked network device as
//!   the cause of the packet's first hop) or `NicRx` (caused by the network's last hop towards
//!   this NIC; becomes `last_causing`; offered to the host as the cause of its receive call).
//!   QEMU's e1000e: a frame's transmit descriptors (`NicTxDescr` up to the one with EOP) make
//!   one `NicEth` tx span, caused by the host's latest driver-transmit call (by order);
//!   `NicRxDescr` … `NicRxWritten` make one rx span.
//! * **NicMsix** — one `NicMsix`/`NicMsi`, child of `last_causing`, offered to the host's
//!   interrupt.

use std::collections::VecDeque;

use weft_model::Event;
use weft_model::event::NicEvent;

use super::links::{Ctx, PcieMode};
use super::{Building, Cx, Ident, attr, int};
use crate::assemble::LocalId;

struct Dma {
    b: Building,
    op: u64,
    addr: u64,
}

pub(crate) struct NicWeaver {
    who: Ident,
    pcie: Option<(usize, PcieMode)>,
    eth: Option<usize>,
    last_causing: Option<(LocalId, u64)>,
    max_age_ns: u64,
    dma: VecDeque<Dma>,
    tx_frame: Option<(Building, u64)>,
    rx_frame: Option<Building>,
}

impl NicWeaver {
    pub fn new(who: Ident, max_age_ns: u64) -> Self {
        NicWeaver {
            who,
            pcie: None,
            eth: None,
            last_causing: None,
            max_age_ns,
            dma: VecDeque::new(),
            tx_frame: None,
            rx_frame: None,
        }
    }

    /// The latest MMIO write or RX span, unless it is older than the maximum cause age.
    fn causing(&self, now_ns: u64) -> Option<LocalId> {
        self.last_causing.filter(|(_, t)| now_ns.saturating_sub(*t) <= self.max_age_ns).map(|(id, _)| id)
    }

    pub fn set_pcie(&mut self, link: usize, mode: PcieMode) {
        self.pcie = Some((link, mode));
    }

    pub fn pcie(&self) -> Option<usize> {
        self.pcie.map(|p| p.0)
    }

    pub fn set_eth(&mut self, link: usize) {
        self.eth = Some(link);
    }

    pub fn eth(&self) -> Option<usize> {
        self.eth
    }

    fn full_link(&self) -> Option<usize> {
        match self.pcie {
            Some((l, PcieMode::Full)) => Some(l),
            _ => None,
        }
    }

    fn close(&self, b: Building, cx: &mut Cx) {
        cx.close(b, &self.who, &self.who.component);
    }

    pub fn on(&mut self, ev: &Event, n: &NicEvent, cx: &mut Cx) {
        match *n {
            NicEvent::MmioR { off, len, val } => self.on_mmio(ev, off, len, val, false, None, cx),
            NicEvent::MmioW { off, len, val, posted } => self.on_mmio(ev, off, len, val, true, posted, cx),
            NicEvent::DmaI { op, addr, len } => {
                let id = cx.asm.open(self.causing(ev.time_ns));
                let mut b = Building::new(id, "NicDma", ev);
                b.attr(attr::DMA_ID, int(op));
                b.attr(attr::DMA_ADDR, int(addr));
                b.attr(attr::DMA_SIZE, int(len));
                self.dma.push_back(Dma { b, op, addr });
                if self.dma.len() > cx.max_open
                    && let Some(mut old) = self.dma.pop_front()
                {
                    old.b.incomplete = true;
                    cx.anomaly("too many pending NIC DMAs (oldest closed)");
                    self.close(old.b, cx);
                }
            }
            NicEvent::DmaEn { op, addr, .. } => match self.find_dma(op, addr) {
                Some(i) => self.dma[i].b.add(ev, cx.max_events),
                None => cx.anomaly("NicDmaEn without NicDmaI"),
            },
            NicEvent::DmaEx { op, addr, .. } => match self.find_dma(op, addr) {
                Some(i) => {
                    self.dma[i].b.add(ev, cx.max_events);
                    if let Some(l) = self.full_link() {
                        let span = self.dma[i].b.id;
                        cx.links.pcie[l].dma.push(Ctx { span, time_ns: ev.time_ns, key: op, aux: 0 });
                    }
                }
                None => cx.anomaly("NicDmaEx without NicDmaI"),
            },
            NicEvent::DmaCR { op, addr, len } | NicEvent::DmaCW { op, addr, len } => {
                let write = matches!(n, NicEvent::DmaCW { .. });
                match self.find_dma(op, addr).and_then(|i| self.dma.remove(i)) {
                    Some(mut d) => {
                        d.b.add(ev, cx.max_events);
                        d.b.attr(attr::DMA_WRITE, write);
                        self.close(d.b, cx);
                    }
                    None => {
                        cx.anomaly("NIC DMA completion without its issue (span marked incomplete)");
                        let id = cx.asm.open(self.causing(ev.time_ns));
                        let mut b = Building::new(id, "NicDma", ev);
                        b.attr(attr::DMA_ID, int(op));
                        b.attr(attr::DMA_ADDR, int(addr));
                        b.attr(attr::DMA_SIZE, int(len));
                        b.attr(attr::DMA_WRITE, write);
                        b.incomplete = true;
                        self.close(b, cx);
                    }
                }
            }
            NicEvent::Msix { vec, .. } => {
                let id = cx.asm.open(self.causing(ev.time_ns));
                let mut b = Building::new(id, "NicMsix", ev);
                b.attr(attr::MSIX_VECTOR, int(vec as u64));
                if let Some(l) = self.full_link() {
                    cx.links.pcie[l].msix.push(Ctx {
                        span: id,
                        time_ns: ev.time_ns,
                        key: vec as u64,
                        aux: 0,
                    });
                }
                self.close(b, cx);
            }
            NicEvent::SetIntx { .. } => cx.stats.not_woven.add("SetIX (legacy interrupt level)", 1),
            NicEvent::Tx { len } => {
                let parent = self.tx_parent(ev, cx);
                let id = cx.asm.open(parent.0);
                let mut b = Building::new(id, "NicEth", ev);
                b.causes.extend(parent.1);
                self.finish_tx(b, len as u64, ev.time_ns, cx);
            }
            NicEvent::TxDescr { lower, .. } => {
                let (len, eop) = NicEvent::tx_descr_len_eop(lower);
                match &mut self.tx_frame {
                    Some((b, total)) => {
                        b.add(ev, cx.max_events);
                        *total += len as u64;
                    }
                    None => {
                        let parent = self.tx_parent(ev, cx);
                        let id = cx.asm.open(parent.0);
                        let mut b = Building::new(id, "NicEth", ev);
                        b.causes.extend(parent.1);
                        self.tx_frame = Some((b, len as u64));
                    }
                }
                if eop && let Some((b, total)) = self.tx_frame.take() {
                    self.finish_tx(b, total, ev.time_ns, cx);
                }
            }
            NicEvent::Rx { port, len } => {
                let b = self.open_rx(ev, Some(len as u64), cx);
                self.finish_rx(b, Some(port), Some(len as u64), cx);
            }
            NicEvent::RxDescr { .. } => match &mut self.rx_frame {
                Some(b) => b.add(ev, cx.max_events),
                None => self.rx_frame = Some(self.open_rx(ev, None, cx)),
            },
            NicEvent::RxWritten { .. } => {
                let b = match self.rx_frame.take() {
                    Some(mut b) => {
                        b.add(ev, cx.max_events);
                        b
                    }
                    None => self.open_rx(ev, None, cx),
                };
                self.finish_rx(b, None, None, cx);
            }
        }
    }

    fn find_dma(&self, op: u64, addr: u64) -> Option<usize> {
        self.dma.iter().position(|d| d.op == op && d.addr == addr)
    }

    #[allow(clippy::too_many_arguments)]
    fn on_mmio(
        &mut self,
        ev: &Event,
        off: u64,
        len: u32,
        val: u64,
        write: bool,
        posted: Option<bool>,
        cx: &mut Cx,
    ) {
        let w = write as u64;
        let cause = self.full_link().and_then(|l| {
            cx.links.pcie[l].mmio.take_or(ev.time_ns, |c| c.key == off && c.aux == w, |c| c.aux == w)
        });
        let id = cx.asm.open(cause.map(|c| c.span));
        let mut b = Building::new(id, "NicMmio", ev);
        b.attr(attr::MMIO_WRITE, write);
        b.attr(attr::MMIO_OFFSET, int(off));
        b.attr(attr::MMIO_SIZE, int(len as u64));
        b.attr(attr::MMIO_VALUE, int(val));
        if let Some(p) = posted {
            b.attr(attr::MMIO_POSTED, p);
        }
        b.causes.extend(cause.map(|c| c.span));
        if write {
            self.last_causing = Some((id, ev.time_ns));
        }
        self.close(b, cx);
    }

    /// The parent of a transmission: the host's driver-transmit call (QEMU, by order), else
    /// `last_causing`. Returns (parent, cross-component cause).
    fn tx_parent(&mut self, ev: &Event, cx: &mut Cx) -> (Option<LocalId>, Option<LocalId>) {
        if let Some((l, PcieMode::Order)) = self.pcie
            && let Some(c) = cx.links.pcie[l].xmit.take(ev.time_ns, |_| false, true)
        {
            return (Some(c.span), Some(c.span));
        }
        (self.causing(ev.time_ns), None)
    }

    fn finish_tx(&mut self, mut b: Building, len: u64, now: u64, cx: &mut Cx) {
        b.attr(attr::ETH_DIRECTION, "tx");
        b.attr(attr::ETH_LENGTH, int(len));
        if let Some(l) = self.eth {
            cx.links.eth[l].tx.push(Ctx { span: b.id, time_ns: now, key: len, aux: 0 });
        }
        self.close(b, cx);
    }

    fn open_rx(&mut self, ev: &Event, len: Option<u64>, cx: &mut Cx) -> Building {
        let cause = self
            .eth
            .and_then(|l| cx.links.eth[l].rx.take(ev.time_ns, |c| len.is_some_and(|n| c.key == n), true));
        let id = cx.asm.open(cause.map(|c| c.span));
        let mut b = Building::new(id, "NicEth", ev);
        b.causes.extend(cause.map(|c| c.span));
        b
    }

    fn finish_rx(&mut self, mut b: Building, port: Option<u32>, len: Option<u64>, cx: &mut Cx) {
        b.attr(attr::ETH_DIRECTION, "rx");
        if let Some(n) = len {
            b.attr(attr::ETH_LENGTH, int(n));
        }
        if let Some(p) = port {
            b.attr(attr::ETH_PORT, int(p as u64));
        }
        self.last_causing = Some((b.id, b.start_ns));
        if let Some((l, _)) = self.pcie {
            cx.links.pcie[l].recv.push(Ctx { span: b.id, time_ns: b.start_ns, key: 0, aux: 0 });
        }
        self.close(b, cx);
    }

    pub fn finish(&mut self, cx: &mut Cx) {
        for d in std::mem::take(&mut self.dma) {
            let mut b = d.b;
            b.incomplete = true;
            self.close(b, cx);
        }
        if let Some((mut b, total)) = self.tx_frame.take() {
            b.incomplete = true;
            b.attr(attr::ETH_DIRECTION, "tx");
            b.attr(attr::ETH_LENGTH, int(total));
            self.close(b, cx);
        }
        if let Some(mut b) = self.rx_frame.take() {
            b.incomplete = true;
            b.attr(attr::ETH_DIRECTION, "rx");
            self.close(b, cx);
        }
    }
}
