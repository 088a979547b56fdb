#!/usr/bin/env python3
"""What a RoCEv2 bulk transfer looks like on the wire, from a capture on the sender's veth.

Reads a classic pcap (tshark -F pcap, snap length >= 54) of RoCEv2 traffic between two
addresses and reports, over the middle 80 % of the requester's frames: the rate, the frame
sizes (a GSO train is one frame on the sending veth), the gaps between the requester's
frames, how many PSNs were unacknowledged when each ACK passed (the window in use), the
time from an ACK to the requester's next frame, and the share of time in gaps over 20 us.
With SPAN_US, also prints the frames of SPAN_US microseconds from the middle of the run.

usage: scripts/bench/wire_timeline.py CAPTURE REQUESTER_IP [SPAN_US]

  ip netns exec B tshark -q -F pcap -i B0 -s 96 -f 'udp port 4791' -w /tmp/w.pcap &
  (then ib_write_bw -s 65536 from B to A; BENCHMARKS.md, "Across hosts, CPU per message")
"""
import bisect
import ipaddress
import struct
import sys

ETH, IPV4, UDP, BTH = 14, 20, 8, 12


def frames(path):
    """(time, source IPv4, BTH opcode, PSN, frame length) of each RoCEv2 frame."""
    with open(path, "rb") as f:
        magic = struct.unpack("<I", f.read(24)[:4])[0]
        scale = 1e-9 if magic == 0xA1B23C4D else 1e-6
        while (h := f.read(16)) and len(h) == 16:
            sec, frac, incl, orig = struct.unpack("<IIII", h)
            d = f.read(incl)
            if len(d) < ETH + IPV4 + UDP + BTH:
                continue
            src = ipaddress.IPv4Address(d[ETH + 12:ETH + 16])
            bth = d[ETH + IPV4 + UDP:ETH + IPV4 + UDP + BTH]
            yield sec + frac * scale, src, bth[0], int.from_bytes(bth[9:12], "big"), orig


def pct(xs, p):
    return xs[min(len(xs) - 1, len(xs) * p // 100)]


def main():
    path, requester = sys.argv[1], ipaddress.IPv4Address(sys.argv[2])
    span = float(sys.argv[3]) if len(sys.argv) > 3 else None
    pk = list(frames(path))
    req_times = sorted(p[0] for p in pk if p[1] == requester)
    if not req_times:
        sys.exit("no frames from the requester")
    lo, hi = pct(req_times, 10), pct(req_times, 90)
    sel = [p for p in pk if lo <= p[0] <= hi]
    req = [p for p in sel if p[1] == requester]
    acks = [p for p in sel if p[1] != requester]
    dur = hi - lo
    print(f"{dur * 1e3:.1f} ms: {len(req)} requester frames, {sum(p[4] for p in req) / dur / 1e6:.0f} MB/s "
          f"on the wire; {len(acks)} responder frames")
    sizes = {}
    for p in req:
        sizes[p[4]] = sizes.get(p[4], 0) + 1
    print("requester frame sizes (bytes: count):", ", ".join(f"{s}: {n}" for s, n in sorted(sizes.items(), key=lambda x: -x[1])[:6]))
    gaps = sorted(b[0] - a[0] for a, b in zip(req, req[1:]))
    print("gaps between requester frames, us: p50 %.1f p90 %.1f p99 %.1f max %.1f"
          % tuple(x * 1e6 for x in (pct(gaps, 50), pct(gaps, 90), pct(gaps, 99), gaps[-1])))
    # PSNs sent and not yet acknowledged as each ACK passes: a frame of n packets (a train)
    # ends at PSN + n - 1, n from its length (1024-byte payloads, 12-byte BTH, 4-byte ICRC).
    last, unacked = None, []
    for p in sel:
        if p[1] == requester:
            n = max(1, (p[4] - ETH - IPV4 - UDP) // (BTH + 1024 + 4))
            last = (p[3] + n - 1) & 0xFFFFFF
        elif last is not None:
            unacked.append((last - p[3]) & 0xFFFFFF)
    unacked.sort()
    if unacked:
        print("PSNs unacknowledged at each ACK: p10 %d p50 %d p90 %d max %d"
              % (pct(unacked, 10), pct(unacked, 50), pct(unacked, 90), unacked[-1]))
    rt = [p[0] for p in req]
    after = sorted(rt[k] - a[0] for a in acks if (k := bisect.bisect_right(rt, a[0])) < len(rt))
    if after:
        print("ACK to the requester's next frame, us: p50 %.1f p90 %.1f" % (pct(after, 50) * 1e6, pct(after, 90) * 1e6))
    ts = [p[0] for p in sel]
    idle = sum(g for g in (b - a for a, b in zip(ts, ts[1:])) if g > 20e-6)
    print(f"time in gaps over 20 us: {100 * idle / dur:.1f} %")
    if span:
        mid = sel[len(sel) // 2][0]
        for t, src, op, psn, length in sel:
            if mid <= t <= mid + span * 1e-6:
                who = "request" if src == requester else "    response"
                print(f"{(t - mid) * 1e6:9.1f} {who} opcode {op:3d} psn {psn:8d} {length:6d} bytes")


if __name__ == "__main__":
    main()
