//! ns-3 packet traces → [`NetEvent`]s, in three layouts:
//!
//! 1. **SimBricks ns-3 fork (2024)**: `<+|-|d> <ps> <path> Packet-Uid=<uid>
//!    Intersting=<true|false> [ns3::EthernetHeader(…)] [ns3::ArpHeader(…)] [ns3::Ipv4Header(…)]
//!    <packet print>` (the misspelt `Intersting` is what the fork writes).
//! 2. **The fork's 2023 layout**: the same without `Packet-Uid=`/`Intersting=`.
//! 3. **Stock ns-3 `AsciiTraceHelper`**: `<+|-|d|r> <seconds> /NodeList/<n>/DeviceList/<d>/$ns3::<Type>/<source> <packet print>`
//!    (time in seconds, printed with the stream's precision — 6 significant digits by default;
//!    `r` = MacRx).
//!
//! `<path>` is `/$ns3::NodeListPriv/NodeList/<n>/$ns3::Node/DeviceList/<d>/$ns3::<Type>/<source>`
//! in the fork and `/NodeList/<n>/DeviceList/<d>/$ns3::<Type>/<source>` in stock ns-3; both are
//! accepted.
//!
//! **Time.** Raw time is always picoseconds. An integer time token is ps when the line is in
//! a fork layout (`Packet-Uid=` present or a `NodeListPriv` path) and seconds otherwise; a
//! token with `.` or an exponent is seconds. Seconds are converted to ps exactly (decimal
//! arithmetic, no floating point). [`Ns3Time`] overrides the detection.
//!
//! **Headers.** The fork prints the headers it could `PeekHeader` itself (no space before
//! `(`) and then ns-3's normal packet print (with a space: `ns3::EthernetHeader (`). On a
//! `SimpleNetDevice` the manually peeked Ethernet header is garbage (the packet carries no
//! Ethernet header there), so an Ethernet header is taken from the packet print, or from the
//! manual print only on a `CosimNetDevice` (raw frames from the NIC). ARP and IPv4 come from
//! their first occurrence; UDP/TCP ports and TCP `Seq=`/`Ack=` from the packet print;
//! `Payload (size=N)` gives the payload size (0 if absent).
//!
//! **Boundary.** `CosimNetDevice/RxPacketFromAdapter` = the packet entered the network from a
//! NIC simulator; `CosimNetDevice/TxPacketToAdapter` = it leaves towards one; all else is
//! within the network.
//!
//! Skipped: blank lines. Rejected: an unknown kind character, a bad time, a path without
//! node/device/type, or a header field that does not parse (the reason names it). Any device
//! type is accepted (unlike Columbo, which only knows Simple and Cosim devices).

use std::collections::HashMap;
use std::sync::Arc;

use memchr::memmem::Finder;
use weft_model::event::{ArpHeader, Boundary, DeviceType, EthHeader, EventKind, Ipv4Header, NetEvent, NetOp};
use weft_model::{Clock, Event, SourceId};

use crate::parse::{Cursor, Interner, LineOutcome, LineParser, Stamp, dec_prefix, hex_value, is_blank};

/// How the time column is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Ns3Time {
    /// Detect per line (see the module docs).
    #[default]
    Auto,
    /// Integer picoseconds (SimBricks fork).
    Picos,
    /// Seconds (stock ns-3).
    Seconds,
}

/// The ns-3 parser (see the module docs).
pub struct Ns3Parser {
    stamp: Stamp,
    time: Ns3Time,
    sources: Interner,
    /// Device types by name: the first few searched linearly, the rest hashed.
    recent_types: Vec<(Box<[u8]>, DeviceType)>,
    types: HashMap<Box<[u8]>, DeviceType>,
    f: Finders,
}

/// Substring searchers, built once per parser (building one costs more than a short search).
struct Finders {
    ns3: Finder<'static>,
    payload: Finder<'static>,
    node_list: Finder<'static>,
    device_list: Finder<'static>,
    node_list_priv: Finder<'static>,
    ip_length: Finder<'static>,
    ip_id: Finder<'static>,
    ip_protocol: Finder<'static>,
    arp_src: Finder<'static>,
    arp_dst: Finder<'static>,
    tcp_seq: Finder<'static>,
    tcp_ack: Finder<'static>,
}

impl Finders {
    fn new() -> Self {
        Finders {
            ns3: Finder::new(b"ns3::"),
            payload: Finder::new(b"Payload (size="),
            node_list: Finder::new(b"NodeList/"),
            device_list: Finder::new(b"DeviceList/"),
            node_list_priv: Finder::new(b"NodeListPriv"),
            ip_length: Finder::new(b"length: "),
            ip_id: Finder::new(b" id "),
            ip_protocol: Finder::new(b"protocol "),
            arp_src: Finder::new(b"source ipv4: "),
            arp_dst: Finder::new(b"dest ipv4: "),
            tcp_seq: Finder::new(b" Seq="),
            tcp_ack: Finder::new(b" Ack="),
        }
    }
}

type R<T> = Result<T, &'static str>;

impl Ns3Parser {
    /// A parser for `source`; raw time (ps) converts through `clock` (normally
    /// [`Clock::simulated_picos`]).
    pub fn new(source: SourceId, clock: Clock, time: Ns3Time) -> Self {
        Ns3Parser {
            stamp: Stamp::new(source, clock),
            time,
            sources: Interner::new(4096),
            recent_types: Vec::new(),
            types: HashMap::new(),
            f: Finders::new(),
        }
    }

    fn device_type(&mut self, name: &[u8]) -> DeviceType {
        if let Some((_, t)) = self.recent_types.iter().find(|(k, _)| **k == *name) {
            return t.clone();
        }
        if let Some(t) = self.types.get(name) {
            return t.clone();
        }
        let t = DeviceType::from_name(&String::from_utf8_lossy(name));
        if self.recent_types.len() < 16 {
            self.recent_types.push((name.into(), t.clone()));
        } else if self.types.len() < 1024 {
            self.types.insert(name.into(), t.clone());
        }
        t
    }

    fn parse(&mut self, line: &[u8]) -> R<(u64, NetEvent)> {
        let mut c = Cursor::new(line);
        let op = match c.peek() {
            Some(b'+') => NetOp::Enqueue,
            Some(b'-') => NetOp::Dequeue,
            Some(b'd') => NetOp::Drop,
            Some(b'r') => NetOp::Receive,
            _ => return Err("expected '+', '-', 'd' or 'r' at the start of the line"),
        };
        c.skip(1);
        if !matches!(c.peek(), Some(b' ' | b'\t')) {
            return Err("expected a space after the kind character");
        }
        c.spaces();
        let time_tok = c.token();
        c.spaces();
        let path = c.token();
        if !path.starts_with(b"/") {
            return Err("expected a '/NodeList/...' context path");
        }
        let (node, device, dtype, source) = self.path(path)?;
        c.spaces();
        let mut packet_uid = None;
        let mut interesting = None;
        if let Some(uid) = c.field(b"Packet-Uid=", Cursor::dec) {
            packet_uid = Some(uid);
            c.spaces();
            interesting = Some(if c.lit(b"Intersting=true") || c.lit(b"Interesting=true") {
                true
            } else if c.lit(b"Intersting=false") || c.lit(b"Interesting=false") {
                false
            } else {
                return Err("bad 'Intersting' (true or false expected)");
            });
        } else if c.rest.starts_with(b"Packet-Uid=") {
            return Err("bad 'Packet-Uid' (decimal expected)");
        }
        let fork = packet_uid.is_some() || self.f.node_list_priv.find(path).is_some();
        let raw = match (self.time, is_seconds_token(time_tok), fork) {
            (Ns3Time::Picos, _, _) | (Ns3Time::Auto, false, true) => match dec_prefix(time_tok) {
                Some((v, n)) if n == time_tok.len() => v,
                _ => return Err("bad time (integer picoseconds expected)"),
            },
            _ => seconds_to_ps(time_tok).ok_or("bad time (seconds expected)")?,
        };
        let boundary = if dtype == DeviceType::Cosim {
            match &*source {
                "RxPacketFromAdapter" => Boundary::FromAdapter,
                "TxPacketToAdapter" => Boundary::ToAdapter,
                _ => Boundary::Within,
            }
        } else {
            Boundary::Within
        };
        let mut ev = NetEvent {
            op,
            node,
            device,
            device_type: dtype,
            trace_source: source,
            packet_uid,
            interesting,
            payload_size: 0,
            boundary,
            eth: None,
            arp: None,
            ipv4: None,
        };
        self.headers(c.rest, &mut ev)?;
        Ok((raw, ev))
    }

    fn path(&mut self, path: &[u8]) -> R<(u32, u32, DeviceType, Arc<str>)> {
        let mut c = Cursor::new(path);
        if !c.past_with(&self.f.node_list) {
            return Err("context path without 'NodeList/'");
        }
        let node = c.dec().ok_or("bad node number in the context path")?;
        if !c.past_with(&self.f.device_list) {
            return Err("context path without 'DeviceList/'");
        }
        let device = c.dec().ok_or("bad device number in the context path")?;
        if !c.lit(b"/$ns3::") {
            return Err("context path without '/$ns3::<DeviceType>'");
        }
        let slash = memchr::memchr(b'/', c.rest).ok_or("context path without a trace source")?;
        let dtype = &c.rest[..slash];
        let source = &c.rest[slash + 1..];
        if dtype.is_empty() || source.is_empty() {
            return Err("context path without a device type or trace source");
        }
        let node = u32::try_from(node).map_err(|_| "node number out of range")?;
        let device = u32::try_from(device).map_err(|_| "device number out of range")?;
        Ok((node, device, self.device_type(dtype), self.sources.get(source)))
    }

    fn headers(&self, rest: &[u8], ev: &mut NetEvent) -> R<()> {
        let mut pos = 0;
        let f = &self.f;
        while let Some(i) = f.ns3.find(&rest[pos..]) {
            let at = pos + i + 5;
            let h = &rest[at..];
            pos = at;
            if let Some(body) = h.strip_prefix(b"EthernetHeader") {
                let printed = body.starts_with(b" (");
                if ev.eth.is_none() && (printed || ev.device_type == DeviceType::Cosim) {
                    ev.eth = Some(eth(body)?);
                }
            } else if let Some(body) = h.strip_prefix(b"ArpHeader") {
                if ev.arp.is_none() {
                    ev.arp = Some(arp(body, f)?);
                }
            } else if let Some(body) = h.strip_prefix(b"Ipv4Header") {
                if ev.ipv4.is_none() {
                    ev.ipv4 = Some(ipv4(body, f)?);
                }
            } else if let Some(body) = h.strip_prefix(b"UdpHeader") {
                if let Some(ip) = &mut ev.ipv4
                    && ip.src_port == 0
                {
                    let mut c = Cursor::new(body);
                    c.lit(b" ");
                    c.lit(b"(");
                    c.field(b"length: ", Cursor::dec).ok_or("bad UDP 'length'")?;
                    c.spaces();
                    (ip.src_port, ip.dst_port) = ports(&mut c).ok_or("bad UDP ports")?;
                }
            } else if let Some(body) = h.strip_prefix(b"TcpHeader")
                && let Some(ip) = &mut ev.ipv4
                && ip.src_port == 0
            {
                let mut c = Cursor::new(body);
                c.lit(b" ");
                c.lit(b"(");
                (ip.src_port, ip.dst_port) = ports(&mut c).ok_or("bad TCP ports")?;
                // `[ ACK ] Seq=1 Ack=1 Win=…)`: the numbers of this header only.
                let hdr = &c.rest[..memchr::memchr(b')', c.rest).unwrap_or(c.rest.len())];
                ip.tcp_seq = tcp_number(hdr, &f.tcp_seq).ok_or("bad TCP 'Seq'")?;
                ip.tcp_ack = tcp_number(hdr, &f.tcp_ack).ok_or("bad TCP 'Ack'")?;
            }
        }
        if let Some(i) = f.payload.find(rest) {
            let mut c = Cursor::new(&rest[i + 14..]);
            let n = c.dec().ok_or("bad 'Payload (size=' (decimal expected)")?;
            ev.payload_size = u32::try_from(n).map_err(|_| "payload size out of range")?;
        }
        Ok(())
    }
}

impl LineParser for Ns3Parser {
    fn format(&self) -> &'static str {
        "ns3"
    }

    fn parse_line(&mut self, line: &[u8], out: &mut Vec<Event>) -> LineOutcome {
        if is_blank(line) {
            return LineOutcome::Skipped("blank line");
        }
        match self.parse(line) {
            Ok((raw, ev)) => {
                out.push(self.stamp.event(raw, EventKind::Net(ev)));
                LineOutcome::Parsed
            }
            Err(r) => LineOutcome::Rejected(r),
        }
    }
}

fn is_seconds_token(t: &[u8]) -> bool {
    t.iter().any(|&b| b == b'.' || b == b'e' || b == b'E')
}

/// Decimal seconds (`1.00001`, `2`, `1e-05`, `3.5E+2`) → picoseconds, exactly (truncating
/// digits below 1 ps). `None` for malformed text or overflow.
pub fn seconds_to_ps(t: &[u8]) -> Option<u64> {
    let mut mant: u128 = 0;
    let mut frac_digits: i32 = 0;
    let mut digits = 0;
    let mut i = 0;
    let mut seen_dot = false;
    while i < t.len() {
        match t[i] {
            b'0'..=b'9' => {
                if mant < 10u128.pow(30) {
                    mant = mant * 10 + (t[i] - b'0') as u128;
                    if seen_dot {
                        frac_digits += 1;
                    }
                } else if !seen_dot {
                    return None;
                }
                digits += 1;
            }
            b'.' if !seen_dot => seen_dot = true,
            _ => break,
        }
        i += 1;
    }
    if digits == 0 {
        return None;
    }
    let mut exp: i32 = 0;
    if i < t.len() {
        if t[i] != b'e' && t[i] != b'E' {
            return None;
        }
        i += 1;
        let neg = match t.get(i) {
            Some(b'-') => {
                i += 1;
                true
            }
            Some(b'+') => {
                i += 1;
                false
            }
            _ => false,
        };
        let (e, n) = dec_prefix(&t[i..])?;
        if i + n != t.len() || e > 400 {
            return None;
        }
        exp = if neg { -(e as i32) } else { e as i32 };
    }
    let scale = 12 + exp - frac_digits;
    let v = if scale >= 0 {
        mant.checked_mul(10u128.checked_pow(scale as u32)?)?
    } else if scale < -38 {
        0
    } else {
        mant / 10u128.pow((-scale) as u32)
    };
    u64::try_from(v).ok()
}

fn mac(c: &mut Cursor<'_>) -> Option<[u8; 6]> {
    let mut m = [0u8; 6];
    for (k, b) in m.iter_mut().enumerate() {
        if k > 0 && !c.lit(b":") {
            return None;
        }
        let s = c.rest.get(..2)?;
        // As `u8::from_str_radix(s, 16)` reads two characters: a leading `+` is a sign.
        *b = match s[0] {
            b'+' => hex_value(s[1])?,
            h => (hex_value(h)? << 4) | hex_value(s[1])?,
        };
        c.skip(2);
    }
    Some(m)
}

fn ipv4_addr(c: &mut Cursor<'_>) -> Option<[u8; 4]> {
    let mut ip = [0u8; 4];
    for (k, b) in ip.iter_mut().enumerate() {
        if k > 0 && !c.lit(b".") {
            return None;
        }
        let (v, n) = dec_prefix(c.rest)?;
        if n > 3 {
            return None;
        }
        *b = u8::try_from(v).ok()?;
        c.skip(n);
    }
    Some(ip)
}

/// The decimal after `key` in a TCP header print; 0 when the key is absent, `None` when
/// what follows it is not a 32-bit decimal.
fn tcp_number(hdr: &[u8], key: &Finder<'_>) -> Option<u32> {
    match key.find(hdr) {
        Some(i) => u32::try_from(dec_prefix(&hdr[i + key.needle().len()..])?.0).ok(),
        None => Some(0),
    }
}

fn ports(c: &mut Cursor<'_>) -> Option<(u16, u16)> {
    let s = u16::try_from(c.dec()?).ok()?;
    c.spaces();
    if !c.lit(b">") {
        return None;
    }
    c.spaces();
    let d = u16::try_from(c.dec()?).ok()?;
    Some((s, d))
}

/// `( length/type=0x806, source=b0:9a:ac:67:3c:98, destination=ff:ff:ff:ff:ff:ff)`
fn eth(body: &[u8]) -> R<EthHeader> {
    let mut c = Cursor::new(body);
    c.spaces();
    c.lit(b"(");
    c.spaces();
    let lt = c.field(b"length/type=", Cursor::hex).ok_or("bad Ethernet 'length/type'")?;
    c.lit(b",");
    c.spaces();
    if !c.lit(b"source=") {
        return Err("bad Ethernet 'source'");
    }
    let src = mac(&mut c).ok_or("bad Ethernet 'source'")?;
    c.lit(b",");
    c.spaces();
    if !c.lit(b"destination=") {
        return Err("bad Ethernet 'destination'");
    }
    let dst = mac(&mut c).ok_or("bad Ethernet 'destination'")?;
    Ok(EthHeader { length_type: u16::try_from(lt).map_err(|_| "bad Ethernet 'length/type'")?, src, dst })
}

/// `(request source mac: 00-06-… source ipv4: 192.168.64.1 dest ipv4: 192.168.64.0)`; ns-3
/// ≥ 3.41 prints `(hardware type: Ethernet request …)`.
fn arp(body: &[u8], f: &Finders) -> R<ArpHeader> {
    let mut c = Cursor::new(body);
    c.spaces();
    c.lit(b"(");
    if c.lit(b"hardware type: ") {
        c.token();
        c.spaces();
    }
    let is_request = if c.lit(b"request") {
        true
    } else if c.lit(b"reply") {
        false
    } else {
        return Err("bad ARP header (request or reply expected)");
    };
    if !c.past_with(&f.arp_src) {
        return Err("bad ARP 'source ipv4'");
    }
    let src_ip = ipv4_addr(&mut c).ok_or("bad ARP 'source ipv4'")?;
    if !c.past_with(&f.arp_dst) {
        return Err("bad ARP 'dest ipv4'");
    }
    let dst_ip = ipv4_addr(&mut c).ok_or("bad ARP 'dest ipv4'")?;
    Ok(ArpHeader { is_request, src_ip, dst_ip })
}

/// `(tos 0x0 … ttl 64 id 0 protocol 17 offset (bytes) 0 flags [none] length: 284 a > b)`
fn ipv4(body: &[u8], f: &Finders) -> R<Ipv4Header> {
    let mut c = Cursor::new(body);
    let len_at = f.ip_length.find(c.rest).ok_or("bad IPv4 header ('length:' missing)")?;
    let pre = &c.rest[..len_at];
    let ident = match f.ip_id.find(pre) {
        Some(i) => {
            u16::try_from(dec_prefix(&pre[i + 4..]).ok_or("bad IPv4 'id'")?.0).map_err(|_| "bad IPv4 'id'")?
        }
        None => 0,
    };
    let protocol = match f.ip_protocol.find(pre) {
        Some(i) => u8::try_from(dec_prefix(&pre[i + 9..]).ok_or("bad IPv4 'protocol'")?.0)
            .map_err(|_| "bad IPv4 'protocol'")?,
        None => 0,
    };
    c.skip(len_at + 8);
    let length = u16::try_from(c.dec().ok_or("bad IPv4 'length'")?).map_err(|_| "bad IPv4 'length'")?;
    c.spaces();
    let src_ip = ipv4_addr(&mut c).ok_or("bad IPv4 source address")?;
    c.spaces();
    if !c.lit(b">") {
        return Err("bad IPv4 header ('>' missing)");
    }
    c.spaces();
    let dst_ip = ipv4_addr(&mut c).ok_or("bad IPv4 destination address")?;
    Ok(Ipv4Header {
        length,
        src_ip,
        dst_ip,
        protocol,
        ident,
        src_port: 0,
        dst_port: 0,
        tcp_seq: 0,
        tcp_ack: 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_with(line: &str, time: Ns3Time) -> Result<(u64, NetEvent), LineOutcome> {
        let mut p = Ns3Parser::new(SourceId(3), Clock::simulated_picos(0), time);
        let mut out = Vec::new();
        match p.parse_line(line.as_bytes(), &mut out) {
            LineOutcome::Parsed => match out.pop().map(|e| (e.raw_time, e.kind)) {
                Some((t, EventKind::Net(n))) => Ok((t, n)),
                k => panic!("{k:?}"),
            },
            o => Err(o),
        }
    }
    fn parse(line: &str) -> Result<(u64, NetEvent), LineOutcome> {
        parse_with(line, Ns3Time::Auto)
    }

    #[test]
    fn fork_layout() {
        let (t, e) = parse("+  1905164778000 /$ns3::NodeListPriv/NodeList/1/$ns3::Node/DeviceList/2/$ns3::CosimNetDevice/RxPacketFromAdapter Packet-Uid=0 Intersting=true ns3::EthernetHeader( length/type=0x806, source=b0:9a:ac:67:3c:98, destination=ff:ff:ff:ff:ff:ff) Payload (size=42)").unwrap();
        assert_eq!(t, 1_905_164_778_000);
        assert_eq!(e.op, NetOp::Enqueue);
        assert_eq!((e.node, e.device), (1, 2));
        assert_eq!(e.device_type, DeviceType::Cosim);
        assert_eq!(&*e.trace_source, "RxPacketFromAdapter");
        assert_eq!(e.boundary, Boundary::FromAdapter);
        assert_eq!((e.packet_uid, e.interesting, e.payload_size), (Some(0), Some(true), 42));
        let eth = e.eth.unwrap();
        assert_eq!(eth.length_type, 0x806);
        assert_eq!(eth.src, [0xb0, 0x9a, 0xac, 0x67, 0x3c, 0x98]);
        assert_eq!(eth.dst, [0xff; 6]);

        // SimpleNetDevice: the manually peeked Ethernet header is garbage and ignored.
        let (_, e) = parse("-  1905164778000 /$ns3::NodeListPriv/NodeList/1/$ns3::Node/DeviceList/1/$ns3::SimpleNetDevice/TxQueue/Dequeue Packet-Uid=0 Intersting=true ns3::EthernetHeader( length/type=0x3c98, source=00:01:b0:9a:ac:67, destination=00:01:08:00:06:04) ns3::ArpHeader(request source mac: 00-06-b0:9a:ac:67:3c:98 source ipv4: 192.168.64.1 dest ipv4: 192.168.64.0) Payload (size=42)").unwrap();
        assert_eq!(e.op, NetOp::Dequeue);
        assert_eq!(&*e.trace_source, "TxQueue/Dequeue");
        assert_eq!(e.eth, None);
        assert_eq!(
            e.arp,
            Some(ArpHeader { is_request: true, src_ip: [192, 168, 64, 1], dst_ip: [192, 168, 64, 0] })
        );
        assert_eq!(e.boundary, Boundary::Within);

        let (_, e) = parse("-  2986435512000 /$ns3::NodeListPriv/NodeList/1/$ns3::Node/DeviceList/2/$ns3::CosimNetDevice/TxPacketToAdapter Packet-Uid=27 Intersting=false ns3::EthernetHeader ( length/type=0x800, source=78:d2:22:c4:b0:a9, destination=a8:32:06:8c:52:b1) ns3::Ipv4Header (tos 0x0 DSCP Default ECN Not-ECT ttl 64 id 50300 protocol 1 offset (bytes) 0 flags [none] length: 84 192.168.64.2 > 192.168.64.3) Payload (size=98)").unwrap();
        assert_eq!(e.boundary, Boundary::ToAdapter);
        assert_eq!(e.interesting, Some(false));
        let ip = e.ipv4.unwrap();
        assert_eq!((ip.length, ip.protocol, ip.ident), (84, 1, 50300));
        assert_eq!((ip.src_ip, ip.dst_ip), ([192, 168, 64, 2], [192, 168, 64, 3]));
        assert_eq!(e.eth.unwrap().length_type, 0x800);
    }

    #[test]
    fn arp_with_the_hardware_type_of_newer_ns3() {
        // ns-3 3.44's ArpHeader::Print (SimpleNetDevice, manual and packet print).
        let (_, e) = parse("+ 10000000000 /$ns3::NodeListPriv/NodeList/0/$ns3::Node/DeviceList/0/$ns3::SimpleNetDevice/TxQueue/Enqueue Packet-Uid=1 Intersting=true ns3::ArpHeader(hardware type: Ethernet request source mac: 00-06-00:00:00:00:00:01 source ipv4: 10.0.0.1 dest ipv4: 10.0.0.2) ns3::ArpHeader (hardware type: Ethernet request source mac: 00-06-00:00:00:00:00:01 source ipv4: 10.0.0.1 dest ipv4: 10.0.0.2) Payload (size=18)").unwrap();
        assert_eq!(e.arp, Some(ArpHeader { is_request: true, src_ip: [10, 0, 0, 1], dst_ip: [10, 0, 0, 2] }));
        let (_, e) = parse("- 1 /NodeList/3/DeviceList/0/$ns3::PointToPointNetDevice/TxQueue/Dequeue ns3::PppHeader (Point-to-Point Protocol: ARP (0x0806)) ns3::ArpHeader (hardware type: Ethernet reply source mac: 00-06-00:00:00:00:00:02 source ipv4: 10.0.0.2 dest mac: 00-06-00:00:00:00:00:01 dest ipv4: 10.0.0.1) Payload (size=18)").unwrap();
        assert_eq!(
            e.arp,
            Some(ArpHeader { is_request: false, src_ip: [10, 0, 0, 2], dst_ip: [10, 0, 0, 1] })
        );
    }

    #[test]
    fn v1_and_generated_layouts() {
        // 2023 fork: no uid; ps because of the NodeListPriv path.
        let (t, e) = parse("+  1924400059000 /$ns3::NodeListPriv/NodeList/1/$ns3::Node/DeviceList/2/$ns3::CosimNetDevice/RxPacketFromAdapter ns3::EthernetHeader( length/type=0x806, source=7c:19:62:99:3b:b4, destination=ff:ff:ff:ff:ff:ff) Payload (size=42)").unwrap();
        assert_eq!(t, 1_924_400_059_000);
        assert_eq!(e.packet_uid, None);
        // Generated fork layout with a plain /NodeList path.
        let (t, e) = parse("+ 1000000000000 /NodeList/0/DeviceList/0/$ns3::SimpleNetDevice/TxQueue/Enqueue Packet-Uid=0 Intersting=true ns3::EthernetHeader( length/type=0xc0a8, source=00:00:40:11:00:00, destination=45:00:01:1c:00:00) ns3::Ipv4Header (tos 0x0 DSCP Default ECN Not-ECT ttl 64 id 0 protocol 17 offset (bytes) 0 flags [none] length: 284 192.168.64.1 > 192.168.64.2) ns3::UdpHeader (length: 264 49153 > 9) Payload (size=256)").unwrap();
        assert_eq!(t, 1_000_000_000_000);
        let ip = e.ipv4.unwrap();
        assert_eq!((ip.protocol, ip.src_port, ip.dst_port), (17, 49153, 9));
    }

    #[test]
    fn stock_layout() {
        let (t, e) = parse("r 1.00001 /NodeList/2/DeviceList/0/$ns3::PointToPointNetDevice/MacRx ns3::PppHeader (Point-to-Point Protocol: IP (0x0021)) ns3::Ipv4Header (tos 0x0 DSCP Default ECN Not-ECT ttl 63 id 0 protocol 17 offset (bytes) 0 flags [none] length: 284 10.0.0.1 > 10.0.2.2) ns3::UdpHeader (length: 264 49153 > 9) Payload (size=256)").unwrap();
        assert_eq!(t, 1_000_010_000_000);
        assert_eq!(e.op, NetOp::Receive);
        assert_eq!(e.device_type, DeviceType::PointToPoint);
        assert_eq!(e.packet_uid, None);
        assert_eq!(e.ipv4.unwrap().dst_port, 9);
        // "+ 1 /NodeList..." is one second in stock output.
        assert_eq!(
            parse(
                "+ 1 /NodeList/0/DeviceList/0/$ns3::PointToPointNetDevice/TxQueue/Enqueue Payload (size=1)"
            )
            .unwrap()
            .0,
            1_000_000_000_000
        );
        assert_eq!(
            parse_with(
                "+ 1 /NodeList/0/DeviceList/0/$ns3::PointToPointNetDevice/TxQueue/Enqueue",
                Ns3Time::Picos
            )
            .unwrap()
            .0,
            1
        );
        let tcp = parse("- 1.0012 /NodeList/3/DeviceList/0/$ns3::PointToPointNetDevice/TxQueue/Dequeue ns3::PppHeader (Point-to-Point Protocol: IP (0x0021)) ns3::Ipv4Header (tos 0x0 DSCP Default ECN Not-ECT ttl 64 id 3 protocol 6 offset (bytes) 0 flags [none] length: 1064 10.0.2.2 > 10.0.0.1) ns3::TcpHeader (49153 > 5000 [ ACK ] Seq=1 Ack=1 Win=131072) Payload (size=1024)").unwrap().1;
        let ip = tcp.ipv4.unwrap();
        assert_eq!((ip.protocol, ip.ident, ip.src_port, ip.dst_port), (6, 3, 49153, 5000));
        assert_eq!((ip.tcp_seq, ip.tcp_ack), (1, 1));
        let tcp = parse("+ 1.2 /NodeList/4/DeviceList/1/$ns3::PointToPointNetDevice/TxQueue/Enqueue ns3::PppHeader (Point-to-Point Protocol: IP (0x0021)) ns3::Ipv4Header (tos 0x0 DSCP Default ECN Not-ECT ttl 63 id 812 protocol 6 offset (bytes) 0 flags [none] length: 576 10.1.4.2 > 10.1.0.1) ns3::TcpHeader (49153 > 5000 [ ACK ] Seq=4294967295 Ack=3 Win=65535 ns3::TcpOptionTS(1099;1080)) Payload (size=536)").unwrap().1;
        let ip = tcp.ipv4.unwrap();
        assert_eq!((ip.tcp_seq, ip.tcp_ack), (4_294_967_295, 3));
        assert_eq!(
            parse("+ 1 /NodeList/0/DeviceList/0/$ns3::A/B ns3::Ipv4Header (id 1 protocol 6 length: 40 1.2.3.4 > 1.2.3.5) ns3::TcpHeader (1 > 2 [ SYN ] Seq=x Ack=0)").unwrap_err(),
            LineOutcome::Rejected("bad TCP 'Seq'")
        );
    }

    #[test]
    fn seconds() {
        assert_eq!(seconds_to_ps(b"1"), Some(1_000_000_000_000));
        assert_eq!(seconds_to_ps(b"1.00001"), Some(1_000_010_000_000));
        assert_eq!(seconds_to_ps(b"0.000123456789012345"), Some(123_456_789));
        assert_eq!(seconds_to_ps(b"1e-05"), Some(10_000_000));
        assert_eq!(seconds_to_ps(b"2.5E+1"), Some(25_000_000_000_000));
        assert_eq!(seconds_to_ps(b"1e400"), None);
        assert_eq!(seconds_to_ps(b"99999999999"), None, "overflows u64 ps");
        assert_eq!(seconds_to_ps(b"1.2.3"), None);
        assert_eq!(seconds_to_ps(b""), None);
        assert_eq!(seconds_to_ps(b"."), None);
    }

    #[test]
    fn rejects() {
        assert_eq!(
            parse("x 1 /NodeList/0").unwrap_err(),
            LineOutcome::Rejected("expected '+', '-', 'd' or 'r' at the start of the line")
        );
        assert_eq!(
            parse("+ 1 NodeList/0").unwrap_err(),
            LineOutcome::Rejected("expected a '/NodeList/...' context path")
        );
        assert_eq!(
            parse("+ 1 /NodeList/x/DeviceList/0/$ns3::A/B").unwrap_err(),
            LineOutcome::Rejected("bad node number in the context path")
        );
        assert_eq!(
            parse("+ 1x /NodeList/0/DeviceList/0/$ns3::A/B Packet-Uid=1 Intersting=true").unwrap_err(),
            LineOutcome::Rejected("bad time (integer picoseconds expected)")
        );
        assert_eq!(
            parse("+ 1 /NodeList/0/DeviceList/0/$ns3::A/B Packet-Uid=1 Intersting=maybe").unwrap_err(),
            LineOutcome::Rejected("bad 'Intersting' (true or false expected)")
        );
        assert_eq!(
            parse("+ 1 /NodeList/0/DeviceList/0/$ns3::A/B ns3::Ipv4Header (length: 5 1.2.3 > 1.2.3.4)")
                .unwrap_err(),
            LineOutcome::Rejected("bad IPv4 source address")
        );
        assert_eq!(parse("").unwrap_err(), LineOutcome::Skipped("blank line"));
    }
}
