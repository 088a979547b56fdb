//! Work requests in the C layout: the soft API's [`SendWr`] and [`RecvWr`] as the
//! `struct ibv_send_wr` / `struct ibv_recv_wr` chains ibv_post_send(3) and
//! ibv_post_recv(3) take.


use rverbs_abi::*;
use rverbs_proto::verbs::{SendFlags, WrOpcode};
use smallvec::SmallVec;

use super::library::unsupported;
use crate::error::{Error, Result};
use crate::mr::Sge;
use crate::rings::wr::{Payload, RecvWr, SendWr};

// The soft API's `Sge` is `struct ibv_sge` field for field: scatter lists are handed to
// the provider in place.
const _: () = assert!(core::mem::size_of::<Sge>() == core::mem::size_of::<ibv_sge>());
const _: () = assert!(core::mem::align_of::<Sge>() == core::mem::align_of::<ibv_sge>());
const _: () = assert!(core::mem::offset_of!(Sge, addr) == core::mem::offset_of!(ibv_sge, addr));
const _: () = assert!(core::mem::offset_of!(Sge, length) == core::mem::offset_of!(ibv_sge, length));
const _: () = assert!(core::mem::offset_of!(Sge, lkey) == core::mem::offset_of!(ibv_sge, lkey));

/// Work requests per post kept on the stack.
const INLINE_WRS: usize = 4;

/// A chain of `struct ibv_send_wr` built from a slice of [`SendWr`], with what it points
/// into: the inline pieces' SGEs (the address handles of UD requests are held by the
/// caller's lock on the context's table).
pub(super) struct SendChain {
    pub(super) wrs: SmallVec<[ibv_send_wr; INLINE_WRS]>,
    /// One `Vec` of SGEs per request that carries an inline list.
    _inline: Vec<Vec<ibv_sge>>,
}

/// A scatter list as the pointer and count `struct ibv_send_wr` / `ibv_recv_wr` take.
fn sg(list: &[Sge]) -> (*mut ibv_sge, core::ffi::c_int) {
    // The provider only reads the list (ibv_post_send(3)); the cast is the C API's lack
    // of `const`. More entries than an int counts are the provider's EINVAL.
    (list.as_ptr().cast_mut().cast::<ibv_sge>(), core::ffi::c_int::try_from(list.len()).unwrap_or(core::ffi::c_int::MAX))
}

/// The context's address handles, locked shared for the post (`None` when no request
/// is UD).
pub(super) type Ahs<'a> = Option<&'a std::collections::HashMap<usize, usize>>;

/// Builds the chain, or says which request the backend cannot express (its index and
/// `EOPNOTSUPP`, or `EINVAL` for a UD request naming an address handle of another
/// context, destroyed, or none of this backend).
pub(super) fn send_chain(ctx: Ahs<'_>, list: &[SendWr<'_>]) -> std::result::Result<SendChain, (usize, Error)> {
    let mut inline = Vec::new();
    let mut wrs: SmallVec<[ibv_send_wr; INLINE_WRS]> = SmallVec::with_capacity(list.len());
    for (i, wr) in list.iter().enumerate() {
        let c = one(ctx, wr, &mut inline).map_err(|e| (i, e))?;
        wrs.push(c);
    }
    // Link the chain now that the array no longer moves.
    let n = wrs.len();
    let base = wrs.as_mut_ptr();
    for i in 0..n.saturating_sub(1) {
        // SAFETY: `i` and `i + 1` are in bounds of the array.
        unsafe { (*base.add(i)).next = base.add(i + 1) };
    }
    Ok(SendChain { wrs, _inline: inline })
}

fn one(
    ctx: Ahs<'_>,
    wr: &SendWr<'_>,
    inline: &mut Vec<Vec<ibv_sge>>,
) -> Result<ibv_send_wr> {
    let opcode = match wr.opcode {
        WrOpcode::RdmaWrite => IBV_WR_RDMA_WRITE,
        WrOpcode::RdmaWriteWithImm => IBV_WR_RDMA_WRITE_WITH_IMM,
        WrOpcode::Send => IBV_WR_SEND,
        WrOpcode::SendWithImm => IBV_WR_SEND_WITH_IMM,
        WrOpcode::RdmaRead => IBV_WR_RDMA_READ,
        WrOpcode::AtomicCmpAndSwp => IBV_WR_ATOMIC_CMP_AND_SWP,
        WrOpcode::AtomicFetchAndAdd => IBV_WR_ATOMIC_FETCH_AND_ADD,
        WrOpcode::SendWithInv => IBV_WR_SEND_WITH_INV,
        _ => return Err(unsupported("post_send", "this opcode (memory windows, FLUSH, ATOMIC_WRITE, TSO)")),
    };
    if wr.bind.is_some() || wr.flush.is_some() || wr.xrc_remote_srqn != 0 {
        return Err(unsupported("post_send", "memory-window binds, FLUSH and XRC"));
    }
    let mut flags = wr.flags;
    let (sg_list, num_sge) = match wr.payload {
        Payload::Sge(list) => sg(list),
        Payload::Inline(bytes) => {
            flags |= SendFlags::INLINE;
            let mut v = vec![ibv_sge { addr: bytes.as_ptr() as u64, length: len32(bytes.len())?, lkey: 0 }];
            // The list's heap buffer stays where it is when the Vec moves into `inline`.
            let list = v.as_mut_ptr();
            inline.push(v);
            (list, 1)
        }
        Payload::InlineList(pieces) => {
            flags |= SendFlags::INLINE;
            let mut v = pieces
                .iter()
                .map(|p| Ok(ibv_sge { addr: p.as_ptr() as u64, length: len32(p.len())?, lkey: 0 }))
                .collect::<Result<Vec<_>>>()?;
            // As above: the buffer does not move with the Vec.
            let (list, n) = (v.as_mut_ptr(), core::ffi::c_int::try_from(v.len()).unwrap_or(core::ffi::c_int::MAX));
            inline.push(v);
            (list, n)
        }
    };
    let mut c = ibv_send_wr {
        wr_id: wr.wr_id,
        next: std::ptr::null_mut(),
        sg_list,
        num_sge,
        opcode,
        send_flags: flags.bits(),
        imm_data: wr.imm_data,
        wr: ibv_send_wr_wr { rdma: ibv_send_wr_rdma { remote_addr: wr.remote_addr, rkey: wr.rkey } },
        qp_type: ibv_send_wr_qp_type { xrc: ibv_send_wr_xrc { remote_srqn: 0 } },
        bind_mw_tso: ibv_send_wr_bind_mw_tso {
            tso: ibv_send_wr_tso { hdr: std::ptr::null_mut(), hdr_sz: 0, mss: 0 },
        },
    };
    if matches!(wr.opcode, WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd) {
        c.wr.atomic = ibv_send_wr_atomic {
            remote_addr: wr.remote_addr,
            compare_add: wr.compare_add,
            swap: wr.swap,
            rkey: wr.rkey,
        };
    }
    if let Some(ud) = wr.ud {
        // The table is locked shared until the post returns: a handle found is live.
        let found = ctx.and_then(|table| table.get(&(ud.ah as *const _ as usize)));
        let ah = *found.ok_or(Error::Os(std::io::Error::from_raw_os_error(libc::EINVAL)))?;
        c.wr.ud = ibv_send_wr_ud { ah: ah as *mut ibv_ah, remote_qpn: ud.remote_qpn, remote_qkey: ud.remote_qkey };
    }
    Ok(c)
}

fn len32(n: usize) -> Result<u32> {
    u32::try_from(n).map_err(|_| Error::Os(std::io::Error::from_raw_os_error(libc::EINVAL)))
}

/// The chain of `struct ibv_recv_wr` for a slice of [`RecvWr`] (scatter lists in place).
pub(super) fn recv_chain(list: &[RecvWr<'_>]) -> SmallVec<[ibv_recv_wr; INLINE_WRS]> {
    let mut wrs: SmallVec<[ibv_recv_wr; INLINE_WRS]> = list
        .iter()
        .map(|wr| {
            let (sg_list, num_sge) = sg(wr.sg_list);
            ibv_recv_wr { wr_id: wr.wr_id, next: std::ptr::null_mut(), sg_list, num_sge }
        })
        .collect();
    let n = wrs.len();
    let base = wrs.as_mut_ptr();
    for i in 0..n.saturating_sub(1) {
        // SAFETY: `i` and `i + 1` are in bounds of the array.
        unsafe { (*base.add(i)).next = base.add(i + 1) };
    }
    wrs
}
