//! `capi_send`: the send side and the create attributes of the drop-in `libibverbs.so.1`
//! (crate `rverbs-capi`), over structs built in memory this harness owns: `ibv_send_wr`
//! chains as ibv_post_send(3) walks them (`qp::post_send_list`, `qp::translate_send`:
//! every opcode, inline data, SGE lists, the `wr` / `qp_type` / `bind_mw` unions, UD and
//! XRC QPs), `ibv_qp_init_attr_ex` (`qp::qp_init_attr_ex_from_c`, `qp_type_from_c`) and
//! `ibv_cq_init_attr_ex` (`cq::cq_init_attr_ex_from_c`, `cq_counts`),
//! `ibv_srq_init_attr_ex` (`srq::srq_init_attr_ex_from_c`), the arguments of the
//! `ibv_wr_*` builders (`qp::wr`: `wr_flags`, `ibv_wr_set_sge_list`,
//! `ibv_wr_set_inline_data[_list]`, `ibv_wr_atomic_write`'s value) and `rdma_create_ep`'s
//! `rdma_addrinfo` (port space and QP type through `cm::obj::ps_and_qp_type`, the
//! private data kept for `rdma_connect`).
//!
//! Input: a sequence of operations, each a selector byte and its fields.
//!
//! Asserts: a send chain posts exactly the requests before the first refused one — an
//! unknown opcode, a scatter list `sge_slice` refuses, inline pieces beyond
//! `max_send_sge` or NULL with bytes, a window or AH that is not the library's (`EINVAL`),
//! ATOMIC_WRITE and FLUSH (`EOPNOTSUPP`), or the one the core refused (its errno) — names
//! it in `*bad_wr`, leaves `*bad_wr` alone on success, and translates each request
//! field by field (opcode, flags, the union member its opcode reads, `imm_data`,
//! `remote_srqn` on XRC_SEND QPs only, the scatter list or exactly the inline bytes);
//! create attributes are refused exactly per the documented rules with their errno and
//! otherwise carried unchanged; a builder's flags are the known ones less INLINE, an SGE
//! list is taken exactly when within `max_send_sge` and not NULL with entries, inline
//! pieces are exactly the caller's bytes unless the list or a piece with bytes is NULL;
//! `rdma_create_ep` keeps exactly `ai_connect_len` bytes of a non-NULL `ai_connect`. A
//! window or AH of the library cannot be made without a
//! device here: those requests are only seen refused.

use core::ffi::c_int;
use std::cell::RefCell;

use ibverbs::abi::*;
use ibverbs::fuzzing as f;
use rverbs::{Payload, SendFlags, WrOpcode};

use crate::input::Input;

/// Inline pieces one request may have (`rverbs::limits::MAX_SGE`).
const INLINE_SLOTS: usize = rverbs::limits::MAX_SGE as usize;
/// `send_ops_flags` rdma-core 44 defines: bits 0–10 and 12.
const V44_SEND_OPS: u64 = 0x7ff | 1 << 12;

/// Runs one input.
pub fn run(data: &[u8]) {
    crate::input::each_op(data, 6, |inp, kind| match kind {
        0 => send_chain(inp),
        1 => qp_init_ex(inp),
        2 => cq_init_ex(inp),
        3 => srq_init_ex(inp),
        4 => builder_args(inp),
        _ => create_ep(inp),
    });
}

fn u64(inp: &mut Input<'_>) -> u64 {
    u64::from(inp.u32()) | u64::from(inp.u32()) << 32
}

/// A count as an application might pass it: small, around the limit, or any.
fn count(inp: &mut Input<'_>) -> c_int {
    match inp.u8() % 4 {
        0 | 1 => c_int::from(inp.u8() % 8),
        2 => f::MAX_ANY_SGE as c_int - 2 + c_int::from(inp.u8() % 5),
        _ => inp.u32() as c_int,
    }
}

/// A pointer value that is not an object of the library (never dereferenced by it).
fn foreign<T>(inp: &mut Input<'_>) -> *mut T {
    match inp.u8() % 3 {
        0 => core::ptr::null_mut(),
        1 => 0x1000 as *mut T,
        _ => (u64(inp) as usize & !7) as *mut T,
    }
}

/// What the harness expects of one request: `Ok` or the errno that refuses it.
fn verdict(w: &ibv_send_wr, inline_ok: bool, shape: f::SendShape) -> Result<(), c_int> {
    let op = WrOpcode::from_raw(w.opcode).ok_or(libc::EINVAL)?;
    if matches!(op, WrOpcode::AtomicWrite | WrOpcode::Flush) {
        return Err(libc::EOPNOTSUPP);
    }
    let n = w.num_sge;
    if n < 0 || n as usize > f::MAX_ANY_SGE || (w.sg_list.is_null() && n > 0) {
        return Err(libc::EINVAL);
    }
    if w.send_flags & IBV_SEND_INLINE != 0 && (n as usize > shape.0 || n as usize > INLINE_SLOTS || !inline_ok) {
        return Err(libc::EINVAL);
    }
    if op == WrOpcode::BindMw || shape.1 {
        return Err(libc::EINVAL);
    }
    Ok(())
}

fn send_chain(inp: &mut Input<'_>) {
    let shape: f::SendShape = (usize::from(inp.u8() % (INLINE_SLOTS as u8 + 3)), inp.u8() % 8 == 0, inp.u8() & 1 == 1);
    let k = usize::from(inp.u8() % 12) + 1;
    let refuse_at = usize::from(inp.u8()) % 16;
    // The bytes inline SGEs point into.
    let bytes: Vec<u8> = (0..512).map(|i| (i as u8).wrapping_mul(31) ^ 0x5a).collect();
    let mut lists: Vec<Vec<ibv_sge>> = Vec::with_capacity(k);
    let mut wrs: Vec<ibv_send_wr> = Vec::with_capacity(k);
    let mut nulls = Vec::with_capacity(k);
    let mut inline_ok = Vec::with_capacity(k);
    for i in 0..k {
        // SAFETY: all-zero is a valid ibv_send_wr (integers, pointers, unions of them).
        let mut w: ibv_send_wr = unsafe { core::mem::zeroed() };
        w.wr_id = 1000 + i as u64;
        w.opcode = match inp.u8() {
            0..=199 => u32::from(inp.u8() % 16),
            _ => inp.u32(),
        };
        w.send_flags = match inp.u8() % 3 {
            0 => 0,
            1 => IBV_SEND_INLINE | u32::from(inp.u8() & 0x17),
            _ => inp.u32(),
        };
        w.num_sge = if inp.u8() < 224 { c_int::from(inp.u8() % 4) } else { count(inp) };
        w.imm_data = inp.u32();
        match inp.u8() % 3 {
            0 => w.wr.rdma = ibv_send_wr_rdma { remote_addr: u64(inp), rkey: inp.u32() },
            1 => {
                w.wr.atomic = ibv_send_wr_atomic { remote_addr: u64(inp), compare_add: u64(inp), swap: u64(inp), rkey: inp.u32() }
            }
            _ => w.wr.ud = ibv_send_wr_ud { ah: foreign(inp), remote_qpn: inp.u32(), remote_qkey: inp.u32() },
        }
        w.qp_type.xrc = ibv_send_wr_xrc { remote_srqn: inp.u32() };
        w.bind_mw_tso.bind_mw = ibv_send_wr_bind_mw {
            mw: foreign(inp),
            rkey: inp.u32(),
            // SAFETY: all-zero is a valid ibv_mw_bind_info (a NULL region, integers).
            bind_info: unsafe { core::mem::zeroed() },
        };
        // The scatter list: inline SGEs name bytes of `bytes` (or NULL with none); others
        // any words.
        let mut ok = true;
        let list: Vec<ibv_sge> = (0..f::MAX_ANY_SGE)
            .map(|_| {
                let (off, len) = (usize::from(inp.u8()) * 2, usize::from(inp.u8()));
                let len = len.min(bytes.len() - off);
                let null = inp.u8() == 0xff;
                ibv_sge { addr: if null { 0 } else { bytes[off..].as_ptr() as u64 }, length: len as u32, lkey: off as u32 }
            })
            .collect();
        if let Ok(n) = usize::try_from(w.num_sge) {
            ok = list[..n.min(f::MAX_ANY_SGE)].iter().all(|s| s.length == 0 || s.addr != 0);
        }
        inline_ok.push(ok);
        nulls.push(inp.u8() == 0xfe);
        lists.push(list);
        wrs.push(w);
    }
    let base = wrs.as_mut_ptr();
    for i in 0..k {
        wrs[i].sg_list = if nulls[i] { core::ptr::null_mut() } else { lists[i].as_mut_ptr() };
        // SAFETY: i + 1 <= k, inside (or one past) the allocation.
        wrs[i].next = if i + 1 < k { unsafe { base.add(i + 1) } } else { core::ptr::null_mut() };
    }
    let first_bad = (0..k).find_map(|i| verdict(&wrs[i], inline_ok[i], shape).err().map(|e| (i, e)));
    // What the core was given: per request, the translated fields.
    type Seen = (u64, WrOpcode, SendFlags, u32, u64, u32, u64, u64, u32, Vec<u64>, Option<Vec<u8>>);
    let posted: RefCell<Vec<Seen>> = RefCell::new(Vec::new());
    let post = |chunk: &[rverbs::SendWr<'_>]| -> Result<(), rverbs::PostError> {
        let mut p = posted.borrow_mut();
        for (j, w) in chunk.iter().enumerate() {
            if p.len() == refuse_at {
                return Err(rverbs::PostError { index: j, error: rverbs::Error::QueueFull { verb: "post_send", max: 1 } });
            }
            let (sges, inline) = match w.payload {
                Payload::Sge(s) => (s.iter().map(|s| s.addr).collect(), None),
                Payload::InlineList(l) => (Vec::new(), Some(l.concat())),
                Payload::Inline(b) => (Vec::new(), Some(b.to_vec())),
            };
            assert!(w.ud.is_none() && w.bind.is_none() && w.flush.is_none());
            p.push((w.wr_id, w.opcode, w.flags, w.imm_data, w.remote_addr, w.rkey, w.compare_add, w.swap, w.xrc_remote_srqn, sges, inline));
        }
        Ok(())
    };
    let sentinel = 0x5a5a_usize as *mut ibv_send_wr;
    let mut bad: *mut ibv_send_wr = sentinel;
    // SAFETY: the chain, its lists (MAX_ANY_SGE entries each, or NULL), the inline bytes
    // and `bad` live in this frame.
    let rc = unsafe { f::post_send_list(base, &mut bad, shape, post) };
    let stop = match first_bad {
        Some((b, e)) if b <= refuse_at => Some((b, e)),
        _ if refuse_at < k => Some((refuse_at, libc::ENOMEM)),
        _ => None,
    };
    let posted = posted.into_inner();
    crate::input::assert_list_stop(rc, bad, sentinel, base, posted.len(), k, stop);
    for (i, got) in posted.iter().enumerate() {
        let w = &wrs[i];
        let op = WrOpcode::from_raw(w.opcode).expect("a posted opcode is known");
        let (mut addr, mut rkey, mut cmp, mut swap) = (0, 0, 0, 0);
        // SAFETY: the union member the opcode reads; every member is plain data here.
        unsafe {
            match op {
                WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm | WrOpcode::RdmaRead => {
                    (addr, rkey) = (w.wr.rdma.remote_addr, w.wr.rdma.rkey);
                }
                WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd => {
                    let a = w.wr.atomic;
                    (addr, rkey, cmp, swap) = (a.remote_addr, a.rkey, a.compare_add, a.swap);
                }
                _ => {}
            }
        }
        // SAFETY: as above.
        let srqn = if shape.2 { unsafe { w.qp_type.xrc.remote_srqn } } else { 0 };
        let flags = SendFlags::from_bits_truncate(w.send_flags);
        let n = w.num_sge as usize;
        let (sges, inline) = if flags.contains(SendFlags::INLINE) {
            let mut b = Vec::new();
            for s in &lists[i][..n] {
                if s.length > 0 {
                    let off = s.lkey as usize;
                    b.extend_from_slice(&bytes[off..off + s.length as usize]);
                }
            }
            (Vec::new(), Some(b))
        } else {
            (lists[i][..n].iter().map(|s| s.addr).collect(), None)
        };
        let want: Seen = (w.wr_id, op, flags, w.imm_data, addr, rkey, cmp, swap, srqn, sges, inline);
        assert_eq!(*got, want, "request {i} translated field by field");
    }
}

fn ptr<T>(inp: &mut Input<'_>) -> *mut T {
    (u64::from(inp.u16()) << 4) as usize as *mut T
}

fn qp_init_ex(inp: &mut Input<'_>) {
    // SAFETY: all-zero is a valid ibv_qp_init_attr_ex (integers and pointers).
    let mut a: ibv_qp_init_attr_ex = unsafe { core::mem::zeroed() };
    a.qp_context = ptr(inp);
    a.send_cq = ptr(inp);
    a.recv_cq = ptr(inp);
    a.srq = ptr(inp);
    a.cap = ibv_qp_cap { max_send_wr: inp.u32(), max_recv_wr: inp.u32(), max_send_sge: inp.u32(), max_recv_sge: inp.u32(), max_inline_data: inp.u32() };
    a.qp_type = match inp.u8() {
        0..=223 => u32::from(inp.u8() % 12),
        _ => inp.u32(),
    };
    a.sq_sig_all = inp.u32() as c_int;
    a.comp_mask = match inp.u8() % 4 {
        0 => IBV_QP_INIT_ATTR_PD,
        1 => IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
        2 => u32::from(inp.u8()),
        _ => inp.u32(),
    };
    a.pd = ptr(inp);
    a.xrcd = ptr(inp);
    a.create_flags = if inp.u8() & 1 == 0 { 0 } else { inp.u32() };
    a.send_ops_flags = match inp.u8() % 3 {
        0 => u64::from(inp.u16()) & V44_SEND_OPS,
        1 => u64::from(inp.u16()),
        _ => u64(inp),
    };
    let m = a.comp_mask;
    let want = if m & !((IBV_QP_INIT_ATTR_SEND_OPS_FLAGS << 1) - 1) != 0 {
        Err(libc::EINVAL)
    } else if m & (IBV_QP_INIT_ATTR_MAX_TSO_HEADER | IBV_QP_INIT_ATTR_IND_TABLE | IBV_QP_INIT_ATTR_RX_HASH) != 0
        || (m & IBV_QP_INIT_ATTR_CREATE_FLAGS != 0 && a.create_flags != 0)
        || (m & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS != 0 && a.send_ops_flags & !V44_SEND_OPS != 0)
    {
        Err(libc::EOPNOTSUPP)
    } else if (a.qp_type == IBV_QPT_XRC_RECV && m & IBV_QP_INIT_ATTR_XRCD == 0)
        || (a.qp_type != IBV_QPT_XRC_RECV && m & IBV_QP_INIT_ATTR_PD == 0)
    {
        Err(libc::EINVAL)
    } else {
        Ok(())
    };
    let got = f::qp_init_attr_ex_from_c(&a);
    assert_eq!(got.as_ref().err().copied(), want.err(), "mask {m:#x} type {} flags {:#x}", a.qp_type, a.send_ops_flags);
    if let Ok((p, ops, pd, home)) = got {
        assert_eq!(
            (p.qp_context, p.send_cq, p.recv_cq, p.srq, p.qp_type, p.sq_sig_all),
            (a.qp_context, a.send_cq, a.recv_cq, a.srq, a.qp_type, a.sq_sig_all)
        );
        assert_eq!(
            (p.cap.max_send_wr, p.cap.max_recv_wr, p.cap.max_send_sge, p.cap.max_recv_sge, p.cap.max_inline_data),
            (a.cap.max_send_wr, a.cap.max_recv_wr, a.cap.max_send_sge, a.cap.max_recv_sge, a.cap.max_inline_data)
        );
        assert_eq!(ops.map(|o| o.bits()), (m & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS != 0).then_some(a.send_ops_flags));
        assert_eq!(pd, if m & IBV_QP_INIT_ATTR_PD != 0 { a.pd } else { core::ptr::null_mut() });
        assert_eq!(home, if a.qp_type == IBV_QPT_XRC_RECV { Ok(a.xrcd) } else { Err(a.pd) });
    }
    // The type ibv_create_qp accepts.
    match f::qp_type_from_c(a.qp_type) {
        Ok(t) => assert!(matches!(t.raw(), IBV_QPT_RC | IBV_QPT_UC | IBV_QPT_UD | IBV_QPT_XRC_SEND) && t.raw() == a.qp_type),
        Err(e) => assert_eq!(e, if a.qp_type == IBV_QPT_XRC_RECV { libc::EINVAL } else { libc::EOPNOTSUPP }),
    }
}

fn cq_init_ex(inp: &mut Input<'_>) {
    // SAFETY: all-zero is a valid ibv_cq_init_attr_ex (integers and pointers).
    let mut a: ibv_cq_init_attr_ex = unsafe { core::mem::zeroed() };
    a.cqe = inp.u32();
    a.cq_context = ptr(inp);
    a.channel = ptr(inp);
    a.comp_vector = if inp.u8() & 1 == 0 { u32::from(inp.u8()) } else { inp.u32() };
    a.wc_flags = match inp.u8() % 3 {
        0 => u64::from(inp.u16()) & u64::from(IBV_CREATE_CQ_SUP_WC_FLAGS),
        1 => u64::from(inp.u16()),
        _ => u64(inp),
    };
    a.comp_mask = if inp.u8() & 1 == 0 { u32::from(inp.u8() % 4) } else { inp.u32() };
    a.flags = if inp.u8() & 1 == 0 { u32::from(inp.u8() % 8) } else { inp.u32() };
    a.parent_domain = ptr(inp);
    let known_flags = IBV_CREATE_CQ_ATTR_SINGLE_THREADED | IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN;
    let flags = if a.comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS != 0 { a.flags } else { 0 };
    let want = if a.wc_flags & !u64::from(IBV_CREATE_CQ_SUP_WC_FLAGS) != 0 {
        Err(libc::EOPNOTSUPP)
    } else if a.comp_mask & !(IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD) != 0 {
        Err(libc::EINVAL)
    } else if a.comp_mask & IBV_CQ_INIT_ATTR_MASK_PD != 0 && a.parent_domain.is_null() {
        Err(libc::EINVAL)
    } else if flags & !known_flags != 0 {
        Err(libc::EOPNOTSUPP)
    } else {
        let parent = (a.comp_mask & IBV_CQ_INIT_ATTR_MASK_PD != 0).then_some(a.parent_domain);
        Ok((c_int::try_from(a.cqe).unwrap_or(-1), c_int::try_from(a.comp_vector).unwrap_or(-1), a.wc_flags, flags, parent))
    };
    let got = f::cq_init_attr_ex_from_c(&a);
    assert_eq!(got, want);
    if let Ok((cqe, vector, _, _, _)) = got {
        let counts = f::cq_counts(cqe, vector);
        assert_eq!(counts, (cqe >= 0 && vector >= 0).then_some((cqe as u32, vector as u32)));
        if counts.is_some() {
            assert_eq!(counts, Some((a.cqe, a.comp_vector)), "a count within c_int is carried unchanged");
        }
    }
}

fn srq_init_ex(inp: &mut Input<'_>) {
    // SAFETY: all-zero is a valid ibv_srq_init_attr_ex (integers and pointers).
    let mut a: ibv_srq_init_attr_ex = unsafe { core::mem::zeroed() };
    a.attr = ibv_srq_attr { max_wr: inp.u32(), max_sge: inp.u32(), srq_limit: inp.u32() };
    a.comp_mask = if inp.u8() & 1 == 0 { u32::from(inp.u8() % 64) } else { inp.u32() };
    a.srq_type = if inp.u8() & 1 == 0 { u32::from(inp.u8() % 4) } else { inp.u32() };
    a.pd = ptr(inp);
    a.xrcd = ptr(inp);
    a.cq = ptr(inp);
    a.tm_cap = ibv_tm_cap { max_num_tags: inp.u32(), max_ops: inp.u32() };
    let m = a.comp_mask;
    let ty = if m & IBV_SRQ_INIT_ATTR_TYPE != 0 { a.srq_type } else { IBV_SRQT_BASIC };
    let xrc_need = IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ;
    let tm_need = IBV_SRQ_INIT_ATTR_TM | IBV_SRQ_INIT_ATTR_CQ;
    let want = if m >= IBV_SRQ_INIT_ATTR_RESERVED {
        Err(libc::EINVAL)
    } else if !(ty == IBV_SRQT_XRC || ty == IBV_SRQT_TM || (ty == IBV_SRQT_BASIC && m & IBV_SRQ_INIT_ATTR_TM == 0)) {
        Err(libc::EINVAL)
    } else if m & IBV_SRQ_INIT_ATTR_PD == 0
        || (ty == IBV_SRQT_XRC && m & xrc_need != xrc_need)
        || (ty == IBV_SRQT_TM && m & tm_need != tm_need)
    {
        Err(libc::EINVAL)
    } else {
        Ok((a.pd, (ty == IBV_SRQT_XRC).then_some((a.xrcd, a.cq)), (ty == IBV_SRQT_TM).then_some((a.tm_cap, a.cq))))
    };
    assert_eq!(f::srq_init_attr_ex_from_c(&a), want, "mask {m:#x} type {}", a.srq_type);
}

fn builder_args(inp: &mut Input<'_>) {
    let wr_flags = inp.u32();
    let got = f::builder_flags(wr_flags);
    assert_eq!(got, SendFlags::from_bits_truncate(wr_flags) - SendFlags::INLINE);
    assert!(!got.contains(SendFlags::INLINE));

    // ibv_wr_atomic_write's value.
    let value = inp.u32().to_le_bytes().repeat(3);
    let at = usize::from(inp.u8() % 5);
    let null = inp.u8() & 1 == 1;
    let p = if null { core::ptr::null() } else { value[at..].as_ptr().cast() };
    // SAFETY: 8 readable bytes from `at` (12 - 4 ≥ 8), or NULL.
    let v = unsafe { f::atomic_write_value(p) };
    assert_eq!(v, (!null).then(|| value[at..at + 8].try_into().expect("8 bytes")));

    // ibv_wr_set_sge_list.
    let max = usize::from(inp.u8() % 34);
    let n = match inp.u8() % 3 {
        0 => usize::from(inp.u8() % 34),
        1 => max + usize::from(inp.u8() % 3),
        _ => inp.u32() as usize,
    };
    let list: Vec<ibv_sge> = (0..34u32).map(|i| ibv_sge { addr: u64::from(inp.u32()) << 8 | u64::from(i), length: i, lkey: inp.u32() }).collect();
    let null = inp.u8() == 0xff;
    let p = if null { core::ptr::null() } else { list.as_ptr() };
    // SAFETY: `list` holds 34 entries, more than any accepted count (max < 34); or NULL.
    let got = unsafe { f::sge_list_arg(n, p, max) };
    if n > max || (null && n > 0) {
        assert!(got.is_none(), "refused before the list is read");
    } else {
        let got = got.expect("a list within max_send_sge");
        assert_eq!(got.len(), n);
        for (g, c) in got.iter().zip(&list) {
            assert_eq!((g.addr, g.length, g.lkey), (c.addr, c.length, c.lkey));
        }
    }

    // ibv_wr_set_inline_data_list.
    let bytes: Vec<u8> = (0..256).map(|i| (i as u8) ^ inp.u8()).collect();
    let k = usize::from(inp.u8() % 20);
    let mut want = Vec::new();
    let mut refused = false;
    let bufs: Vec<ibv_data_buf> = (0..k)
        .map(|_| {
            let (off, len) = (usize::from(inp.u8()), usize::from(inp.u8()));
            let len = len.min(bytes.len() - off);
            let null = inp.u8() == 0xff;
            if null && len > 0 {
                refused = true;
            } else {
                want.extend_from_slice(&bytes[off..off + len]);
            }
            let addr = if null { core::ptr::null_mut() } else { bytes[off..].as_ptr().cast_mut().cast() };
            ibv_data_buf { addr, length: len }
        })
        .collect();
    let null_list = inp.u8() == 0xff;
    let p = if null_list { core::ptr::null() } else { bufs.as_ptr() };
    // SAFETY: `bufs` holds k entries naming bytes of `bytes` (or NULL); or a NULL list.
    let got = unsafe { f::inline_data(k, p) };
    if null_list && k > 0 {
        assert_eq!(got, Err("inline data list is NULL"));
    } else if refused {
        assert_eq!(got, Err("inline data piece is NULL"));
    } else {
        assert_eq!(got, Ok(want), "exactly the caller's bytes, in order");
    }
}

fn create_ep(inp: &mut Input<'_>) {
    use ibverbs::cm::abi::{rdma_addrinfo, RDMA_PS_IB, RDMA_PS_IPOIB, RDMA_PS_TCP, RDMA_PS_UDP};
    let data: Vec<u8> = (0..64).map(|_| inp.u8()).collect();
    // SAFETY: all-zero is a valid rdma_addrinfo (integers and pointers).
    let mut res: rdma_addrinfo = unsafe { core::mem::zeroed() };
    res.ai_flags = inp.u32() as c_int;
    res.ai_qp_type = if inp.u8() & 1 == 0 { c_int::from(inp.u8() % 12) } else { inp.u32() as c_int };
    res.ai_port_space = match inp.u8() % 5 {
        0 => RDMA_PS_TCP as c_int,
        1 => RDMA_PS_UDP as c_int,
        2 => RDMA_PS_IB as c_int,
        3 => RDMA_PS_IPOIB as c_int,
        _ => inp.u32() as c_int,
    };
    res.ai_connect_len = match inp.u8() % 3 {
        0 => usize::from(inp.u8() % 65),
        1 => 0,
        _ => usize::from(inp.u8() % 65),
    };
    let null = inp.u8() & 3 == 0;
    res.ai_connect = if null { core::ptr::null_mut() } else { data.as_ptr().cast_mut().cast() };
    // SAFETY: a non-NULL ai_connect holds 64 ≥ ai_connect_len bytes.
    let got = unsafe { f::ep_connect_data(&res) };
    assert_eq!(got, if null { &[][..] } else { &data[..res.ai_connect_len] });
    // The id rdma_create_ep creates: TCP is RC, UDP and IPoIB UD, IB the addrinfo's type.
    let ps = res.ai_port_space as u32;
    match ibverbs::cm::obj::ps_and_qp_type(ps, res.ai_qp_type as u32) {
        Ok((_, q)) => match ps {
            RDMA_PS_TCP => assert_eq!(q, rverbs::QpType::Rc),
            RDMA_PS_UDP | RDMA_PS_IPOIB => assert_eq!(q, rverbs::QpType::Ud),
            RDMA_PS_IB => assert_eq!(q.raw(), res.ai_qp_type as u32),
            other => panic!("port space {other:#x} accepted"),
        },
        Err(e) => {
            assert_eq!(e, libc::EINVAL);
            assert!(!matches!(ps, RDMA_PS_TCP | RDMA_PS_UDP | RDMA_PS_IPOIB), "a port space with a fixed type refused");
        }
    }
}
