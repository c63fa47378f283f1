//! Cross-component context queues (spec §7): what one weaver leaves for another along a link
//! the topology declares, and how effects find their causes.
//!
//! A [`Ctx`] names the cause span, when it happened, and a matching key (BAR offset, DMA op,
//! interrupt vector, frame length). An effect takes the oldest context whose key matches
//! ("exact"), else — where order is an acceptable fallback — the oldest context ("by order").
//! Contexts older than the link's maximum age, or pushed past the queue's bound, are dropped and
//! counted as unmatched causes; effects that find nothing are counted as unmatched effects.

use std::collections::VecDeque;

use crate::assemble::LocalId;

/// A cause waiting for its effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ctx {
    /// The cause span.
    pub span: LocalId,
    /// When the cause happened (ns).
    pub time_ns: u64,
    /// Matching key (offset, DMA op, vector, length).
    pub key: u64,
    /// Second matching key (e.g. 1 for a write).
    pub aux: u64,
}

/// Counters of one queue.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LinkStats {
    /// Causes pushed.
    pub pushed: u64,
    /// Effects matched on their key.
    pub exact: u64,
    /// Effects matched by order (no context with their key).
    pub by_order: u64,
    /// Causes that no effect took (expired, evicted, or left at the end).
    pub unmatched_causes: u64,
    /// Effects that found no cause.
    pub unmatched_effects: u64,
}

impl LinkStats {
    /// Adds another tally.
    pub fn merge(&mut self, o: &LinkStats) {
        self.pushed += o.pushed;
        self.exact += o.exact;
        self.by_order += o.by_order;
        self.unmatched_causes += o.unmatched_causes;
        self.unmatched_effects += o.unmatched_effects;
    }
}

/// One direction of one kind of causality on one link.
#[derive(Debug)]
pub struct CtxQueue {
    q: VecDeque<Ctx>,
    cap: usize,
    max_age_ns: u64,
    /// Counters.
    pub stats: LinkStats,
}

impl CtxQueue {
    /// A queue holding at most `cap` contexts, each for at most `max_age_ns`.
    pub fn new(cap: usize, max_age_ns: u64) -> Self {
        CtxQueue { q: VecDeque::new(), cap: cap.max(1), max_age_ns, stats: LinkStats::default() }
    }

    /// Leaves a cause.
    pub fn push(&mut self, ctx: Ctx) {
        self.stats.pushed += 1;
        self.q.push_back(ctx);
        while self.q.len() > self.cap {
            self.q.pop_front();
            self.stats.unmatched_causes += 1;
        }
    }

    fn expire(&mut self, now_ns: u64) {
        while let Some(c) = self.q.front() {
            if now_ns.saturating_sub(c.time_ns) > self.max_age_ns {
                self.q.pop_front();
                self.stats.unmatched_causes += 1;
            } else {
                break;
            }
        }
    }

    /// The oldest context satisfying `exact`, else (if `order`) the oldest context. Counts
    /// the outcome.
    pub fn take(&mut self, now_ns: u64, exact: impl Fn(&Ctx) -> bool, order: bool) -> Option<Ctx> {
        self.take_or(now_ns, exact, |_| order)
    }

    /// The oldest context satisfying `exact`, else the oldest satisfying `fallback` (counted
    /// as matched by order).
    pub fn take_or(
        &mut self,
        now_ns: u64,
        exact: impl Fn(&Ctx) -> bool,
        fallback: impl Fn(&Ctx) -> bool,
    ) -> Option<Ctx> {
        self.expire(now_ns);
        if let Some(i) = self.q.iter().position(exact) {
            self.stats.exact += 1;
            return self.q.remove(i);
        }
        if let Some(i) = self.q.iter().position(fallback) {
            self.stats.by_order += 1;
            return self.q.remove(i);
        }
        self.stats.unmatched_effects += 1;
        None
    }

    /// The oldest context only if it happened before `before_ns` (extra causes of one
    /// effect); counted as matched by order.
    pub fn take_before(&mut self, before_ns: u64) -> Option<Ctx> {
        if self.q.front().is_some_and(|c| c.time_ns < before_ns) {
            self.stats.by_order += 1;
            return self.q.pop_front();
        }
        None
    }

    /// Contexts waiting.
    pub fn len(&self) -> usize {
        self.q.len()
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.q.is_empty()
    }

    /// End of input: whatever is left is unmatched.
    pub fn finish(&mut self) {
        self.stats.unmatched_causes += self.q.len() as u64;
        self.q.clear();
    }
}

/// How a PCIe link is matched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PcieMode {
    /// gem5 ↔ nicbm: MMIO by offset, DMA by op id, MSI-X by vector, receive by order.
    Full,
    /// QEMU host ↔ its own e1000e: the logs carry no MMIO/DMA ids and no host interrupts;
    /// transmit (driver-transmit call → NIC TX) and receive (NIC RX → receive call) by order.
    Order,
}

/// The queues of a host ↔ NIC link.
#[derive(Debug)]
pub struct PcieQueues {
    /// `host ↔ nic`.
    pub name: String,
    /// Matching mode.
    pub mode: PcieMode,
    /// Host MMIO → NIC MMIO (key: BAR offset, aux: 1 = write).
    pub mmio: CtxQueue,
    /// NIC DMA → host DMA (key: nicbm op = gem5 DMA id).
    pub dma: CtxQueue,
    /// NIC MSI-X → host MSI-X (key: vector).
    pub msix: CtxQueue,
    /// NIC RX → host receive call.
    pub recv: CtxQueue,
    /// Host driver-transmit call → NIC TX (QEMU).
    pub xmit: CtxQueue,
}

/// The queues of a NIC ↔ network-device link.
#[derive(Debug)]
pub struct EthQueues {
    /// `nic ↔ net/node/dev`.
    pub name: String,
    /// NIC TX → the network's first hop (key: frame length).
    pub tx: CtxQueue,
    /// The network's last hop → NIC RX (key: frame length).
    pub rx: CtxQueue,
}

/// Every link's queues.
#[derive(Debug, Default)]
pub struct Links {
    /// Host ↔ NIC links.
    pub pcie: Vec<PcieQueues>,
    /// NIC ↔ network links.
    pub eth: Vec<EthQueues>,
}

/// Unmatched/matched counters of one queue, for reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkReport {
    /// The link (`client ↔ client-nic`, `client-nic ↔ ns3/node1/dev2`).
    pub link: String,
    /// What travels: `mmio`, `dma`, `msix`, `recv`, `xmit`, `tx`, `rx`.
    pub kind: &'static str,
    /// Counters.
    pub stats: LinkStats,
}

impl Links {
    /// Ends every queue (leftovers become unmatched causes).
    pub fn finish(&mut self) {
        for p in &mut self.pcie {
            for q in [&mut p.mmio, &mut p.dma, &mut p.msix, &mut p.recv, &mut p.xmit] {
                q.finish();
            }
        }
        for e in &mut self.eth {
            e.tx.finish();
            e.rx.finish();
        }
    }

    /// Per-queue counters (queues that saw nothing are left out).
    pub fn report(&self) -> Vec<LinkReport> {
        let mut out = Vec::new();
        let mut add = |link: &str, kind: &'static str, q: &CtxQueue| {
            if q.stats != LinkStats::default() {
                out.push(LinkReport { link: link.to_owned(), kind, stats: q.stats });
            }
        };
        for p in &self.pcie {
            add(&p.name, "mmio", &p.mmio);
            add(&p.name, "dma", &p.dma);
            add(&p.name, "msix", &p.msix);
            add(&p.name, "recv", &p.recv);
            add(&p.name, "xmit", &p.xmit);
        }
        for e in &self.eth {
            add(&e.name, "tx", &e.tx);
            add(&e.name, "rx", &e.rx);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(span: u64, t: u64, key: u64) -> Ctx {
        Ctx { span, time_ns: t, key, aux: 0 }
    }

    #[test]
    fn exact_then_order_then_unmatched() {
        let mut q = CtxQueue::new(2, 100);
        q.push(c(1, 0, 7));
        q.push(c(2, 1, 8));
        assert_eq!(q.take(5, |x| x.key == 8, true).map(|x| x.span), Some(2));
        assert_eq!(q.take(5, |x| x.key == 9, true).map(|x| x.span), Some(1));
        assert_eq!(q.take(5, |x| x.key == 9, true), None);
        q.push(c(3, 0, 1));
        q.push(c(4, 0, 1));
        q.push(c(5, 0, 1)); // evicts 3
        assert_eq!(q.take(500, |_| true, true), None, "4 and 5 expired");
        assert_eq!(
            q.stats,
            LinkStats { pushed: 5, exact: 1, by_order: 1, unmatched_causes: 3, unmatched_effects: 2 }
        );
    }
}
