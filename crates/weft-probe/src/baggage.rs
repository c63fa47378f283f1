//! Request baggage for Pivot Tracing's happened-before join: values an upstream tracepoint
//! packs into the request's context travel with it across processes (W3C `baggage` header
//! form, `key=value,key=value`, values percent-encoded) and group a downstream tracepoint's
//! aggregate ([`crate::query::Operand::Baggage`]).
//!
//! * Each thread has one bounded baggage ([`MAX_BYTES`] of header text, no allocation). A
//!   member that does not fit, or a malformed incoming member, is dropped and counted
//!   ([`dropped`]).
//! * Only a live query with a carry list ([`crate::query::Plan::carry`]) adds members: while
//!   none is installed, a thread's baggage holds only what arrived with the request, and a
//!   process that received none sends none ([`header`] is `None`).
//! * A server scopes a request's baggage with [`enter`] (the incoming header, or none); the
//!   guard restores the thread's previous baggage when dropped. A client sends [`header`]
//!   next to its `traceparent`.
//!
//! ```
//! let g = weft_probe::baggage::enter(Some("gateway.volume=v%2C1"));
//! assert_eq!(weft_probe::baggage::header().as_deref(), Some("gateway.volume=v%2C1"));
//! drop(g);
//! assert_eq!(weft_probe::baggage::header(), None);
//! ```

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};

/// Most bytes of a thread's baggage (header text).
pub const MAX_BYTES: usize = 256;

static DROPPED: AtomicU64 = AtomicU64::new(0);

/// Members dropped so far in this process: over [`MAX_BYTES`], or malformed on arrival.
pub fn dropped() -> u64 {
    DROPPED.load(Ordering::Relaxed)
}

fn drop_one() {
    DROPPED.fetch_add(1, Ordering::Relaxed);
}

/// One thread's baggage: header text in a fixed buffer.
#[derive(Clone, Copy)]
struct Bag {
    len: u16,
    buf: [u8; MAX_BYTES],
}

impl Bag {
    const EMPTY: Bag = Bag { len: 0, buf: [0; MAX_BYTES] };

    fn text(&self) -> &[u8] {
        &self.buf[..self.len as usize]
    }

    /// Append one member (`key=value` text, already encoded); `false` if it does not fit.
    fn push_member(&mut self, key: &[u8], enc_value: impl Iterator<Item = u8> + Clone) -> bool {
        let sep = usize::from(self.len > 0);
        let need = sep + key.len() + 1 + enc_value.clone().count();
        let at = self.len as usize;
        if at + need > MAX_BYTES {
            return false;
        }
        let mut i = at;
        let mut put = |b: u8| {
            self.buf[i] = b;
            i += 1;
        };
        if sep == 1 {
            put(b',');
        }
        key.iter().for_each(|b| put(*b));
        put(b'=');
        enc_value.for_each(put);
        self.len = i as u16;
        true
    }

    /// The member of `key`: its byte range in the text (value part), if present.
    fn find(&self, key: &[u8]) -> Option<(usize, usize, std::ops::Range<usize>)> {
        let t = self.text();
        let mut start = 0;
        while start < t.len() {
            let end = t[start..].iter().position(|b| *b == b',').map_or(t.len(), |p| start + p);
            let m = &t[start..end];
            if let Some(eq) = m.iter().position(|b| *b == b'=')
                && trim(&m[..eq]) == key
            {
                let v = start + eq + 1;
                let vend = t[v..end].iter().position(|b| *b == b';').map_or(end, |p| v + p);
                return Some((start, end, v..vend));
            }
            start = end + 1;
        }
        None
    }

    fn remove(&mut self, key: &[u8]) {
        let Some((start, end, _)) = self.find(key) else { return };
        let len = self.len as usize;
        // take the separator with it: the one after, else the one before
        let (from, to) = if end < len { (start, end + 1) } else { (start.saturating_sub(1), end) };
        self.buf.copy_within(to..len, from);
        self.len = (len - (to - from)) as u16;
    }
}

fn trim(b: &[u8]) -> &[u8] {
    let s = b.iter().position(|c| !c.is_ascii_whitespace()).unwrap_or(b.len());
    let e = b.iter().rposition(|c| !c.is_ascii_whitespace()).map_or(s, |p| p + 1);
    &b[s..e]
}

/// W3C `baggage-octet`: printable ASCII except space, `"`, `,`, `;`, `\` (and `%`, which
/// starts an escape here).
fn plain(b: u8) -> bool {
    matches!(b, 0x21 | 0x23..=0x24 | 0x26..=0x2b | 0x2d..=0x3a | 0x3c..=0x5b | 0x5d..=0x7e)
}

fn encode(v: &[u8]) -> impl Iterator<Item = u8> + Clone + '_ {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    v.iter().flat_map(|&b| {
        let esc = !plain(b);
        let n = if esc { 3 } else { 1 };
        let seq = if esc { [b'%', HEX[(b >> 4) as usize], HEX[(b & 15) as usize]] } else { [b, 0, 0] };
        seq.into_iter().take(n)
    })
}

fn valid_key(k: &[u8]) -> bool {
    !k.is_empty() && k.iter().all(|b| b.is_ascii_graphic() && !b"\"(),/:;<=>?@[\\]{}".contains(b))
}

thread_local! {
    static BAG: RefCell<Bag> = const { RefCell::new(Bag::EMPTY) };
}

/// Restores the thread's previous baggage when dropped (see [`enter`]).
#[must_use = "the baggage is the thread's only while the guard lives"]
pub struct Guard {
    prev: Bag,
}

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = BAG.try_with(|b| {
            if let Ok(mut b) = b.try_borrow_mut() {
                *b = self.prev;
            }
        });
    }
}

/// Make `header` (an incoming `baggage` header value, or none) the thread's baggage until the
/// guard drops. Members that are malformed or do not fit are dropped and counted.
pub fn enter(header: Option<&str>) -> Guard {
    let mut next = Bag::EMPTY;
    for m in header.unwrap_or("").split(',') {
        let m = m.trim();
        if m.is_empty() {
            continue;
        }
        let ok = match m.split_once('=') {
            Some((k, v)) => {
                let k = k.trim().as_bytes();
                valid_key(k)
                    && v.trim().bytes().all(|b| plain(b) || b == b'%' || b == b';' || b == b'=' || b == b' ')
                    && next.find(k).is_none()
                    && next.push_member(k, v.trim().bytes())
            }
            None => false,
        };
        if !ok {
            drop_one();
        }
    }
    let prev = BAG
        .try_with(|b| match b.try_borrow_mut() {
            Ok(mut b) => std::mem::replace(&mut *b, next),
            Err(_) => Bag::EMPTY,
        })
        .unwrap_or(Bag::EMPTY);
    Guard { prev }
}

/// The thread's baggage as a `baggage` header value, `None` when empty.
pub fn header() -> Option<String> {
    BAG.try_with(|b| {
        let b = b.try_borrow().ok()?;
        (b.len > 0).then(|| String::from_utf8_lossy(b.text()).into_owned())
    })
    .ok()
    .flatten()
}

/// Set member `key` to `value` (percent-encoded), replacing an earlier one; a member that
/// does not fit is dropped and counted.
pub(crate) fn put(key: &str, value: &[u8]) {
    let _ = BAG.try_with(|b| {
        let Ok(mut b) = b.try_borrow_mut() else { return };
        b.remove(key.as_bytes());
        if !b.push_member(key.as_bytes(), encode(value)) {
            drop_one();
        }
    });
}

/// Decode member `key`'s value into `out`; its length (truncated to `out`), or `None` when
/// the thread's baggage has no such member.
pub(crate) fn get(key: &str, out: &mut [u8]) -> Option<usize> {
    BAG.try_with(|b| {
        let b = b.try_borrow().ok()?;
        let (_, _, r) = b.find(key.as_bytes())?;
        let v = trim(&b.text()[r]);
        let mut n = 0;
        let mut i = 0;
        while i < v.len() && n < out.len() {
            let hex = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
            let byte = match (v[i], v.get(i + 1).copied().and_then(hex), v.get(i + 2).copied().and_then(hex))
            {
                (b'%', Some(h), Some(l)) => {
                    i += 3;
                    h << 4 | l
                }
                (c, _, _) => {
                    i += 1;
                    c
                }
            };
            out[n] = byte;
            n += 1;
        }
        Some(n)
    })
    .ok()
    .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(key: &str) -> Option<Vec<u8>> {
        let mut out = [0u8; 64];
        get(key, &mut out).map(|n| out[..n].to_vec())
    }

    #[test]
    fn put_get_replace_and_restore() {
        assert_eq!(header(), None);
        let g = enter(Some("a=1, b = x%20y;prop=1"));
        assert_eq!(value("b").as_deref(), Some(&b"x y"[..]));
        put("c", b"v,1 \xff");
        assert_eq!(value("c").as_deref(), Some(&b"v,1 \xff"[..]));
        assert_eq!(header().as_deref(), Some("a=1,b=x%20y;prop=1,c=v%2C1%20%FF"));
        put("a", b"2");
        assert_eq!(header().as_deref(), Some("b=x%20y;prop=1,c=v%2C1%20%FF,a=2"));
        assert_eq!(value("zz"), None);
        drop(g);
        assert_eq!(header(), None);
    }

    #[test]
    fn bounded_and_counted() {
        let _g = enter(None);
        let before = dropped();
        let big = [b'x'; MAX_BYTES];
        put("k", &big);
        assert_eq!(header(), None, "a member over the cap is not added");
        assert_eq!(dropped(), before + 1);
        let long = format!("k={}", "y".repeat(MAX_BYTES));
        let _h = enter(Some(&format!("ok=1,{long},bad,=x,q\"=1")));
        assert_eq!(header().as_deref(), Some("ok=1"));
        assert_eq!(dropped(), before + 5);
    }
}
