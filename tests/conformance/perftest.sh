#!/usr/bin/env bash
# Debian's perftest, unmodified, as two processes (server and client) on this host, both
# on rverbs' drop-in libibverbs.so.1 (-d rverbs0 -x 1, the client connecting to
# 127.0.0.1).
#
# usage: perftest.sh [FILTER]
#
#   FILTER  run only the pairs whose label (e.g. "ib_read_lat -a -e") matches this bash
#           regex; default: all
#
# Environment:
#   DROPIN_DIR        directory holding libibverbs.so.1 (default: scripts/build-dropin.sh)
#   PERFTEST_ITERS    iterations per message size, -n (default 100; perftest's minimum is 5)
#   PERFTEST_TIMEOUT  seconds each side may run (default 120)
#   PERFTEST_PORT     first TCP port to use (default: random, below the ephemeral range)
#   PERFTEST_LAT_SIZES  the latency programs (ib_*_lat but atomics) run once per size
#                     listed here (-s SIZE) instead of with -a (default: unset, -a);
#                     fast_path_off.sh's second pass sets it, as -a costs a latency
#                     program ~10 s whatever -n is (below)
#
# Pairs (every one with -d rverbs0 -x 1 -F -n ITERS; -F only silences the cpufreq
# warning):
#   ib_write_bw, ib_write_lat              -a
#   ib_read_bw, ib_read_lat                -a, and -a -e
#   ib_send_bw, ib_send_lat                -a, and -a -e, and -a --use-srq
#   ib_atomic_bw, ib_atomic_lat            (fetch-and-add), -e, and -A CMP_AND_SWAP
#   ib_write_bw -c UC                      -a (RDMA WRITE on an unreliable connection)
# -a runs every size from 2 B to 8 MiB (2^1..2^23). Left out because perftest itself
# refuses them, on any device:
#   -e on ib_write_bw / ib_write_lat: "Events feature not available on WRITE verb";
#   -a on ib_atomic_bw / ib_atomic_lat: "Message size cannot be changed for Atomic
#     tests" (atomics are 8 bytes).
# Most of the time goes to perftest itself: it measures the CPU clock (a ~0.2 s busy
# loop on gettimeofday) for every size it reports, so a latency test with -a takes
# ~10 s whatever -n is.
#
# A pair passes only if both processes exit 0 and the client printed the result row of
# the last size (8388608 for -a, 8 for atomics) with ITERS iterations, so a silent early
# exit 0 cannot pass. Prints one line per pair, the last 20 lines of both sides' output
# on stderr for a failing pair, then "N passed, N failed" and the elapsed time; exits 1
# if any pair failed.
set -euo pipefail
cd "$(dirname "$0")/../.."

FILTER=${1:-}
ITERS=${PERFTEST_ITERS:-100}
TIMEOUT=${PERFTEST_TIMEOUT:-120}
NAME=perftest.sh
FIRST_PORT=${PERFTEST_PORT:-}
DEV=rverbs0
GID_INDEX=1
for p in ib_write_bw ib_write_lat ib_read_bw ib_read_lat ib_send_bw ib_send_lat \
         ib_atomic_bw ib_atomic_lat timeout; do
  command -v "$p" >/dev/null || { echo "perftest.sh: $p not found (apt-get install perftest)" >&2; exit 2; }
done
# shellcheck source=lib/pairs.bash
source tests/conformance/lib/pairs.bash

# run_pair LAST_SIZE PROGRAM ARGS...: server `PROGRAM ARGS -p PORT` in the background,
# then client `PROGRAM ARGS -p PORT 127.0.0.1`; the client must print the result row
# "LAST_SIZE ITERS ...". The label is PROGRAM and ARGS without the common options.
run_pair() {
  local last=$1 prog=$2
  shift 2
  local label="$prog${*:+ $*}"
  if [ -n "$FILTER" ] && ! [[ $label =~ $FILTER ]]; then return 0; fi
  run_server_client "$prog" "${common[@]}" "$@"
  if [ ${#why[@]} -eq 0 ] && ! grep -Eq "^ *$last +$ITERS +[0-9]" "$clog"; then
    why+=("client printed no result row for $last bytes x $ITERS")
  fi
  report_pair "$label"
}

common=(-d "$DEV" -x "$GID_INDEX" -F -n "$ITERS")
echo "perftest.sh: ${common[*]} on every pair, client to 127.0.0.1, ${TIMEOUT} s timeout"

all=8388608   # the last size of -a (2^23)

# lat_pair PROGRAM ARGS...: a latency program over every size (-a), or, when
# PERFTEST_LAT_SIZES is set, one pair per size it lists (-s SIZE).
lat_pair() {
  local prog=$1 size
  shift
  if [ -z "${PERFTEST_LAT_SIZES:-}" ]; then
    run_pair $all "$prog" -a "$@"
    return
  fi
  for size in $PERFTEST_LAT_SIZES; do
    run_pair "$size" "$prog" -s "$size" "$@"
  done
}

# WRITE: no -e (perftest: "Events feature not available on WRITE verb").
run_pair $all ib_write_bw -a
lat_pair ib_write_lat
for t in ib_read_bw ib_send_bw; do
  run_pair $all "$t" -a
  run_pair $all "$t" -a -e
done
for t in ib_read_lat ib_send_lat; do
  lat_pair "$t"
  lat_pair "$t" -e
done
# SENDs into a shared receive queue (ibv_post_srq_recv: the SRQ kept full, each receive
# posted again once its completion is polled).
run_pair $all ib_send_bw -a --use-srq
lat_pair ib_send_lat --use-srq
# Atomics: 8 bytes, no -a (perftest: "Message size cannot be changed for Atomic tests").
for t in ib_atomic_bw ib_atomic_lat; do
  run_pair 8 "$t"
  run_pair 8 "$t" -e
  run_pair 8 "$t" -A CMP_AND_SWAP
done
run_pair $all ib_write_bw -c UC -a

finish
