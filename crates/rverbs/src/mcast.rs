//! UD multicast groups (ibv_attach_mcast(3), ibv_detach_mcast(3)).
//!
//! Rule (kernel `ib_attach_mcast`, rxe `rxe_mcast.c`): only UD QPs attach, only to
//! multicast GIDs (ff00::/8, or IPv4-mapped 224.0.0.0/4); the LID is ignored on RoCE;
//! attaching twice keeps one attachment; detaching a QP that is not a member is EINVAL; a
//! QP still attached cannot be destroyed (EBUSY). A UD send to a group (destination GID =
//! the group, remote QPN 0xFFFFFF) delivers a copy to every attached QP that accepts
//! requests and whose Q_Key matches — the sender's own QP too if it is attached (hardware
//! loopback; rverbs has no BLOCK_SELF_MCAST_LB).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use crate::device::{limits, Gid};
use crate::error::{Error, Result};
use crate::qp::{Qp, QpInner};
use crate::QpType;

/// The QPN that addresses a multicast group.
pub const MULTICAST_QPN: u32 = 0xff_ffff;

/// Whether `gid` is a multicast GID.
pub fn is_multicast(gid: &Gid) -> bool {
    gid.0[0] == 0xff || gid.to_ipv4().is_some_and(|ip| ip.is_multicast())
}

/// The QPs attached to one group: (QPN, QP).
type Members = Vec<(u32, Weak<QpInner>)>;

/// Members of each group, by GID.
#[derive(Default)]
pub(crate) struct Groups {
    groups: Mutex<HashMap<Gid, Members>>,
}

impl Groups {
    /// The live members of `gid`.
    pub(crate) fn members(&self, gid: &Gid) -> Vec<Arc<QpInner>> {
        let g = self.groups.lock().expect("mcast");
        g.get(gid).map(|m| m.iter().filter_map(|(_, w)| w.upgrade()).collect()).unwrap_or_default()
    }
}

impl Qp {
    /// Attaches the QP to the multicast group `gid` (ibv_attach_mcast(3)).
    ///
    /// Errors: `EINVAL` for a QP that is not UD or a GID that is not multicast;
    /// `ENOMEM` beyond `max_mcast_grp` groups or `max_mcast_qp_attach` QPs per group.
    pub fn attach_mcast(&self, gid: &Gid, _lid: u16) -> Result<()> {
        let q = self.inner();
        let verb = "attach_mcast";
        if q.qp_type != QpType::Ud {
            return Err(Error::invalid(verb, "only UD QPs join multicast groups"));
        }
        if !is_multicast(gid) {
            return Err(Error::invalid(verb, "not a multicast GID"));
        }
        let mut g = q.pd.ctx.dev.mcast.groups.lock().expect("mcast");
        if !g.contains_key(gid) && g.len() >= limits::MAX_MCAST_GRP as usize {
            return Err(Error::Exhausted { what: "multicast groups" });
        }
        let members = g.entry(*gid).or_default();
        members.retain(|(_, w)| w.strong_count() > 0);
        if members.iter().any(|(n, _)| *n == q.qpn) {
            return Ok(());
        }
        if members.len() >= limits::MAX_MCAST_QP_ATTACH as usize {
            return Err(Error::Exhausted { what: "QPs of a multicast group" });
        }
        members.push((q.qpn, Arc::downgrade(q)));
        q.mcast_attached.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        Ok(())
    }

    /// Detaches the QP from `gid` (ibv_detach_mcast(3)).
    ///
    /// Errors: `EINVAL` if the QP is not a member.
    pub fn detach_mcast(&self, gid: &Gid, _lid: u16) -> Result<()> {
        let q = self.inner();
        let mut g = q.pd.ctx.dev.mcast.groups.lock().expect("mcast");
        let Some(members) = g.get_mut(gid) else {
            return Err(Error::invalid("detach_mcast", "no such group"));
        };
        let before = members.len();
        members.retain(|(n, _)| *n != q.qpn);
        if members.len() == before {
            return Err(Error::invalid("detach_mcast", "the QP is not a member"));
        }
        if members.is_empty() {
            g.remove(gid);
        }
        q.mcast_attached.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
        Ok(())
    }
}
