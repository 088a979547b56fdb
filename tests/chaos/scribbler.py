#!/usr/bin/python3
"""The hostile peer of tests/chaos/hostile_seg.sh: a same-user process that scribbles
over, truncates and deletes the shared segments of the victims in one runtime
directory, and writes garbage into their FIFOs.

    scribbler.py <xdir> <seed> <rounds> <seconds> <log>

<xdir> holds the victims' inventories (written by victim.c): `a.inv` is attacked as a
whole (every file of its endpoint directory, any record); `b.inv` only through the
files and records of its first connection, so that its second connection (to a third
process) can be checked to keep working. Rounds are spread over <seconds>. Each round
appends one line to <log> before it acts: "<round> <kind> <victim> <detail>", so a
victim that hangs or crashes can be blamed on the attack that preceded it. The last
line is "done <count per kind>".

The layouts are those of crates/rverbs (docs/shared-state.md, docs/completion-queues.md):
rings/cq_segment.rs, rings/completion_ring.rs, rings/recv_ring.rs, shm/tables.rs, shm/registry.rs. Written from those files,
for this harness.
"""
import mmap
import os
import random
import re
import stat
import struct
import sys
import time

PAGE = 4096
# shm/tables.rs
QP_REC, SRQ_REC, CQ_REC, KEY_REC = 128, 64, 16, 384
SRQ_OFF = 65536 * QP_REC
CQ_OFF = SRQ_OFF + 65536 * SRQ_REC
KEY_OFF = CQ_OFF + 65536 * CQ_REC
QP_FIELDS = {  # offset, size
    "qpn": (0, 4), "state": (4, 4), "qp_type": (8, 4), "access": (12, 4), "qkey": (16, 4),
    "min_rnr": (20, 4), "max_dest_rd": (24, 4), "pd": (28, 4), "srqn": (32, 4),
    "rq_gen": (36, 4), "recv_cq": (40, 4), "ctx": (48, 4), "flags": (52, 4),
    "path_mtu": (56, 4), "dest_qpn": (60, 4), "dgid": (64, 8), "xrcd": (80, 8),
}
KEY_FIELDS = {
    "seq": (0, 4), "key": (4, 4), "kind": (8, 4), "state": (12, 4), "pd": (16, 4),
    "access": (20, 4), "qpn": (24, 4), "mr_index": (28, 4), "iova": (32, 8), "len": (40, 8),
    "va": (48, 8), "loc": (56, 8), "seg_off": (64, 8), "busy_local": (128, 4),
    "busy_remote": (256, 4),
}
# rings/cq_segment.rs: CqShm at 0, the producers' gate at 256 (rings/producer_gate.rs: resize word, pad, one
# word per endpoint: pid << 32 | threads inside), ring from 4096; rings/completion_ring.rs: tail and
# head each on a 128-byte line (crossbeam's CachePadded on x86-64), then 64-byte slots
# (seq, 7 data words).
CQ_SHM = {"errored": (0, 4), "notify": (4, 4), "channel": (8, 4), "flags": (12, 4),
          "ctx": (16, 4), "id": (20, 4), "moved": (24, 4), "cap": (32, 8),
          "resizing": (256, 4), "gate_ep0": (264, 8), "gate_ep1": (272, 8), "gate_ep2": (280, 8)}
RING, TAIL, HEAD, SLOTS = 4096, 4096, 4096 + 128, 4096 + 256
# rings/recv_ring.rs: RqHdr (three 64-byte lines): cap, max_sge, limit, moved, tag | lock, pad,
# head | tail; the slots follow at RQ_SLOTS
RQ_HDR = {"cap": (0, 4), "max_sge": (4, 4), "limit": (8, 4), "moved": (12, 4), "tag": (16, 4),
          "lock": (64, 4), "head": (72, 8), "tail": (128, 8)}
RQ_SLOTS = 192
# shm/registry.rs: magic, pid, canary address, canary value, refuse-CMA flag, ports
HDR_FIELDS = {"magic": (0, 8), "pid": (8, 8), "canary_addr": (16, 8), "canary": (24, 8),
              "cma_off": (32, 8), "port_tag": (64 + 24, 8), "port_addr": (64, 8)}

KINDS = ["bytes", "cq_idx", "cq_seq", "cq_shm", "rq_idx", "rq_lock", "rq_slot", "qp_rec",
         "key_rec", "key_busy", "cq_rec", "hdr", "fifo", "truncate", "delete", "counters"]
# Destructive kinds end a connection for good: rarer, so that most rounds meet live state.
WEIGHTS = {"truncate": 0.35, "delete": 0.35, "hdr": 0.5, "counters": 0.5}


class Victim:
    def __init__(self, name, path, whole):
        self.name, self.whole = name, whole
        self.dir, self.qpns, self.keys, self.files = None, [], [], []
        for line in open(path):
            k, _, v = line.strip().partition(" ")
            if k == "dir":
                self.dir = v
            elif k == "qpn":
                self.qpns.append(int(v))
            elif k == "key":
                self.keys.append(int(v))
            elif k == "file":
                self.files.append(v)
        self.cqs = sorted({int(m.group(1)) for f in self.files for m in [re.match(r"cq-(\d+)-", f)] if m})

    def candidates(self, pattern):
        """Files of the victim matching `pattern` that may be attacked now."""
        names = os.listdir(self.dir) if self.whole else self.files
        if not self.whole:
            # The second connection must stay untouched: whole-file attacks only on the
            # first connection's own segments (tables, header are shared by both).
            names = [n for n in names if re.match(r"(cq|rq|srq|mr)-", n)]
        return [n for n in names if re.match(pattern, n)]

    def fifos(self):
        names = os.listdir(self.dir) if self.whole else self.files
        return [n for n in names if re.match(r"(bell|ch-|async-)", n)]


def garbage(rng, size):
    """A hostile value: small, boundary or random."""
    bits = 8 * size
    return rng.choice([0, 1, 2, 3, 0x7f, 0xff, 1 << (bits - 1), (1 << bits) - 1, (1 << bits) - 2,
                       rng.getrandbits(bits), rng.getrandbits(bits), rng.randrange(0, 4096),
                       (1 << 31) | rng.randrange(8), rng.getrandbits(bits) | 1])


def poke(path, off, size, value):
    """Stores `value` at `off` through a shared mapping (never grows the file)."""
    fd = os.open(path, os.O_RDWR)
    try:
        n = os.fstat(fd).st_size
        if off + size > n or n == 0:
            return False
        with mmap.mmap(fd, n, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE) as m:
            struct.pack_into("<Q" if size == 8 else "<I", m, off, value & ((1 << (8 * size)) - 1))
        return True
    finally:
        os.close(fd)


def peek(path, off, size):
    fd = os.open(path, os.O_RDONLY)
    try:
        b = os.pread(fd, size, off)
        return struct.unpack("<Q" if size == 8 else "<I", b)[0] if len(b) == size else None
    finally:
        os.close(fd)


def scribble_bytes(path, rng, lo=0, hi=None):
    fd = os.open(path, os.O_RDWR)
    try:
        n = os.fstat(fd).st_size
        hi = min(hi or n, n)
        if hi <= lo:
            return "empty"
        k = rng.randrange(1, 65)
        off = rng.randrange(lo, hi)
        k = min(k, hi - off)
        with mmap.mmap(fd, n, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE) as m:
            m[off:off + k] = rng.randbytes(k)
        return f"{k}@{off}"
    finally:
        os.close(fd)


def attack(kind, v, rng):
    """One attack on victim `v`; returns a description (or None: nothing to attack)."""
    d = v.dir
    pick = lambda pat: (lambda c: os.path.join(d, rng.choice(c)) if c else None)(v.candidates(pat))
    if kind == "bytes":
        p = pick(r"(cq|rq|srq)-" if not v.whole else r"(cq|rq|srq|hdr|px|counters)-?")
        if p is None:
            return None
        return f"{os.path.basename(p)} {scribble_bytes(p, rng)}"
    if kind in ("cq_idx", "cq_seq", "cq_shm"):
        p = pick(r"cq-")
        if p is None:
            return None
        name = os.path.basename(p)
        if kind == "cq_idx":
            t, h = peek(p, TAIL, 8), peek(p, HEAD, 8)
            if t is None or h is None:
                return None
            how = rng.choice(["head_past_tail", "tail_past_cap", "tail_back", "both_huge", "head_garbage"])
            if how == "head_past_tail":
                poke(p, HEAD, 8, t + rng.randrange(1, 100))
            elif how == "tail_past_cap":
                poke(p, TAIL, 8, h + rng.choice([64, 65, 1 << 20, 1 << 40]))
            elif how == "tail_back":
                poke(p, TAIL, 8, max(h, 1) - 1)
            elif how == "both_huge":
                x = (1 << 64) - rng.randrange(1, 4)
                poke(p, TAIL, 8, x)
                poke(p, HEAD, 8, x)
            else:
                poke(p, HEAD, 8, garbage(rng, 8))
            return f"{name} {how} (was t={t} h={h})"
        if kind == "cq_seq":
            cap = peek(p, 32, 8) or 1
            h = peek(p, HEAD, 8) or 0
            slot = (h if rng.random() < 0.6 else rng.randrange(0, 1 << 16)) % max(1, min(cap, 1 << 16))
            off = SLOTS + 64 * slot
            val = rng.choice([h + 2, h + 1 + cap, h + 1 + 2 * cap, garbage(rng, 8)])
            if not poke(p, off, 8, val):
                return None
            return f"{name} slot {slot} seq={val:#x}"
        f = rng.choice(list(CQ_SHM))
        o, s = CQ_SHM[f]
        val = garbage(rng, s)
        poke(p, o, s, val)
        return f"{name} {f}={val:#x}"
    if kind in ("rq_idx", "rq_lock", "rq_slot"):
        p = pick(r"s?rq-")
        if p is None:
            return None
        name = os.path.basename(p)
        if kind == "rq_idx":
            f = rng.choice(["cap", "max_sge", "limit", "moved", "tag", "head", "tail"])
            o, s = RQ_HDR[f]
            val = garbage(rng, s)
            poke(p, o, s, val)
            return f"{name} {f}={val:#x}"
        if kind == "rq_lock":
            # Held "by" an endpoint: garbage, or one that is alive (the victim itself).
            ep = re.search(r"ep-(\d+)", d)
            val = rng.choice([garbage(rng, 4), int(ep.group(1)) + 1 if ep else 1, 0xffffffff])
            poke(p, RQ_HDR["lock"][0], 4, val)
            return f"{name} lock={val:#x}"
        max_sge = peek(p, RQ_HDR["max_sge"][0], 4) or 1
        cap = peek(p, RQ_HDR["cap"][0], 4) or 1
        words = 2 + 2 * min(max_sge, 32)
        slot = rng.randrange(0, max(1, min(cap, 64)))
        w = rng.randrange(0, words)
        val = garbage(rng, 8)
        if not poke(p, RQ_SLOTS + 8 * (slot * words + w), 8, val):
            return None
        return f"{name} slot {slot} word {w}={val:#x}"
    if kind == "qp_rec":
        if not v.qpns:
            return None
        qpn = rng.choice(v.qpns)
        f = rng.choice(list(QP_FIELDS))
        o, s = QP_FIELDS[f]
        val = garbage(rng, s)
        poke(os.path.join(d, "tables"), (qpn & 0xffff) * QP_REC + o, s, val)
        return f"qp {qpn:#x} {f}={val:#x}"
    if kind in ("key_rec", "key_busy"):
        if not v.keys:
            return None
        key = rng.choice(v.keys)
        base = KEY_OFF + (key >> 8) * KEY_REC
        t = os.path.join(d, "tables")
        if kind == "key_busy":
            f = rng.choice(["busy_local", "busy_remote"])
            o, s = KEY_FIELDS[f]
            val = garbage(rng, s)
            poke(t, base + o, s, val)
            return f"key {key:#x} {f}={val:#x}"
        how = rng.choice(["field", "field", "va_shift", "outside", "seq_odd"])
        if how == "va_shift":
            # Point the record just outside the region: at the canary pages around it.
            va = peek(t, base + 48, 8)
            delta = rng.choice([-PAGE, -64, PAGE, 4 * PAGE])
            poke(t, base + 48, 8, (va or 0) + delta)
            return f"key {key:#x} va{delta:+d}"
        if how == "outside":
            # Length or offset beyond the segment the bytes live in.
            f = rng.choice(["len", "seg_off", "iova"])
            val = rng.choice([1 << 40, (1 << 64) - 4096, 1 << 20, (1 << 63)])
            poke(t, base + KEY_FIELDS[f][0], 8, val)
            return f"key {key:#x} {f}={val:#x}"
        if how == "seq_odd":
            s0 = peek(t, base, 4) or 0
            poke(t, base, 4, s0 | 1)
            return f"key {key:#x} seq odd ({s0 | 1:#x})"
        f = rng.choice(list(KEY_FIELDS)[:13])
        o, s = KEY_FIELDS[f]
        val = garbage(rng, s)
        poke(t, base + o, s, val)
        return f"key {key:#x} {f}={val:#x}"
    if kind == "cq_rec":
        if not v.cqs:
            return None
        cq = rng.choice(v.cqs)
        f, o = rng.choice([("id", 0), ("gen", 4)])
        val = garbage(rng, 4)
        poke(os.path.join(d, "tables"), CQ_OFF + (cq & 0xffff) * CQ_REC + o, 4, val)
        return f"cq {cq} record {f}={val:#x}"
    if kind == "hdr":
        if not v.whole:
            return None
        f = rng.choice(list(HDR_FIELDS))
        o, s = HDR_FIELDS[f]
        val = garbage(rng, s)
        poke(os.path.join(d, "hdr"), o, s, val)
        return f"hdr {f}={val:#x}"
    if kind == "fifo":
        c = v.fifos()
        if not c:
            return None
        name = rng.choice(c)
        size = 8 if not name.startswith("async-") else 16
        how = rng.choice(["records", "records", "partial"])
        data = rng.randbytes(size * rng.randrange(1, 8) if how == "records" else rng.randrange(1, size))
        try:
            fd = os.open(os.path.join(d, name), os.O_WRONLY | os.O_NONBLOCK)
        except OSError as e:
            return f"{name} open failed ({e.errno})"
        try:
            if not stat.S_ISFIFO(os.fstat(fd).st_mode):
                return f"{name} not a FIFO"
            os.write(fd, data)
        except OSError as e:
            return f"{name} write failed ({e.errno})"
        finally:
            os.close(fd)
        return f"{name} {how} {len(data)} bytes"
    if kind == "counters":
        # shm/counters.rs: the magic word, one word per counter, then the lanes (a held
        # word and the counters again, each held by one send queue); written by its
        # owner, read by `rverbs stat` (hostile_seg.sh runs it after the rounds).
        p = pick(r"counters$")
        if p is None:
            return None
        how = rng.choice(["scribble", "short", "empty"])
        if how == "scribble":
            return f"counters {scribble_bytes(p, rng)}"
        size = 0 if how == "empty" else rng.choice([4, 8, 64])
        os.truncate(p, size)
        return f"counters truncated to {size}"
    if kind == "truncate":
        p = pick(r"(cq|rq|srq|mr|tables|hdr|px|counters)")
        if p is None:
            return None
        size = rng.choice([0, PAGE])
        try:
            os.truncate(p, size)
        except OSError as e:
            return f"{os.path.basename(p)} truncate failed ({e.errno})"
        return f"{os.path.basename(p)} to {size}"
    if kind == "delete":
        p = pick(r"(cq|rq|srq|mr|tables|hdr|px|counters|bell|ch-|async-)")
        if p is None:
            return None
        try:
            os.unlink(p)
        except OSError as e:
            return f"{os.path.basename(p)} unlink failed ({e.errno})"
        return os.path.basename(p)
    raise ValueError(kind)


def main():
    xdir, seed, rounds, seconds, log = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
    rng = random.Random(seed)
    victims = [Victim("a", os.path.join(xdir, "a.inv"), True), Victim("b", os.path.join(xdir, "b.inv"), False)]
    counts = {k: 0 for k in KINDS}
    weights = [WEIGHTS.get(k, 1.0) for k in KINDS]
    pause = seconds / max(rounds, 1)
    with open(log, "a", buffering=1) as out:
        for r in range(rounds):
            kind = rng.choices(KINDS, weights)[0]
            v = rng.choice(victims)
            out.write(f"{r} {kind} {v.name} ...\n")
            try:
                what = attack(kind, v, rng)
            except FileNotFoundError:
                what = None
            except OSError as e:
                what = f"error {e}"
            if what is not None:
                counts[kind] += 1
            out.write(f"{r} {kind} {v.name} {what if what is not None else 'skipped (no target)'}\n")
            time.sleep(pause)
        out.write("done " + " ".join(f"{k}={n}" for k, n in counts.items()) + "\n")


if __name__ == "__main__":
    main()
