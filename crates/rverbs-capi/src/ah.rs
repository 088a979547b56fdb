//! Address handles, and building one from a received completion and its GRH.

use core::ffi::c_int;
use std::cell::UnsafeCell;

use crate::abi::*;
use crate::live;
use crate::conv;
use crate::context::ContextObj;
use crate::ffi::{ToErrno, minus_one_errno, null_errno, set_errno};
use crate::pd::PdObj;

/// An AH handed to C: `struct ibv_ah`, then the core AH.
#[repr(C)]
pub struct AhObj {
    ah: UnsafeCell<ibv_ah>,
    core: rverbs::Ah,
}

// SAFETY: `#[repr(C)]` with the C struct first; only leaked boxes are registered.
unsafe impl live::Object for AhObj {
    const KIND: live::Kind = live::Kind::Ah;
}

impl AhObj {
    /// The AH behind an `ibv_ah *`; `None` for NULL, a foreign
    /// pointer or a destroyed object, refused without reading through it (`live.rs`).
    ///
    /// # Safety
    /// `ah` is any pointer; if it is a live object of this library, it is not destroyed
    /// while the returned reference is used.
    pub unsafe fn from_raw<'a>(ah: *const ibv_ah) -> Option<&'a AhObj> {
        // SAFETY: caller contract (any pointer; a live one stays alive while used).
        unsafe { live::get(ah) }
    }

    /// The core AH.
    pub fn core(&self) -> &rverbs::Ah {
        &self.core
    }
}

export! {
    /// Creates an address handle (`ibv_create_ah(3)`). Errors: NULL with `errno`.
    ///
    /// Rule: verbs.c: the library sets `ah->context` and `ah->pd`; on RoCE the address
    /// vector needs a GRH (the core checks, `EINVAL`).
    #[export("IBVERBS_1.1", null)]
    pub unsafe fn ibv_create_ah(pd: *mut ibv_pd, attr: *mut ibv_ah_attr) -> *mut ibv_ah {
        // SAFETY: caller contract.
        let Some(pd_obj) = (unsafe { PdObj::from_raw(pd) }) else {
            return null_errno(libc::EINVAL);
        };
        // SAFETY: attr is NULL or valid (caller contract).
        let Some(a) = (unsafe { attr.as_ref() }) else {
            return null_errno(libc::EINVAL);
        };
        let core = match rverbs::Ah::new(pd_obj.core(), &conv::ah_attr_from_c(a)) {
            Ok(ah) => ah,
            Err(e) => return null_errno(e.c_errno()),
        };
        let ah = ibv_ah { context: pd_obj.context_ptr(), pd, handle: 0 };
        let p = Box::into_raw(Box::new(AhObj { ah: UnsafeCell::new(ah), core }))
            .cast::<ibv_ah>();
        // SAFETY: field of the allocation just made: a handle unique among live AHs.
        unsafe { (*p).handle = p as usize as u32 };
        live::register(p.cast::<AhObj>());
        p
    }
}

export! {
    /// Destroys an address handle (`ibv_destroy_ah(3)`). Returns 0 or an errno.
    #[export("IBVERBS_1.1", errno)]
    pub unsafe fn ibv_destroy_ah(ah: *mut ibv_ah) -> c_int {
        // SAFETY: caller contract.
        let Some(obj) = (unsafe { AhObj::from_raw(ah) }) else {
            return libc::EINVAL;
        };
        if let Err(e) = obj.core.destroy() {
            return e.c_errno();
        }
        // SAFETY: the caller gives the object up (ibv_destroy_*: the pointer is dead after
        // the call); `obj` is not used after this.
        unsafe { live::free::<AhObj, _>(ah) };
        0
    }
}

/// The Internet checksum over an IPv4 header (10 half-words) read as big-endian words,
/// with its checksum field taken as zero.
fn ipv4_checksum(h: &[u8; 20]) -> u16 {
    let mut sum: u32 = 0;
    for (i, c) in h.chunks(2).enumerate() {
        if i != 5 {
            sum += u32::from(u16::from_be_bytes([c[0], c[1]]));
        }
    }
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// The IP version of the 40-byte GRH area (`union rdma_network_hdr`; verbs.c
/// `get_grh_header_version`): 4, 6, or `None` (EPROTONOSUPPORT).
fn grh_version(grh: &[u8; 40]) -> Option<u8> {
    let ip4: &[u8; 20] = grh[20..].try_into().expect("20 bytes");
    if grh[0] >> 4 != 6 {
        return (ip4[0] >> 4 == 4).then_some(4);
    }
    if ip4[0] & 0x0f != 5 {
        return Some(6);
    }
    let stored = u16::from_be_bytes([ip4[10], ip4[11]]);
    Some(if stored == ipv4_checksum(ip4) { 4 } else { 6 })
}

/// The index of `gid` with sysfs type `gid_type` in the port's table (verbs.c
/// `ibv_find_gid_index`), or the errno of the failing lookup.
fn find_gid_index(
    context: *mut ibv_context,
    port: u8,
    gid: [u8; 16],
    gid_type: ibv_gid_type_sysfs,
) -> Result<u8, c_int> {
    // SAFETY: the application's context pointer (caller contract of the verb).
    let ctx = unsafe { ContextObj::from_raw(context) }.ok_or(libc::EINVAL)?;
    let table = ctx.core().query_gid_table();
    let found = table.iter().find(|e| {
        e.port == u32::from(port)
            && e.gid.0 == gid
            && crate::context::gid_type_sysfs(context, port, e.index) == Ok(gid_type)
    });
    match found {
        Some(e) => u8::try_from(e.index).map_err(|_| libc::EINVAL),
        None => Err(libc::ENOENT),
    }
}

fn ipv4_mapped(addr: &[u8]) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[10] = 0xff;
    g[11] = 0xff;
    g[12..].copy_from_slice(addr);
    g
}

export! {
    /// Builds an AH attribute from a received completion and its GRH
    /// (`ibv_init_ah_from_wc(3)`). Returns 0, or -1 with `errno`.
    ///
    /// Rule: verbs.c: `is_global` iff `wc_flags & IBV_WC_GRH`; the 40-byte area is read as
    /// IPv4 (20 zero bytes + a header with a valid checksum) or IPv6 (`union
    /// rdma_network_hdr`); the sender becomes `dgid`, the local address it was sent to picks
    /// `sgid_index` (a multicast destination is `EINVAL`, an unknown one `ENOENT`).
    #[export("IBVERBS_1.1", minus_one)]
    pub unsafe fn ibv_init_ah_from_wc(
        context: *mut ibv_context,
        port_num: u8,
        wc: *mut ibv_wc,
        grh: *mut ibv_grh,
        ah_attr: *mut ibv_ah_attr,
    ) -> c_int {
        // SAFETY: wc/ah_attr are NULL or valid (caller contract).
        let (Some(wc), Some(out)) = (unsafe { wc.as_ref() }, unsafe { ah_attr.as_mut() }) else {
            return minus_one_errno(libc::EINVAL);
        };
        let mut a = ibv_ah_attr::zeroed();
        a.dlid = wc.slid;
        a.sl = wc.sl;
        a.src_path_bits = wc.dlid_path_bits;
        a.port_num = port_num;
        if wc.wc_flags & IBV_WC_GRH != 0 {
            if grh.is_null() {
                return minus_one_errno(libc::EINVAL);
            }
            // SAFETY: C contract: with IBV_WC_GRH the first 40 bytes of the receive buffer
            // (`grh`) hold the network header.
            let raw: [u8; 40] = unsafe { grh.cast::<[u8; 40]>().read_unaligned() };
            a.is_global = 1;
            a.grh.flow_label = u32::from_be_bytes([raw[0], raw[1], raw[2], raw[3]]) & 0xf_ffff;
            match grh_version(&raw) {
                Some(4) => {
                    let ip = &raw[20..];
                    if ip[16] & 0xf0 == 0xe0 {
                        return minus_one_errno(libc::EINVAL); // IN_CLASSD(daddr)
                    }
                    let sgid = ipv4_mapped(&ip[16..20]);
                    match find_gid_index(context, port_num, sgid, IBV_GID_TYPE_SYSFS_ROCE_V2) {
                        Ok(i) => a.grh.sgid_index = i,
                        Err(e) => return minus_one_errno(e),
                    }
                    a.grh.dgid = ibv_gid { raw: ipv4_mapped(&ip[12..16]) };
                    a.grh.hop_limit = ip[8];
                    a.grh.traffic_class = ip[1];
                }
                Some(_) => {
                    let dgid: [u8; 16] = raw[24..40].try_into().expect("16 bytes");
                    if dgid[0] == 0xff {
                        return minus_one_errno(libc::EINVAL);
                    }
                    let gid_type = match raw[6] {
                        17 => IBV_GID_TYPE_SYSFS_ROCE_V2, // IPPROTO_UDP
                        0x1b => IBV_GID_TYPE_SYSFS_IB_ROCE_V1,
                        _ => return minus_one_errno(libc::EPROTONOSUPPORT),
                    };
                    a.grh.dgid = ibv_gid { raw: raw[8..24].try_into().expect("16 bytes") };
                    match find_gid_index(context, port_num, dgid, gid_type) {
                        Ok(i) => a.grh.sgid_index = i,
                        Err(e) => return minus_one_errno(e),
                    }
                    let flow_class = u32::from_be_bytes([raw[0], raw[1], raw[2], raw[3]]);
                    a.grh.hop_limit = raw[7];
                    a.grh.traffic_class = ((flow_class >> 20) & 0xff) as u8;
                }
                None => return minus_one_errno(libc::EPROTONOSUPPORT),
            }
        }
        *out = a;
        0
    }
}

export! {
    /// Creates an AH towards the sender of a received completion
    /// (`ibv_create_ah_from_wc(3)`). Errors: NULL with `errno`.
    #[export("IBVERBS_1.1", null)]
    pub unsafe fn ibv_create_ah_from_wc(
        pd: *mut ibv_pd,
        wc: *mut ibv_wc,
        grh: *mut ibv_grh,
        port_num: u8,
    ) -> *mut ibv_ah {
        // SAFETY: caller contract.
        let Some(pd_obj) = (unsafe { PdObj::from_raw(pd) }) else {
            return null_errno(libc::EINVAL);
        };
        let mut attr = ibv_ah_attr::zeroed();
        // SAFETY: forwarded caller contract; attr is a local.
        if unsafe { ibv_init_ah_from_wc(pd_obj.context_ptr(), port_num, wc, grh, &mut attr) } != 0 {
            return core::ptr::null_mut(); // errno from ibv_init_ah_from_wc
        }
        // SAFETY: forwarded caller contract; attr is a local.
        unsafe { ibv_create_ah(pd, &mut attr) }
    }
}

export! {
    /// Resolves the Ethernet MAC (and VLAN) of a RoCE address vector
    /// (`ibv_resolve_eth_l2_from_gid`, used by libmlx4/5). Returns 0 or a negative errno:
    /// `-EOPNOTSUPP`, the soft device has no L2 neighbour table (it routes by GID).
    #[export("IBVERBS_1.1", value(-libc::EIO))]
    pub unsafe fn ibv_resolve_eth_l2_from_gid(
        _context: *mut ibv_context,
        _attr: *mut ibv_ah_attr,
        _eth_mac: *mut u8,
        _vid: *mut u16,
    ) -> c_int {
        set_errno(libc::EOPNOTSUPP);
        -libc::EOPNOTSUPP
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The RoCE v2 IPv4 area (`union rdma_network_hdr`): 20 zero bytes, then a header.
    fn ipv4_area(src: [u8; 4], dst: [u8; 4]) -> [u8; 40] {
        let mut a = [0u8; 40];
        let ip: &mut [u8] = &mut a[20..];
        ip[0] = 0x45;
        ip[2..4].copy_from_slice(&48u16.to_be_bytes());
        ip[6] = 0x40;
        ip[8] = 64;
        ip[9] = 17;
        ip[12..16].copy_from_slice(&src);
        ip[16..20].copy_from_slice(&dst);
        let sum = ipv4_checksum(a[20..].try_into().unwrap());
        a[30..32].copy_from_slice(&sum.to_be_bytes());
        a
    }

    #[test]
    fn grh_version_reads_ipv4_areas_by_version_and_checksum() {
        let a = ipv4_area([10, 0, 0, 1], [10, 0, 0, 2]);
        assert_eq!(grh_version(&a), Some(4));
        // Byte 0 with version nibble 6 is ambiguous: a valid IPv4 checksum decides.
        let mut b = a;
        b[0] = 0x60;
        assert_eq!(grh_version(&b), Some(4));
        b[30] ^= 1;
        assert_eq!(grh_version(&b), Some(6), "a bad checksum means IPv6");
    }

    #[test]
    fn grh_version_reads_ipv6_and_refuses_garbage() {
        let mut a = [0u8; 40];
        a[0] = 0x60;
        a[6] = 17;
        assert_eq!(grh_version(&a), Some(6), "IHL is not 5: IPv6");
        let z = [0u8; 40];
        assert_eq!(
            grh_version(&z),
            None,
            "neither IPv6 nor IPv4: EPROTONOSUPPORT"
        );
    }

    #[test]
    fn ipv4_mapped_gids() {
        assert_eq!(
            ipv4_mapped(&[127, 0, 0, 1]),
            [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1]
        );
    }
}
