//! RoCEv2 packet views, representations, the opcode table and the ICRC.
//!
//! Read before editing: IBTA vol. 1, ch. 9 (BTH, extension headers, opcodes, padding) and
//! Annex A17 (RoCEv2 encapsulation, ICRC), and how rxe implements them: `rxe_hdr.h` (header
//! layouts), `rxe_opcode.c` (which headers each opcode carries, in order) and `rxe_icrc.c`.
//!
//! Every header has its own module with the same three parts, after smoltcp's `wire`:
//! - `Packet<T: AsRef<[u8]>>`, a view over bytes. Getters need only `AsRef<[u8]>`; setters
//!   need `AsMut<[u8]>` as well. Byte ranges live in a private `mod field`. All fields are
//!   big-endian (IBTA vol. 1, ch. 9); the ICRC alone is little-endian (rxe `rxe_icrc.c`).
//! - `Repr`, the valid subset of what a header can hold, with `parse`, `buffer_len` and
//!   `emit`.
//! - `HEADER_LEN`, the size of the header in bytes.
//!
//! [`roce`] puts them together into a whole packet (BTH to ICRC, the UDP payload) and
//! [`icrc`] computes the invariant CRC over it.
//!
//! # Panics
//!
//! - `Packet::new_unchecked` wraps any buffer and checks nothing; an accessor on a buffer
//!   that is too short panics.
//! - `Packet::check_len` returns `Err(Error)` when an accessor could panic. Once it has
//!   succeeded, no accessor panics, whatever the bytes hold.
//! - `Packet::new_checked` is `new_unchecked` followed by `check_len`. **Bytes from the
//!   network must go through `new_checked`** (or `check_len`) before any accessor is used.
//! - `Repr::parse` checks the length itself and never panics.
//! - `Repr::emit` never panics on a buffer of at least `Repr::buffer_len()` bytes (the whole
//!   packet's emit wants exactly that many, since the ICRC sits at the end). Values wider than
//!   their field (a 24-bit QPN held in a `u32`) are truncated to the field, not refused.
//!
//! Nothing here allocates.

use core::fmt;
use core::ops::Range;

pub mod aeth;
pub mod atomic_ack_eth;
pub mod atomic_eth;
pub mod bth;
pub mod deth;
pub mod feth;
pub mod icrc;
pub mod ieth;
pub mod immdt;
pub mod opcode;
pub mod reth;
pub mod roce;
pub mod xrceth;

#[cfg(test)]
pub(crate) mod tests;

pub use self::aeth::{NakCode, Packet as AethPacket, Repr as AethRepr, Syndrome};
pub use self::atomic_ack_eth::{Packet as AtomicAckEthPacket, Repr as AtomicAckEthRepr};
pub use self::atomic_eth::{Packet as AtomicEthPacket, Repr as AtomicEthRepr};
pub use self::bth::{Packet as BthPacket, Repr as BthRepr};
pub use self::deth::{Packet as DethPacket, Repr as DethRepr};
pub use self::feth::{Packet as FethPacket, Placement, Repr as FethRepr, Selectivity};
pub use self::ieth::{Packet as IethPacket, Repr as IethRepr};
pub use self::immdt::{Packet as ImmDtPacket, Repr as ImmDtRepr};
pub use self::opcode::{ExtHeader, OpCode, Operation, Position, Transport};
pub use self::reth::{Packet as RethPacket, Repr as RethRepr};
pub use self::roce::{Packet as RocePacket, Repr as RoceRepr};
pub use self::xrceth::{Packet as XrcEthPacket, Repr as XrcEthRepr};

/// The parse error of this module: the bytes are not a header or packet rverbs accepts.
///
/// It carries no detail on purpose (smoltcp's `wire::Error`): a malformed packet from the
/// network is dropped silently (rxe `rxe_rcv`), so there is nobody to tell why.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Error;

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("malformed RoCEv2 packet")
    }
}

impl std::error::Error for Error {}

/// A field's byte range inside its header.
pub(crate) type Field = Range<usize>;

/// Reads the `N` bytes of field `f`. `f` must be `N` bytes long (every `mod field` is).
#[inline]
pub(crate) fn read<const N: usize>(buf: &[u8], f: Field) -> [u8; N] {
    let mut out = [0; N];
    out.copy_from_slice(&buf[f]);
    out
}

/// Reads a big-endian 24-bit field into the low bits of a `u32`.
#[inline]
pub(crate) fn read_u24(buf: &[u8], f: Field) -> u32 {
    let [a, b, c] = read(buf, f);
    u32::from_be_bytes([0, a, b, c])
}

/// Writes the low 24 bits of `value` big-endian into field `f` (3 bytes).
#[inline]
pub(crate) fn write_u24(buf: &mut [u8], f: Field, value: u32) {
    buf[f].copy_from_slice(&value.to_be_bytes()[1..]);
}

/// Sets or clears the bits of `mask` in `byte`.
#[inline]
pub(crate) fn set_bits(byte: &mut u8, mask: u8, on: bool) {
    if on {
        *byte |= mask;
    } else {
        *byte &= !mask;
    }
}

/// An enum over a wire value with an `Unknown` variant, so every value round-trips
/// (smoltcp's `enum_with_unknown!`, written anew). Generates `From` both ways and `KNOWN`.
/// Exported for the other wire formats of rverbs (the CM's MADs).
#[macro_export]
macro_rules! enum_with_unknown {
    (
        $(#[$attr:meta])*
        pub enum $name:ident($ty:ty) {
            $( $(#[$vattr:meta])* $variant:ident = $value:literal ),+ $(,)?
        }
    ) => {
        $(#[$attr])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name {
            $( $(#[$vattr])* $variant, )+
            /// A value with no named variant, kept as it is so that it round-trips.
            Unknown($ty),
        }

        impl $name {
            /// Every named variant, in declaration order.
            pub const KNOWN: &'static [$name] = &[$($name::$variant),+];

            /// Whether `value` has a named variant (usable in constant tables).
            #[allow(dead_code, clippy::manual_range_patterns)]
            pub(crate) const fn is_named(value: $ty) -> bool {
                matches!(value, $( $value )|+)
            }

            /// The value on the wire (usable in constant tables; `From` for the rest).
            #[inline]
            pub(crate) const fn raw(self) -> $ty {
                match self {
                    $( $name::$variant => $value, )+
                    $name::Unknown(other) => other,
                }
            }
        }

        impl ::core::convert::From<$ty> for $name {
            #[inline]
            fn from(value: $ty) -> Self {
                match value {
                    $( $value => $name::$variant, )+
                    other => $name::Unknown(other),
                }
            }
        }

        impl ::core::convert::From<$name> for $ty {
            #[inline]
            fn from(value: $name) -> Self {
                value.raw()
            }
        }
    };
}
pub(crate) use enum_with_unknown;

/// The parts every fixed-size header view shares: the struct, `new_unchecked`, `new_checked`,
/// `check_len`, `into_inner`, `payload` and `payload_mut`. `HEADER_LEN` must be in scope.
macro_rules! header_packet {
    ($what:literal) => {
        #[doc = concat!("A view over the bytes of a ", $what, ", which start at offset 0.")]
        ///
        /// See the panic contract in [`crate::wire`].
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub struct Packet<T: AsRef<[u8]>> {
            buffer: T,
        }

        impl<T: AsRef<[u8]>> Packet<T> {
            /// Wraps `buffer` without checking its length.
            pub const fn new_unchecked(buffer: T) -> Self {
                Packet { buffer }
            }

            /// Wraps `buffer` and checks it is long enough for every accessor.
            ///
            /// Errors: `Error` if `buffer` is shorter than [`HEADER_LEN`].
            pub fn new_checked(buffer: T) -> Result<Self, $crate::wire::Error> {
                let packet = Self::new_unchecked(buffer);
                packet.check_len()?;
                Ok(packet)
            }

            /// Checks that no accessor can panic.
            ///
            /// Errors: `Error` if the buffer is shorter than [`HEADER_LEN`].
            pub fn check_len(&self) -> Result<(), $crate::wire::Error> {
                if self.buffer.as_ref().len() < HEADER_LEN {
                    Err($crate::wire::Error)
                } else {
                    Ok(())
                }
            }

            /// Returns the wrapped buffer.
            pub fn into_inner(self) -> T {
                self.buffer
            }

            /// The bytes after this header (the next header, or the payload).
            pub fn payload(&self) -> &[u8] {
                &self.buffer.as_ref()[HEADER_LEN..]
            }
        }

        impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
            /// The bytes after this header, mutably.
            pub fn payload_mut(&mut self) -> &mut [u8] {
                &mut self.buffer.as_mut()[HEADER_LEN..]
            }
        }
    };
}
pub(crate) use header_packet;
