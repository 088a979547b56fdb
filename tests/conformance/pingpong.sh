#!/usr/bin/env bash
# Debian's ibverbs-utils ping-pong programs, unmodified, as two processes (server and
# client) on this host, both on rverbs' drop-in libibverbs.so.1 (device rverbs0, GID
# index 1, the client connecting to 127.0.0.1).
#
# usage: pingpong.sh [FILTER]
#
#   FILTER  run only the pairs whose label (e.g. "rc -e -s 65536") matches this bash
#           regex; default: all
#
# Environment:
#   DROPIN_DIR        directory holding libibverbs.so.1 (default: scripts/build-dropin.sh)
#   PINGPONG_ITERS    exchanges per pair, -n (default 500)
#   PINGPONG_TIMEOUT  seconds each side may run (default 30)
#   PINGPONG_PORT     first TCP port to use (default: random, below the ephemeral range)
#
# Pairs: ibv_{rc,uc,srq,xsrq}_pingpong with -s 1, the default 4096 and -s 65536, and
# ibv_ud_pingpong with -s 1, the default 2048 and -s 4096 (UD messages are limited to the
# port MTU, 4096 on rverbs0; the program refuses larger sizes with "Requested size larger
# than port MTU" and adds the 40-byte GRH to its receive buffer itself), each polling and
# with -e (sleep on completion events); also ibv_rc_pingpong -N (the ibv_wr_* post-send
# API) polling and with -e. rc, uc, ud and srq get -c (validate the received buffer):
# the program prints "invalid data in page N" but still exits 0, so that line fails the
# pair here. ibv_xsrq_pingpong has no buffer check (its -c is the server's client count);
# it must print "success" on both sides. The others must print "<iters> iters in" on
# both sides.
#
# A pair passes only if both processes exit 0 and the checks above hold. Prints one line
# per pair, the last 20 lines of both sides' output on stderr for a failing pair, then
# "N passed, N failed" and the elapsed time; exits 1 if any pair failed.
set -euo pipefail
cd "$(dirname "$0")/../.."

FILTER=${1:-}
ITERS=${PINGPONG_ITERS:-500}
TIMEOUT=${PINGPONG_TIMEOUT:-30}
# Ports for the servers: from a random base below the kernel's ephemeral range (where
# clients' local ports come from), so that no connection of this host holds them.
eph_lo=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
[ "$eph_lo" -gt 12000 ] 2>/dev/null || eph_lo=32768
next_port=${PINGPONG_PORT:-$((10000 + RANDOM % ((eph_lo - 11000) / 100) * 100))}
DEV=rverbs0
GID_INDEX=1

t0=$EPOCHREALTIME
WORK=$(mktemp -d "${TMPDIR:-/tmp}/rverbs-pingpong.XXXXXX")
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

for p in ibv_rc_pingpong ibv_uc_pingpong ibv_ud_pingpong ibv_srq_pingpong ibv_xsrq_pingpong timeout; do
  command -v "$p" >/dev/null || { echo "pingpong.sh: $p not found (apt-get install ibverbs-utils)" >&2; exit 2; }
done

dropin=${DROPIN_DIR:-$(scripts/build-dropin.sh)}
[ -e "$dropin/libibverbs.so.1" ] || { echo "pingpong.sh: no libibverbs.so.1 in $dropin" >&2; exit 2; }
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

# run_pair LABEL CHECK PROGRAM ARGS...: server `PROGRAM ARGS -p PORT` in the background,
# then client `PROGRAM ARGS -p PORT 127.0.0.1`. CHECK: "iters" or "success" (see top).
run_pair() {
  local label=$1 check=$2 prog=$3
  shift 3
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
    scmd=("$prog" "$@" -p "$port")
    ccmd=("$prog" "$@" -p "$port" 127.0.0.1)
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
  [ ${#why[@]} -eq 0 ] && case $check in
    iters)
      grep -q "^$ITERS iters in" "$slog" || why+=("server printed no \"$ITERS iters in\"")
      grep -q "^$ITERS iters in" "$clog" || why+=("client printed no \"$ITERS iters in\"")
      ! grep -q "invalid data in page" "$clog" || why+=("client: invalid data (-c)")
      ;;
    success)
      grep -qx "success" "$slog" || why+=("server printed no \"success\"")
      grep -qx "success" "$clog" || why+=("client printed no \"success\"")
      ;;
  esac

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

common=(-d "$DEV" -g "$GID_INDEX" -n "$ITERS")
echo "pingpong.sh: ${common[*]} on every pair (+ -c for rc uc ud srq), client to 127.0.0.1, ${TIMEOUT} s timeout"

for t in rc uc srq ud xsrq; do
  case $t in
    ud) sizes=(1 "" 4096) ;;    # "" = the program's default (2048 for UD)
    *) sizes=(1 "" 65536) ;;    # "" = the program's default (4096)
  esac
  check=iters
  [ "$t" = xsrq ] && check=success
  for ev in "" -e; do
    for s in "${sizes[@]}"; do
      args=("${common[@]}")
      [ "$t" = xsrq ] || args+=(-c)
      [ -z "$ev" ] || args+=("$ev")
      [ -z "$s" ] || args+=(-s "$s")
      run_pair "$t${ev:+ $ev}${s:+ -s $s}" "$check" "ibv_${t}_pingpong" "${args[@]}"
    done
    # ibv_rc_pingpong -N: the same exchange through ibv_wr_start/ibv_wr_send/ibv_wr_complete.
    if [ "$t" = rc ]; then
      run_pair "rc -N${ev:+ $ev}" iters ibv_rc_pingpong "${common[@]}" -c -N ${ev:+"$ev"}
    fi
  done
done

if [ $n -eq 0 ]; then
  echo "pingpong.sh: no pair matches \"$FILTER\"" >&2
  exit 2
fi
echo "$passed passed, $failed failed"
awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "pingpong.sh: total %.1f s\n", b - a }'
[ "$failed" -eq 0 ]
