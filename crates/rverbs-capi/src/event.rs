//! Asynchronous events.

use core::ffi::c_int;

use rverbs::AsyncElement;

use crate::abi::*;
use crate::cq::CqObj;
use crate::context::ContextObj;
use crate::ffi::{ToErrno, getter_on_unknown_object, minus_one_errno, set_errno};
use crate::qp::QpObj;
use crate::srq::SrqObj;

export! {
    /// Waits for the next async event of a context (`ibv_get_async_event(3)`).
    /// Returns 0, or -1 with `errno` (`EAGAIN` on an `O_NONBLOCK` `async_fd`).
    ///
    /// Rule: `element` is the C object the event is about (the `ibv_cq *`, `ibv_qp *` or
    /// `ibv_srq *` this library handed out) or the port number; the event must be acked
    /// with `ibv_ack_async_event`, and destroying the object waits for that.
    #[export("IBVERBS_1.1", minus_one)]
    pub unsafe fn ibv_get_async_event(context: *mut ibv_context, event: *mut ibv_async_event) -> c_int {
        // SAFETY: caller contract.
        let Some(ctx) = (unsafe { ContextObj::from_raw(context) }) else {
            return getter_on_unknown_object();
        };
        if event.is_null() {
            return minus_one_errno(libc::EINVAL);
        }
        let ev = match ctx.core().get_async_event() {
            Ok(ev) => ev,
            Err(e) => return minus_one_errno(e.c_errno()),
        };
        let (kind, element) = ev.into_parts();
        // The cookies are the C objects, set at creation; the objects cannot be destroyed
        // before this event is acked.
        let element = match element {
            AsyncElement::Cq(cq) => ibv_async_event_element { cq: cq.cookie() as *mut ibv_cq },
            AsyncElement::Qp(qp) => ibv_async_event_element { qp: qp.cookie() as *mut ibv_qp },
            AsyncElement::Srq(srq) => ibv_async_event_element { srq: srq.cookie() as *mut ibv_srq },
            AsyncElement::Port(p) => ibv_async_event_element { port_num: c_int::from(p) },
            // DEVICE_FATAL names no object; the port number field reads 0.
            AsyncElement::Device => ibv_async_event_element { port_num: 0 },
        };
        // SAFETY: event is writable (caller contract, checked non-NULL).
        unsafe { event.write(ibv_async_event { element, event_type: kind.raw() }) };
        0
    }
}

export! {
    /// Acknowledges an async event (`ibv_ack_async_event(3)`).
    ///
    /// Rule: device.c: CQ events bump `cq->async_events_completed`; QP events
    /// (`QP_FATAL`…`PATH_MIG_ERR`, `QP_LAST_WQE_REACHED`) `qp->events_completed`; SRQ
    /// events `srq->events_completed` — each under the object's mutex followed by
    /// `pthread_cond_signal`; port/device events nothing. The core's count is acked too,
    /// which is what destroy waits on.
    #[export("IBVERBS_1.1", void)]
    pub unsafe fn ibv_ack_async_event(event: *mut ibv_async_event) {
        // SAFETY: event is NULL or valid (caller contract).
        let Some(ev) = (unsafe { event.as_ref() }) else {
            set_errno(libc::EINVAL);
            return;
        };
        // In every arm: the union member selected by the event type is the one
        // ibv_get_async_event wrote, and the object is live until the event is acked.
        match ev.event_type {
            IBV_EVENT_CQ_ERR => {
                // SAFETY: see above.
                if let Some(cq) = unsafe { CqObj::from_raw(ev.element.cq) } {
                    crate::cq::ack_async(cq);
                }
            }
            IBV_EVENT_QP_FATAL
            | IBV_EVENT_QP_REQ_ERR
            | IBV_EVENT_QP_ACCESS_ERR
            | IBV_EVENT_COMM_EST
            | IBV_EVENT_SQ_DRAINED
            | IBV_EVENT_PATH_MIG
            | IBV_EVENT_PATH_MIG_ERR
            | IBV_EVENT_QP_LAST_WQE_REACHED => {
                // SAFETY: see above.
                if let Some(qp) = unsafe { QpObj::from_raw(ev.element.qp) } {
                    crate::qp::ack_async(qp);
                }
            }
            IBV_EVENT_SRQ_ERR | IBV_EVENT_SRQ_LIMIT_REACHED => {
                // SAFETY: see above.
                if let Some(srq) = unsafe { SrqObj::from_raw(ev.element.srq) } {
                    crate::srq::ack_async(srq);
                }
            }
            _ => {}
        }
    }
}
