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
# ibv_ud_pingpong with -s 1, the default 2048 if the port's MTU allows it, and -s MTU,
# each polling and with -e (sleep on completion events). UD messages are limited to the
# port's active MTU, which rverbs0 derives from the host's links as rxe does from its
# netdev (1024 on a host whose smallest link is 1500 bytes, 4096 with only the loopback:
# `ibv_devinfo -v`): the program refuses larger sizes with "Requested size larger than
# port MTU", as it does on rxe, so the sizes here are the ones a user of that port passes
# (the MTU is read with ibv_devinfo, not assumed), and one more run checks that -s MTU+1
# is refused that way. (The program adds the 40-byte GRH to its receive buffer itself.)
# Also ibv_rc_pingpong -N (the ibv_wr_* post-send API) polling and with -e, and
# ibv_xsrq_pingpong -c 2 (two client processes sharing an XRC domain through a file). rc, uc, ud and srq get -c (validate the received buffer):
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
NAME=pingpong.sh
FIRST_PORT=${PINGPONG_PORT:-}
DEV=rverbs0
GID_INDEX=1
for p in ibv_rc_pingpong ibv_uc_pingpong ibv_ud_pingpong ibv_srq_pingpong ibv_xsrq_pingpong timeout; do
  command -v "$p" >/dev/null || { echo "pingpong.sh: $p not found (apt-get install ibverbs-utils)" >&2; exit 2; }
done
# shellcheck source=lib/pairs.bash
source tests/conformance/lib/pairs.bash

# run_pair LABEL CHECK PROGRAM ARGS...: server `PROGRAM ARGS -p PORT` in the background,
# then client `PROGRAM ARGS -p PORT 127.0.0.1`. CHECK: "iters" or "success" (see top).
run_pair() {
  local label=$1 check=$2
  shift 2
  if [ -n "$FILTER" ] && ! [[ $label =~ $FILTER ]]; then return 0; fi
  run_server_client "$@"
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
  report_pair "$label"
}

common=(-d "$DEV" -g "$GID_INDEX" -n "$ITERS")
# The port's active MTU (bytes), the largest UD message.
ud_mtu=$(ibv_devinfo -d "$DEV" -i 1 | awk '/active_mtu:/ { print $2; exit }')
case $ud_mtu in
  256 | 512 | 1024 | 2048 | 4096) ;;
  *) echo "pingpong.sh: ibv_devinfo reports no active_mtu for $DEV port 1 (\"$ud_mtu\")" >&2; exit 2 ;;
esac
echo "pingpong.sh: ${common[*]} on every pair (+ -c for rc uc ud srq), client to 127.0.0.1, ${TIMEOUT} s timeout; port MTU $ud_mtu"

# ud_too_big: `ibv_ud_pingpong -s MTU+1` exits non-zero with "Requested size larger than
# port MTU (MTU)" before it listens, as against rxe.
ud_too_big() {
  local size=$((ud_mtu + 1)) rc=0
  local label="ud -s $size refused (port MTU $ud_mtu)"
  if [ -n "$FILTER" ] && ! [[ $label =~ $FILTER ]]; then return 0; fi
  n=$((n + 1))
  slog=$WORK/logs/$n.server clog=$WORK/logs/$n.client
  start=$EPOCHREALTIME why=()
  scmd=(ibv_ud_pingpong "${common[@]}" -s "$size" -p "$next_port") ccmd=("(no client)")
  echo "(no client)" >"$clog"
  timeout -k 5 "$TIMEOUT" "${scmd[@]}" >"$slog" 2>&1 || rc=$?
  [ "$rc" != 0 ] || why+=("exit 0")
  grep -q "^Requested size larger than port MTU ($ud_mtu)" "$slog" || why+=("no \"Requested size larger than port MTU ($ud_mtu)\"")
  report_pair "$label"
}

for t in rc uc srq ud xsrq; do
  case $t in
    ud)  # "" = the program's default (2048), where the port's MTU allows it
      sizes=(1 "$ud_mtu")
      [ "$ud_mtu" -lt 2048 ] || sizes=(1 "" "$ud_mtu")
      ud_too_big ;;
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

# ibv_xsrq_pingpong -c 2: one server, two client processes. The server sends to each
# client's XRC SRQ through the *other* client's target QP, so the clients' domains must
# be one domain shared through the file both open (/tmp/xrc_domain): across processes.
run_xsrq_two_clients() {
  local label="xsrq -c 2 (two client processes)"
  if [ -n "$FILTER" ] && ! [[ $label =~ $FILTER ]]; then return 0; fi
  n=$((n + 1))
  slog=$WORK/logs/$n.server clog=$WORK/logs/$n.client
  local clog2=$WORK/logs/$n.client2 port ready=0 src=0 crc=0 crc2=0 pid2
  start=$EPOCHREALTIME why=()
  pick_port
  scmd=(ibv_xsrq_pingpong "${common[@]}" -c 2 -p "$port")
  ccmd=(ibv_xsrq_pingpong "${common[@]}" -p "$port" 127.0.0.1)
  timeout -k 5 $((TIMEOUT + 5)) "${linebuf[@]}" "${scmd[@]}" >"$slog" 2>&1 &
  server_pid=$!
  wait_listen "$port" "$server_pid" || ready=$?
  if [ "$ready" = 0 ]; then
    timeout -k 5 "$TIMEOUT" "${linebuf[@]}" "${ccmd[@]}" >"$clog2" 2>&1 &
    pid2=$!
    timeout -k 5 "$TIMEOUT" "${linebuf[@]}" "${ccmd[@]}" >"$clog" 2>&1 &
    client_pid=$!
    wait "$client_pid" || crc=$?
    client_pid=
    wait "$pid2" || crc2=$?
  else
    why+=("server not listening on port $port")
    kill "$server_pid" 2>/dev/null || true
  fi
  wait "$server_pid" || src=$?
  server_pid=
  [ "$src" = 0 ] || why+=("server $(exit_text "$src")")
  [ "$crc" = 0 ] || why+=("client 1 $(exit_text "$crc")")
  [ "$crc2" = 0 ] || why+=("client 2 $(exit_text "$crc2")")
  for f in "$slog" "$clog" "$clog2"; do
    grep -qx "success" "$f" || why+=("$(basename "$f") printed no \"success\"")
  done
  report_pair "$label"
}
# The programs share their domain through this fixed path; start from a fresh one.
rm -f /tmp/xrc_domain 2>/dev/null || true
run_xsrq_two_clients

finish
