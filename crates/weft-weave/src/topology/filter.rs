//! The `[filter]` table: event types to drop, time windows, components, blacklist.

use super::raw::RawFilter;
use super::{Reader, SourceSpec, TopologyError};
use crate::actor::FilterSpec;
use crate::weaver::Role;

/// Every event type name a filter may mention.
pub const EVENT_TYPES: &[&str] = &[
    "SimSendSync",
    "SimProcInEvent",
    "HostInstr",
    "HostCall",
    "HostMmioR",
    "HostMmioW",
    "HostMmioImRespPoW",
    "HostMmioCR",
    "HostMmioCW",
    "HostDmaR",
    "HostDmaW",
    "HostDmaC",
    "HostMsiX",
    "HostMsi",
    "HostConfRead",
    "HostConfWrite",
    "HostPciR",
    "HostPciW",
    "HostPostInt",
    "HostClearInt",
    "NicMmioR",
    "NicMmioW",
    "NicDmaI",
    "NicDmaEn",
    "NicDmaEx",
    "NicDmaCR",
    "NicDmaCW",
    "NicMsix",
    "NicMsi",
    "SetIX",
    "NicTx",
    "NicRx",
    "NicTxDescr",
    "NicRxDescr",
    "NicRxWritten",
    "NetworkEnqueue",
    "NetworkDequeue",
    "NetworkDrop",
    "NetworkReceive",
];

impl Reader<'_> {
    /// The filter; component names must name sources (or a QEMU guest's NIC).
    pub(super) fn filter(&self, rf: RawFilter, sources: &[SourceSpec]) -> Result<FilterSpec, TopologyError> {
        let mut filter = FilterSpec::default();
        if let Some(t) = rf.drop_types {
            for (i, name) in t.iter().enumerate() {
                if !EVENT_TYPES.contains(&name.as_str()) {
                    return Err(self.err(
                        &format!("filter.drop_types[{i}]"),
                        format!("unknown event type `{name}` (one of {})", EVENT_TYPES.join(", ")),
                    ));
                }
            }
            filter.drop_types = t;
        }
        if let Some([a, b]) = rf.window_ns {
            if a >= b {
                return Err(self.err("filter.window_ns", format!("empty window [{a}, {b})")));
            }
            filter.from_ns = Some(a);
            filter.to_ns = Some(b);
        }
        if let Some([a, b]) = rf.window_raw {
            if a >= b {
                return Err(self.err("filter.window_raw", format!("empty window [{a}, {b})")));
            }
            filter.from_raw = Some(a);
            filter.to_raw = Some(b);
        }
        if let Some(c) = rf.components {
            for (i, name) in c.iter().enumerate() {
                let head = name.split('/').next().unwrap_or("");
                let known = sources
                    .iter()
                    .any(|s| s.name == head || matches!(&s.role, Role::HostAndNic { nic } if nic == head));
                if !known {
                    return Err(
                        self.err(&format!("filter.components[{i}]"), format!("no component `{head}`"))
                    );
                }
            }
            filter.components = c;
        }
        filter.only_interesting = rf.only_interesting.unwrap_or(false);
        filter.blacklist = rf.blacklist.unwrap_or_default();
        Ok(filter)
    }
}
