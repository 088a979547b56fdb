//! A registered region with canaries: a buffer of caller memory larger than the region,
//! of which only the middle is registered; both guards hold the canary pattern and the
//! middle the region pattern (`common`). After the region is deregistered, every guard
//! byte is compared with what was written.
#![allow(unsafe_code)]

use rverbs::{Access, Mr, Pd};

use crate::common::{canary_byte, region_byte};

/// Bytes of canary on each side of a region.
pub const GUARD: usize = 8192;

pub struct Canaried {
    /// `GUARD + len + GUARD` bytes, 8-aligned (u64 words); registered in the middle.
    buf: Box<[u64]>,
    len: usize,
    mr: Option<Mr>,
}

/// What the final check found.
#[derive(Debug, Default, Clone, Copy)]
pub struct Check {
    /// Canary bytes checked.
    pub canary_bytes: usize,
    /// Canary bytes that changed: bytes outside the registered region written.
    pub outside_changed: usize,
    /// Region bytes that differ from their initial pattern (legitimate or attacker writes).
    pub inside_changed: usize,
}

impl Canaried {
    /// Registers `len` bytes (a multiple of 8) with `access` in `pd`, canaries around.
    pub fn new(pd: &Pd, len: usize, access: Access) -> rverbs::Result<Canaried> {
        assert!(len.is_multiple_of(8));
        let words = (2 * GUARD + len) / 8;
        let mut buf = vec![0u64; words].into_boxed_slice();
        {
            let bytes = Self::bytes_mut(&mut buf);
            for (i, b) in bytes.iter_mut().enumerate() {
                *b = if i < GUARD || i >= GUARD + len { canary_byte(i) } else { region_byte(i - GUARD) };
            }
        }
        // SAFETY: the range is inside `buf`, which is heap memory owned by the returned
        // value and freed only after the region is deregistered (`mr` is taken and
        // dropped in `check`, and `Drop` drops it before `buf`); nothing else reads or
        // writes the middle while the region is registered.
        let mr = unsafe { pd.reg_mr((buf.as_mut_ptr() as *mut u8).add(GUARD), len, access)? };
        Ok(Canaried { buf, len, mr: Some(mr) })
    }

    fn bytes_mut(buf: &mut [u64]) -> &mut [u8] {
        let n = buf.len() * 8;
        // SAFETY: u8 has no alignment or validity requirement; the slice covers exactly
        // the words' bytes and borrows `buf` mutably for its life.
        unsafe { std::slice::from_raw_parts_mut(buf.as_mut_ptr() as *mut u8, n) }
    }

    pub fn mr(&self) -> &Mr {
        self.mr.as_ref().expect("registered")
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// Deregisters the region (the caller dropped every QP that could reach it) and
    /// compares every byte with its initial pattern.
    pub fn check(&mut self) -> rverbs::Result<Check> {
        if let Some(mr) = self.mr.take() {
            mr.dereg()?;
        }
        let len = self.len;
        let bytes = Self::bytes_mut(&mut self.buf);
        let mut c = Check { canary_bytes: 2 * GUARD, ..Check::default() };
        for (i, &b) in bytes.iter().enumerate() {
            if i < GUARD || i >= GUARD + len {
                c.outside_changed += usize::from(b != canary_byte(i));
            } else {
                c.inside_changed += usize::from(b != region_byte(i - GUARD));
            }
        }
        Ok(c)
    }
}

impl Drop for Canaried {
    fn drop(&mut self) {
        // Deregistered before the memory goes.
        drop(self.mr.take());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl Canaried {
        /// A stray write at byte `i` of the whole buffer (guards included).
        fn poke(&mut self, i: usize, b: u8) {
            Self::bytes_mut(&mut self.buf)[i] = b;
        }
    }

    /// The check sees a byte changed on either side of the region, and tells it from
    /// bytes written inside.
    #[test]
    fn a_byte_changed_beside_the_region_is_counted_and_one_inside_is_not() {
        let dir = std::env::temp_dir().join(format!("rverbs-chaos-region-{}", std::process::id()));
        // The only test of this crate that opens the device: no network, a private runtime directory.
        std::env::set_var("RVERBS_RUNTIME_DIR", &dir);
        std::env::set_var("RVERBS_NET", "off");
        let ctx = rverbs::devices().unwrap()[0].open().unwrap();
        let pd = ctx.alloc_pd().unwrap();
        let mut c = Canaried::new(&pd, 4096, Access::LOCAL_WRITE).unwrap();
        c.mr().write(0, &[0xee; 16]).unwrap();
        let clean = {
            let mut d = Canaried::new(&pd, 4096, Access::LOCAL_WRITE).unwrap();
            d.check().unwrap()
        };
        assert_eq!((clean.canary_bytes, clean.outside_changed, clean.inside_changed), (2 * GUARD, 0, 0));
        c.poke(GUARD - 1, !canary_byte(GUARD - 1));
        c.poke(GUARD + 4096, !canary_byte(GUARD + 4096));
        let r = c.check().unwrap();
        assert_eq!((r.outside_changed, r.inside_changed), (2, 16));
        drop((c, pd, ctx));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
