//! Conversions between the packet descriptors and [`crate::wire::roce::Repr`], the seam to
//! a transport that sends real packets (docs/rocev2-wire.md §1.2–§1.5).
//!
//! Payload bytes stay outside: `to_repr` sets `payload_len`; the driver writes the payload
//! (gathered from the WQE's range, or read at `source`) into `packet.payload_mut()`.

use super::{Request, Response};
use crate::psn::Psn;
use crate::wire::{AethRepr, AtomicAckEthRepr, BthRepr, IethRepr, ImmDtRepr, RoceRepr, XrcEthRepr};

/// The P_Key rxe sends (docs/rocev2-wire.md §1.2).
pub const DEFAULT_PKEY: u16 = 0xffff;

fn bth(opcode: crate::wire::OpCode, psn: Psn, dest_qp: u32, ack_req: bool, solicited: bool) -> BthRepr {
    BthRepr {
        opcode,
        solicited,
        migreq: false,
        pad_count: 0,
        pkey: DEFAULT_PKEY,
        fecn: false,
        becn: false,
        dest_qp,
        ack_req,
        psn: psn.get(),
    }
}

impl Request {
    /// The packet for this request to `dest_qp` (UD: `self.dest_qpn` wins).
    ///
    /// Rule: docs/rocev2-wire.md §1.2: TVer 0, P_Key 0xFFFF, M 0; §1.5: the headers of the
    /// opcode.
    pub fn to_repr(&self, dest_qp: u32) -> RoceRepr {
        let dest = self.dest_qpn.unwrap_or(dest_qp);
        let mut r = RoceRepr::new(bth(self.opcode, self.psn, dest, self.ack_req, self.solicited), self.payload_len as usize);
        r.deth = self.deth;
        r.feth = self.feth;
        r.reth = self.reth;
        r.atomic_eth = self.atomic;
        r.immdt = self.imm.map(|imm| ImmDtRepr { imm });
        r.ieth = self.invalidate.map(|rkey| IethRepr { rkey });
        r.xrceth = self.xrc_srq.map(|xrc_srq| XrcEthRepr { xrc_srq });
        r
    }

    /// The request a parsed packet carries; `payload` is the packet's payload (read for
    /// ATOMIC_WRITE, whose 8 bytes are data the responder stores itself, §1.3).
    pub fn from_repr(repr: &RoceRepr, payload: &[u8]) -> Request {
        let mut r = Request::new(repr.bth.opcode, Psn::new(repr.bth.psn));
        r.ack_req = repr.bth.ack_req;
        r.solicited = repr.bth.solicited;
        r.payload_len = repr.payload_len as u32;
        r.reth = repr.reth;
        r.atomic = repr.atomic_eth;
        r.imm = repr.immdt.map(|i| i.imm);
        r.invalidate = repr.ieth.map(|i| i.rkey);
        r.feth = repr.feth;
        r.deth = repr.deth;
        r.xrc_srq = repr.xrceth.map(|x| x.xrc_srq);
        if repr.bth.opcode.operation() == Some(crate::wire::Operation::AtomicWrite) && payload.len() >= 8 {
            let mut b = [0; 8];
            b.copy_from_slice(&payload[..8]);
            // §1.3: ATOMIC_WRITE's payload is copied verbatim (no byte swap).
            r.atomic_write = Some(u64::from_ne_bytes(b));
        }
        r
    }
}

impl Response {
    /// The packet for this response to `dest_qp`.
    pub fn to_repr(&self, dest_qp: u32) -> RoceRepr {
        let mut r = RoceRepr::new(bth(self.opcode, self.psn, dest_qp, false, false), self.payload_len as usize);
        r.aeth = self.syndrome.map(|syndrome| AethRepr { syndrome, msn: self.msn });
        r.atomic_ack_eth = self.atomic_original.map(|original| AtomicAckEthRepr { original });
        r
    }

    /// The response a parsed packet carries.
    pub fn from_repr(repr: &RoceRepr) -> Response {
        Response {
            opcode: repr.bth.opcode,
            psn: Psn::new(repr.bth.psn),
            syndrome: repr.aeth.map(|a| a.syndrome),
            msn: repr.aeth.map_or(0, |a| a.msn),
            atomic_original: repr.atomic_ack_eth.map(|a| a.original),
            payload_len: repr.payload_len as u32,
            source: None,
            reason: None,
        }
    }
}
