#!/usr/bin/env python3
"""Runs the rverbs criterion benches several times and summarises them (BENCHMARKS.md).

Noise rule: on a shared 2-vCPU VM single runs drift, so compare medians of >= 5 runs in
which rverbs and its peer ran interleaved, never single runs or runs from different days.
Each rep runs both bench binaries (rc_loopback measures every WRITE size right before its
memcpy peer). The binaries are built once and copied to OUT_DIR first, so every rep runs
the same code. After each binary the per-benchmark *median* sample (criterion's
estimates.json, ns per iteration) is kept.
The report gives, per benchmark, the median over reps and the min-max range, and for
write_bw the median over reps of the same-rep ratio to peer_memcpy.

Usage (from the repository root):
    CARGO_TARGET_DIR=/tmp/cli-target python3 crates/rverbs-bench/benches/reps.py [REPS] [OUT_DIR]
Standard library only. Prints markdown tables to stdout; logs, criterion data and raw
per-rep JSON go to OUT_DIR (default /tmp/rverbs-bench-reps). REPS 0 re-prints the report
of the reps already in OUT_DIR.
"""

import json
import os
import shutil
import statistics
import subprocess
import sys

BENCHES = ["cq_poll", "rc_loopback"]


def collect(criterion_dir):
    """{full_id: (median_ns_per_iter, throughput)} for every benchmark criterion has stored."""
    found = {}
    for root, _dirs, files in os.walk(criterion_dir):
        if os.path.basename(root) != "new" or "benchmark.json" not in files:
            continue
        with open(os.path.join(root, "benchmark.json")) as f:
            bench = json.load(f)
        with open(os.path.join(root, "estimates.json")) as f:
            est = json.load(f)
        found[bench["full_id"]] = (est["median"]["point_estimate"], bench.get("throughput"))
    return found


def loadavg():
    """The 1-minute load average: other work on the machine during the run."""
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def build(out_dir):
    """Builds the bench binaries once and copies them to OUT_DIR, so every rep runs the
    same code even if the sources change during the run."""
    cmd = ["cargo", "bench", "-p", "rverbs-bench", "--no-run", "--message-format=json"]
    cmd += [f"--bench={b}" for b in BENCHES]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    exes = {}
    for line in out.splitlines():
        msg = json.loads(line)
        target = msg.get("target", {})
        if msg.get("reason") == "compiler-artifact" and msg.get("executable") \
                and target.get("name") in BENCHES and "bench" in target.get("kind", []):
            dst = os.path.join(out_dir, target["name"])
            shutil.copy2(msg["executable"], dst)
            exes[target["name"]] = dst
    missing = set(BENCHES) - set(exes)
    if missing:
        sys.exit(f"no executable for {missing}")
    return exes


def run(reps, out_dir):
    exes = build(out_dir)
    crit = os.path.join(out_dir, "criterion")
    env = dict(os.environ, CRITERION_HOME=crit)
    runs = []
    for rep in range(1, reps + 1):
        merged = {}
        for b in BENCHES:
            # Drop stored results of these groups so a failed run cannot leave stale ones.
            for g in GROUPS[b]:
                shutil.rmtree(os.path.join(crit, g), ignore_errors=True)
            log = os.path.join(out_dir, f"{b}.{rep}.log")
            with open(log, "w") as f:
                subprocess.run([exes[b], "--bench"], stdout=f, stderr=subprocess.STDOUT,
                               env=env, check=True)
            ids = collect(crit)
            merged.update({k: v for k, v in ids.items() if k.split("/")[0] in GROUPS[b]})
            merged.setdefault("_loadavg", []).append(loadavg())
            print(f"rep {rep}/{reps}: {b} done, loadavg {loadavg()}", file=sys.stderr)
        with open(os.path.join(out_dir, f"rep{rep}.json"), "w") as f:
            json.dump(merged, f, indent=1)
        runs.append(merged)
    return runs


GROUPS = {
    "cq_poll": {"cq_poll", "cq_poll_empty"},
    "rc_loopback": {"send_pingpong", "write_lat", "write_bw", "peer_memcpy"},
}


def med_range(values):
    return statistics.median(values), min(values), max(values)


def gib_s(size, ns):
    return size / ns * 1e9 / 2**30


def report(runs):
    loads = [r.get("_loadavg", []) for r in runs]
    runs = [{k: v for k, v in r.items() if not k.startswith("_")} for r in runs]
    ids = sorted(set().union(*runs))

    def series(i):
        return [r[i][0] for r in runs if i in r]

    print(f"Runs: {len(runs)}; figures are the median over runs of each run's median "
          "sample; [min-max] over runs.")
    print(f"1-minute load average after each bench binary, per run: {loads}\n")

    print("| benchmark | per poll call ns | per CQE ns | CQEs/s (M) |")
    print("|---|---|---|---|")
    for i in ids:
        if not i.startswith("cq_poll"):
            continue
        elems = runs[0][i][1]["Elements"]
        m, lo, hi = med_range([ns / elems for ns in series(i)])
        batch = i.rsplit("batch", 1)[-1] if "batch" in i else None
        calls = elems / int(batch) if batch and i.startswith("cq_poll/") else 1
        per_call = m * elems / calls
        print(f"| `{i}` | {per_call:.1f} | {m:.2f} [{lo:.2f}-{hi:.2f}] | {1e3 / m:.0f} |")

    print("\n| benchmark | time per iteration | one-way (RTT/2) |")
    print("|---|---|---|")
    for i in ids:
        if i.startswith("send_pingpong"):
            m, lo, hi = med_range(series(i))
            print(f"| `{i}` | {m / 1e3:.3f} µs [{lo / 1e3:.3f}-{hi / 1e3:.3f}] | {m / 2e3:.3f} µs |")

    print("\n| size B | `write_lat` µs | `peer_memcpy` ns | `write_bw` GiB/s | `peer_memcpy` GiB/s "
          "| write_bw / memcpy (median of per-run ratios) |")
    print("|---|---|---|---|---|---|")
    sizes = sorted({int(i.split("/")[1]) for i in ids if i.startswith(("write_", "peer_memcpy"))})
    for s in sizes:
        lat = series(f"write_lat/{s}")
        bw = series(f"write_bw/{s}")
        mc = series(f"peer_memcpy/{s}")
        cells = [str(s)]
        if lat:
            m, lo, hi = med_range(lat)
            cells.append(f"{m / 1e3:.3f} [{lo / 1e3:.3f}-{hi / 1e3:.3f}]")
        else:
            cells.append("-")
        m, lo, hi = med_range(mc)
        cells.append(f"{m:.1f} [{lo:.1f}-{hi:.1f}]")
        if bw:
            m, lo, hi = med_range([gib_s(s, ns) for ns in bw])
            cells.append(f"{m:.1f} [{lo:.1f}-{hi:.1f}]")
        else:
            cells.append("-")
        m, lo, hi = med_range([gib_s(s, ns) for ns in mc])
        cells.append(f"{m:.1f} [{lo:.1f}-{hi:.1f}]")
        if bw:
            ratios = [r[f"peer_memcpy/{s}"][0] / r[f"write_bw/{s}"][0] for r in runs
                      if f"write_bw/{s}" in r and f"peer_memcpy/{s}" in r]
            m, lo, hi = med_range(ratios)
            cells.append(f"{100 * m:.0f} % [{100 * lo:.0f}-{100 * hi:.0f}]")
        else:
            cells.append("-")
        print("| " + " | ".join(cells) + " |")


def main():
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    out_dir = sys.argv[2] if len(sys.argv) > 2 else "/tmp/rverbs-bench-reps"
    os.makedirs(out_dir, exist_ok=True)
    if reps > 0:
        runs = run(reps, out_dir)
    else:  # REPS 0: only re-print the report of the runs already in OUT_DIR
        runs = []
        for name in sorted(os.listdir(out_dir)):
            if name.startswith("rep") and name.endswith(".json"):
                with open(os.path.join(out_dir, name)) as f:
                    runs.append(json.load(f))
    report(runs)


if __name__ == "__main__":
    main()
