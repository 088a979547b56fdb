#!/usr/bin/env bash
# RDMA READ and WRITE bandwidth between two network namespaces (a veth pair, link MTU 1500,
# path MTU 1024) with packet faults injected into the packets of the side that sends the
# data: for ib_read_bw the server (the READ responder, whose READ responses are dropped or
# corrupted), for ib_write_bw the client (the WRITE requester). Each row without faults
# and with each spec; WRITE under the same faults is the peer figure of READ.
#
#   BENCH_FAULTS   space-separated RVERBS_FAULTS specs (default "seed=7,drop=1%
#                  seed=7,drop=2% seed=7,drop=5% seed=7,corrupt=2%")
#   BENCH_BASE_DIR a directory holding libibverbs.so.1 and librdmacm.so.1 of another build:
#                  each row runs with it too, just before the current build ("base" rows),
#                  a before/after in one run, on the same link
#   BENCH_ITERS    -n of the 64 KiB rows (default 2000; the 1 MiB rows take a tenth, a
#                  fortieth with faults)
#
# Prints one line per measurement: build, program, size, faults, the client's result row
# (bytes, iterations, peak and average MB/s, Mpps) and the wall time of the client. Needs
# root (netns); uses the namespaces of net_side_by_side.sh (rvb-a, rvb-b), so the two do
# not run together. Not a test: numbers go to BENCHMARKS.md with the command.
set -euo pipefail
cd "$(dirname "$0")/../.."

N=${BENCH_ITERS:-2000}
SPECS=${BENCH_FAULTS:-seed=7,drop=1% seed=7,drop=2% seed=7,drop=5% seed=7,corrupt=2%}
A=rvb-a B=rvb-b IP_A=10.68.0.1 IP_B=10.68.0.2
DROPIN=${DROPIN_DIR:-$(bash scripts/build-dropin.sh | tail -1)}
BASE=${BENCH_BASE_DIR:-}
# shellcheck source=tests/conformance/lib/netns.bash
source tests/conformance/lib/netns.bash
WORK=$(mktemp -d /tmp/net-faults.XXXXXX)
cleanup() {
  netns_del "$A" "$B"
  rm -rf "$WORK"
}
trap cleanup EXIT
netns_pair "$A" "$B" 1500 "$IP_A" "$IP_B"
mkdir -p "$WORK/rt-a" "$WORK/rt-b"

port=19400
# run LABEL LIBDIR FAULTS PROG ARGS...: server in A, client in B, on the libraries of
# LIBDIR; FAULTS on the side that sends the data.
run() {
  local label=$1 lib=$2 faults=$3 prog=$4
  shift 4
  local sf= cf= t0 t1
  if [ "$prog" = ib_read_bw ]; then sf=$faults; else cf=$faults; fi
  port=$((port + 1))
  ip netns exec "$A" env LD_LIBRARY_PATH="$lib" RVERBS_RUNTIME_DIR="$WORK/rt-a" ${sf:+RVERBS_FAULTS="$sf"} timeout 300 \
    "$prog" -d rverbs0 -x 1 -F -m 1024 -p "$port" "$@" >"$WORK/s.log" 2>&1 &
  local spid=$!
  wait_listen "$A" "$port"
  t0=$(date +%s%N)
  ip netns exec "$B" env LD_LIBRARY_PATH="$lib" RVERBS_RUNTIME_DIR="$WORK/rt-b" ${cf:+RVERBS_FAULTS="$cf"} timeout 300 \
    "$prog" -d rverbs0 -x 1 -F -m 1024 -p "$port" "$@" "$IP_A" >"$WORK/c.log" 2>&1 || true
  t1=$(date +%s%N)
  wait "$spid" || true
  printf '%-6s %-11s %-22s %-20s %s (%d ms)\n' "$label" "$prog" "$*" "${faults:-no faults}" \
    "$(grep -E '^ +[0-9]+ +[0-9]+ ' "$WORK/c.log" | tail -1 | tr -s ' ')" $(((t1 - t0) / 1000000))
}

# row FAULTS PROG ARGS...: with the base build first, if one is set.
row() {
  [ -z "$BASE" ] || run base "$BASE" "$@"
  run rverbs "$DROPIN" "$@"
}

echo "# $(date -u +%FT%TZ) $(git rev-parse --short HEAD) link MTU 1500, path MTU 1024${BASE:+, base $BASE}"
for prog in ib_read_bw ib_write_bw; do
  row "" "$prog" -s 65536 -n "$N"
  for f in $SPECS; do
    row "$f" "$prog" -s 65536 -n "$N"
  done
  row "" "$prog" -s 1048576 -n $((N / 10))
  for f in $SPECS; do
    row "$f" "$prog" -s 1048576 -n $((N / 40))
  done
done
