//! The wire protocol between the tiers: length-prefixed binary frames over TCP.
//!
//! ```text
//! u32 LE  frame length (bytes after this word, ≤ MAX_FRAME)
//! u8      op (READ, WRITE, REPLY, ERROR, STAT)
//! u8      traceparent length, then the W3C traceparent (0 = none)
//! u16 LE  baggage length, then the W3C baggage header value (0 = none; carried while a
//!         happened-before join query runs, see `weft_probe::baggage`)
//! u16 LE  volume length, then the volume name (UTF-8)
//! u64 LE  offset
//! u32 LE  length (bytes to read; data length for WRITE/REPLY)
//! …       data
//! ```

use std::io::{self, Read, Write};

pub const MAX_FRAME: usize = 16 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Op {
    Read = 1,
    Write = 2,
    Reply = 3,
    Error = 4,
    /// A volume's in-flight requests, answered by the gateway.
    Stat = 5,
}

impl Op {
    fn from_u8(b: u8) -> Option<Op> {
        Some(match b {
            1 => Op::Read,
            2 => Op::Write,
            3 => Op::Reply,
            4 => Op::Error,
            5 => Op::Stat,
            _ => return None,
        })
    }
}

/// One message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Msg {
    pub op: Op,
    pub traceparent: Option<String>,
    pub baggage: Option<String>,
    pub volume: String,
    pub offset: u64,
    pub len: u32,
    pub data: Vec<u8>,
}

impl Msg {
    pub fn reply(data: Vec<u8>, traceparent: Option<String>) -> Msg {
        Msg {
            op: Op::Reply,
            traceparent,
            baggage: None,
            volume: String::new(),
            offset: 0,
            len: data.len() as u32,
            data,
        }
    }

    pub fn error(text: &str) -> Msg {
        Msg {
            op: Op::Error,
            traceparent: None,
            baggage: None,
            volume: String::new(),
            offset: 0,
            len: 0,
            data: text.as_bytes().to_vec(),
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let tp = self.traceparent.as_deref().unwrap_or("").as_bytes();
        let tp = &tp[..tp.len().min(255)];
        let bag = self.baggage.as_deref().unwrap_or("").as_bytes();
        let bag = &bag[..bag.len().min(u16::MAX as usize)];
        let vol = self.volume.as_bytes();
        let vol = &vol[..vol.len().min(u16::MAX as usize)];
        let body = 1 + 1 + tp.len() + 2 + bag.len() + 2 + vol.len() + 8 + 4 + self.data.len();
        let mut v = Vec::with_capacity(4 + body);
        v.extend_from_slice(&(body as u32).to_le_bytes());
        v.push(self.op as u8);
        v.push(tp.len() as u8);
        v.extend_from_slice(tp);
        v.extend_from_slice(&(bag.len() as u16).to_le_bytes());
        v.extend_from_slice(bag);
        v.extend_from_slice(&(vol.len() as u16).to_le_bytes());
        v.extend_from_slice(vol);
        v.extend_from_slice(&self.offset.to_le_bytes());
        v.extend_from_slice(&self.len.to_le_bytes());
        v.extend_from_slice(&self.data);
        v
    }

    /// Decode a frame body (after the length word).
    pub fn decode(b: &[u8]) -> Result<Msg, String> {
        let mut p = 0usize;
        let take = |p: &mut usize, n: usize, what: &str| -> Result<std::ops::Range<usize>, String> {
            let end = p
                .checked_add(n)
                .filter(|&e| e <= b.len())
                .ok_or_else(|| format!("frame truncated in {what} at byte {p}"))?;
            let r = *p..end;
            *p = end;
            Ok(r)
        };
        let op = b[take(&mut p, 1, "op")?][0];
        let op = Op::from_u8(op).ok_or_else(|| format!("unknown op {op}"))?;
        let tl = b[take(&mut p, 1, "traceparent length")?][0] as usize;
        let tp = &b[take(&mut p, tl, "traceparent")?];
        let traceparent = if tl == 0 {
            None
        } else {
            Some(std::str::from_utf8(tp).map_err(|_| "traceparent is not UTF-8".to_string())?.to_string())
        };
        let r = take(&mut p, 2, "baggage length")?;
        let bl = u16::from_le_bytes([b[r.start], b[r.start + 1]]) as usize;
        let bag = &b[take(&mut p, bl, "baggage")?];
        let baggage = if bl == 0 {
            None
        } else {
            Some(std::str::from_utf8(bag).map_err(|_| "baggage is not UTF-8".to_string())?.to_string())
        };
        let r = take(&mut p, 2, "volume length")?;
        let vl = u16::from_le_bytes([b[r.start], b[r.start + 1]]) as usize;
        let volume = std::str::from_utf8(&b[take(&mut p, vl, "volume")?])
            .map_err(|_| "volume is not UTF-8".to_string())?
            .to_string();
        let r = take(&mut p, 8, "offset")?;
        let mut o = [0u8; 8];
        o.copy_from_slice(&b[r]);
        let r = take(&mut p, 4, "length")?;
        let mut l = [0u8; 4];
        l.copy_from_slice(&b[r]);
        Ok(Msg {
            op,
            traceparent,
            baggage,
            volume,
            offset: u64::from_le_bytes(o),
            len: u32::from_le_bytes(l),
            data: b[p..].to_vec(),
        })
    }
}

/// Read one frame; `Ok(None)` on a clean EOF.
pub fn read_frame(r: &mut impl Read, buf: &mut Vec<u8>) -> io::Result<Option<usize>> {
    let mut len = [0u8; 4];
    match r.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let n = u32::from_le_bytes(len) as usize;
    if n > MAX_FRAME || n == 0 {
        return Err(io::Error::new(io::ErrorKind::InvalidData, format!("frame of {n} bytes")));
    }
    buf.resize(n, 0);
    r.read_exact(buf)?;
    Ok(Some(n))
}

pub fn write_msg(w: &mut impl Write, m: &Msg) -> io::Result<usize> {
    let v = m.encode();
    w.write_all(&v)?;
    Ok(v.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_truncation() {
        let m = Msg {
            op: Op::Write,
            traceparent: Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".into()),
            baggage: Some("gateway.op.write.volume=vol1".into()),
            volume: "vol1".into(),
            offset: 4096,
            len: 3,
            data: vec![1, 2, 3],
        };
        let v = m.encode();
        assert_eq!(Msg::decode(&v[4..]).unwrap(), m);
        for cut in 5..v.len() - 3 {
            assert!(Msg::decode(&v[4..cut]).is_err(), "cut at {cut}");
        }
        let mut r = &v[..];
        let mut buf = Vec::new();
        assert_eq!(read_frame(&mut r, &mut buf).unwrap(), Some(v.len() - 4));
        assert_eq!(read_frame(&mut r, &mut buf).unwrap(), None);
    }
}
