//! Field access in the notation of the IBTA message-contents tables.
//!
//! IBTA Vol 1 ch. 12 gives every CM field as a `Byte[Bit]` offset and a length in bits. The
//! byte offset counts from the start of the MAD data area (after the 24-byte common MAD header,
//! IBTA Vol 1 §13.4); the bit counts from the most significant bit of that byte (bit 0 is
//! `0x80`). Fields are big-endian: a field wider than the rest of its byte continues into the
//! following bytes (a 24-bit QPN at `32[0]` fills bytes 32, 33 and 34). The Linux kernel's
//! `include/rdma/ibta_vol1_c12.h` lists each field this way, which is where the offsets in this
//! module's users come from.
//!
//! [`Bits`] describes one such field; [`FieldValue`] converts between the raw bits and the
//! typed value a getter returns; [`bit_accessors!`] writes the getter and setter pairs of a
//! packet view. Octet-aligned runs of bytes (GIDs, private data) are plain [`Bytes`] ranges.

use core::ops::Range;

use super::common::MessageKind;

/// An octet-aligned field: a byte range inside its view.
pub(crate) type Bytes = Range<usize>;

/// A bit field of up to 32 bits, in the IBTA `Byte[Bit]`-and-length notation.
///
/// Rule: IBTA Vol 1 ch. 12 message tables: bit 0 is the most significant bit of the byte;
/// multi-byte values are big-endian (network order, IBTA Vol 1 §13.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Bits {
    byte: usize,
    bit: u32,
    width: u32,
}

impl Bits {
    /// The field of `width` bits that starts at bit `bit` (0 = MSB) of byte `byte`.
    ///
    /// Panics (at compile time, as every field is a `const`) unless `bit < 8`, `width >= 1`
    /// and the field ends within four bytes of `byte`.
    pub(crate) const fn new(byte: usize, bit: u32, width: u32) -> Bits {
        assert!(bit < 8 && width >= 1 && bit + width <= 32);
        Bits { byte, bit, width }
    }

    /// How many bytes, starting at `byte`, the field touches.
    const fn len(self) -> usize {
        self.bit.saturating_add(self.width).div_ceil(8) as usize
    }

    /// How far the field's least significant bit sits above bit 0 of its last byte.
    const fn shift(self) -> u32 {
        self.len() as u32 * 8 - self.bit - self.width
    }

    /// The field's value mask, `width` ones.
    pub(crate) const fn mask(self) -> u32 {
        u32::MAX >> (32 - self.width)
    }

    /// One past the last byte the field touches.
    pub(crate) const fn end(self) -> usize {
        self.byte + self.len()
    }

    /// Reads the field from `buf`; the bits around it are ignored.
    ///
    /// Panics if `buf` is shorter than [`Bits::end`].
    #[inline]
    pub(crate) fn get(self, buf: &[u8]) -> u32 {
        let word = buf[self.byte..self.end()]
            .iter()
            .fold(0u32, |word, &b| (word << 8) | u32::from(b));
        (word >> self.shift()) & self.mask()
    }

    /// Writes the low `width` bits of `value` into the field, keeping the bits around it.
    ///
    /// Panics if `buf` is shorter than [`Bits::end`].
    #[inline]
    pub(crate) fn set(self, buf: &mut [u8], value: u32) {
        let bytes = &mut buf[self.byte..self.end()];
        let word = bytes
            .iter()
            .fold(0u32, |word, &b| (word << 8) | u32::from(b));
        let mask = self.mask() << self.shift();
        let word = (word & !mask) | ((value << self.shift()) & mask);
        bytes.copy_from_slice(&word.to_be_bytes()[4 - self.len()..]);
    }
}

/// Reads the big-endian `u64` at `range` (8 bytes).
#[inline]
pub(crate) fn get_u64(buf: &[u8], range: Bytes) -> u64 {
    let mut out = [0; 8];
    out.copy_from_slice(&buf[range]);
    u64::from_be_bytes(out)
}

/// Writes `value` big-endian into `range` (8 bytes).
#[inline]
pub(crate) fn set_u64(buf: &mut [u8], range: Bytes, value: u64) {
    buf[range].copy_from_slice(&value.to_be_bytes());
}

/// Copies the `N` bytes of `range` out of `buf`.
#[inline]
pub(crate) fn get_array<const N: usize>(buf: &[u8], range: Bytes) -> [u8; N] {
    let mut out = [0; N];
    out.copy_from_slice(&buf[range]);
    out
}

/// A typed value held in a [`Bits`] field.
///
/// `from_bits` receives the field already masked to its width; `into_bits` may return more
/// bits than the field holds, and the setter drops them.
pub(crate) trait FieldValue: Copy {
    /// Converts the raw field bits into the value.
    fn from_bits(bits: u32) -> Self;
    /// Converts the value into raw field bits.
    fn into_bits(self) -> u32;
}

impl FieldValue for bool {
    fn from_bits(bits: u32) -> Self {
        bits != 0
    }
    fn into_bits(self) -> u32 {
        u32::from(self)
    }
}

impl FieldValue for u8 {
    fn from_bits(bits: u32) -> Self {
        bits as u8
    }
    fn into_bits(self) -> u32 {
        u32::from(self)
    }
}

impl FieldValue for u16 {
    fn from_bits(bits: u32) -> Self {
        bits as u16
    }
    fn into_bits(self) -> u32 {
        u32::from(self)
    }
}

impl FieldValue for u32 {
    fn from_bits(bits: u32) -> Self {
        bits
    }
    fn into_bits(self) -> u32 {
        self
    }
}

/// Writes a getter (on `impl<T: AsRef<[u8]>>`) and a setter (on `impl<T: AsRef<[u8]> +
/// AsMut<[u8]>>`) for each [`Bits`] field of a packet view, smoltcp style.
///
/// ```text
/// bit_accessors!(Packet {
///     /// doc of the getter
///     local_qpn / set_local_qpn: u32 = field::LOCAL_QPN;
/// });
/// ```
macro_rules! bit_accessors {
    ($packet:ident {
        $(
            $(#[$doc:meta])*
            $get:ident / $set:ident : $ty:ty = $field:expr;
        )+
    }) => {
        impl<T: AsRef<[u8]>> $packet<T> {
            $(
                $(#[$doc])*
                #[inline]
                pub fn $get(&self) -> $ty {
                    <$ty as $crate::mad::field::FieldValue>::from_bits(
                        $field.get(self.buffer.as_ref()),
                    )
                }
            )+
        }

        impl<T: AsRef<[u8]> + AsMut<[u8]>> $packet<T> {
            $(
                #[doc = concat!(
                    "Sets the field that [`Self::", stringify!($get),
                    "`] reads; bits wider than the field are dropped."
                )]
                #[inline]
                pub fn $set(&mut self, value: $ty) {
                    $field.set(
                        self.buffer.as_mut(),
                        $crate::mad::field::FieldValue::into_bits(value),
                    )
                }
            )+
        }
    };
}
pub(crate) use bit_accessors;

/// Declares a packet view type over a fixed-length area, with `new_unchecked`,
/// `new_checked`, `check_len`, `into_inner` and `clear`. The panic contract is the one in
/// [`crate::mad`].
macro_rules! view {
    ($(#[$doc:meta])* $packet:ident, $len:expr) => {
        $(#[$doc])*
        ///
        /// See the panic contract in [`crate::mad`]: after `check_len` succeeds no accessor
        /// panics, whatever the bytes hold.
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub struct $packet<T: AsRef<[u8]>> {
            buffer: T,
        }

        impl<T: AsRef<[u8]>> $packet<T> {
            /// Wraps `buffer` without checking its length.
            pub const fn new_unchecked(buffer: T) -> Self {
                $packet { buffer }
            }

            /// Wraps `buffer` and checks it is long enough for every accessor.
            ///
            /// Errors: `MadError::Truncated` if `buffer` is shorter than the view.
            pub fn new_checked(buffer: T) -> Result<Self, $crate::mad::common::MadError> {
                let packet = Self::new_unchecked(buffer);
                packet.check_len()?;
                Ok(packet)
            }

            /// Checks that no accessor can panic.
            ///
            /// Errors: `MadError::Truncated` if the buffer is shorter than the view.
            pub fn check_len(&self) -> Result<(), $crate::mad::common::MadError> {
                let len = self.buffer.as_ref().len();
                if len < $len {
                    Err($crate::mad::common::MadError::Truncated { len, need: $len })
                } else {
                    Ok(())
                }
            }

            /// Returns the wrapped buffer.
            pub fn into_inner(self) -> T {
                self.buffer
            }
        }

        impl<T: AsRef<[u8]> + AsMut<[u8]>> $packet<T> {
            /// Zeroes every byte of the view, reserved bits included.
            pub fn clear(&mut self) {
                self.buffer.as_mut()[..$len].fill(0);
            }
        }
    };
}
pub(crate) use view;

/// The 2-bit message kind of an MRA or REJ as a field value.
impl FieldValue for MessageKind {
    fn from_bits(bits: u32) -> Self {
        MessageKind::from(bits as u8)
    }
    fn into_bits(self) -> u32 {
        u32::from(u8::from(self))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_follow_ibta_msb_first_numbering() {
        // 43[5], 2 bits (REQ Transport Service Type): the kernel's mask GENMASK(2, 1).
        let f = Bits::new(0, 5, 2);
        let mut buf = [0u8; 1];
        f.set(&mut buf, 0b11);
        assert_eq!(buf, [0b0000_0110]);
        assert_eq!(f.get(&[0xff]), 0b11);
        assert_eq!(f.get(&[0b1111_1001]), 0b00);
    }

    #[test]
    fn bits_span_bytes_big_endian() {
        // 88[0], 20 bits (REQ Primary Flow Label): the top 20 bits of bytes 88..91.
        let f = Bits::new(0, 0, 20);
        let mut buf = [0u8; 4];
        f.set(&mut buf, 0xABCDE);
        assert_eq!(buf, [0xAB, 0xCD, 0xE0, 0x00]);
        assert_eq!(f.get(&buf), 0xABCDE);
    }

    #[test]
    fn set_keeps_neighbouring_bits_and_drops_excess() {
        let f = Bits::new(0, 2, 3);
        let mut buf = [0xFFu8];
        f.set(&mut buf, 0b1111_1000);
        assert_eq!(buf, [0b1100_0111]);
    }

    #[test]
    fn full_width_fields() {
        let f = Bits::new(0, 0, 32);
        let mut buf = [0u8; 4];
        f.set(&mut buf, 0x0102_0304);
        assert_eq!(buf, [1, 2, 3, 4]);
        assert_eq!(f.get(&buf), 0x0102_0304);
    }
}
