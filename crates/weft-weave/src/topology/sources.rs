//! `[[source]]` tables: format, clock, ns-3 node names, a QEMU guest's NIC, symbol tables.

use std::collections::{BTreeMap, HashSet};

use weft_model::TimeUnit;
use weft_sources::sim::SimFormat;
use weft_sources::sim::ns3::Ns3Time;
use weft_sources::symbols::{LoadOptions, SymbolFormat};

use super::raw::{Num, RawSource};
use super::{Reader, SourceSpec, SymbolSpec, TopologyError};
use crate::weaver::Role;

impl Reader<'_> {
    /// The sources, in file order (at least one; names unique among all components).
    pub(super) fn sources(&self, raw: &[RawSource], epoch_ns: u64) -> Result<Vec<SourceSpec>, TopologyError> {
        if raw.is_empty() {
            return Err(self.err("source", "no [[source]] given: a topology needs at least one log".into()));
        }
        let mut sources = Vec::new();
        let mut names = HashSet::new();
        for (i, s) in raw.iter().enumerate() {
            sources.push(self.source(i, s, epoch_ns, &mut names)?);
        }
        Ok(sources)
    }

    /// Source `i`; its component names go into `names`.
    fn source(
        &self,
        i: usize,
        s: &RawSource,
        epoch_ns: u64,
        names: &mut HashSet<String>,
    ) -> Result<SourceSpec, TopologyError> {
        let key = |k: &str| format!("source[{i}].{k}");
        if s.name.trim().is_empty() {
            return Err(self.err(&key("name"), "must not be empty".into()));
        }
        if !names.insert(s.name.clone()) {
            return Err(self.err(&key("name"), format!("`{}` is used by another source", s.name)));
        }
        let format = match s.kind.as_str() {
            "ns3-stock" => SimFormat::Ns3(Ns3Time::Seconds),
            k => SimFormat::parse(k).ok_or_else(|| {
                self.err(&key("kind"), format!("unknown kind `{k}` (gem5, nicbm, ns3, ns3-stock, qemu)"))
            })?,
        };
        let mut clock = format.default_clock(epoch_ns);
        if let Some(c) = &s.clock {
            if let Some(u) = &c.unit {
                clock.unit = parse_unit(u).ok_or_else(|| {
                    self.err(&key("clock.unit"), format!("unknown unit `{u}` (ps, ns, us, ms, s or <n>hz)"))
                })?;
            }
            if let Some(e) = c.epoch_ns {
                clock.epoch_ns = e;
            }
            if let Some(o) = &c.origin {
                clock.raw_origin = parse_num(o)
                    .ok_or_else(|| self.err(&key("clock.origin"), format!("not a number: {o:?}")))?;
            }
        }
        let mut nodes = BTreeMap::new();
        if let Some(ns) = &s.nodes {
            if !matches!(format, SimFormat::Ns3(_)) {
                return Err(self.err(&key("nodes"), "only ns-3 sources have nodes".into()));
            }
            for (k, v) in ns {
                let n: u32 = k
                    .parse()
                    .map_err(|_| self.err(&key("nodes"), format!("node `{k}` is not a node index")))?;
                if v.is_empty() || v.contains('/') {
                    return Err(self.err(
                        &key(&format!("nodes.{k}")),
                        format!("bad node name `{v}` (non-empty, no '/')"),
                    ));
                }
                nodes.insert(n, v.clone());
            }
        }
        if s.nic.is_some() && format != SimFormat::Qemu {
            return Err(self.err(&key("nic"), "only qemu sources name their NIC".into()));
        }
        let role = match format {
            SimFormat::Gem5 => Role::Host,
            SimFormat::Nicbm => Role::Nic,
            SimFormat::Ns3(_) => Role::Network { nodes },
            SimFormat::Qemu => {
                Role::HostAndNic { nic: s.nic.clone().unwrap_or_else(|| format!("{}-nic", s.name)) }
            }
        };
        if let Role::HostAndNic { nic } = &role
            && !names.insert(nic.clone())
        {
            return Err(self.err(&key("nic"), format!("`{nic}` is used by another component")));
        }
        let mut symbols = Vec::new();
        for (j, y) in s.symbols.iter().enumerate() {
            let sk = |k: &str| key(&format!("symbols[{j}].{k}"));
            let fmt = match &y.format {
                None => SymbolFormat::Auto,
                Some(f) => SymbolFormat::parse(f).ok_or_else(|| {
                    self.err(
                        &sk("format"),
                        format!(
                            "unknown format `{f}` (auto, objdump-syms, objdump-d, readelf, nm, kallsyms, elf)"
                        ),
                    )
                })?,
            };
            let offset = match &y.offset {
                None => 0,
                Some(o) => {
                    parse_num(o).ok_or_else(|| self.err(&sk("offset"), format!("not a number: {o:?}")))?
                }
            };
            let path = self.resolve(&sk("path"), &y.path)?;
            symbols.push(SymbolSpec {
                id: y.id.clone().unwrap_or_else(|| {
                    path.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default()
                }),
                path,
                options: LoadOptions { format: fmt, offset, section: y.section.clone() },
            });
        }
        Ok(SourceSpec {
            name: s.name.clone(),
            format,
            path: self.resolve(&key("path"), &s.path)?,
            clock,
            role,
            symbols,
        })
    }
}

fn parse_num(n: &Num) -> Option<u64> {
    match n {
        Num::Int(i) => u64::try_from(*i).ok(),
        Num::Str(s) => {
            let s = s.trim().replace('_', "");
            match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
                Some(h) => u64::from_str_radix(h, 16).ok(),
                None => s.parse().ok(),
            }
        }
    }
}

fn parse_unit(s: &str) -> Option<TimeUnit> {
    Some(match s {
        "ps" | "picos" => TimeUnit::Picos,
        "ns" | "nanos" => TimeUnit::Nanos,
        "us" | "µs" | "micros" => TimeUnit::Micros,
        "ms" | "millis" => TimeUnit::Millis,
        "s" | "seconds" => TimeUnit::Seconds,
        other => TimeUnit::Hz(other.strip_suffix("hz").or_else(|| other.strip_suffix("Hz"))?.parse().ok()?),
    })
}
