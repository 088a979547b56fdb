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
#
# Pairs (every one with -d rverbs0 -x 1 -F -n ITERS; -F only silences the cpufreq
# warning):
#   ib_write_bw, ib_write_lat              -a
#   ib_read_bw, ib_read_lat                -a, and -a -e
#   ib_send_bw, ib_send_lat                -a, and -a -e
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
# Ports for the servers: from a random base below the kernel's ephemeral range (where
# clients' local ports come from), so that no connection of this host holds them.
eph_lo=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
[ "$eph_lo" -gt 12000 ] 2>/dev/null || eph_lo=32768
next_port=${PERFTEST_PORT:-$((10000 + RANDOM % ((eph_lo - 11000) / 100) * 100))}
DEV=rverbs0
GID_INDEX=1

t0=$EPOCHREALTIME
WORK=$(mktemp -d "${TMPDIR:-/tmp}/rverbs-perftest.XXXXXX")
server_pid= client_pid=
cleanup() {
  local pid
  for pid in $client_pid $server_pid; do
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

for p in ib_write_bw ib_write_lat ib_read_bw ib_read_lat ib_send_bw ib_send_lat \
         ib_atomic_bw ib_atomic_lat timeout; do
  command -v "$p" >/dev/null || { echo "perftest.sh: $p not found (apt-get install perftest)" >&2; exit 2; }
done

dropin=${DROPIN_DIR:-$(scripts/build-dropin.sh)}
[ -e "$dropin/libibverbs.so.1" ] || { echo "perftest.sh: no libibverbs.so.1 in $dropin" >&2; exit 2; }
export LD_LIBRARY_PATH=$dropin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# This run's shared-memory endpoints, registry and FIFOs live here, apart from any other
# rverbs user of the machine.
export RVERBS_RUNTIME_DIR=$WORK/runtime
mkdir -m 700 "$RVERBS_RUNTIME_DIR" "$WORK/logs"

# Line-buffered stdout, so that a side killed by `timeout` still leaves its output.
linebuf=()
command -v stdbuf >/dev/null && linebuf=(stdbuf -oL -eL)

# Is something listening on TCP port $1 (LISTEN only)? Is any socket on it (any state)?
# ss (iproute2), else /proc/net/tcp{,6}.
if command -v ss >/dev/null; then
  listening() { [ -n "$(ss -Hltn "sport = :$1" 2>/dev/null)" ]; }
  port_busy() { [ -n "$(ss -Hatn "sport = :$1" 2>/dev/null)" ]; }
elif [ -r /proc/net/tcp ]; then
  proc_tcp() {  # PORT STATE-REGEX
    awk -v p="$(printf ':%04X' "$1")" -v st="$2" \
      'FNR > 1 && $4 ~ st && substr($2, length($2) - 4) == p { f = 1 } END { exit !f }' \
      /proc/net/tcp /proc/net/tcp6 2>/dev/null
  }
  listening() { proc_tcp "$1" '^0A$'; }
  port_busy() { proc_tcp "$1" '.'; }
else
  listening() { return 1; }
  port_busy() { return 1; }
fi

# Waits until the server ($2) listens on port $1: polls every 50 ms for up to 5 s.
# Returns 1 if the server exits first, 2 after 5 s. Without ss or /proc/net/tcp: waits
# 1 s (bounded) and returns 1 if the server is gone by then.
wait_listen() {
  local i
  if ! command -v ss >/dev/null && ! [ -r /proc/net/tcp ]; then
    sleep 1
    kill -0 "$2" 2>/dev/null
    return
  fi
  for ((i = 0; i < 100; i++)); do
    listening "$1" && return 0
    kill -0 "$2" 2>/dev/null || return 1
    sleep 0.05
  done
  return 2
}

# "exit N", naming timeout(1)'s 124 and 137.
exit_text() {
  case $1 in
    124) echo "timed out (exit 124)" ;;
    137) echo "killed after the timeout (exit 137)" ;;
    *) echo "exit $1" ;;
  esac
}

passed=0 failed=0 n=0

# run_pair LAST_SIZE PROGRAM ARGS...: server `PROGRAM ARGS -p PORT` in the background,
# then client `PROGRAM ARGS -p PORT 127.0.0.1`; the client must print the result row
# "LAST_SIZE ITERS ...". The label is PROGRAM and ARGS without the common options.
run_pair() {
  local last=$1 prog=$2
  shift 2
  local label="$prog${*:+ $*}"
  if [ -n "$FILTER" ] && ! [[ $label =~ $FILTER ]]; then return 0; fi
  n=$((n + 1))
  local slog=$WORK/logs/$n.server clog=$WORK/logs/$n.client
  local start=$EPOCHREALTIME src=0 crc=0 ready why=() port scmd ccmd attempt

  # Up to 3 ports: another program of this host may take the port between our check
  # and the server's bind ("Couldn't listen to port"); that is not a failure of the pair.
  for attempt in 1 2 3; do
    port=$next_port
    while port_busy "$port"; do port=$((port + 1)); done
    next_port=$((port + 1))
    scmd=("$prog" "${common[@]}" "$@" -p "$port")
    ccmd=("$prog" "${common[@]}" "$@" -p "$port" 127.0.0.1)
    timeout -k 5 $((TIMEOUT + 5)) "${linebuf[@]}" "${scmd[@]}" >"$slog" 2>&1 &
    server_pid=$!
    ready=0
    wait_listen "$port" "$server_pid" || ready=$?
    if [ "$ready" = 1 ] && [ $attempt -lt 3 ] && grep -q "^Couldn't listen to port" "$slog"; then
      wait "$server_pid" || true
      server_pid=
      continue
    fi
    break
  done
  if [ "$ready" = 0 ]; then
    # In the background too, so that a signal to this script is handled at once.
    timeout -k 5 "$TIMEOUT" "${linebuf[@]}" "${ccmd[@]}" >"$clog" 2>&1 &
    client_pid=$!
    wait "$client_pid" || crc=$?
    client_pid=
  else
    echo "(client not started)" >"$clog"
    [ "$ready" = 1 ] && why+=("server exited before listening on port $port")
    [ "$ready" = 2 ] && why+=("server not listening on port $port after 5 s")
    kill "$server_pid" 2>/dev/null || true
  fi
  wait "$server_pid" || src=$?
  server_pid=

  [ "$src" = 0 ] || why+=("server $(exit_text "$src")")
  [ "$ready" != 0 ] || [ "$crc" = 0 ] || why+=("client $(exit_text "$crc")")
  if [ ${#why[@]} -eq 0 ] && ! grep -Eq "^ *$last +$ITERS +[0-9]" "$clog"; then
    why+=("client printed no result row for $last bytes x $ITERS")
  fi

  local secs
  secs=$(awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.2f", b - a }')
  if [ ${#why[@]} -eq 0 ]; then
    passed=$((passed + 1))
    echo "PASS $label (${secs} s)"
  else
    failed=$((failed + 1))
    local reasons
    reasons=$(printf '%s; ' "${why[@]}")
    echo "FAIL $label (${secs} s): ${reasons%; }"
    {
      echo "--- server (last 20 lines): LD_LIBRARY_PATH=$dropin ${scmd[*]}"
      tail -n 20 "$slog"
      echo "--- client (last 20 lines): LD_LIBRARY_PATH=$dropin ${ccmd[*]}"
      tail -n 20 "$clog"
      echo "---"
    } >&2
  fi
}

common=(-d "$DEV" -x "$GID_INDEX" -F -n "$ITERS")
echo "perftest.sh: ${common[*]} on every pair, client to 127.0.0.1, ${TIMEOUT} s timeout"

all=8388608   # the last size of -a (2^23)
# WRITE: no -e (perftest: "Events feature not available on WRITE verb").
run_pair $all ib_write_bw -a
run_pair $all ib_write_lat -a
for t in ib_read_bw ib_read_lat ib_send_bw ib_send_lat; do
  run_pair $all "$t" -a
  run_pair $all "$t" -a -e
done
# Atomics: 8 bytes, no -a (perftest: "Message size cannot be changed for Atomic tests").
for t in ib_atomic_bw ib_atomic_lat; do
  run_pair 8 "$t"
  run_pair 8 "$t" -e
  run_pair 8 "$t" -A CMP_AND_SWAP
done
run_pair $all ib_write_bw -c UC -a

if [ $n -eq 0 ]; then
  echo "perftest.sh: no pair matches \"$FILTER\"" >&2
  exit 2
fi
echo "$passed passed, $failed failed"
awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "perftest.sh: total %.1f s\n", b - a }'
[ "$failed" -eq 0 ]
