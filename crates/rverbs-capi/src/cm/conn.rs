//! Listening, connection establishment and teardown (rdma_listen(3),
//! rdma_get_request(3), rdma_connect(3), rdma_accept(3), rdma_reject(3),
//! rdma_establish(3), rdma_disconnect(3), rdma_notify(3)). All return 0 or -1 with
//! `errno` (rdma-core 44).
//!
//! Rules kept from librdmacm: in the TCP port space a connect or accept with neither a
//! QP on the id nor parameters is `EINVAL`; NULL parameters mean retry and RNR retry 7
//! and the device's maximum outstanding RDMA READs; `rdma_connect`, `rdma_accept`
//! (except for UD ids, which get no ESTABLISHED) and `rdma_disconnect` wait for their
//! event on a synchronous id; a synchronous listener's requests are synchronous ids.

use core::ffi::{c_int, c_void};

use rverbs_cm::ConnParam;

use super::abi::{rdma_cm_id, rdma_conn_param, RDMA_CM_EVENT_CONNECT_REQUEST, RDMA_PS_TCP};
use super::id::id_or_einval;
use super::obj::{fail, Id};
use crate::abi::{ibv_event_type, IBV_EVENT_COMM_EST};
use crate::ffi::minus_one_errno;
use crate::qp::QpObj;

/// `RDMA_MAX_RESP_RES` / `RDMA_MAX_INIT_DEPTH`.
const MAX_RD: u8 = 0xff;

/// The bytes `len` bytes at `p` (none for NULL or 0).
///
/// # Safety
/// `p` is NULL or valid for reading `len` bytes.
unsafe fn bytes<'a>(p: *const c_void, len: usize) -> &'a [u8] {
    if p.is_null() || len == 0 {
        &[]
    } else {
        // SAFETY: caller contract.
        unsafe { core::slice::from_raw_parts(p.cast(), len) }
    }
}

/// The core parameters of a C `rdma_conn_param` (NULL: librdmacm's defaults), with
/// `prefix` (an endpoint's `ai_connect` data) before the private data.
///
/// # Safety
/// `p` is NULL or a valid `rdma_conn_param` whose private data is readable.
pub(crate) unsafe fn core_param(p: *const rdma_conn_param, prefix: &[u8]) -> ConnParam {
    // SAFETY: caller contract.
    match unsafe { p.as_ref() } {
        Some(p) => {
            let mut data = prefix.to_vec();
            // SAFETY: caller contract.
            data.extend_from_slice(unsafe {
                bytes(p.private_data, usize::from(p.private_data_len))
            });
            ConnParam {
                private_data: data,
                responder_resources: p.responder_resources,
                initiator_depth: p.initiator_depth,
                flow_control: p.flow_control,
                retry_count: p.retry_count,
                rnr_retry_count: p.rnr_retry_count,
                srq: p.srq,
                qp_num: p.qp_num,
            }
        }
        None => ConnParam {
            private_data: prefix.to_vec(),
            responder_resources: MAX_RD,
            initiator_depth: MAX_RD,
            retry_count: 7,
            rnr_retry_count: 7,
            ..ConnParam::default()
        },
    }
}

/// librdmacm's `ucma_valid_param` (TCP port space only): a QP on the id or parameters.
fn valid_param(w: &Id, p: *const rdma_conn_param) -> Result<(), c_int> {
    // SAFETY: fields of the live id.
    let (ps, qp) = unsafe { ((*w.c()).ps, (*w.c()).qp) };
    if ps == RDMA_PS_TCP && qp.is_null() && p.is_null() {
        return Err(minus_one_errno(libc::EINVAL));
    }
    Ok(())
}

/// The QP number and SRQ flag of the id's QP, if it has one (they replace the
/// parameters', as librdmacm does).
fn qp_of(w: &Id) -> Option<(u32, u8)> {
    // SAFETY: `id->qp` is NULL or a QP of this library (set by rdma_create_qp).
    let obj = unsafe { QpObj::from_raw((*w.c()).qp) }?;
    // SAFETY: field of the live QP.
    let srq = unsafe { !(*obj.as_ptr()).srq.is_null() };
    Some((obj.core().qp_num(), u8::from(srq)))
}

cm_export! {
    /// Listens for connection requests (rdma_listen(3)); `backlog` ≤ 0 = the maximum.
    /// An unbound id is bound to the wildcard address first.
    #[cm(minus_one)]
    pub unsafe fn rdma_listen(id: *mut rdma_cm_id, backlog: c_int) -> c_int {
        // SAFETY: caller contract.
        let w = match unsafe { id_or_einval(id) } {
            Ok(w) => w,
            Err(e) => return e,
        };
        let r = w.core().listen(backlog);
        w.refresh();
        match r {
            Ok(()) => 0,
            Err(e) => fail(&e),
        }
    }
}

cm_export! {
    /// Takes the next connection request of a synchronous listener
    /// (rdma_get_request(3)): the request's (synchronous) id, with the QP of the
    /// endpoint's `qp_init_attr` created on it when `rdma_create_ep` got one; the
    /// CONNECT_REQUEST event is parked in the new id's `event`. Errors: `EINVAL` (the
    /// listener is not synchronous, or another event came), the event's status.
    #[cm(minus_one)]
    pub unsafe fn rdma_get_request(listen: *mut rdma_cm_id, id: *mut *mut rdma_cm_id) -> c_int {
        // SAFETY: caller contract.
        let w = match unsafe { id_or_einval(listen) } {
            Ok(w) => w,
            Err(e) => return e,
        };
        let Some(ch) = w.sync_channel() else {
            return minus_one_errno(libc::EINVAL);
        };
        if id.is_null() {
            return minus_one_errno(libc::EINVAL);
        }
        w.ack_parked();
        let core = match ch.core().get_event() {
            Ok(ev) => ev,
            Err(e) => return fail(&e),
        };
        let ev = match super::obj::deliver(core, super::obj::Chan::as_ptr(&ch)) {
            Ok(ev) => ev,
            Err(e) => return minus_one_errno(e),
        };
        let park = |err: c_int| {
            // SAFETY: field of the live listener.
            unsafe { (*w.c()).event = ev };
            minus_one_errno(err)
        };
        // SAFETY: `ev` is a live event of ours.
        let (kind, status, child) = unsafe { ((*ev).event, (*ev).status, (*ev).id) };
        if status != 0 {
            return park(if status < 0 { -status } else { status });
        }
        if kind != RDMA_CM_EVENT_CONNECT_REQUEST {
            return park(libc::EINVAL);
        }
        let attr = w.extra().qp_init_attr;
        if let Some(mut attr) = attr {
            // SAFETY: the request's live id; the listener's PD (or NULL = the CM's).
            let r = unsafe { super::qp::rdma_create_qp(child, (*w.c()).pd, &mut attr) };
            if r != 0 {
                return park(crate::ffi::errno());
            }
        }
        // SAFETY: `child` is the request's live id; `id` checked non-NULL.
        unsafe {
            (*child).event = ev;
            id.write(child);
        }
        0
    }
}

cm_export! {
    /// Initiates a connection (rdma_connect(3)): ESTABLISHED follows (CONNECT_RESPONSE
    /// for an id without a QP), or REJECTED / UNREACHABLE; a synchronous id waits
    /// (REJECTED → `ECONNREFUSED`). `conn_param` NULL is allowed with a QP on the id.
    #[cm(minus_one)]
    pub unsafe fn rdma_connect(id: *mut rdma_cm_id, conn_param: *mut rdma_conn_param) -> c_int {
        // SAFETY: caller contract.
        let w = match unsafe { id_or_einval(id) } {
            Ok(w) => w,
            Err(e) => return e,
        };
        if let Err(e) = valid_param(w, conn_param) {
            return e;
        }
        let prefix = std::mem::take(&mut w.extra().connect);
        // SAFETY: caller contract.
        let mut p = unsafe { core_param(conn_param, &prefix) };
        if let Some((qpn, srq)) = qp_of(w) {
            p.qp_num = qpn;
            p.srq = srq;
        }
        let r = w.core().connect(&p);
        w.refresh();
        match r {
            Ok(()) => w.complete(),
            Err(e) => fail(&e),
        }
    }
}

cm_export! {
    /// Accepts a connection request (rdma_accept(3)): the id's QP goes to RTR and RTS
    /// before the reply is sent; a synchronous id waits for ESTABLISHED (UD ids get
    /// none: their parked request is acked and the call returns).
    #[cm(minus_one)]
    pub unsafe fn rdma_accept(id: *mut rdma_cm_id, conn_param: *mut rdma_conn_param) -> c_int {
        // SAFETY: caller contract.
        let w = match unsafe { id_or_einval(id) } {
            Ok(w) => w,
            Err(e) => return e,
        };
        if let Err(e) = valid_param(w, conn_param) {
            return e;
        }
        let p = if conn_param.is_null() {
            None
        } else {
            // SAFETY: caller contract.
            let mut p = unsafe { core_param(conn_param, &[]) };
            if let Some((qpn, srq)) = qp_of(w) {
                p.qp_num = qpn;
                p.srq = srq;
            }
            Some(p)
        };
        let r = w.core().accept(p.as_ref());
        w.refresh();
        if let Err(e) = r {
            return fail(&e);
        }
        if w.is_ud() {
            if w.sync_channel().is_some() {
                w.ack_parked();
            }
            return 0;
        }
        w.complete()
    }
}

cm_export! {
    /// Rejects a connection request (rdma_reject(3)): the peer sees REJECTED with
    /// status 28 and this private data (≤ 148 bytes, `EINVAL` beyond).
    #[cm(minus_one)]
    pub unsafe fn rdma_reject(
        id: *mut rdma_cm_id,
        private_data: *const c_void,
        private_data_len: u8,
    ) -> c_int {
        // SAFETY: caller contract.
        let w = match unsafe { id_or_einval(id) } {
            Ok(w) => w,
            Err(e) => return e,
        };
        // SAFETY: caller contract.
        let data = unsafe { bytes(private_data, usize::from(private_data_len)) };
        match w.core().reject(data) {
            Ok(()) => 0,
            Err(e) => fail(&e),
        }
    }
}

cm_export! {
    /// Completes an active connection on a QP the caller manages (rdma_establish(3)),
    /// after CONNECT_RESPONSE: sends the RTU. `EINVAL` when the id has a QP.
    #[cm(minus_one)]
    pub unsafe fn rdma_establish(id: *mut rdma_cm_id) -> c_int {
        // SAFETY: caller contract.
        let w = match unsafe { id_or_einval(id) } {
            Ok(w) => w,
            Err(e) => return e,
        };
        // SAFETY: field of the live id.
        if !unsafe { (*w.c()).qp }.is_null() {
            return minus_one_errno(libc::EINVAL);
        }
        match w.core().establish() {
            Ok(()) => 0,
            Err(e) => fail(&e),
        }
    }
}

cm_export! {
    /// Disconnects (rdma_disconnect(3)): the QP moves to ERR (its work requests flush),
    /// the peer is told; a synchronous id waits for DISCONNECTED. `EINVAL` for an id
    /// without a device (librdmacm's `ucma_shutdown`) or one never connected.
    #[cm(minus_one)]
    pub unsafe fn rdma_disconnect(id: *mut rdma_cm_id) -> c_int {
        // SAFETY: caller contract.
        let w = match unsafe { id_or_einval(id) } {
            Ok(w) => w,
            Err(e) => return e,
        };
        // SAFETY: field of the live id.
        if unsafe { (*w.c()).verbs }.is_null() {
            return minus_one_errno(libc::EINVAL);
        }
        match w.core().disconnect() {
            Ok(()) => w.complete(),
            Err(e) => fail(&e),
        }
    }
}

cm_export! {
    /// Reports a QP async event to the CM (rdma_notify(3)). The kernel hands it to the
    /// IB CM (RoCE ports use it): `IBV_EVENT_COMM_EST` (data arrived before the RTU)
    /// completes the connection there; here the RTU always arrives (the CM's messages
    /// are delivered reliably), so it is accepted and changes nothing. Other events, or
    /// an id without a device, are `EINVAL`.
    #[cm(minus_one)]
    pub unsafe fn rdma_notify(id: *mut rdma_cm_id, event: ibv_event_type) -> c_int {
        // SAFETY: caller contract.
        let w = match unsafe { id_or_einval(id) } {
            Ok(w) => w,
            Err(e) => return e,
        };
        // SAFETY: field of the live id.
        if event != IBV_EVENT_COMM_EST || unsafe { (*w.c()).verbs }.is_null() {
            return minus_one_errno(libc::EINVAL);
        }
        0
    }
}
