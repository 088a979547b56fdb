//! `capi_structs`: the readers of the structs an application hands to the drop-in
//! `libibverbs.so.1` / `librdmacm.so.1` (crate `rverbs-capi`), built in memory this
//! harness owns from the fuzzer's bytes: `ibv_qp_attr` + mask as ibv_modify_qp(3) reads
//! them, `ibv_ah_attr` with its global route, scatter lists (`sg_list` + `num_sge`),
//! receive work-request chains as ibv_post_recv(3) walks them, socket addresses as
//! rdma_cm reads them, and `rdma_conn_param` with its private data.
//!
//! Input: a sequence of operations, each a selector byte and its fields.
//!
//! Asserts: never a panic; mask bits beyond the standard ones are `EOPNOTSUPP`, an
//! undefined state, MTU or migration state in a field the mask names is `EINVAL` and
//! nothing else is refused; what is accepted reads back through `qp_attr_to_c`
//! unchanged (the address vectors with `is_global` as 0/1 and no route when it is 0); a
//! scatter list is refused (`EINVAL`) for a negative count, one above every queue's
//! limit, or NULL with entries, and otherwise is exactly the caller's entries; a receive
//! chain posts exactly the requests before the first refused one, reports that one in
//! `*bad_wr` with its errno (`EINVAL` for its list, the core's errno for the core's
//! refusal), and leaves `*bad_wr` alone on success; a socket address is read only for
//! AF_INET/AF_INET6, then written back identical, its port what `rdma_get_*_port` read;
//! connection parameters carry exactly the prefix and `private_data_len` bytes.

use core::ffi::{c_int, c_void};
use std::cell::RefCell;

use ibverbs::abi::*;
use ibverbs::cm::abi::{rdma_conn_param, sockaddr_ib, AF_IB};
use ibverbs::fuzzing as f;

use crate::input::Input;

/// Runs one input.
pub fn run(data: &[u8]) {
    crate::input::each_op(data, 5, |inp, kind| match kind {
        0 => qp_attr(inp),
        1 => sges(inp),
        2 => recv_chain(inp),
        3 => sockaddr(inp),
        _ => conn_param(inp),
    });
}

/// A small value most of the time (the defined enum values are small), any otherwise.
fn small_or_any(inp: &mut Input<'_>) -> u32 {
    match inp.u8() {
        0..=191 => u32::from(inp.u8() % 8),
        _ => inp.u32(),
    }
}

fn ah(inp: &mut Input<'_>) -> ibv_ah_attr {
    let mut a = ibv_ah_attr::zeroed();
    let mut g = [0u8; 16];
    for b in &mut g {
        *b = inp.u8();
    }
    a.grh.dgid = ibv_gid { raw: g };
    a.grh.flow_label = inp.u32();
    a.grh.sgid_index = inp.u8();
    a.grh.hop_limit = inp.u8();
    a.grh.traffic_class = inp.u8();
    a.dlid = inp.u16();
    a.sl = inp.u8();
    a.src_path_bits = inp.u8();
    a.static_rate = inp.u8();
    a.is_global = inp.u8() % 3;
    a.port_num = inp.u8();
    a
}

fn ah_bytes(a: &ibv_ah_attr) -> Vec<u8> {
    // SAFETY: every view of the GID union is 16 plain bytes.
    let mut v = unsafe { a.grh.dgid.raw }.to_vec();
    v.extend_from_slice(&a.grh.flow_label.to_le_bytes());
    v.extend_from_slice(&[a.grh.sgid_index, a.grh.hop_limit, a.grh.traffic_class]);
    v.extend_from_slice(&a.dlid.to_le_bytes());
    v.extend_from_slice(&[a.sl, a.src_path_bits, a.static_rate, a.is_global, a.port_num]);
    v
}

/// What `ah_attr_to_c(ah_attr_from_c(a))` must be.
fn ah_normalised(a: &ibv_ah_attr) -> ibv_ah_attr {
    let mut n = *a;
    if a.is_global == 0 {
        n.grh = ibv_ah_attr::zeroed().grh;
    } else {
        n.is_global = 1;
    }
    n
}

fn qp_attr(inp: &mut Input<'_>) {
    let mut a = ibv_qp_attr::zeroed();
    a.qp_state = small_or_any(inp);
    a.cur_qp_state = small_or_any(inp);
    a.path_mtu = small_or_any(inp);
    a.path_mig_state = small_or_any(inp);
    a.qkey = inp.u32();
    a.rq_psn = inp.u32();
    a.sq_psn = inp.u32();
    a.dest_qp_num = inp.u32();
    a.qp_access_flags = inp.u32();
    a.cap.max_send_wr = inp.u32();
    a.cap.max_recv_sge = inp.u32();
    a.ah_attr = ah(inp);
    a.alt_ah_attr = ah(inp);
    a.pkey_index = inp.u16();
    a.max_rd_atomic = inp.u8();
    a.max_dest_rd_atomic = inp.u8();
    a.min_rnr_timer = inp.u8();
    a.port_num = inp.u8();
    a.timeout = inp.u8();
    a.retry_cnt = inp.u8();
    a.rnr_retry = inp.u8();
    a.rate_limit = inp.u32();
    let mask = match inp.u8() {
        0..=223 => (inp.u32() & ((IBV_QP_DEST_QPN << 1) - 1)) as c_int,
        _ => inp.u32() as c_int,
    };

    // The AH conversion alone.
    let back = f::ah_attr_to_c(&f::ah_attr_from_c(&a.ah_attr));
    assert_eq!(ah_bytes(&back), ah_bytes(&ah_normalised(&a.ah_attr)));

    let standard = ((IBV_QP_DEST_QPN << 1) - 1) as c_int;
    let got = f::modify_attr_from_c(&a, mask);
    if mask & !standard != 0 {
        assert_eq!(got.err(), Some(libc::EOPNOTSUPP));
        return;
    }
    let m = mask as u32;
    let bad = (m & IBV_QP_STATE != 0 && rverbs::QpState::from_raw(a.qp_state).is_none())
        || (m & IBV_QP_CUR_STATE != 0 && rverbs::QpState::from_raw(a.cur_qp_state).is_none())
        || (m & IBV_QP_PATH_MTU != 0 && rverbs::Mtu::from_raw(a.path_mtu).is_none())
        || (m & IBV_QP_PATH_MIG_STATE != 0 && a.path_mig_state > IBV_MIG_ARMED);
    let (q, qmask) = match got {
        Err(e) => {
            assert_eq!(e, libc::EINVAL);
            assert!(bad, "only an undefined enum the mask names is refused");
            return;
        }
        Ok(q) => q,
    };
    assert!(!bad, "an undefined enum the mask names was accepted");
    assert_eq!(qmask.bits(), m);
    let c = f::qp_attr_to_c(&q);
    if m & IBV_QP_STATE != 0 {
        assert_eq!(c.qp_state, a.qp_state);
    }
    if m & IBV_QP_CUR_STATE != 0 {
        assert_eq!(c.cur_qp_state, a.cur_qp_state);
    }
    if m & IBV_QP_PATH_MTU != 0 {
        assert_eq!(c.path_mtu, a.path_mtu);
    }
    if m & IBV_QP_PATH_MIG_STATE != 0 {
        assert_eq!(c.path_mig_state, a.path_mig_state);
    }
    assert_eq!(
        (c.qkey, c.rq_psn, c.sq_psn, c.dest_qp_num, c.qp_access_flags, c.cap.max_send_wr, c.cap.max_recv_sge),
        (a.qkey, a.rq_psn, a.sq_psn, a.dest_qp_num, a.qp_access_flags, a.cap.max_send_wr, a.cap.max_recv_sge)
    );
    assert_eq!(
        (c.pkey_index, c.max_rd_atomic, c.max_dest_rd_atomic, c.min_rnr_timer, c.port_num, c.timeout, c.retry_cnt, c.rnr_retry, c.rate_limit),
        (a.pkey_index, a.max_rd_atomic, a.max_dest_rd_atomic, a.min_rnr_timer, a.port_num, a.timeout, a.retry_cnt, a.rnr_retry, a.rate_limit)
    );
    assert_eq!(ah_bytes(&c.ah_attr), ah_bytes(&ah_normalised(&a.ah_attr)));
    assert_eq!(ah_bytes(&c.alt_ah_attr), ah_bytes(&ah_normalised(&a.alt_ah_attr)));
}

/// A count as an application might pass it: small, around the limit, or any.
fn count(inp: &mut Input<'_>) -> c_int {
    match inp.u8() % 4 {
        0 | 1 => c_int::from(inp.u8() % 8),
        2 => f::MAX_ANY_SGE as c_int - 2 + c_int::from(inp.u8() % 5),
        _ => inp.u32() as c_int,
    }
}

/// A scatter list of `MAX_ANY_SGE` entries (the most any count may make the reader see).
fn sge_list(inp: &mut Input<'_>) -> Vec<ibv_sge> {
    (0..f::MAX_ANY_SGE)
        .map(|i| ibv_sge { addr: u64::from(inp.u32()) << 8 | i as u64, length: inp.u32(), lkey: inp.u32() })
        .collect()
}

/// Whether a list of `n` entries at a NULL (`null`) or real address is refused.
fn refused(n: c_int, null: bool) -> bool {
    n < 0 || n as usize > f::MAX_ANY_SGE || (null && n > 0)
}

fn sges(inp: &mut Input<'_>) {
    let n = count(inp);
    let null = inp.u8() & 1 == 1;
    let list = sge_list(inp);
    let p = if null { core::ptr::null() } else { list.as_ptr() };
    // SAFETY: `list` holds MAX_ANY_SGE entries; NULL otherwise.
    let got = unsafe { f::sge_slice(p, n) };
    if refused(n, null) {
        assert_eq!(got.err(), Some(libc::EINVAL));
    } else {
        let got = got.expect("a valid list");
        assert_eq!(got.len(), n as usize);
        for (g, c) in got.iter().zip(&list) {
            assert_eq!((g.addr, g.length, g.lkey), (c.addr, c.length, c.lkey));
        }
    }
}

fn recv_chain(inp: &mut Input<'_>) {
    let k = usize::from(inp.u8() % 20) + 1;
    let refuse_at = usize::from(inp.u8()) % 24;
    let mut lists: Vec<Vec<ibv_sge>> = Vec::with_capacity(k);
    let mut wrs: Vec<ibv_recv_wr> = Vec::with_capacity(k);
    let mut nulls = Vec::with_capacity(k);
    for i in 0..k {
        let n = if inp.u8() < 224 { c_int::from(inp.u8() % 4) } else { count(inp) };
        let null = inp.u8() == 0xff;
        nulls.push(null);
        lists.push((0..f::MAX_ANY_SGE).map(|j| ibv_sge { addr: (i * 64 + j) as u64, length: j as u32, lkey: i as u32 }).collect());
        wrs.push(ibv_recv_wr { wr_id: 1000 + i as u64, next: core::ptr::null_mut(), sg_list: core::ptr::null_mut(), num_sge: n });
    }
    // Link the chain in place (the vectors are not resized from here on).
    let base = wrs.as_mut_ptr();
    for i in 0..k {
        wrs[i].sg_list = if nulls[i] { core::ptr::null_mut() } else { lists[i].as_mut_ptr() };
        // SAFETY: i + 1 <= k, inside (or one past) the allocation.
        wrs[i].next = if i + 1 < k { unsafe { base.add(i + 1) } } else { core::ptr::null_mut() };
    }
    let first_bad = (0..k).find(|&i| refused(wrs[i].num_sge, nulls[i]));
    let posted: RefCell<Vec<(u64, Vec<u64>)>> = RefCell::new(Vec::new());
    let post = |chunk: &[rverbs::RecvWr<'_>]| -> Result<(), rverbs::PostError> {
        let mut p = posted.borrow_mut();
        for (j, w) in chunk.iter().enumerate() {
            if p.len() == refuse_at {
                return Err(rverbs::PostError { index: j, error: rverbs::Error::QueueFull { verb: "post_recv", max: 1 } });
            }
            p.push((w.wr_id, w.sg_list.iter().map(|s| s.addr).collect()));
        }
        Ok(())
    };
    let sentinel = 0x5a5a_usize as *mut ibv_recv_wr;
    let mut bad: *mut ibv_recv_wr = sentinel;
    // SAFETY: the chain, its lists (MAX_ANY_SGE entries each, or NULL) and `bad` live
    // in this frame.
    let rc = unsafe { f::post_recv_list(base, &mut bad, post) };
    let stop = match first_bad {
        Some(b) if b <= refuse_at => Some((b, libc::EINVAL)),
        _ if refuse_at < k => Some((refuse_at, libc::ENOMEM)),
        _ => None,
    };
    let posted = posted.into_inner();
    crate::input::assert_list_stop(rc, bad, sentinel, base, posted.len(), k, stop);
    for (i, (id, addrs)) in posted.iter().enumerate() {
        assert_eq!(*id, 1000 + i as u64);
        let n = wrs[i].num_sge as usize;
        assert_eq!(*addrs, lists[i][..n].iter().map(|s| s.addr).collect::<Vec<_>>());
    }
}

fn sockaddr(inp: &mut Input<'_>) {
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut st: libc::sockaddr_storage = unsafe { core::mem::zeroed() };
    let raw = {
        let mut b = inp.bytes(core::mem::size_of::<libc::sockaddr_storage>()).to_vec();
        b.resize(core::mem::size_of::<libc::sockaddr_storage>(), 0);
        b
    };
    // SAFETY: `raw` has the storage's size; any bytes are a valid sockaddr_storage.
    unsafe { core::ptr::copy_nonoverlapping(raw.as_ptr(), (&raw mut st).cast::<u8>(), raw.len()) };
    let family = match inp.u8() % 4 {
        0 => libc::AF_INET,
        1 => libc::AF_INET6,
        2 => AF_IB,
        _ => c_int::from(st.ss_family),
    };
    st.ss_family = family as libc::sa_family_t;
    let p = (&raw const st).cast::<libc::sockaddr>();
    // SAFETY: a 128-byte storage, the largest any family implies.
    let got = unsafe { ibverbs::cm::obj::sockaddr_from_c(p) };
    // SAFETY: as above.
    let port = unsafe { ibverbs::cm::addr::port_of(p) };
    match family {
        libc::AF_INET | libc::AF_INET6 => {
            let a = got.expect("an IP address is read");
            assert_eq!(port, a.port().to_be());
            // SAFETY: all-zero is a valid sockaddr_storage.
            let mut out: libc::sockaddr_storage = unsafe { core::mem::zeroed() };
            // SAFETY: `out` is a writable sockaddr_storage.
            unsafe { ibverbs::cm::obj::write_sockaddr(&mut out, a) };
            // SAFETY: as above.
            let again = unsafe { ibverbs::cm::obj::sockaddr_from_c((&raw const out).cast()) };
            assert_eq!(again, Ok(a), "written back identical");
        }
        _ => {
            assert_eq!(got, Err(libc::EINVAL));
            if family == AF_IB {
                // SAFETY: a sockaddr_ib fits the storage.
                let sid = unsafe { (*(&raw const st).cast::<sockaddr_ib>()).sib_sid };
                assert_eq!(port, (u64::from_be(sid) as u16).to_be());
            } else {
                assert_eq!(port, 0);
            }
        }
    }
    // SAFETY: NULL is refused before any read.
    assert_eq!(unsafe { ibverbs::cm::obj::sockaddr_from_c(core::ptr::null()) }, Err(libc::EINVAL));
}

fn conn_param(inp: &mut Input<'_>) {
    let n = usize::from(inp.u8() % 72);
    let prefix = inp.bytes(n).to_vec();
    let data: Vec<u8> = (0..256).map(|_| inp.u8()).collect();
    let mut c = rdma_conn_param {
        private_data: if inp.u8() & 3 == 0 { core::ptr::null() } else { data.as_ptr().cast::<c_void>() },
        private_data_len: inp.u8(),
        responder_resources: inp.u8(),
        initiator_depth: inp.u8(),
        flow_control: inp.u8(),
        retry_count: inp.u8(),
        rnr_retry_count: inp.u8(),
        srq: inp.u8(),
        qp_num: inp.u32(),
    };
    let null_param = inp.u8() & 7 == 0;
    let p: *const rdma_conn_param = if null_param { core::ptr::null() } else { &raw mut c };
    // SAFETY: `c` and its 256 bytes of private data (≥ any u8 length) live here.
    let got = unsafe { f::core_param(p, &prefix) };
    let mut want = prefix.clone();
    if !null_param {
        if !c.private_data.is_null() {
            want.extend_from_slice(&data[..usize::from(c.private_data_len)]);
        }
        assert_eq!(
            (got.responder_resources, got.initiator_depth, got.flow_control, got.retry_count, got.rnr_retry_count, got.srq, got.qp_num),
            (c.responder_resources, c.initiator_depth, c.flow_control, c.retry_count, c.rnr_retry_count, c.srq, c.qp_num)
        );
    }
    assert_eq!(got.private_data, want, "the prefix, then exactly private_data_len bytes");
}
