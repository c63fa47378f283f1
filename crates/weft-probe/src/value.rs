//! Field values and their encoding into records (see [`crate::layout`], "Records").

use crate::layout::*;
use crate::query::Scalar;

/// A value a tracepoint field can carry.
pub trait Value {
    /// Encoded bytes of the value as one field (field word, optional key, value; 8-aligned).
    fn encoded_len(&self) -> usize;
    /// Write the field at `p`, named by `name_index`; returns the bytes written
    /// (= `encoded_len()`).
    ///
    /// # Safety
    /// `p` must be 8-aligned and valid for `encoded_len()` bytes.
    unsafe fn encode(&self, name_index: u8, p: *mut u8) -> usize;
    /// The value as a live query reads it ([`crate::query`]).
    fn scalar(&self) -> Scalar<'_>;
}

#[inline(always)]
fn word(ty: u8, name_index: u8, key_len: usize, value_len: usize) -> u64 {
    ty as u64 | (name_index as u64) << 8 | (key_len as u64 & 0xffff) << 16 | (value_len as u64) << 32
}

/// Write a scalar field.
///
/// # Safety
/// `p` valid for 16 bytes, 8-aligned.
#[inline(always)]
pub(crate) unsafe fn put_scalar(p: *mut u8, ty: u8, name_index: u8, bits: u64) -> usize {
    // SAFETY: caller contract.
    unsafe {
        (p as *mut u64).write(word(ty, name_index, 0, 8));
        (p as *mut u64).add(1).write(bits);
    }
    16
}

/// Encoded length of a byte-string field (clipped to what a record can hold).
#[inline(always)]
pub(crate) fn bytes_len(b: &[u8]) -> usize {
    8 + pad8(clip(b.len()))
}

#[inline(always)]
fn clip(n: usize) -> usize {
    n.min(RECORD_MAX - RECORD_HEADER_SIZE - 16)
}

/// Write a str/bytes field.
///
/// # Safety
/// `p` valid for `bytes_len(b)` bytes, 8-aligned.
#[inline(always)]
pub(crate) unsafe fn put_bytes(p: *mut u8, ty: u8, name_index: u8, b: &[u8]) -> usize {
    let n = clip(b.len());
    let padded = pad8(n);
    // SAFETY: caller contract; the zero word covers the padding before the copy overwrites it.
    unsafe {
        (p as *mut u64).write(word(ty, name_index, 0, n));
        if padded > 0 {
            (p.add(8 + padded - 8) as *mut u64).write(0);
        }
        std::ptr::copy_nonoverlapping(b.as_ptr(), p.add(8), n);
    }
    8 + padded
}

/// Encoded length of an inline-keyed field.
pub(crate) fn keyed_len(key: &str, v: &KeyedValue<'_>) -> usize {
    8 + pad8(key.len().min(0xffff)) + v.value_len_padded()
}

/// A value under an inline key (key/value annotations, `tracing` fields).
#[derive(Debug, Clone, Copy)]
pub enum KeyedValue<'a> {
    I64(i64),
    U64(u64),
    F64(f64),
    Bool(bool),
    Str(&'a str),
    Bytes(&'a [u8]),
}

impl KeyedValue<'_> {
    fn value_len_padded(&self) -> usize {
        match self {
            KeyedValue::Str(s) => pad8(clip(s.len())),
            KeyedValue::Bytes(b) => pad8(clip(b.len())),
            _ => 8,
        }
    }
}

/// Write an inline-keyed field.
///
/// # Safety
/// `p` valid for `keyed_len(key, v)` bytes, 8-aligned.
pub(crate) unsafe fn put_keyed(p: *mut u8, key: &str, v: &KeyedValue<'_>) -> usize {
    let k = key.len().min(0xffff);
    let kp = pad8(k);
    let (ty, bits, bytes): (u8, u64, &[u8]) = match *v {
        KeyedValue::I64(x) => (TYPE_I64, x as u64, &[]),
        KeyedValue::U64(x) => (TYPE_U64, x, &[]),
        KeyedValue::F64(x) => (TYPE_F64, x.to_bits(), &[]),
        KeyedValue::Bool(x) => (TYPE_BOOL, x as u64, &[]),
        KeyedValue::Str(s) => (TYPE_STR, 0, s.as_bytes()),
        KeyedValue::Bytes(b) => (TYPE_BYTES, 0, b),
    };
    let scalar = matches!(ty, TYPE_I64 | TYPE_U64 | TYPE_F64 | TYPE_BOOL);
    let vlen = if scalar { 8 } else { clip(bytes.len()) };
    // SAFETY: caller contract; each region is zero-padded before the copy.
    unsafe {
        (p as *mut u64).write(word(ty, NAME_INLINE, k, vlen));
        let mut q = p.add(8);
        if kp > 0 {
            (q.add(kp - 8) as *mut u64).write(0);
            std::ptr::copy_nonoverlapping(key.as_ptr(), q, k);
        }
        q = q.add(kp);
        if scalar {
            (q as *mut u64).write(bits);
            8 + kp + 8
        } else {
            let vp = pad8(vlen);
            if vp > 0 {
                (q.add(vp - 8) as *mut u64).write(0);
            }
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), q, vlen);
            8 + kp + vp
        }
    }
}

macro_rules! scalar_value {
    ($($t:ty => $tag:expr, |$v:ident| $bits:expr, $sc:ident($conv:ty);)*) => {$(
        impl Value for $t {
            #[inline(always)]
            fn encoded_len(&self) -> usize { 16 }
            #[inline(always)]
            unsafe fn encode(&self, name_index: u8, p: *mut u8) -> usize {
                let $v = *self;
                // SAFETY: caller contract.
                unsafe { put_scalar(p, $tag, name_index, $bits) }
            }
            #[inline(always)]
            fn scalar(&self) -> Scalar<'_> {
                Scalar::$sc(*self as $conv)
            }
        }
    )*};
}

scalar_value! {
    i64 => TYPE_I64, |v| v as u64, I64(i64);
    i32 => TYPE_I64, |v| v as i64 as u64, I64(i64);
    i16 => TYPE_I64, |v| v as i64 as u64, I64(i64);
    i8 => TYPE_I64, |v| v as i64 as u64, I64(i64);
    isize => TYPE_I64, |v| v as i64 as u64, I64(i64);
    u64 => TYPE_U64, |v| v, U64(u64);
    u32 => TYPE_U64, |v| v as u64, U64(u64);
    u16 => TYPE_U64, |v| v as u64, U64(u64);
    u8 => TYPE_U64, |v| v as u64, U64(u64);
    usize => TYPE_U64, |v| v as u64, U64(u64);
    f64 => TYPE_F64, |v| v.to_bits(), F64(f64);
    f32 => TYPE_F64, |v| (v as f64).to_bits(), F64(f64);
}

impl Value for bool {
    #[inline(always)]
    fn encoded_len(&self) -> usize {
        16
    }
    #[inline(always)]
    unsafe fn encode(&self, name_index: u8, p: *mut u8) -> usize {
        // SAFETY: caller contract.
        unsafe { put_scalar(p, TYPE_BOOL, name_index, *self as u64) }
    }
    #[inline(always)]
    fn scalar(&self) -> Scalar<'_> {
        Scalar::Bool(*self)
    }
}

impl Value for str {
    #[inline(always)]
    fn encoded_len(&self) -> usize {
        bytes_len(self.as_bytes())
    }
    #[inline(always)]
    unsafe fn encode(&self, name_index: u8, p: *mut u8) -> usize {
        // SAFETY: caller contract.
        unsafe { put_bytes(p, TYPE_STR, name_index, self.as_bytes()) }
    }
    #[inline(always)]
    fn scalar(&self) -> Scalar<'_> {
        Scalar::Bytes(self.as_bytes())
    }
}

impl Value for String {
    #[inline(always)]
    fn encoded_len(&self) -> usize {
        self.as_str().encoded_len()
    }
    #[inline(always)]
    unsafe fn encode(&self, name_index: u8, p: *mut u8) -> usize {
        // SAFETY: caller contract.
        unsafe { self.as_str().encode(name_index, p) }
    }
    #[inline(always)]
    fn scalar(&self) -> Scalar<'_> {
        Scalar::Bytes(self.as_bytes())
    }
}

impl Value for [u8] {
    #[inline(always)]
    fn encoded_len(&self) -> usize {
        bytes_len(self)
    }
    #[inline(always)]
    unsafe fn encode(&self, name_index: u8, p: *mut u8) -> usize {
        // SAFETY: caller contract.
        unsafe { put_bytes(p, TYPE_BYTES, name_index, self) }
    }
    #[inline(always)]
    fn scalar(&self) -> Scalar<'_> {
        Scalar::Bytes(self)
    }
}

impl<T: Value + ?Sized> Value for &T {
    #[inline(always)]
    fn encoded_len(&self) -> usize {
        (**self).encoded_len()
    }
    #[inline(always)]
    unsafe fn encode(&self, name_index: u8, p: *mut u8) -> usize {
        // SAFETY: caller contract.
        unsafe { (**self).encode(name_index, p) }
    }
    #[inline(always)]
    fn scalar(&self) -> Scalar<'_> {
        (**self).scalar()
    }
}

/// A fixed list of field values (a tuple), named by position in the tracepoint's field spec.
pub trait Fields {
    const COUNT: u8;
    fn encoded_len(&self) -> usize;
    /// # Safety
    /// `p` must be 8-aligned and valid for `encoded_len()` bytes.
    unsafe fn encode(&self, p: *mut u8);
    /// Field `i` (by position) as a live query reads it; `None` past the last field.
    fn field(&self, i: u8) -> Option<Scalar<'_>>;
}

impl Fields for () {
    const COUNT: u8 = 0;
    #[inline(always)]
    fn encoded_len(&self) -> usize {
        0
    }
    #[inline(always)]
    unsafe fn encode(&self, _p: *mut u8) {}
    #[inline(always)]
    fn field(&self, _i: u8) -> Option<Scalar<'_>> {
        None
    }
}

macro_rules! tuple_fields {
    ($n:expr; $($T:ident $i:tt),+) => {
        impl<$($T: Value),+> Fields for ($($T,)+) {
            const COUNT: u8 = $n;
            #[inline(always)]
            fn encoded_len(&self) -> usize { 0 $(+ self.$i.encoded_len())+ }
            #[inline(always)]
            unsafe fn encode(&self, p: *mut u8) {
                let mut off = 0usize;
                // SAFETY: caller contract; each field stays within encoded_len().
                $( off += unsafe { self.$i.encode($i, p.add(off)) }; )+
                let _ = off;
            }
            #[inline(always)]
            fn field(&self, i: u8) -> Option<Scalar<'_>> {
                match i {
                    $($i => Some(self.$i.scalar()),)+
                    _ => None,
                }
            }
        }
    };
}

tuple_fields!(1; A 0);
tuple_fields!(2; A 0, B 1);
tuple_fields!(3; A 0, B 1, C 2);
tuple_fields!(4; A 0, B 1, C 2, D 3);
tuple_fields!(5; A 0, B 1, C 2, D 3, E 4);
tuple_fields!(6; A 0, B 1, C 2, D 3, E 4, F 5);
tuple_fields!(7; A 0, B 1, C 2, D 3, E 4, F 5, G 6);
tuple_fields!(8; A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7);
tuple_fields!(9; A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8);
tuple_fields!(10; A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9);
tuple_fields!(11; A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10);
tuple_fields!(12; A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11);

/// Write a value named by position `index` in the field spec.
///
/// # Safety
/// `p` valid for `keyed_len("", v)` bytes, 8-aligned.
pub(crate) unsafe fn put_positional(p: *mut u8, index: u8, v: &KeyedValue<'_>) -> usize {
    let index = index.min(NAME_NONE - 1);
    // SAFETY: caller contract (keyed_len("", v) = 8 + value bytes).
    unsafe {
        match *v {
            KeyedValue::I64(x) => put_scalar(p, TYPE_I64, index, x as u64),
            KeyedValue::U64(x) => put_scalar(p, TYPE_U64, index, x),
            KeyedValue::F64(x) => put_scalar(p, TYPE_F64, index, x.to_bits()),
            KeyedValue::Bool(x) => put_scalar(p, TYPE_BOOL, index, x as u64),
            KeyedValue::Str(s) => put_bytes(p, TYPE_STR, index, s.as_bytes()),
            KeyedValue::Bytes(b) => put_bytes(p, TYPE_BYTES, index, b),
        }
    }
}
