//! UD multicast groups (ibv_attach_mcast(3), ibv_detach_mcast(3)).
//!
//! Rule (kernel `ib_attach_mcast`, rxe `rxe_mcast.c`): only UD QPs attach, only to
//! multicast GIDs (ff00::/8, or IPv4-mapped 224.0.0.0/4); the LID is ignored on RoCE;
//! attaching twice keeps one attachment; detaching a QP that is not a member is EINVAL; a
//! QP still attached cannot be destroyed (EBUSY). A UD send to a group (destination GID =
//! the group, remote QPN 0xFFFFFF) delivers a copy to every attached QP that accepts
//! requests and whose Q_Key matches — the sender's own QP too if it is attached (hardware
//! loopback; rverbs has no BLOCK_SELF_MCAST_LB).
//!
//! Groups are host-wide, as on a network where every member hears the group: each
//! process keeps its own members in a table (the sender's fast path for QPs of its own
//! process) and publishes each attachment in the runtime directory as an empty file
//! `<runtime dir>/mcast/<group GID, 32 hex digits>/<QPN, 6 hex digits>.<pid>`, created by
//! `attach_mcast` and removed by `detach_mcast`. `pid` is the process that owns the QP's
//! endpoint, so an entry left by a process that died (its QPs cannot detach) is known
//! stale even once another process has claimed the same endpoint number: a sender skips
//! and removes entries whose endpoint is dead or owned by another pid. The limits
//! (`max_mcast_grp`, `max_mcast_qp_attach`) count this process's attachments.
//!
//! Across hosts (`transport::mcast_net`): a process with at least one member of a group
//! receives the group from the network on a UDP socket bound to `group:4791` and joined
//! to the group on the interfaces of the addresses the network transport serves (opened
//! by the first `Groups::attach` of the group, closed by the last
//! `Groups::detach`; an attach whose socket cannot be opened fails with its errno);
//! what arrives there goes to this process's members, with the same checks. A send to a
//! group reaches this host's members as above and goes once on the network to the group's
//! address, loopback off (this host's members already have it), with the address
//! handle's hop limit as TTL (0: 1). This file keeps the attachment rules and tells the
//! transport when to join and leave (`Reception`); the sockets are the transport's.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};

use crate::gid::Gid;
use crate::limits;
use crate::mr::endpoint::Endpoint;
use crate::error::{Error, Result};
use crate::rule::Rule;
use crate::qp::QpInner;
use crate::shm::registry::Peer;
use crate::table::endpoint_of;
use rverbs_proto::verbs::QpType;

/// The destination QPN of a UD send to a multicast group (`0xFFFFFF`, ibv_attach_mcast(3)).
pub const MULTICAST_QPN: u32 = 0xff_ffff;

/// Where this process receives its groups from beyond the host: the network transport
/// (`transport::mcast_net`), told when the process's first member of a group attaches
/// and when its last one detaches.
pub(crate) trait Reception {
    /// Starts receiving `gid`. Errors: the errno that keeps the group from being received.
    fn join(&self, gid: &Gid) -> std::io::Result<()>;
    /// Stops receiving `gid`.
    fn leave(&self, gid: &Gid);
}

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
    /// The live members of `gid` in this process.
    pub(crate) fn members(&self, gid: &Gid) -> Vec<Arc<QpInner>> {
        let g = self.groups.lock().expect("mcast");
        g.get(gid).map(|m| m.iter().filter_map(|(_, w)| w.upgrade()).collect()).unwrap_or_default()
    }
}

/// The directory of group `gid` under the runtime directory `root`.
fn group_dir(root: &Path, gid: &Gid) -> PathBuf {
    let hex: String = gid.0.iter().map(|b| format!("{b:02x}")).collect();
    root.join("mcast").join(hex)
}

/// The name of the entry of QP `qpn` of the process `pid`.
fn entry_name(qpn: u32, pid: u32) -> String {
    format!("{qpn:06x}.{pid}")
}

/// An entry name as (QPN, pid); `None` for anything else (temporary files start with
/// a dot).
fn parse_entry(name: &str) -> Option<(u32, u32)> {
    let (qpn, pid) = name.split_once('.')?;
    if qpn.len() != 6 {
        return None;
    }
    Some((u32::from_str_radix(qpn, 16).ok()?, pid.parse().ok()?))
}

/// Publishes the attachment of `qpn` of process `pid` to `gid`.
fn publish(root: &Path, gid: &Gid, qpn: u32, pid: u32) -> std::io::Result<()> {
    let dir = group_dir(root, gid);
    let path = dir.join(entry_name(qpn, pid));
    let mut tries = 0;
    loop {
        std::fs::create_dir_all(&dir)?;
        // A detaching process may remove the (then empty) directory between the two
        // calls: create it again.
        match std::fs::OpenOptions::new().write(true).create(true).truncate(false).open(&path) {
            Ok(_) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && tries < 16 => tries += 1,
            Err(e) => return Err(e),
        }
    }
}

/// Removes an entry, and the group's directory if it is left empty.
fn unpublish(dir: &Path, name: &str) {
    let _ = std::fs::remove_file(dir.join(name));
    // Fails (ENOTEMPTY) while other members remain: nothing to do then.
    let _ = std::fs::remove_dir(dir);
}

/// The members of `gid` in other processes of the host: (the peer, QPN), from the
/// host-wide record. Entries of dead endpoints, or of a process that no longer owns the
/// endpoint, are removed; this process's own entries are skipped (they are in
/// [`Groups::members`]). `me` is this process's endpoint, whose owner's pid its own
/// entries carry.
pub(crate) fn remote_members(me: &Endpoint, gid: &Gid) -> Vec<(Arc<Peer>, u32)> {
    let Some(reg) = me.reg.as_ref() else { return Vec::new() };
    let dir = group_dir(&reg.root, gid);
    let Ok(entries) = std::fs::read_dir(&dir) else { return Vec::new() };
    let mut out = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some((qpn, pid)) = parse_entry(name) else { continue };
        let ep = endpoint_of(qpn);
        if ep == reg.ep {
            if pid != me.pid {
                unpublish(&dir, name); // a previous owner of this endpoint
            }
            continue;
        }
        match reg.peer(ep) {
            Ok(peer) if peer.pid as u32 == pid => out.push((peer, qpn)),
            Ok(_) => unpublish(&dir, name),
            Err(_) if !reg.alive(ep) => unpublish(&dir, name),
            Err(_) => {} // alive but not reachable yet: skip this time
        }
    }
    out
}

impl Groups {
    /// Attaches the QP to the multicast group `gid` (ibv_attach_mcast(3)).
    ///
    /// The attachment is published host-wide (module doc), so sends from any process of
    /// the host reach the QP; the process's first member of a group has `net` (the
    /// network transport, if the device has one) join the group, so sends from other
    /// hosts do.
    ///
    /// Errors: `EINVAL` for a QP that is not UD or a GID that is not multicast;
    /// `ENOMEM` beyond `max_mcast_grp` groups or `max_mcast_qp_attach` QPs per group (of
    /// this process); the errno of a failure to write the host-wide record or of `net`'s
    /// join (rxe: the netdev refusing the group fails the attach).
    pub(crate) fn attach(&self, q: &Arc<QpInner>, gid: &Gid, net: Option<&dyn Reception>) -> Result<()> {
        let verb = "attach_mcast";
        if q.qp_type != QpType::Ud {
            return Err(Error::invalid(verb, Rule::McastNeedsUd));
        }
        if !is_multicast(gid) {
            return Err(Error::invalid(verb, Rule::NotMulticast { gid: *gid }));
        }
        let mut g = self.groups.lock().expect("mcast");
        if !g.contains_key(gid) {
            if g.len() >= limits::MAX_MCAST_GRP as usize {
                return Err(Error::Exhausted { what: "multicast groups" });
            }
            // The process's first member: receive the group from the network too.
            if let Some(net) = net {
                net.join(gid)?;
            }
        }
        let members = g.entry(*gid).or_default();
        members.retain(|(_, w)| w.strong_count() > 0);
        if members.iter().any(|(n, _)| *n == q.qpn) {
            return Ok(());
        }
        if members.len() >= limits::MAX_MCAST_QP_ATTACH as usize {
            return Err(Error::Exhausted { what: "QPs of a multicast group" });
        }
        let dev = q.endpoint;
        if let Some(Err(e)) = dev.reg.as_ref().map(|reg| publish(&reg.root, gid, q.qpn, dev.pid)) {
            if members.is_empty() {
                g.remove(gid);
                if let Some(net) = net {
                    net.leave(gid);
                }
            }
            return Err(e.into());
        }
        members.push((q.qpn, Arc::downgrade(q)));
        q.mcast_attached.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        Ok(())
    }

    /// Detaches the QP from `gid` (ibv_detach_mcast(3)); sends that start after this
    /// returns no longer reach it, from any process. The process's last member of the
    /// group has `net` leave it.
    ///
    /// Errors: `EINVAL` if the QP is not a member.
    pub(crate) fn detach(&self, q: &Arc<QpInner>, gid: &Gid, net: Option<&dyn Reception>) -> Result<()> {
        let mut g = self.groups.lock().expect("mcast");
        let Some(members) = g.get_mut(gid) else {
            return Err(Error::invalid("detach_mcast", Rule::NoSuchGroup { gid: *gid }));
        };
        let before = members.len();
        members.retain(|(n, _)| *n != q.qpn);
        if members.len() == before {
            return Err(Error::invalid("detach_mcast", Rule::NotAMember { qpn: q.qpn }));
        }
        if members.is_empty() {
            g.remove(gid);
            if let Some(net) = net {
                net.leave(gid);
            }
        }
        let dev = q.endpoint;
        if let Some(reg) = dev.reg.as_ref() {
            unpublish(&group_dir(&reg.root, gid), &entry_name(q.qpn, dev.pid));
        }
        q.mcast_attached.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_names_round_trip_and_others_are_ignored() {
        let n = entry_name(0x03_0005, 4242);
        assert_eq!(n, "030005.4242");
        assert_eq!(parse_entry(&n), Some((0x03_0005, 4242)));
        for bad in [".030005.4242.tmp", "30005.4242", "030005", "03000g.1", "030005.x"] {
            assert_eq!(parse_entry(bad), None, "{bad}");
        }
        let g = Gid::from_ipv4(std::net::Ipv4Addr::new(224, 0, 0, 251));
        assert!(group_dir(Path::new("/r"), &g).ends_with("mcast/00000000000000000000ffffe00000fb"));
    }
}
