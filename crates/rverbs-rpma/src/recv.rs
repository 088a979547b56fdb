//! Posting one receive as librpma's `rpma_mr_recv` and `rpma_srq_recv` do: into a
//! registered region's range, or (no region) a zero-length receive.

use rverbs::{Qp, RecvWr};

use crate::error::{Error, Result};
use crate::mr::MrLocal;

/// Posts one receive as librpma's `rpma_mr_recv` does.
pub(crate) fn post_recv(qp: &Qp, dst: Option<&MrLocal>, offset: usize, len: usize, op_context: u64) -> Result<()> {
    post_recv_to(|wr| qp.post_recv(wr), dst, offset, len, op_context)
}

/// Posts one receive through `post` (a QP's or a shared receive queue's).
pub(crate) fn post_recv_to(
    post: impl FnOnce(&[RecvWr<'_>]) -> std::result::Result<(), rverbs::PostError>,
    dst: Option<&MrLocal>,
    offset: usize,
    len: usize,
    op_context: u64,
) -> Result<()> {
    let sge;
    let list: &[rverbs::Sge] = match dst {
        Some(mr) => {
            sge = [mr.sge(offset, len)?];
            &sge
        }
        None if offset != 0 || len != 0 => return Err(Error::Inval),
        None => &[],
    };
    post(&[RecvWr::new(op_context, list)]).map_err(Error::from)
}
