//! `neigh`: what the device reads from the kernel to decide whether another host's next
//! hop answers (crate `rverbs`, `neigh.rs`): `RTM_GETNEIGH` dump replies (netlink
//! messages), and the text of `/proc/net/route`, `/proc/net/ipv6_route` and
//! `/proc/net/arp`.
//!
//! Input: a sequence of operations, each a selector byte and its fields. The dump and the
//! tables are built from the fuzzer's bytes as the kernel lays them out (so that the
//! harness knows the answer), then, for some inputs, truncated or overwritten with raw
//! bytes; a raw operation hands arbitrary bytes / text over.
//!
//! Asserts: never a panic or an endless loop; a dump of whole messages gives the state of
//! the last `RTM_NEWNEIGH` entry whose `NDA_DST` is the address asked about, before the
//! first `NLMSG_DONE` / `NLMSG_ERROR` (attributes after a malformed one are not read),
//! and "ended" exactly when one of those is there; a dump cut anywhere gives nothing
//! that is not in the whole messages before the cut; a raw reply's answer is a state
//! next to the address's 16 bytes in an `NDA_DST` attribute. The next hop is the gateway
//! of the route with the most mask bits (IPv6: longest prefix; the first of equals), the
//! destination itself for a gateway of 0, none through `lo` (IPv6: or a local route) or
//! without a match; an ARP entry counts only when its address is the one asked and its
//! flags have ATF_COM.

use std::net::{Ipv4Addr, Ipv6Addr};

use rverbs::fuzzing::neigh as n;

use crate::input::Input;

const RTM_NEWNEIGH: u16 = 28;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NDA_DST: u16 = 1;
const NDA_LLADDR: u16 = 2;

fn u64(inp: &mut Input<'_>) -> u64 {
    u64::from(inp.u32()) | u64::from(inp.u32()) << 32
}

/// Runs one input.
pub fn run(data: &[u8]) {
    crate::input::each_op(data, 5, |inp, kind| match kind {
        0 => dump(inp),
        1 => raw_dump(inp),
        2 => routes(inp),
        3 => routes6(inp),
        _ => arp(inp),
    });
}

/// One of a few addresses (so that entries meet the one asked about), or any.
fn ip6(inp: &mut Input<'_>) -> Ipv6Addr {
    match inp.u8() % 4 {
        3 => Ipv6Addr::from(u128::from(u64(inp)) << 64 | u128::from(u64(inp))),
        k => Ipv6Addr::new(0xfd69, 0, 0, 0, 0, 0, 0, u16::from(k)),
    }
}

fn attr(out: &mut Vec<u8>, kind: u16, payload: &[u8]) {
    out.extend_from_slice(&((4 + payload.len()) as u16).to_ne_bytes());
    out.extend_from_slice(&kind.to_ne_bytes());
    out.extend_from_slice(payload);
    while out.len() % 4 != 0 {
        out.push(0);
    }
}

fn dump(inp: &mut Input<'_>) {
    let ip = ip6(inp);
    let mut buf = Vec::new();
    // Offsets where whole messages end, and the answer after each.
    let mut ends: Vec<(usize, Option<u16>, bool)> = vec![(0, None, false)];
    let (mut found, mut done) = (None, false);
    let count = usize::from(inp.u8() % 8);
    for _ in 0..count {
        let kind = match inp.u8() % 8 {
            0..=4 => RTM_NEWNEIGH,
            5 => NLMSG_DONE,
            6 => NLMSG_ERROR,
            _ => u16::from(inp.u8()) + 32,
        };
        let mut body = vec![10u8, 0, 0, 0, 3, 0, 0, 0];
        let state = inp.u16();
        body.extend_from_slice(&state.to_ne_bytes());
        body.extend_from_slice(&[0, 0]);
        let mut matches = false;
        let mut malformed = false;
        for _ in 0..inp.u8() % 4 {
            match inp.u8() % 4 {
                0 => attr(&mut body, NDA_LLADDR, &[0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff]),
                1 | 2 => {
                    let a = ip6(inp);
                    attr(&mut body, NDA_DST, &a.octets());
                    matches |= a == ip && !malformed;
                }
                _ => {
                    // An attribute whose length is below its header: reading stops.
                    body.extend_from_slice(&2u16.to_ne_bytes());
                    body.extend_from_slice(&NDA_DST.to_ne_bytes());
                    malformed = true;
                }
            }
        }
        let start = buf.len();
        buf.extend_from_slice(&((16 + body.len()) as u32).to_ne_bytes());
        buf.extend_from_slice(&kind.to_ne_bytes());
        buf.extend_from_slice(&[0; 10]);
        buf.extend_from_slice(&body);
        while buf.len() % 4 != 0 {
            buf.push(0);
        }
        debug_assert!(buf.len() > start);
        if !done {
            match kind {
                NLMSG_DONE | NLMSG_ERROR => done = true,
                RTM_NEWNEIGH if matches => found = Some(state),
                _ => {}
            }
        }
        ends.push((buf.len(), found, done));
    }
    assert_eq!(n::parse_neighbours(&buf, ip), (found, done), "the whole dump");
    // Cut anywhere: never an answer that is not in the whole messages before the cut.
    let cut = usize::from(inp.u16()) % (buf.len() + 1);
    let (got, _) = n::parse_neighbours(&buf[..cut], ip);
    let before: Vec<Option<u16>> = ends.iter().filter(|e| e.0 <= cut).map(|e| e.1).collect();
    if let Some(&(_, f, d)) = ends.iter().find(|e| e.0 == cut) {
        assert_eq!(n::parse_neighbours(&buf[..cut], ip), (f, d), "cut at a message boundary");
    }
    assert!(got.is_none() || before.contains(&got), "{got:?} not in {before:?}");
    // Overwritten bytes: no panic, and an answer only with an NDA_DST of the address.
    for _ in 0..inp.u8() % 4 {
        if buf.is_empty() {
            break;
        }
        let at = usize::from(inp.u16()) % buf.len();
        buf[at] = inp.u8();
    }
    check_raw(&buf, ip);
}

fn raw_dump(inp: &mut Input<'_>) {
    let ip = ip6(inp);
    let buf = inp.record().to_vec();
    check_raw(&buf, ip);
}

/// Any bytes: an answer only next to an `NDA_DST` attribute of 20 bytes holding `ip`,
/// in a message of type `RTM_NEWNEIGH`.
fn check_raw(buf: &[u8], ip: Ipv6Addr) {
    let (found, _) = n::parse_neighbours(buf, ip);
    if found.is_some() {
        let mut attr = 20u16.to_ne_bytes().to_vec();
        attr.extend_from_slice(&NDA_DST.to_ne_bytes());
        attr.extend_from_slice(&ip.octets());
        assert!(buf.windows(attr.len()).any(|w| w == attr), "an answer without the address's attribute");
        assert!(buf.windows(2).any(|w| w == RTM_NEWNEIGH.to_ne_bytes()));
    }
}

/// A field of fuzzer bytes without whitespace (one field).
fn junk(inp: &mut Input<'_>) -> String {
    let n = usize::from(inp.u8() % 12);
    String::from_utf8_lossy(inp.bytes(n)).chars().filter(|c| !c.is_whitespace()).collect()
}

fn routes(inp: &mut Input<'_>) {
    let dst = Ipv4Addr::from(match inp.u8() % 3 {
        0 => [10, 66, 0, inp.u8()],
        1 => [192, 168, inp.u8() % 2, inp.u8()],
        _ => inp.u32().to_be_bytes(),
    });
    let hex = |a: Ipv4Addr| format!("{:08X}", u32::from_ne_bytes(a.octets()));
    let mut text = String::from("Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n");
    // The model: (mask bits, iface, gateway) of the best route so far.
    let mut best: Option<(u32, String, Ipv4Addr)> = None;
    for _ in 0..inp.u8() % 6 {
        let iface = ["eth0", "lo", "veth0"][usize::from(inp.u8() % 3)].to_owned();
        let bits = u32::from(inp.u8() % 33);
        let mask = Ipv4Addr::from(if bits == 0 { 0 } else { u32::MAX << (32 - bits) });
        let net = Ipv4Addr::from(u32::from(if inp.u8() & 1 == 0 { dst } else { Ipv4Addr::from(inp.u32()) }) & u32::from(mask));
        let gw = if inp.u8() & 1 == 0 { Ipv4Addr::UNSPECIFIED } else { Ipv4Addr::from(inp.u32()) };
        if inp.u8() % 8 == 0 {
            // A malformed line: ignored.
            text.push_str(&format!("{iface}\t{}\t{}\n", junk(inp), hex(gw)));
            continue;
        }
        text.push_str(&format!("{iface}\t{}\t{}\t0003\t0\t0\t0\t{}\t0\t0\t0\n", hex(net), hex(gw), hex(mask)));
        if u32::from(dst) & u32::from(mask) == u32::from(net) && best.as_ref().is_none_or(|b| bits > b.0) {
            best = Some((bits, iface, gw));
        }
    }
    let want = best.and_then(|(_, iface, gw)| (iface != "lo").then_some(if gw.is_unspecified() { dst } else { gw }));
    assert_eq!(n::next_hop(dst, &text), want, "{text}");
    // Raw text: no panic; an answer is the destination or a gateway field of the text.
    let raw = String::from_utf8_lossy(inp.record()).into_owned();
    if let Some(hop) = n::next_hop(dst, &raw) {
        let word = u32::from_ne_bytes(hop.octets());
        assert!(hop == dst || raw.split_whitespace().any(|f| u32::from_str_radix(f, 16) == Ok(word)), "{raw:?}");
    }
}

fn routes6(inp: &mut Input<'_>) {
    let dst = ip6(inp);
    let hex = |a: Ipv6Addr| format!("{:032x}", u128::from(a));
    let mut text = String::new();
    let mut best: Option<(u32, bool, Ipv6Addr)> = None;
    for _ in 0..inp.u8() % 6 {
        let lo = inp.u8() % 4 == 0;
        let len = u32::from(inp.u8() % 129);
        let mask = if len == 0 { 0 } else { u128::MAX << (128 - len) };
        let net = Ipv6Addr::from(u128::from(if inp.u8() & 1 == 0 { dst } else { ip6(inp) }) & mask);
        let gw = if inp.u8() & 1 == 0 { Ipv6Addr::UNSPECIFIED } else { ip6(inp) };
        let flags: u32 = if inp.u8() % 4 == 0 { 0x8020_0001 } else { 0x0000_0003 };
        if inp.u8() % 8 == 0 {
            text.push_str(&format!("{} {} {}\n", hex(net), junk(inp), hex(gw)));
            continue;
        }
        let iface = if lo { "lo" } else { "veth0" };
        text.push_str(&format!(
            "{} {len:02x} {} 00 {} 00000400 00000003 00000000 {flags:08x} {iface:>8}\n",
            hex(net),
            hex(Ipv6Addr::UNSPECIFIED),
            hex(gw)
        ));
        if u128::from(dst) & mask == u128::from(net) && best.is_none_or(|b| len > b.0) {
            best = Some((len, lo || flags & 0x8000_0000 != 0, gw));
        }
    }
    let want = best.and_then(|(_, none, gw)| (!none).then_some(if gw.is_unspecified() { dst } else { gw }));
    assert_eq!(n::next_hop6(dst, &text), want, "{text}");
    let raw = String::from_utf8_lossy(inp.record()).into_owned();
    if let Some(hop) = n::next_hop6(dst, &raw) {
        let word = u128::from(hop);
        assert!(hop == dst || raw.split_whitespace().any(|f| u128::from_str_radix(f, 16) == Ok(word)), "{raw:?}");
    }
}

fn arp(inp: &mut Input<'_>) {
    let ip = Ipv4Addr::new(10, 66, 66, inp.u8() % 4);
    let mut text = String::from("IP address       HW type     Flags       HW address            Mask     Device\n");
    let mut want = false;
    for _ in 0..inp.u8() % 6 {
        let a = Ipv4Addr::new(10, 66, 66, inp.u8() % 4);
        let flags = inp.u8();
        if inp.u8() % 8 == 0 {
            text.push_str(&format!("{a} {}\n", junk(inp)));
            continue;
        }
        text.push_str(&format!("{a:<16} 0x1 {flags:#x} aa:bb:cc:dd:ee:ff * veth0\n"));
        want |= a == ip && flags & 2 != 0;
    }
    assert_eq!(n::arp_complete(ip, &text), want, "{text}");
    let raw = String::from_utf8_lossy(inp.record()).into_owned();
    if n::arp_complete(ip, &raw) {
        assert!(raw.contains(&ip.to_string()));
    }
}
