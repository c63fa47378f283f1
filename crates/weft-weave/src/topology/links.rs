//! `[[link]]` tables: host ↔ NIC (`pcie`) and NIC ↔ network device (`eth`) links.

use super::raw::RawLink;
use super::{Reader, SourceSpec, TopologyError};
use crate::weaver::{EthLink, PcieLink, Role};

impl Reader<'_> {
    /// The links, by the names of the sources they join.
    pub(super) fn links(
        &self,
        raw: &[RawLink],
        sources: &[SourceSpec],
    ) -> Result<(Vec<PcieLink>, Vec<EthLink>), TopologyError> {
        let find = |key: &str, name: &Option<String>, what: &str| -> Result<usize, TopologyError> {
            let n =
                name.as_ref().ok_or_else(|| self.err(key, format!("missing (the {what}'s source name)")))?;
            sources
                .iter()
                .position(|s| &s.name == n || matches!(&s.role, Role::HostAndNic { nic } if nic == n))
                .ok_or_else(|| self.err(key, format!("no source named `{n}`")))
        };
        let mut pcie = Vec::new();
        let mut eth = Vec::new();
        for (i, l) in raw.iter().enumerate() {
            let key = |k: &str| format!("link[{i}].{k}");
            match l.kind.as_str() {
                "pcie" => {
                    let host = find(&key("host"), &l.host, "host")?;
                    let nic = find(&key("nic"), &l.nic, "NIC")?;
                    if sources[host].role != Role::Host {
                        return Err(
                            self.err(&key("host"), format!("`{}` is not a gem5 host", sources[host].name))
                        );
                    }
                    if sources[nic].role != Role::Nic {
                        return Err(
                            self.err(&key("nic"), format!("`{}` is not a nicbm NIC", sources[nic].name))
                        );
                    }
                    pcie.push(PcieLink { host, nic });
                }
                "eth" => {
                    let nic = find(&key("nic"), &l.nic, "NIC")?;
                    let net = find(&key("net"), &l.net, "network")?;
                    if !matches!(sources[nic].role, Role::Nic | Role::HostAndNic { .. }) {
                        return Err(self.err(&key("nic"), format!("`{}` is not a NIC", sources[nic].name)));
                    }
                    if !matches!(sources[net].role, Role::Network { .. }) {
                        return Err(
                            self.err(&key("net"), format!("`{}` is not a network", sources[net].name))
                        );
                    }
                    let node = l
                        .node
                        .ok_or_else(|| self.err(&key("node"), "missing (the ns-3 node index)".into()))?;
                    let device = l.device.ok_or_else(|| {
                        self.err(&key("device"), "missing (the device index on the node)".into())
                    })?;
                    eth.push(EthLink { nic, net, node, device });
                }
                k => return Err(self.err(&key("kind"), format!("unknown link kind `{k}` (pcie, eth)"))),
            }
        }
        Ok((pcie, eth))
    }
}
