#!/usr/bin/python3
"""The "death at any instant" harness: groups of processes on the rverbs drop-in, one of
them killed with SIGKILL at a point a seed chooses, the others checked.

    tests/chaos/kill.py [--seed N] [--rounds N] [--time-cap S] [--long] [--modes rc,ud,...]
                        [--lib DIR] [--keep]

Each round starts 2 or 3 nodes of tests/chaos/kill_peer.c (one mode: rc, uc, ud, srq,
shcq, chan, cm; see that file) in a runtime directory of their own
(RVERBS_RUNTIME_DIR), relays their INFO lines, and kills the victim in one of these
phases, chosen by the seed:
  setup       a random delay after the spawn (device open, QP creation, connection, or
              for cm the rdma_cm handshake; whichever it reaches)
  first_post  as soon as the victim says it posted its first work request
  traffic     a random delay after START, while every node keeps 16 WRs outstanding
Then the survivors are told (DEAD) and must report (REPORT) within their deadline
(derived from the QP's timeout and retry_cnt, see kill_peer.c) plus 10 s, else the
round FAILs as a hang and the survivor is killed. A round FAILs on: a survivor's FAIL
line (kill_peer.c's checks: its WRs, its receives, and with an SRQ, once every survivor
reported and was told QUIET, the SRQ's receives) or non-zero exit, a survivor killed by
a signal (crash), a victim that died before the kill, a hang, a broken canary, or an
ep-N directory left in the runtime directory once every process of the round is gone. The runtime directory is then
opened once more (ibv_devices) and checked again (what the next process would reclaim).

Short mode (default): 60 rounds, capped at 100 s. --long: 2000 rounds, capped at 2 h.
Exit status 0 when every round passed. The counts are printed at the end (and as JSON
with --json FILE).
"""

import argparse
import json
import os
import random
import select
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
MODES = ["rc", "uc", "ud", "srq", "shcq", "chan", "cm"]
PHASES = ["open", "exchange", "connect", "ready", "first_post", "traffic"]
WC_STATUS = {0: "SUCCESS", 1: "LOC_LEN_ERR", 2: "LOC_QP_OP_ERR", 4: "LOC_PROT_ERR",
             5: "WR_FLUSH_ERR", 9: "REM_INV_REQ_ERR", 10: "REM_ACCESS_ERR", 11: "REM_OP_ERR",
             12: "RETRY_EXC_ERR", 13: "RNR_RETRY_EXC_ERR", 21: "GENERAL_ERR"}
HANG_SLACK = 10.0   # seconds past a survivor's own deadline before the driver calls it a hang
ROUND_CAP = 90.0    # seconds a round may take in all


def log(*a):
    print(*a, flush=True)


class Node:
    def __init__(self, idx, proc, errpath):
        self.idx = idx
        self.proc = proc
        self.errpath = errpath
        self.buf = b""
        self.lines = []
        self.info = None
        self.ready = False
        self.posted = False
        self.report = None
        self.fails = []
        self.eof = False
        self.status = None
        self.child = None
        self.hung = False
        self.quieted = False
        self.srq = None

    def send(self, line):
        try:
            self.proc.stdin.write((line + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass


def stacks(pid):
    """Every thread's stack of a hung process (gdb, if installed), for the FAIL report."""
    if not shutil.which("gdb"):
        return []
    try:
        out = subprocess.run(["gdb", "-p", str(pid), "-batch", "-ex", "thread apply all bt 25"],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, timeout=60).stdout
    except subprocess.TimeoutExpired:
        return ["(gdb timed out)"]
    return ["  " + l for l in out.splitlines() if l.startswith(("#", "Thread"))]


def read_lines(sel, nd):
    """The whole lines node `nd` wrote since the last call; None once it closed its
    stdout (then marked `eof` and no longer selected)."""
    try:
        chunk = os.read(nd.proc.stdout.fileno(), 65536)
    except BlockingIOError:
        return []
    if not chunk:
        nd.eof = True
        sel.unregister(nd.proc.stdout)
        return None
    nd.buf += chunk
    lines = []
    while b"\n" in nd.buf:
        raw, nd.buf = nd.buf.split(b"\n", 1)
        lines.append(raw.decode(errors="replace"))
    return lines


def parse_report(line):
    kv = {}
    for tok in line.split()[1:]:
        if "=" in tok:
            k, v = tok.split("=", 1)
            kv[k] = v
    return kv


def run_round(r, rng, args, exe, env_base, stats, base):
    mode = rng.choice(args.modes)
    if mode == "shcq":
        n = 3
    elif mode in ("rc", "srq", "ud"):
        n = rng.choice([2, 2, 3])
    else:
        n = 2
    victim = rng.randrange(n)
    # Where the kill falls: a random delay after a protocol event of the victim.
    phase = rng.choices(PHASES, weights=[2, 2, 2, 1, 2, 4])[0]
    delay = {
        "open": lambda: rng.uniform(0.0, 0.03),          # library load, device open, claim
        "exchange": lambda: rng.uniform(0.0, 0.003),     # after its INFO: QPs, MR made
        "connect": lambda: rng.uniform(0.0, 0.003),      # after CONNECT (cm: the handshake)
        "ready": lambda: rng.uniform(0.0, 0.001),        # after its READY, around START
        "first_post": lambda: rng.choice([0.0, 0.0, rng.uniform(0, 0.002)]),
        "traffic": lambda: rng.uniform(0.005, 0.3),
    }[phase]()
    shared_mr = rng.random() < 0.3
    forks = mode != "cm" and rng.random() < args.fork_share
    node_seed = rng.randrange(1 << 30)
    rt = os.path.join(base, f"r{r}")
    os.makedirs(rt)
    env = dict(env_base, RVERBS_RUNTIME_DIR=rt)
    if shared_mr:
        env["RVERBS_SHARED_MR"] = "1"
    desc = f"round {r}: mode={mode} nodes={n} victim={victim} phase={phase} delay={delay*1e3:.2f}ms shared_mr={int(shared_mr)} fork={int(forks)}"
    problems = []

    sel = selectors.DefaultSelector()
    nodes = []
    t_spawn = time.monotonic()
    for i in range(n):
        errpath = os.path.join(rt + ".stderr." + str(i))
        with open(errpath, "wb") as ef:
            p = subprocess.Popen([exe, mode, str(i), str(n), str(node_seed)] + (["fork"] if forks else []), stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, stderr=ef, env=env)
        nd = Node(i, p, errpath)
        os.set_blocking(p.stdout.fileno(), False)
        sel.register(p.stdout, selectors.EVENT_READ, nd)
        nodes.append(nd)
    V = nodes[victim]
    survivors = [x for x in nodes if x is not V]
    kill_at = t_spawn + delay if phase == "open" else None
    killed_at = None
    told = False
    sent_connect = sent_start = False
    killed_phase = None
    deadline_report = None

    def state_of_victim():
        """Where the victim was when it was killed, as far as the driver knows."""
        if V.posted:
            return "traffic" if phase == "traffic" else "first_post"
        if sent_start:
            return "ready"
        if V.ready:
            return "ready" if mode != "cm" else "connect"
        if sent_connect:
            return "connect"
        if V.info is not None:
            return "exchange"
        return "open"

    def where_stuck(pid):
        # What kept a process from dying: its state, where it sleeps in the kernel, and
        # each thread's kernel stack (readable as root), so that a rare case leaves data.
        def read(path):
            try:
                with open(path) as f:
                    return f.read().strip()
            except OSError as e:
                return f"({e.strerror})"
        state = next((l for l in read(f"/proc/{pid}/status").splitlines() if l.startswith("State:")), "State: ?")
        parts = [state, "wchan " + read(f"/proc/{pid}/wchan")]
        try:
            tids = sorted(os.listdir(f"/proc/{pid}/task"), key=int)
        except OSError:
            tids = []
        for tid in tids:
            stack = " < ".join(l.split()[-1] for l in read(f"/proc/{pid}/task/{tid}/stack").splitlines()[:6])
            parts.append(f"thread {tid} {read(f'/proc/{pid}/task/{tid}/stat').split(') ')[-1][:1]}: {stack}")
        return "; ".join(parts)

    def do_kill():
        nonlocal killed_at, killed_phase
        killed_phase = state_of_victim()
        try:
            V.proc.send_signal(signal.SIGKILL)
        except ProcessLookupError:
            pass
        killed_at = time.monotonic()

    while True:
        now = time.monotonic()
        if now - t_spawn > ROUND_CAP:
            problems.append(f"round took more than {ROUND_CAP:.0f} s")
            break
        if kill_at is not None and killed_at is None and now >= kill_at:
            do_kill()
        if killed_at is not None and not told:
            try:
                V.status = V.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                problems.append("victim did not die within 5 s of SIGKILL: " + where_stuck(V.proc.pid))
                break
            for s in survivors:
                s.send(f"DEAD {victim}")
            told = True
            deadline_report = time.monotonic()
        if told and all(s.report is not None or s.eof for s in survivors):
            break
        if told and time.monotonic() - deadline_report > 3.0 + 0.0:
            # A survivor's own deadline is at most ~3.2 s (RC) or 10 s (rdma_cm); past
            # that plus HANG_SLACK it is a hang.
            late = [s for s in survivors if s.report is None and not s.eof]
            if late and time.monotonic() - deadline_report > (10.0 if mode == "cm" else 3.2) + HANG_SLACK:
                for s in late:
                    problems.append(f"HANG: node {s.idx} gave no report {time.monotonic() - deadline_report:.1f} s after DEAD")
                    problems.extend(stacks(s.proc.pid))
                    s.hung = True
                    s.proc.send_signal(signal.SIGKILL)
                    stats["hangs"] += 1
                break
        timeout = 0.05
        if kill_at is not None and killed_at is None:
            timeout = max(0.0, min(timeout, kill_at - time.monotonic()))
        for key, _ in sel.select(timeout):
            nd = key.data
            lines = read_lines(sel, nd)
            if lines is None:
                if nd is V and killed_at is None:
                    problems.append(f"CRASH: the victim exited before the kill (status {nd.proc.wait()})")
                    stats["crashes"] += 1
                    killed_at = time.monotonic()  # tell the others anyway
                    killed_phase = "none"
                continue
            for line in lines:
                if line.startswith("INFO"):
                    nd.info = line[5:]
                    if nd is V and phase == "exchange" and kill_at is None:
                        kill_at = time.monotonic() + delay
                elif line == "READY":
                    nd.ready = True
                    if nd is V and phase == "ready" and kill_at is None:
                        kill_at = time.monotonic() + delay
                elif line == "POSTED":
                    nd.posted = True
                    if nd is V and phase == "first_post" and killed_at is None and kill_at is None:
                        kill_at = time.monotonic() + delay
                elif line.startswith("REPORT"):
                    nd.report = parse_report(line)
                elif line.startswith("FAIL"):
                    nd.fails.append(line)
                elif line.startswith("CHILD"):
                    nd.child = int(line.split()[1])
                elif line.startswith("NOTE"):
                    pass
        if killed_at is None:
            if not sent_connect and all(x.info is not None for x in nodes):
                for x in nodes:
                    for y in nodes:
                        if y is not x:
                            x.send(f"PEER {y.idx} {y.info}")
                    x.send("CONNECT")
                sent_connect = True
                if phase == "connect":
                    kill_at = time.monotonic() + delay
            if sent_connect and not sent_start and all(x.ready for x in nodes):
                for x in nodes:
                    x.send("START")
                sent_start = True
                if phase == "traffic":
                    kill_at = time.monotonic() + delay

    # srq, shcq: once every survivor reported nobody posts any more, and each accounts for
    # the receives of its SRQ (kill_peer.c, QUIET), one at a time.
    if mode in ("srq", "shcq") and told:
        for s in survivors:
            if s.report is None or s.eof or s.hung:
                continue
            s.send("QUIET")
            end = time.monotonic() + 15
            while not s.quieted and not s.eof and time.monotonic() < end:
                for key, _ in sel.select(0.05):
                    nd = key.data
                    for line in read_lines(sel, nd) or []:
                        if line == "QUIETED":
                            nd.quieted = True
                        elif line.startswith("SRQ"):
                            nd.srq = parse_report(line)
                        elif line.startswith("FAIL"):
                            nd.fails.append(line)
            if not s.quieted and not s.eof:
                problems.append(f"HANG: node {s.idx} did not account for its SRQ within 15 s of QUIET")
                problems.extend(stacks(s.proc.pid))
                stats["hangs"] += 1

    # Survivors exit; everything is reaped.
    for s in survivors:
        s.send("EXIT")
    for x in nodes:
        try:
            x.status = x.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            problems.append(f"HANG: node {x.idx} did not exit within 15 s of EXIT")
            stats["hangs"] += 1
            x.proc.kill()
            x.status = x.proc.wait()
        try:
            x.proc.stdin.close()
        except OSError:
            pass
        x.proc.stdout.close()
    sel.close()
    # Forked children live until their node's stdin closes (just done): wait for them.
    for x in nodes:
        if x.child is None:
            continue
        try:
            fd = os.pidfd_open(x.child)
        except ProcessLookupError:
            continue
        try:
            if not select.select([fd], [], [], 15)[0]:
                problems.append(f"HANG: the forked child of node {x.idx} did not exit")
                os.kill(x.child, signal.SIGKILL)
        finally:
            os.close(fd)

    # Checks of the survivors.
    if V.status is not None and V.status != -signal.SIGKILL and killed_phase != "none":
        problems.append(f"victim status {V.status}, expected SIGKILL")
    for s in survivors:
        for f in s.fails:
            problems.append(f.strip())
        if s.status is not None and s.status < 0 and not s.hung:
            problems.append(f"CRASH: survivor {s.idx} killed by signal {-s.status}")
            stats["crashes"] += 1
        elif s.status not in (0, None) and not s.fails:
            problems.append(f"survivor {s.idx} exited with {s.status}")
        if s.report is None:
            if s.status is not None and s.status >= 0 and not any("HANG" in p for p in problems):
                problems.append(f"survivor {s.idx} gave no report")
            continue
        rep = s.report
        stats["survivors"] += 1
        stats["wr_dead_ok"] += int(rep.get("dead_ok", 0))
        stats["wr_dead_err"] += int(rep.get("dead_err", 0))
        stats["wr_dead_flush"] += int(rep.get("dead_flush", 0))
        stats["wr_after_death"] += int(rep.get("after_death", 0))
        stats["wr_live_ok"] += int(rep.get("live_ok", 0))
        stats["wr_live_bad"] += int(rep.get("live_bad", 0))
        stats["wr_left"] += int(rep.get("left", 0))
        stats["recvs"] += int(rep.get("recvs", 0))
        stats["recvs_dead_flushed"] += int(rep.get("recv_flushed", 0))
        stats["recvs_dead_left"] += int(rep.get("recv_left", 0))
        if s.srq is not None:
            stats["srq_accounted"] += 1
            stats["srq_posted"] += int(s.srq.get("posted", 0))
            stats["srq_probed"] += int(s.srq.get("probed", 0))
            stats["srq_missing"] += int(s.srq.get("posted", 0)) - int(s.srq.get("completed", 0))
        stats["chan_wakeups"] += int(rep.get("chan_wakeups", 0))
        if rep.get("canary") != "ok":
            stats["canary_broken"] += 1
        st = rep.get("statuses", "-")
        if st != "-":
            for kv in st.split(","):
                code, cnt = kv.split(":")
                stats["status"][WC_STATUS.get(int(code), code)] += int(cnt)
        dm = float(rep.get("drain_ms", 0))
        stats["drain_ms_max"] = max(stats["drain_ms_max"], dm)
        if mode == "cm":
            stats["cm_end"][f"{rep.get('cm')}/{rep.get('cm_event')}"] += 1
        with open(s.errpath, "rb") as ef:
            err = ef.read().decode(errors="replace")
        if "panicked" in err:
            problems.append(f"CRASH: survivor {s.idx} panicked: {err.strip().splitlines()[-1][:200]}")
            stats["crashes"] += 1

    # What the round left in its runtime directory once every process is gone.
    def leftovers():
        out = []
        for name in sorted(os.listdir(rt)):
            path = os.path.join(rt, name)
            if name.startswith("ep-") and os.path.isdir(path):
                size = 0
                files = 0
                for dp, _, fs in os.walk(path):
                    for f in fs:
                        files += 1
                        try:
                            size += os.lstat(os.path.join(dp, f)).st_blocks * 512
                        except OSError:
                            pass
                out.append((name, files, size))
        return out

    left = leftovers()
    if left:
        stats["rounds_with_leftovers"] += 1
        stats["dirs_left"] += len(left)
        stats["bytes_left"] += sum(s for _, _, s in left)
        # Whose directory it was: the pid its header names (shm/registry.rs: byte 8).
        roles = {x.proc.pid: f"node {x.idx}{' (victim)' if x is V else ''}" for x in nodes}
        roles.update({x.child: f"forked child of node {x.idx}" for x in nodes if x.child})

        def owner(nm):
            try:
                with open(os.path.join(rt, nm, "hdr"), "rb") as h:
                    h.seek(8)
                    pid = int.from_bytes(h.read(8), sys.byteorder)
                who = f"pid {pid}: {roles.get(pid, 'no process of the round')}"
            except OSError:
                who = "no header"
            # Whether its lock was free when the survivors exited, and who holds it open.
            lockp = os.path.join(rt, nm + ".lock")
            openers = []
            for d in os.listdir("/proc"):
                if not d.isdigit():
                    continue
                try:
                    for fd in os.listdir(f"/proc/{d}/fd"):
                        if os.readlink(f"/proc/{d}/fd/{fd}") == lockp:
                            openers.append(roles.get(int(d), d))
                except OSError:
                    pass
            return f"{who}; lock open in {openers or 'no process'}"
        problems.append("LEFT: " + ", ".join(f"{nm} ({f} files, {s // 1024} KiB; {owner(nm)}; {sorted(os.listdir(os.path.join(rt, nm)))})" for nm, f, s in left))
    subprocess.run(["ibv_devices"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=30)
    left2 = leftovers()
    if left2:
        stats["dirs_left_after_reopen"] += len(left2)
        problems.append("LEFT after reopening: " + ", ".join(nm for nm, _, _ in left2))

    kp = killed_phase or "never"
    stats["kills"][f"{mode}/{kp}"] += 1
    stats["kills_by_phase"][kp] += 1
    stats["kills_by_mode"][mode] += 1
    if forks:
        stats["fork_rounds"] += 1
    stats["rounds"] += 1
    if problems:
        stats["failed_rounds"] += 1
        log("FAIL " + desc + f" killed_in={kp}")
        for p in problems:
            log("   " + p)
        for x in nodes:
            try:
                with open(x.errpath, "rb") as ef:
                    tail = ef.read().decode(errors="replace").strip().splitlines()[-5:]
            except OSError:
                tail = []
            for t in tail:
                log(f"   node {x.idx} stderr: {t}")
        if args.keep:
            return
    elif args.verbose:
        log("ok   " + desc + f" killed_in={kp}")
    shutil.rmtree(rt, ignore_errors=True)
    for x in nodes:
        try:
            os.unlink(x.errpath)
        except OSError:
            pass


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=int(os.environ.get("RVERBS_CHAOS_SEED", "1")))
    ap.add_argument("--rounds", type=int)
    ap.add_argument("--time-cap", type=float, help="seconds; no round starts after it")
    ap.add_argument("--long", action="store_true", help="2000 rounds, capped at 2 h")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--lib", help="drop-in directory (default: scripts/build-dropin.sh)")
    ap.add_argument("--keep", action="store_true", help="keep the runtime dirs of failed rounds")
    ap.add_argument("--verbose", "-v", action="store_true")
    ap.add_argument("--fork-share", type=float, default=0.15,
                    help="share of rounds whose nodes fork an idle child (default 0.15)")
    ap.add_argument("--json", help="write the counts to this file")
    args = ap.parse_args()
    if os.environ.get("RVERBS_CHAOS_LONG") == "1":
        args.long = True
    if args.rounds is None:
        args.rounds = 2000 if args.long else 60
    if args.time_cap is None:
        args.time_cap = 7200.0 if args.long else 100.0
    args.modes = [m for m in args.modes.split(",") if m]
    for m in args.modes:
        if m not in MODES:
            sys.exit(f"unknown mode {m}")

    lib = args.lib or subprocess.run([os.path.join(REPO, "scripts/build-dropin.sh")], check=True,
                                     stdout=subprocess.PIPE, text=True).stdout.strip()
    work = tempfile.mkdtemp(prefix="rverbs-chaos-")
    base = tempfile.mkdtemp(prefix="rverbs-chaos-rt-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    children = []

    def cleanup(*_):
        shutil.rmtree(work, ignore_errors=True)
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)

    signal.signal(signal.SIGTERM, lambda *_: (cleanup(), sys.exit(143)))
    exe = os.path.join(work, "kill_peer")
    subprocess.run(["gcc", "-O2", "-Wall", "-Wextra", "-Werror", "-o", exe, os.path.join(HERE, "kill_peer.c"),
                    "-libverbs", "-lrdmacm"], check=True)
    env = dict(os.environ, LD_LIBRARY_PATH=lib, RVERBS_NET="off")
    env.pop("RVERBS_SHARED_MR", None)
    stats = defaultdict(int)
    for k in ("kills", "kills_by_phase", "kills_by_mode", "status", "cm_end"):
        stats[k] = Counter()
    stats["drain_ms_max"] = 0.0
    rng = random.Random(args.seed)
    t0 = time.monotonic()
    log(f"chaos/kill: seed {args.seed}, up to {args.rounds} rounds, cap {args.time_cap:.0f} s, modes {','.join(args.modes)}, drop-in {lib}")
    try:
        for r in range(args.rounds):
            if time.monotonic() - t0 > args.time_cap:
                log(f"time cap reached after {r} rounds")
                break
            run_round(r, rng, args, exe, env, stats, base)
            if args.long and r % 100 == 99:
                log(f"... {r + 1} rounds, {stats['failed_rounds']} failed, {time.monotonic() - t0:.0f} s")
    finally:
        del children
        cleanup()
    el = time.monotonic() - t0
    summary = {k: (dict(v) if isinstance(v, Counter) else v) for k, v in stats.items()}
    summary["seconds"] = round(el, 1)
    summary["seed"] = args.seed
    log("== chaos/kill summary ==")
    log(f"rounds {stats['rounds']} ({stats['failed_rounds']} failed) in {el:.0f} s, seed {args.seed}")
    log("kills by phase: " + ", ".join(f"{k} {v}" for k, v in sorted(stats['kills_by_phase'].items())))
    log("kills by mode:  " + ", ".join(f"{k} {v}" for k, v in sorted(stats['kills_by_mode'].items())))
    log(f"rounds whose nodes forked a child: {stats['fork_rounds']}")
    log(f"survivors {stats['survivors']}: WRs to the dead node completed: success {stats['wr_dead_ok']}, "
        f"error {stats['wr_dead_err']}, flushed {stats['wr_dead_flush']} (of which posted after the death "
        f"{stats['wr_after_death']}); WRs to live nodes: success {stats['wr_live_ok']}, error {stats['wr_live_bad']}; "
        f"never completed {stats['wr_left']}")
    log(f"receives on QPs to the dead node (own receive queues), once moved to ERR: flushed "
        f"{stats['recvs_dead_flushed']}, neither completed nor flushed {stats['recvs_dead_left']}")
    log(f"SRQs accounted {stats['srq_accounted']}: receives posted {stats['srq_posted']}, still in the SRQ "
        f"(taken by the probe) {stats['srq_probed']}, neither in it nor completed {stats['srq_missing']}")
    log("statuses towards the dead node: " + ", ".join(f"{k} {v}" for k, v in sorted(stats['status'].items())))
    log(f"longest drain {stats['drain_ms_max']:.0f} ms; completion-channel wake-ups {stats['chan_wakeups']}")
    if stats["cm_end"]:
        log("rdma_cm survivors ended: " + ", ".join(f"{k} {v}" for k, v in sorted(stats['cm_end'].items())))
    log(f"hangs {stats['hangs']}, crashes {stats['crashes']}, broken canaries {stats['canary_broken']}, "
        f"ep dirs left {stats['dirs_left']} ({stats['bytes_left'] // 1024} KiB, {stats['rounds_with_leftovers']} rounds), "
        f"left after reopening {stats['dirs_left_after_reopen']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=1, sort_keys=True)
    sys.exit(1 if stats["failed_rounds"] else 0)


if __name__ == "__main__":
    main()
