#!/usr/bin/env bash
# The same-host suites with the fast path turned off (issue 24's acceptance: "stay green in
# the default configuration and with the fast path turned off").
#
# usage: fast_path_off.sh
#
# By default a runtime directory in memory (/dev/shm) makes registrations of caller memory
# shareable, and a peer on this host reaches them with plain loads and stores
# (docs/memory.md, "Shareable registrations"); `RVERBS_SHARED_MR=0` turns that off, and
# peers reach caller memory with cross-memory attach (process_vm_writev/readv). The other
# scripts of this directory run in the default configuration; this one:
#
# 1. checks that the switch decides the path, both ways: ibv_rc_pingpong (RC SEND between
#    two processes, -n ITERS) with the client under `strace -c`, which counts its
#    process_vm_writev calls. With RVERBS_SHARED_MR=0 every 4 KiB SEND it makes into the
#    server's private receive buffer is one (at least ITERS calls); a 64-byte one is none:
#    receives into private memory of at most 1 KiB are placed by their owner's poll from
#    a slot the peer fills with plain stores (docs/memory.md, "Receives placed by their
#    owner"; ibv_rc_pingpong posts its receives in INIT, which moves them to slots at
#    RTR); with RVERBS_SHARED_MR=1, none (the bytes go by plain stores). Without that
#    check the runs below could pass with the switch ignored;
# 2. runs pingpong.sh, perftest.sh and run_pyverbs.sh again with RVERBS_SHARED_MR=0
#    exported, each as it runs by default (scripts/test.sh runs the workspace's tests the
#    same way), except that perftest's latency programs run at 8 B, 4 KiB and 1 MiB
#    (PERFTEST_LAT_SIZES) instead of every size: with -a perftest measures the CPU clock
#    for each of 23 sizes, 11 s per program here for 0.1 s of RDMA. Its bandwidth
#    programs, which move every size through the same requester and responder, keep -a.
#
# Environment: DROPIN_DIR as pingpong.sh; FAST_PATH_OFF_ITERS (default 200).
# Exits 1 if the check or a suite failed, 2 on a missing program.
set -euo pipefail
cd "$(dirname "$0")/../.."

ITERS=${FAST_PATH_OFF_ITERS:-200}
TIMEOUT=30
NAME=fast_path_off.sh
FIRST_PORT=
for p in ibv_rc_pingpong strace timeout; do
  command -v "$p" >/dev/null || { echo "fast_path_off.sh: $p not found (apt-get install ibverbs-utils strace)" >&2; exit 2; }
done
# shellcheck source=lib/pairs.bash
source tests/conformance/lib/pairs.bash

# switch_pair VALUE SIZE: the pingpong pair with RVERBS_SHARED_MR=VALUE on both sides and
# SIZE-byte messages, the client under strace; sets `calls` to its process_vm_writev calls.
switch_pair() {
  local value=$1 trace
  size=$2
  n=$((n + 1))
  slog=$WORK/logs/$n.server clog=$WORK/logs/$n.client trace=$WORK/logs/$n.strace
  start=$EPOCHREALTIME why=()
  strace_out=$trace shared_mr=$value
  serve_on_free_port switch_commands
  [ ${#why[@]} -eq 0 ] || return 0
  grep -q "^$ITERS iters in" "$slog" || why+=("server printed no \"$ITERS iters in\"")
  grep -q "^$ITERS iters in" "$clog" || why+=("client printed no \"$ITERS iters in\"")
  # strace -c's table: "% time  seconds  usecs/call  calls  [errors]  syscall"; no row
  # when the call was never made.
  calls=$(awk '$NF == "process_vm_writev" { print $4 }' "$trace")
  calls=${calls:-0}
}
switch_commands() {
  local common=(-d rverbs0 -g 1 -n "$ITERS" -s "$size" -p "$port")
  scmd=(env RVERBS_SHARED_MR="$shared_mr" ibv_rc_pingpong "${common[@]}")
  ccmd=(env RVERBS_SHARED_MR="$shared_mr" strace -f -c -o "$strace_out" -e trace=process_vm_writev
        ibv_rc_pingpong "${common[@]}" 127.0.0.1)
}

switch_pair 0 4096
[ ${#why[@]} -ne 0 ] || [ "$calls" -ge "$ITERS" ] ||
  why+=("RVERBS_SHARED_MR=0: $calls process_vm_writev calls for $ITERS SENDs of 4 KiB (expected one per SEND)")
report_pair "RVERBS_SHARED_MR=0: each 4 KiB SEND is a process_vm_writev ($calls for $ITERS)"
switch_pair 0 64
[ ${#why[@]} -ne 0 ] || [ "$calls" -eq 0 ] ||
  why+=("RVERBS_SHARED_MR=0: $calls process_vm_writev calls for $ITERS SENDs of 64 B (expected none: placed by the receiver's poll)")
report_pair "RVERBS_SHARED_MR=0: no process_vm_writev for 64-byte SENDs, placed by the receiver ($calls for $ITERS)"
switch_pair 1 64
[ ${#why[@]} -ne 0 ] || [ "$calls" -eq 0 ] ||
  why+=("RVERBS_SHARED_MR=1: $calls process_vm_writev calls (expected none: plain stores)")
report_pair "RVERBS_SHARED_MR=1: no process_vm_writev ($calls for $ITERS SENDs)"

# The suites, fast path off. Each prints its own lines and summary.
export RVERBS_SHARED_MR=0 DROPIN_DIR=$dropin PERFTEST_LAT_SIZES="8 4096 1048576"
for suite in pingpong.sh perftest.sh run_pyverbs.sh; do
  n=$((n + 1))
  start=$EPOCHREALTIME why=()
  slog=/dev/null clog=/dev/null scmd=("(suite)") ccmd=("RVERBS_SHARED_MR=0 tests/conformance/$suite")
  echo "== $NAME: RVERBS_SHARED_MR=0 tests/conformance/$suite"
  args=()
  [ "$suite" = run_pyverbs.sh ] && args=("$dropin")
  bash "tests/conformance/$suite" "${args[@]}" || why+=("exit $?")
  report_pair "RVERBS_SHARED_MR=0 $suite"
done
finish
