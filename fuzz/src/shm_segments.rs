//! `shm_segments`: the readers of bytes other processes of the user can write into the
//! device's shared segments (crate `rverbs`, `shm/`, `rings/completion_ring.rs`, `rings/recv_ring.rs`,
//! `mr/keyspace.rs`), over in-memory stand-ins for the segments: key records (seqlock
//! read, then the access checks and where the access lands in the key's segment), QP
//! records (what the responder path reads), completion rings (consumer and producers
//! against scribbled indices and sequence words), receive rings (geometry from the
//! header, clamped head and count, slots with any `num_sge`), and endpoint headers
//! (pid, canary, refusal of cross-memory attach, the table of relay ports); and what a
//! process reads from a segment a peer writes besides those records (`mr/proxy.rs`,
//! `rings/cq_segment.rs`, `rings/producer_gate.rs`, `shm/lock.rs`): proxy request headers, a CQ segment's header
//! (capacity, error, arming, channel, flags, forwarding mark) and producers' gate with a
//! completion ring behind them, and lock words.
//!
//! Input: a sequence of operations, each a selector byte and its words (little-endian;
//! zeros past the end).
//!
//! Asserts: no panic and no endless loop whatever the words; a key access accepted only
//! for the record's key, a valid state, the PD, the bound QP of a type 2 window and the
//! rights, with `[va, va+len)` inside `[iova, iova+len)` and the bytes inside the
//! segment; a QP record read back as written (GID halves, type only when defined, live
//! QP only when number and type match); a completion ring, until scribbled, behaves as a
//! FIFO of its capacity (IGNORE_OVERRUN: the newest `capacity` entries) and never holds
//! more than its capacity; a receive ring's geometry accepted only when every slot lies
//! inside the segment, its head and count inside the ring, a slot's list no longer than
//! the ring's SGE limit; an endpoint header read only with its magic and a positive pid,
//! a relay port never 0 and found once published; a proxy request served only within the
//! buffer, in a segment that holds it, for a read or a write that asks a right to write,
//! its fields carried as written; a CQ capacity taken only when a power of two whose
//! slots fit the segment; publishing into a CQ: an errored CQ refuses at once, a resize
//! flag is followed to the forwarding mark or (nobody moving the CQ) puts it in error
//! within the wait, the ring stays the FIFO of its capacity (IGNORE_OVERRUN: the newest
//! entries) whatever the other header words say, a notification fires exactly when armed
//! for it and a channel exists and is disarmed then, the producer's gate word is as the
//! protocol leaves it (a dead process's word replaced, the count back); a resize waits
//! exactly for live producers; a lock is always taken (a garbage, dead or stuck holder
//! taken over), asking about no endpoint but the holder's, never its own or a garbage
//! one's, and released to 0.

use std::collections::VecDeque;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use rverbs::fuzzing::peer::{self, FuzzCq, Published};
use rverbs::fuzzing::shm::{self, FuzzRing, KeyWords, Popped, CQE_WORDS};
use rverbs_proto::verbs::Access;

use crate::input::Input;

fn u64(inp: &mut Input<'_>) -> u64 {
    u64::from(inp.u32()) | u64::from(inp.u32()) << 32
}

/// Runs one input.
pub fn run(data: &[u8]) {
    let mut inp = Input::new(data);
    for _ in 0..16 {
        if inp.is_empty() {
            break;
        }
        match inp.u8() % 8 {
            0 => key(&mut inp),
            1 => qp(&mut inp),
            2 => ring(&mut inp),
            3 => rq(&mut inp),
            4 => header(&mut inp),
            5 => proxy(&mut inp),
            6 => cq(&mut inp),
            _ => lock(&mut inp),
        }
    }
}

fn key(inp: &mut Input<'_>) {
    let w = KeyWords {
        // An odd sequence number is a record being written: the reader waits (500 ms)
        // before it reads as empty (a unit test of `tables` covers that).
        seq: inp.u32() & !1,
        key: inp.u32(),
        kind: u32::from(inp.u8() % 5),
        state: u32::from(inp.u8() % 4),
        pd: u32::from(inp.u8() % 4),
        access: inp.u32(),
        qpn: u32::from(inp.u8() % 4),
        mr_index: inp.u32(),
        iova: u64(inp),
        len: u64(inp),
        va: u64(inp),
        loc: u64(inp),
        seg_off: u64(inp),
    };
    let d = shm::key_read(&w);
    assert_eq!(d, KeyWords { seq: 0, ..w }, "a record nobody writes reads as it is");
    let key = if inp.u8() & 1 == 0 { d.key } else { inp.u32() };
    let pd = u32::from(inp.u8() % 4);
    let sel = inp.u8();
    let remote = (sel & 1 != 0).then_some(u32::from(sel >> 1 & 3));
    let need = inp.u32();
    let va = if inp.u8() & 1 == 0 { d.iova.wrapping_add(u64::from(inp.u32())) } else { u64(inp) };
    let len = if inp.u8() & 1 == 0 { u64::from(inp.u16()) } else { u64(inp) };
    let seg_len = inp.u32() as usize;
    let Ok((off, start)) = shm::key_access(&d, key, pd, remote, need, va, len, seg_len) else { return };
    assert!(d.key == key && d.state == shm::KEY_STATE_VALID && d.pd == pd);
    if remote.is_none() {
        assert_eq!(d.kind, shm::KEY_KIND_MR, "a local key names a region");
    }
    if let (Some(qpn), shm::KEY_KIND_MW2) = (remote, d.kind) {
        assert_eq!(d.qpn, qpn, "a type 2 window is used by the QP it is bound to");
    }
    let granted = rverbs_proto::verbs::Access::from_bits_truncate(d.access);
    assert!(granted.contains(rverbs_proto::verbs::Access::from_bits_truncate(need)));
    assert_eq!(u128::from(va), u128::from(d.iova) + u128::from(off));
    assert!(u128::from(off) + u128::from(len) <= u128::from(d.len), "inside the key's range");
    assert_eq!(start as u128, u128::from(d.seg_off) + u128::from(off));
    assert!(start as u128 + u128::from(len) <= seg_len as u128, "inside the segment");
}

fn qp(inp: &mut Input<'_>) {
    let mut w = [0u32; 16];
    for x in &mut w {
        *x = match inp.u8() {
            0..=127 => u32::from(inp.u8() % 16),
            _ => inp.u32(),
        };
    }
    let dgid = [u64(inp), u64(inp)];
    let (qpn, ty) = if inp.u8() & 1 == 0 { (w[0], w[2]) } else { (inp.u32(), u32::from(inp.u8() % 8)) };
    let v = shm::qp_read(&w, dgid, qpn, ty);
    let mut g = [0u8; 16];
    g[..8].copy_from_slice(&dgid[0].to_be_bytes());
    g[8..].copy_from_slice(&dgid[1].to_be_bytes());
    assert_eq!(v.dgid, g);
    if let Some(t) = v.qp_type {
        assert_eq!(t, w[2]);
    }
    if v.state != w[1] {
        assert_eq!(v.state, rverbs_proto::verbs::QpState::Err.raw(), "an unknown state reads as ERR");
    }
    if v.is_qp {
        // (The wrapper asks for RC when `ty` names no type.)
        let want = rverbs_proto::verbs::QpType::from_raw(ty).map_or(rverbs_proto::verbs::QpType::Rc.raw(), |t| t.raw());
        assert_eq!((w[0], v.qp_type), (qpn, Some(want)));
    }
    assert_eq!(v.responder.3, w[4], "Q_Key");
    assert_eq!(v.responder.0, v.access);
}

fn ring(inp: &mut Input<'_>) {
    let r = FuzzRing::new(usize::from(inp.u8() % 16) + 1);
    let cap = r.capacity();
    assert!(cap.is_power_of_two());
    let overwrite = inp.u8() & 1 != 0;
    let mut model: VecDeque<[u64; CQE_WORDS]> = VecDeque::new();
    let mut scribbled = false;
    let mut next = 1u64;
    for _ in 0..48 {
        if inp.is_empty() {
            break;
        }
        match inp.u8() % 5 {
            0 | 1 => {
                let e = [next; CQE_WORDS];
                next += 1;
                let got = r.push(&e, overwrite);
                if !scribbled {
                    if overwrite || model.len() < cap {
                        assert_eq!(got, Ok(()));
                        model.push_back(e);
                        if model.len() > cap {
                            model.pop_front();
                        }
                    } else {
                        assert_eq!(got, Err(true), "a full ring refuses");
                    }
                }
            }
            2 | 3 => {
                let got = r.pop();
                if !scribbled {
                    // (A scribbled head beyond the tail can meet a slot whose sequence
                    // word says "published": its words are read like any a peer wrote,
                    // and the producers then report the ring corrupt.)
                    if let Popped::Entry(_, pos) = got {
                        assert!(pos < r.indices().0, "an entry's position was reserved");
                    }
                    match model.pop_front() {
                        Some(e) => assert!(matches!(got, Popped::Entry(d, _) if d == e), "{got:?} != {e:?}"),
                        None => assert_eq!(got, Popped::Empty),
                    }
                }
            }
            _ => {
                let what = inp.u8();
                let slot = usize::from(inp.u8());
                let value = match inp.u8() % 4 {
                    0 => u64(inp),
                    1 => u64::MAX - u64::from(inp.u8()),
                    2 => r.indices().0.wrapping_add(u64::from(inp.u8())),
                    _ => u64::from(inp.u8()),
                };
                r.scribble(what, slot, value);
                scribbled = true;
            }
        }
        assert!(r.len() <= cap);
        if !scribbled {
            assert_eq!(r.len(), model.len());
        }
    }
}

fn rq(inp: &mut Input<'_>) {
    let cap = if inp.u8() & 1 == 0 { u32::from(inp.u8()) } else { inp.u32() };
    let max_sge = u32::from(inp.u8());
    let seg_len = inp.u32() as usize;
    let Some((cap, max_sge)) = shm::rq_geometry(cap, max_sge, seg_len) else { return };
    assert!(cap > 0 && (1..=shm::RQ_MAX_SGE).contains(&max_sge));
    let (last, words) = shm::rq_slot_at(cap - 1, max_sge);
    assert!(last + words * 8 <= seg_len, "every slot lies inside the segment");
    let (head, count) = shm::rq_clamp_state(u64(inp), u64(inp), cap);
    assert!(head < cap && count <= cap);
    let mut slot = vec![0u64; words];
    for w in &mut slot {
        *w = if inp.u8() & 1 == 0 { u64::from(inp.u8()) } else { u64(inp) };
    }
    let (wr_id, sges) = shm::rq_read_slot(&slot, max_sge);
    assert_eq!(wr_id, slot[0]);
    assert!(sges.len() <= max_sge && sges.len() as u64 <= slot[1]);
    for (k, s) in sges.iter().enumerate() {
        assert_eq!(*s, (slot[2 + 2 * k], slot[3 + 2 * k] as u32, (slot[3 + 2 * k] >> 32) as u32));
    }
}

fn header(inp: &mut Input<'_>) {
    let mut words = vec![0u64; shm::HDR_WORDS];
    let n = usize::from(inp.u8());
    for _ in 0..n {
        let i = usize::from(inp.u8()) % shm::HDR_WORDS;
        words[i] = match inp.u8() % 3 {
            0 => u64(inp),
            1 => u64::from(inp.u16()) | 1 << 32 | u64::from(inp.u8() % 8) << 16,
            _ => u64::from(inp.u8()),
        };
    }
    if inp.u8() & 1 == 0 {
        words[0] = 0x7276_6572_6273_0001;
    }
    let len = if inp.u8() & 1 == 0 { shm::HDR_WORDS } else { usize::from(inp.u8()) };
    let h = &words[..len.min(shm::HDR_WORDS)];
    if let Ok((pid, canary, refuses)) = shm::header_info(h) {
        assert!(h.len() == shm::HDR_WORDS && h[0] == 0x7276_6572_6273_0001);
        assert!(pid > 0 && u64::try_from(pid) == Ok(h[1]));
        assert_eq!((canary, refuses), ((h[2], h[3]), h[4] & 1 != 0));
    }
    let ip = match inp.u8() % 3 {
        0 => IpAddr::V4(Ipv4Addr::from(inp.u32())),
        1 => IpAddr::V6(Ipv6Addr::from(u128::from(u64(inp)) << 64 | u128::from(u64(inp)))),
        _ => IpAddr::V4(Ipv4Addr::new(10, 66, 0, 2)),
    };
    let netns = u64::from(inp.u8());
    let port = inp.u16();
    let publish = (inp.u8() & 1 == 0).then_some((netns, ip, port));
    let (published, found) = shm::net_port(h, publish, netns, ip);
    assert_ne!(found, Some(0), "port 0 names no socket");
    if published && port != 0 {
        assert!(found.is_some(), "a published port is found");
    }
}

fn proxy(inp: &mut Input<'_>) {
    let op = match inp.u8() % 4 {
        0 => 1,
        1 => 2,
        2 => u32::from(inp.u8()),
        _ => inp.u32(),
    };
    let (key, pd) = (inp.u32(), u32::from(inp.u8() % 4));
    let remote = if inp.u8() & 1 == 0 { 0 } else { inp.u32() };
    let qpn = inp.u32();
    let need = inp.u32();
    let va = u64(inp);
    let len = match inp.u8() % 4 {
        0 => u64::from(inp.u16()),
        1 => peer::PROXY_MAX_PIECE as u64 - 2 + u64::from(inp.u8() % 5),
        _ => u64(inp),
    };
    let seg_len = match inp.u8() % 3 {
        0 => peer::PROXY_CHANNEL_BYTES,
        1 => peer::PROXY_CHANNEL_BYTES - 1,
        _ => inp.u32() as usize,
    };
    let got = peer::proxy_check((op, key, pd, remote, qpn, need, va, len), seg_len);
    let need_t = Access::from_bits_truncate(need);
    let writes = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_ATOMIC;
    let ok = len <= peer::PROXY_MAX_PIECE as u64
        && seg_len >= peer::PROXY_CHANNEL_BYTES
        && (op == 2 || (op == 1 && need_t.intersects(writes)));
    assert_eq!(got.is_some(), ok, "op {op} need {need:#x} len {len} seg {seg_len}");
    if let Some((write, k, p, r, n, v, l)) = got {
        assert_eq!((write, k, p, n, v, l as u64), (op == 1, key, pd, need_t.bits(), va, len));
        assert_eq!(r, (remote != 0).then_some(qpn), "a remote use names its QP");
    }
}

fn cq(inp: &mut Input<'_>) {
    let c = FuzzCq::new(usize::from(inp.u8() % 8) + 1);
    let cap = c.capacity();
    let fixed = peer::CQ_SHM_BYTES + peer::CQ_RING_HDR_BYTES;
    // A peer opening the segment: the capacity the header says, the file's length.
    let hdr_cap = match inp.u8() % 3 {
        0 => cap as u64,
        1 => u64(inp),
        _ => 1u64 << (inp.u8() % 64),
    };
    let seg_len = if inp.u8() & 1 == 0 { fixed + cap * peer::CQ_SLOT_BYTES } else { inp.u32() as usize };
    let fits = seg_len >= fixed && hdr_cap <= ((seg_len - fixed) / peer::CQ_SLOT_BYTES) as u64;
    assert_eq!(peer::cq_open_capacity(hdr_cap, seg_len), (hdr_cap.is_power_of_two() && fits).then_some(hdr_cap as usize));

    // Endpoints 0..8; a producer is alive when its endpoint's bit is set and its pid odd.
    let alive_eps = inp.u8();
    let alive = move |ep: u32, pid: u32| ep < 8 && alive_eps >> ep & 1 == 1 && pid % 2 == 1;
    let mut model: VecDeque<u64> = VecDeque::new();
    let mut exact = true;
    let mut next = 1u64;
    for _ in 0..32 {
        if inp.is_empty() {
            break;
        }
        match inp.u8() % 7 {
            0 | 1 => {
                let (ep, pid, sol) = (u32::from(inp.u8() % 8), u32::from(inp.u8() % 4), inp.u8() & 1 == 1);
                let [errored, notify, channel, flags, _, _, moved] = c.header();
                let (resizing, word) = c.gate_word(ep as usize);
                let got = c.publish(ep, pid, next, sol, std::time::Duration::ZERO);
                let after = c.header();
                if errored != 0 {
                    assert_eq!(got, Published::Overrun { first: false }, "an errored CQ refuses");
                    assert_eq!(c.gate_word(ep as usize).1, word, "without entering");
                    continue;
                }
                // Entered (and left), or counted and uncounted when refused by a resize.
                let want_word = if word >> 32 == u64::from(pid) { word } else { u64::from(pid) << 32 };
                assert_eq!(c.gate_word(ep as usize).1, want_word, "the gate word as the protocol leaves it");
                if resizing != 0 {
                    let want = if moved != 0 { Published::Moved(moved) } else { Published::Overrun { first: true } };
                    assert_eq!(got, want, "a resize is followed, or one nobody finishes is an error");
                    continue;
                }
                let overwrite = flags & peer::FLAG_IGNORE_OVERRUN != 0;
                match got {
                    Published::Done { fire } => {
                        let armed = notify & peer::NOTIFY_NEXT != 0 || (notify & peer::NOTIFY_SOLICITED != 0 && sol);
                        assert_eq!(fire, channel != 0 && armed, "fires exactly when armed for it, with a channel");
                        if fire {
                            assert_eq!(after[1], 0, "disarmed");
                        } else {
                            assert_eq!(after[1], notify);
                        }
                        if exact {
                            assert!(overwrite || model.len() < cap, "a full ring accepted without IGNORE_OVERRUN");
                            model.push_back(next);
                            if model.len() > cap {
                                model.pop_front();
                            }
                        }
                    }
                    Published::Overrun { first } => {
                        assert!(first, "the first overrun reports it");
                        assert_ne!(after[0], 0, "the CQ is in error");
                        if exact {
                            assert!(!overwrite && model.len() == cap, "an overrun with room");
                        }
                    }
                    Published::Moved(_) => panic!("moved without a resize"),
                }
                next += 1;
            }
            2 => {
                let got = c.pop();
                if exact {
                    assert_eq!(got, model.pop_front(), "the ring is a FIFO");
                }
            }
            3 => {
                let i = usize::from(inp.u8());
                let v = if inp.u8() & 1 == 0 { u32::from(inp.u8() % 4) } else { inp.u32() };
                c.set_header(i, v);
            }
            4 => {
                let ep = usize::from(inp.u8());
                match inp.u8() % 3 {
                    0 => c.set_gate(Some(u32::from(inp.u8() % 2)), ep, None),
                    1 => c.set_gate(None, ep, Some(u64::from(inp.u8() % 4) << 32 | u64::from(inp.u8() % 3))),
                    _ => c.set_gate(None, ep, Some(u64(inp))),
                }
            }
            5 => match inp.u8() % 3 {
                0 => c.arm(inp.u8() & 1 == 1),
                1 => {
                    let live = c.live_inside(&alive);
                    assert_eq!(c.freeze(&alive, std::time::Duration::ZERO), !live, "waits exactly for live producers");
                    assert_eq!(c.gate_word(0).0, 1, "the resize flag is set");
                    if inp.u8() & 1 == 0 {
                        c.thaw();
                        assert_eq!(c.gate_word(0).0, 0);
                    }
                }
                _ => {
                    if c.skip_dead(&alive) {
                        assert!(!c.live_inside(&alive), "a stall skipped while a live producer is inside");
                    }
                }
            },
            _ => {
                // A producer killed between reserving and publishing: the model no longer
                // holds (the stall is the consumer's to skip).
                c.reserve_only();
                exact = false;
            }
        }
    }
}

fn lock(inp: &mut Input<'_>) {
    let me = u32::from(inp.u8()) % peer::MAX_ENDPOINTS;
    let word = match inp.u8() % 4 {
        0 => 0,
        1 => me + 1,
        2 => u32::from(inp.u8()) + 1,
        _ => inp.u32(),
    };
    let bits = [u64(inp), u64(inp), u64(inp), u64(inp)];
    let alive = move |ep: u32| ep < 256 && bits[(ep / 64) as usize] >> (ep % 64) & 1 == 1;
    let holder = word.wrapping_sub(1);
    let garbage = holder >= peer::MAX_ENDPOINTS;
    // A garbage or dead holder is taken over without waiting for the stuck limit (an
    // hour here: libFuzzer's timeout catches a wait); a live one (or this endpoint
    // itself) after the limit (zero here).
    let dead_or_garbage = word != 0 && (garbage || (holder != me && !alive(holder)));
    let stuck = if dead_or_garbage { std::time::Duration::from_secs(3600) } else { std::time::Duration::ZERO };
    let (held, asked, after) = peer::lock_word(word, me, alive, stuck);
    assert_eq!((held, after), (me + 1, 0), "held by this endpoint, then released");
    if word == 0 {
        assert!(asked.is_empty(), "a free lock asks nobody");
    }
    for a in &asked {
        assert_eq!(*a, holder, "only the holder is asked about");
        assert!(!garbage && holder != me, "never a garbage endpoint or itself");
    }
}
