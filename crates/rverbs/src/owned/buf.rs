//! The buffers an owned region can hold ([`StableBuf`]): heap bytes whose address does
//! not change when the value that owns them moves, taken apart into raw parts while the
//! device may reach them and put back together when it no longer can.
//!
//! Why raw parts: while a region is registered the device (this process's queues, or a
//! peer through the rkey) writes its bytes at any time, so no Rust reference to them may
//! exist then, not even the unique pointer inside a `Box` (moving a `Box` asserts that
//! nothing else uses its bytes). A held buffer is a pointer, a length and what is needed
//! to rebuild it ([`Raw`]); the `Vec`, `Box` or `BytesMut` exists again only once the
//! device cannot reach the bytes any more ([`Buf::release`]).
#![allow(unsafe_code)]

use std::mem::ManuallyDrop;
use std::ptr::NonNull;

/// A heap buffer of bytes that [`Pd::reg_owned`](crate::Pd::reg_owned) can register and
/// give back: `Vec<u8>` (its `len()` bytes; the spare capacity is not registered),
/// `Box<[u8]>`, and `bytes::BytesMut` with the feature `bytes`.
///
/// Sealed: the region relies on each of them keeping its bytes at one address, owned by
/// the value alone, for as long as it is held; a type outside this list cannot promise it.
pub trait StableBuf: sealed::Buf + Send + Sync + 'static {}

impl StableBuf for Vec<u8> {}
impl StableBuf for Box<[u8]> {}
#[cfg(feature = "bytes")]
impl StableBuf for bytes::BytesMut {}

pub(crate) mod sealed {
    use crate::owned::buf::Raw;

    /// How a [`StableBuf`](crate::owned::buf::StableBuf) is taken apart and put back together.
    pub trait Buf: Sized {
        /// What is kept of the buffer besides its bytes while it is held.
        type Held: Send + Sync;

        /// Takes the buffer apart: what rebuilds it, and where its bytes are. No
        /// reference to the bytes is left.
        fn hold(self) -> (Self::Held, Raw);

        /// Rebuilds the buffer.
        ///
        /// # Safety
        /// `held` and `raw` come from one [`Buf::hold`] of this type, and nothing reads or
        /// writes the bytes any more except through the value returned.
        unsafe fn release(held: Self::Held, raw: Raw) -> Self;
    }
}

/// Where a held buffer's bytes are: `len` bytes from `ptr`, owned by the region that
/// holds them (as the `Vec`, `Box` or `BytesMut` owned them).
#[derive(Debug)]
pub struct Raw {
    pub(crate) ptr: NonNull<u8>,
    pub(crate) len: usize,
}

// SAFETY: a `Raw` stands for the buffer it was taken from, which is the sole owner of its
// bytes and is `Send` and `Sync` (`Vec<u8>`, `Box<[u8]>`, `BytesMut`); the region that
// keeps it hands out references to the bytes only under its own borrow rules
// (`owned::region`).
unsafe impl Send for Raw {}
// SAFETY: as for `Send`.
unsafe impl Sync for Raw {}

impl sealed::Buf for Vec<u8> {
    /// The capacity.
    type Held = usize;

    fn hold(self) -> (usize, Raw) {
        let mut v = ManuallyDrop::new(self);
        // `as_mut_ptr` makes no reference to the elements (its documentation says so).
        let ptr = NonNull::new(v.as_mut_ptr()).expect("a Vec's pointer is never null");
        (v.capacity(), Raw { ptr, len: v.len() })
    }

    unsafe fn release(cap: usize, raw: Raw) -> Self {
        // SAFETY: pointer, length and capacity are those of the Vec `hold` took apart,
        // which nothing freed or resized since (the caller's contract).
        unsafe { Vec::from_raw_parts(raw.ptr.as_ptr(), raw.len, cap) }
    }
}

impl sealed::Buf for Box<[u8]> {
    type Held = ();

    fn hold(self) -> ((), Raw) {
        let len = self.len();
        let ptr = Box::into_raw(self).cast::<u8>();
        ((), Raw { ptr: NonNull::new(ptr).expect("a Box's pointer is never null"), len })
    }

    unsafe fn release((): (), raw: Raw) -> Self {
        let slice = std::ptr::slice_from_raw_parts_mut(raw.ptr.as_ptr(), raw.len);
        // SAFETY: the pointer and length of the `Box<[u8]>` `hold` gave up with
        // `into_raw`, not freed since (the caller's contract).
        unsafe { Box::from_raw(slice) }
    }
}

#[cfg(feature = "bytes")]
impl sealed::Buf for bytes::BytesMut {
    /// The `BytesMut` itself: its handle holds its bytes through a raw pointer, so
    /// keeping it asserts nothing about them; it is not touched until released.
    type Held = bytes::BytesMut;

    fn hold(mut self) -> (bytes::BytesMut, Raw) {
        let len = self.len();
        let ptr = NonNull::new(self.as_mut_ptr()).expect("a BytesMut's pointer is never null");
        (self, Raw { ptr, len })
    }

    unsafe fn release(held: bytes::BytesMut, _raw: Raw) -> Self {
        held
    }
}

#[cfg(test)]
mod tests {
    //! Pure: the round trips run under Miri (`cargo +nightly miri test -p rverbs --lib
    //! owned::buf`).
    use super::sealed::Buf;

    /// Writes `byte` at every position through the raw parts, as the device does.
    fn device_writes(raw: &super::Raw, byte: u8) {
        for i in 0..raw.len {
            // SAFETY: `i < len`, inside the held buffer, which nothing else references.
            unsafe { raw.ptr.as_ptr().add(i).write(byte) };
        }
    }

    #[test]
    fn vec_round_trip_keeps_bytes_length_and_capacity() {
        let mut v = Vec::with_capacity(64);
        v.extend_from_slice(&[1u8; 48]);
        let (held, raw) = v.hold();
        assert_eq!((held, raw.len), (64, 48));
        device_writes(&raw, 7);
        // SAFETY: from this `hold`; nothing else touches the bytes.
        let back = unsafe { Vec::<u8>::release(held, raw) };
        assert_eq!((back.len(), back.capacity()), (48, 64));
        assert!(back.iter().all(|&b| b == 7));
    }

    #[test]
    fn boxed_slice_round_trip_keeps_bytes() {
        let b: Box<[u8]> = vec![3u8; 33].into_boxed_slice();
        let (held, raw) = b.hold();
        assert_eq!(raw.len, 33);
        device_writes(&raw, 9);
        // SAFETY: from this `hold`; nothing else touches the bytes.
        let back = unsafe { <Box<[u8]>>::release(held, raw) };
        assert_eq!(&*back, &[9u8; 33][..]);
    }

    #[cfg(feature = "bytes")]
    #[test]
    fn bytes_mut_round_trip_keeps_bytes() {
        let b = bytes::BytesMut::from(&[5u8; 20][..]);
        let (held, raw) = b.hold();
        device_writes(&raw, 6);
        // SAFETY: from this `hold`; nothing else touches the bytes.
        let back = unsafe { bytes::BytesMut::release(held, raw) };
        assert_eq!(&back[..], &[6u8; 20][..]);
    }
}
