//! The `vendor_err` codes rverbs puts in error completions, and what each means.
//!
//! ibv_poll_cq(3) makes `vendor_err` meaningful on every non-success completion. rxe
//! always writes 0; rverbs writes one of these codes so a failure says *why*.
//! Codes are stable: they are part of the documented ABI of the soft device.

/// Declares the vendor error table: `NAME = code, "why";` rows become constants, the
/// list [`ALL`] and [`describe`].
macro_rules! vendor_errors {
    ($( $(#[$m:meta])* $name:ident = $code:expr, $why:expr; )*) => {
        $( $(#[$m])* #[doc = concat!("`", stringify!($code), "`: ", $why)] pub const $name: u32 = $code; )*

        /// Every code with its name and explanation, in numeric order.
        pub const ALL: &[(u32, &str, &str)] = &[$( ($code, stringify!($name), $why), )*];

        /// The explanation of `code`, or `None` for a code rverbs never writes.
        pub fn describe(code: u32) -> Option<&'static str> {
            match code {
                $( $code => Some($why), )*
                _ => None,
            }
        }
    };
}

vendor_errors! {
    NONE = 0x00, "no error (successful completion)";
    FLUSHED = 0x01, "the QP is in the error state; the work request was flushed";
    LOCAL_LKEY = 0x10, "a local SGE names an lkey that is not registered";
    LOCAL_PD = 0x11, "a local SGE's memory region belongs to another protection domain";
    LOCAL_BOUNDS = 0x12, "a local SGE lies outside its memory region";
    LOCAL_ACCESS = 0x13, "a local SGE's memory region lacks LOCAL_WRITE for data the device must place";
    LOCAL_LENGTH = 0x14, "the message exceeds the port's maximum message size";
    RECV_TOO_SMALL = 0x15, "the receive buffers are smaller than the incoming message";
    RECV_WQE_BAD = 0x16, "the receive WQE's scatter list failed its lkey, PD, bounds or access check";
    LOCAL_NO_OPCODE = 0x17, "the QP's transport has no wire opcode for this work request (UC SEND with Invalidate)";
    REMOTE_RKEY = 0x20, "the rkey is not registered at the responder";
    REMOTE_PD = 0x21, "the rkey's memory belongs to another protection domain than the responder QP";
    REMOTE_BOUNDS = 0x22, "the remote range lies outside the rkey's memory";
    REMOTE_MR_ACCESS = 0x23, "the rkey's memory does not allow this operation";
    REMOTE_QP_ACCESS = 0x24, "the responder QP's access flags do not allow this operation";
    REMOTE_ALIGN = 0x25, "the remote address of an atomic is not 8-byte aligned";
    REMOTE_RD_ATOMIC = 0x26, "the responder QP allows no RDMA READ or atomic (max_dest_rd_atomic 0)";
    REMOTE_INVALID = 0x27, "the responder refused the request as invalid (opcode or length)";
    REMOTE_INVALIDATE = 0x28, "the rkey to invalidate is not valid at the responder";
    REMOTE_OP = 0x29, "the responder failed to execute the request";
    REMOTE_SEQUENCE = 0x2a, "the responder saw a packet out of its message's opcode sequence (missing FIRST or LAST)";
    REMOTE_LENGTH = 0x2b, "the responder refused a packet whose payload or RETH length breaks the length rules";
    REMOTE_ACCESS = 0x2c, "the responder answered with a remote access error NAK (bad rkey, range or rights; the exact reason stays at the responder)";
    REMOTE_XRC_SRQ = 0x2d, "the XRC SRQ an XRC request names does not exist at the target or is of another XRC domain than the target QP";
    RNR_EXHAUSTED = 0x30, "receiver not ready and the RNR retries are exhausted";
    RETRY_EXHAUSTED = 0x31, "no response within the ACK timeout and the retries are exhausted";
    BAD_RESPONSE = 0x32, "the responder's responses broke the response sequence or did not match the work request";
    CQ_OVERRUN = 0x40, "the completion queue overran";
    MW_BIND = 0x50, "the memory window bind failed its checks";
    INJECTED = 0x60, "the fault plan (RVERBS_FAULTS wc=…) completed this work request with this status; nothing was sent";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_unique_and_described() {
        let mut seen = std::collections::HashSet::new();
        for (code, name, why) in ALL {
            assert!(seen.insert(*code), "duplicate vendor_err {code:#x} ({name})");
            assert_eq!(describe(*code), Some(*why));
            assert!(!why.is_empty());
        }
        assert_eq!(describe(0xffff), None);
        assert_eq!(describe(RNR_EXHAUSTED), Some("receiver not ready and the RNR retries are exhausted"));
    }
}
