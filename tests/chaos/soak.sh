#!/usr/bin/env bash
# The bounded soak (hardening issue, "Load"): many RC QPs in many processes, mixed opcodes,
# data checked end to end, no lost, duplicated or reordered completion, flat memory
# (`rverbs-chaos soak`, crates/rverbs-chaos/src/soak.rs, which documents the checks).
#
#   same host:      CHAOS_WORKERS (8) processes on one runtime directory, each with about
#                   CHAOS_QPS (64) RC QPs spread over every other process;
#   two namespaces: the same, even ranks in rvsoak-a (10.72.0.1) and odd ranks in
#                   rvsoak-b (10.72.0.2), joined by a veth pair this script creates and
#                   always removes, each namespace with its own runtime directory, so about
#                   half of each worker's partners are across the link (RoCEv2, UDP 4791).
#                   Needs root; without it this part is SKIPPED.
# Each QP runs CHAOS_OPS operations on the same host, CHAOS_OPS_NET across the namespaces
# (WRITE + checked READ, SEND/RECV checked in order, FETCH_AND_ADD returning 0, 1, 2, …,
# CMP_AND_SWP that must and must not swap), a window of WRs outstanding; every WR must
# complete (same host: within 10 s); each worker's VmRSS may grow by at most 10 % + 8 MiB
# between the warm-up (a fifth of the operations) and the end.
#
# Short by default (CI: well under a minute of traffic each). Long by hand: CHAOS_LONG=1
# (more QPs and operations, minutes). CHAOS_SEED (default 1) seeds the operation mix and
# the PSNs; CHAOS_SECONDS caps each run; CHAOS_KEEP=1 keeps the logs.
# Prints the `SOAK` counts and "PASS"/"FAIL"; exits 1 on failure.
set -euo pipefail
cd "$(dirname "$0")/../.."

SEED=${CHAOS_SEED:-1}
WORKERS=${CHAOS_WORKERS:-8}
if [ -n "${CHAOS_LONG:-}" ]; then
  QPS=${CHAOS_QPS:-128} OPS_HOST=${CHAOS_OPS:-30000} OPS_NET=${CHAOS_OPS_NET:-${CHAOS_OPS:-6000}}
  WINDOW=16 MAXLEN=4096 CAP=${CHAOS_SECONDS:-900}
else
  QPS=${CHAOS_QPS:-64} OPS_HOST=${CHAOS_OPS:-2000} OPS_NET=${CHAOS_OPS_NET:-${CHAOS_OPS:-500}}
  WINDOW=8 MAXLEN=2048 CAP=${CHAOS_SECONDS:-45}
fi
# Across the link: window 8, and an ACK timeout of 2^18 x 4.096 us (1.07 s; 8 tries, 8.6 s)
# instead of ibv_rc_pingpong's 14 (67 ms; 0.54 s): every request into a namespace passes
# through the one process that owns its port 4791 (it relays to the others), and with
# 8 busy-polling workers and their progress threads on 2 shared cores that process can be
# off CPU long enough for 8 timeouts of 67 ms (RETRY_EXC_ERR, with the owner's 4 MiB
# socket buffer overflowing meanwhile). A WR may take up to 30 s there.
NET_OPTS=(--window 8 --timeout 18 --wr-ms 30000)
A=rvsoak-a B=rvsoak-b
IP_A=10.72.0.1 IP_B=10.72.0.2

scripts/build-dropin.sh >/dev/null   # builds rverbs-chaos
target_dir=$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
BIN=${target_dir:-target}/release/rverbs-chaos
# shellcheck source=tests/conformance/lib/netns.bash
source tests/conformance/lib/netns.bash

WORK=$(mktemp -d /tmp/rverbs-soak.XXXXXX)
root=
[ "$(id -u)" = 0 ] && root=1
cleanup() {
  # The driver kills its workers on its own limit; timeout(1) bounds the driver.
  [ -n "$root" ] && netns_del "$A" "$B"
  if [ -n "${CHAOS_KEEP:-}" ]; then echo "logs kept in $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

why=()
# run NAME OPS [driver options...]: one soak in $WORK/NAME; its SOAK lines printed.
run() {
  local name=$1 ops=$2
  shift 2
  mkdir -p "$WORK/$name"
  local rc=0 t0
  t0=$(date +%s%N)
  timeout -k 5 $((CAP + 60)) "$BIN" soak --dir "$WORK/$name" --workers "$WORKERS" --qps "$QPS" --ops "$ops" \
    --window "$WINDOW" --max-len "$MAXLEN" --seed "$SEED" --seconds "$CAP" "$@" >"$WORK/$name.log" 2>&1 || rc=$?
  grep -h '^SOAK' "$WORK/$name.log" | sed "s/^/$name: /" || true
  echo "$name: $(( ($(date +%s%N) - t0) / 1000000 )) ms"
  if [ "$rc" != 0 ]; then
    why+=("$name: exit $rc: $(grep -h '^FAIL' "$WORK/$name.log" | head -1 | cut -c1-600)")
    tail -n 5 "$WORK/$name.log" >&2 || true
  fi
}

echo "soak.sh: seed $SEED, $WORKERS workers x ~$QPS QPs, window $WINDOW, messages up to $MAXLEN bytes, cap ${CAP}s per run"
mkdir -p "$WORK/rt-host"
RVERBS_RUNTIME_DIR="$WORK/rt-host" run same-host "$OPS_HOST"

if [ -z "$root" ]; then
  echo "soak.sh: two namespaces SKIPPED: needs root to create network namespaces"
else
  netns_del "$A" "$B"
  mkdir -p "$WORK/rt-a" "$WORK/rt-b"
  netns_pair "$A" "$B" 1500 "$IP_A" "$IP_B"
  run two-netns "$OPS_NET" "${NET_OPTS[@]}" --ns-a "$A" --ns-b "$B" --ip-a "$IP_A" --ip-b "$IP_B" --rt-a "$WORK/rt-a" --rt-b "$WORK/rt-b"
fi

if [ ${#why[@]} -eq 0 ]; then
  echo "PASS soak.sh (seed $SEED)"
else
  echo "FAIL soak.sh (seed $SEED): ${why[*]}"
  exit 1
fi
