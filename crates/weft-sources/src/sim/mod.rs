//! Parsers of simulator logs, one module per simulator. Each turns lines into the
//! component-kind event streams of [`weft_model::event`]: gem5 → host events, nicbm → NIC
//! events, ns-3 → network events, QEMU → host and NIC events.
//!
//! [`parser_for`] builds a boxed parser from a format name, for configuration-driven callers.

pub mod gem5;
pub mod nicbm;
pub mod ns3;
pub mod qemu;

use weft_model::{Clock, SourceId};

use crate::parse::LineParser;

/// The simulator log formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SimFormat {
    /// gem5 debug log.
    Gem5,
    /// SimBricks nicbm (i40e and other behavioural NIC models).
    Nicbm,
    /// ns-3 packet traces (SimBricks fork layouts and stock `AsciiTraceHelper`).
    Ns3(ns3::Ns3Time),
    /// QEMU trace events and exec log.
    Qemu,
}

impl SimFormat {
    /// From a configuration name: `gem5`, `nicbm`, `ns3` (time auto-detected), `ns3-ps`,
    /// `ns3-seconds`, `qemu`.
    pub fn parse(s: &str) -> Option<SimFormat> {
        Some(match s {
            "gem5" => SimFormat::Gem5,
            "nicbm" | "i40e" => SimFormat::Nicbm,
            "ns3" | "ns-3" => SimFormat::Ns3(ns3::Ns3Time::Auto),
            "ns3-ps" => SimFormat::Ns3(ns3::Ns3Time::Picos),
            "ns3-seconds" => SimFormat::Ns3(ns3::Ns3Time::Seconds),
            "qemu" => SimFormat::Qemu,
            _ => return None,
        })
    }

    /// The format's natural clock: simulated ps from `epoch_ns` on, or for QEMU µs since the
    /// UNIX epoch (host wall clock; `epoch_ns` is ignored).
    pub fn default_clock(self, epoch_ns: u64) -> Clock {
        match self {
            SimFormat::Qemu => qemu::QEMU_CLOCK,
            _ => Clock::simulated_picos(epoch_ns),
        }
    }

    /// The simulator's tool name (`weft.source.tool`).
    pub fn tool(self) -> &'static str {
        match self {
            SimFormat::Gem5 => "gem5",
            SimFormat::Nicbm => "nicbm",
            SimFormat::Ns3(_) => "ns-3",
            SimFormat::Qemu => "qemu",
        }
    }
}

/// A parser for `format`.
pub fn parser_for(format: SimFormat, source: SourceId, clock: Clock) -> Box<dyn LineParser> {
    match format {
        SimFormat::Gem5 => Box::new(gem5::Gem5Parser::new(source, clock)),
        SimFormat::Nicbm => Box::new(nicbm::NicbmParser::new(source, clock)),
        SimFormat::Ns3(t) => Box::new(ns3::Ns3Parser::new(source, clock, t)),
        SimFormat::Qemu => Box::new(qemu::QemuParser::new(source, clock)),
    }
}

impl LineParser for Box<dyn LineParser> {
    fn format(&self) -> &'static str {
        (**self).format()
    }
    fn parse_line(&mut self, line: &[u8], out: &mut Vec<weft_model::Event>) -> crate::parse::LineOutcome {
        (**self).parse_line(line, out)
    }
    fn finish(&mut self, out: &mut Vec<weft_model::Event>) {
        (**self).finish(out)
    }
}
