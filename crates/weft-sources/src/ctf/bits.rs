//! Bit-level reads in CTF's bit order.
//!
//! CTF numbers bits within a packet from the start: a little-endian field of `size` bits at
//! bit position `pos` takes bits from the least significant end of byte `pos / 8` upwards; a
//! big-endian field takes them from the most significant end downwards. Both readers load a
//! 16-byte window with one unaligned load, so callers must keep [`PAD`] readable bytes past
//! the last bit they read (the decoder pads its packet buffer).

/// Bytes that must be readable past the last byte holding bits a read touches.
pub const PAD: usize = 16;

#[inline]
fn window(buf: &[u8], byte: usize) -> [u8; 16] {
    match buf.get(byte..byte + 16) {
        Some(w) => {
            let mut a = [0u8; 16];
            a.copy_from_slice(w);
            a
        }
        None => {
            // Near the end of an unpadded buffer (only in tests and fuzzing): zero-fill.
            let mut a = [0u8; 16];
            if let Some(rest) = buf.get(byte..) {
                a[..rest.len()].copy_from_slice(rest);
            }
            a
        }
    }
}

/// Mask of the low `size` bits (`size` in 1..=64).
#[inline]
pub fn mask(size: u32) -> u64 {
    if size >= 64 { u64::MAX } else { (1u64 << size) - 1 }
}

/// Reads an unsigned little-endian field of `size` (1..=64) bits at bit `pos`.
#[inline]
pub fn read_le(buf: &[u8], pos: u64, size: u32) -> u64 {
    let byte = (pos >> 3) as usize;
    let shift = (pos & 7) as u32;
    let w = u128::from_le_bytes(window(buf, byte));
    ((w >> shift) as u64) & mask(size)
}

/// Reads an unsigned big-endian field of `size` (1..=64) bits at bit `pos`.
#[inline]
pub fn read_be(buf: &[u8], pos: u64, size: u32) -> u64 {
    let byte = (pos >> 3) as usize;
    let shift = (pos & 7) as u32;
    let w = u128::from_be_bytes(window(buf, byte));
    ((w << shift) >> (128 - size)) as u64
}

/// Sign-extends the low `size` bits of `v`.
#[inline]
pub fn sign_extend(v: u64, size: u32) -> u64 {
    if size >= 64 {
        v
    } else {
        let s = 64 - size;
        (((v << s) as i64) >> s) as u64
    }
}

/// Rounds `pos` up to a multiple of `align` (a power of two).
#[inline]
pub fn align_up(pos: u64, align: u32) -> u64 {
    let a = align as u64;
    (pos + a - 1) & !(a - 1)
}

/// Reference implementation, one bit at a time, for tests.
#[cfg(test)]
pub fn read_ref(buf: &[u8], pos: u64, size: u32, le: bool) -> u64 {
    let mut v = 0u64;
    for i in 0..size as u64 {
        let bit = if le {
            let p = pos + i;
            (buf[(p / 8) as usize] >> (p % 8)) & 1
        } else {
            let p = pos + i;
            (buf[(p / 8) as usize] >> (7 - p % 8)) & 1
        };
        if le {
            v |= (bit as u64) << i;
        } else {
            v = (v << 1) | bit as u64;
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn known_values() {
        let b = [0b1010_1100u8, 0xff, 0x12, 0x34];
        assert_eq!(read_le(&b, 2, 3), 0b011);
        assert_eq!(read_be(&b, 2, 3), 0b101);
        assert_eq!(read_le(&b, 16, 16), 0x3412);
        assert_eq!(read_be(&b, 16, 16), 0x1234);
        assert_eq!(sign_extend(0b111, 3) as i64, -1);
        assert_eq!(sign_extend(0b011, 3) as i64, 3);
        assert_eq!(align_up(9, 8), 16);
        assert_eq!(align_up(16, 8), 16);
        assert_eq!(align_up(3, 1), 3);
    }

    proptest! {
        #[test]
        fn matches_bit_by_bit_reference(
            bytes in proptest::collection::vec(any::<u8>(), 9..40),
            pos in 0u64..64,
            size in 1u32..=64,
        ) {
            prop_assume!(pos + size as u64 <= bytes.len() as u64 * 8);
            prop_assert_eq!(read_le(&bytes, pos, size), read_ref(&bytes, pos, size, true));
            prop_assert_eq!(read_be(&bytes, pos, size), read_ref(&bytes, pos, size, false));
        }

        #[test]
        fn writes_read_back(v in any::<u64>(), size in 1u32..=64, pos in 0u64..40, le in any::<bool>()) {
            // Write with a bit-by-bit writer, read with the fast reader.
            let v = v & mask(size);
            let mut buf = vec![0u8; 24];
            for i in 0..size as u64 {
                let bit = if le { (v >> i) & 1 } else { (v >> (size as u64 - 1 - i)) & 1 };
                let p = pos + i;
                let shift = if le { p % 8 } else { 7 - p % 8 };
                buf[(p / 8) as usize] |= (bit as u8) << shift;
            }
            let got = if le { read_le(&buf, pos, size) } else { read_be(&buf, pos, size) };
            prop_assert_eq!(got, v);
        }

        #[test]
        fn sign_extension_round_trips(v in any::<i64>(), size in 1u32..=64) {
            let lo = -(1i128 << (size - 1));
            let hi = (1i128 << (size - 1)) - 1;
            let v = (v as i128).clamp(lo, hi) as i64;
            prop_assert_eq!(sign_extend(v as u64 & mask(size), size) as i64, v);
        }
    }
}
