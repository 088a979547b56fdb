#!/usr/bin/env bash
# UD, RC and UC over RoCEv2 against the kernel's own Soft-RoCE: unmodified
# ibv_{ud,rc,uc}_pingpong on rverbs (the drop-in, in the host-side network namespace of
# the rxe guest, 10.77.0.1) and on rxe0 in the QEMU guest (10.77.0.2,
# tests/interop/rxe-vm), in both directions: each message is RoCEv2 packets whose ICRC
# the other side checks (rxe drops a bad one silently; rverbs verifies rxe's, whose IPv4
# Identification is not 0, by solving for it). RC runs rverbs' protocol core against
# rxe's requester, responder and completer: segmentation at the path MTU (1024, rxe's
# active MTU on a 1500-byte link), ACKs, and rxe's retransmissions.
#
# Pairs: UD at sizes 1, 512 and 1024 with -c, one with -e; RC at 1, 4096 and 65536 with
# -c, one with -e; UC at 4096 with -c; perftest ib_write_bw, ib_read_bw, ib_send_bw at
# 64 KiB, ib_read_lat, ib_atomic_bw (fetch-and-add and compare-and-swap) — each with
# rverbs as server and as client. Prints one line per pair, then "N passed, N failed";
# exits 1 if any pair failed. A ping-pong whose rverbs side finished and whose rxe side
# hung is run once more, and says so (rxe's end-of-run wedge, tests/interop/README.md).
# Needs root (netns, tap).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
VM=$HERE/rxe-vm/vm.sh
export RVERBS_VM_NETNS=${RVERBS_VM_NETNS:-rvx-ud}
export RVERBS_VM_TAP=${RVERBS_VM_TAP:-rvx-ud0}
export RVERBS_VM_STATE=${RVERBS_VM_STATE:-/run/rverbs-vm-ud}
export RVERBS_VM_RUN_TIMEOUT=${RVERBS_VM_RUN_TIMEOUT:-150}
HOST_IP=10.77.0.1 GUEST_IP=10.77.0.2
ITERS=${UD_ITERS:-100}
# RXE_FILTER: run only the pairs whose label matches this bash regular expression.
FILTER=${RXE_FILTER:-}
TIMEOUT=${RXE_TIMEOUT:-90}

[ "$(id -u)" = 0 ] || { echo "rxe_pingpong.sh: needs root (netns, tap)" >&2; exit 1; }
DROPIN=${DROPIN_DIR:-$(bash "$ROOT/scripts/build-dropin.sh" | tail -1)}
# shellcheck source=../conformance/lib/verdict.bash
source "$ROOT/tests/conformance/lib/verdict.bash"
WORK=$(mktemp -d /tmp/rxe-pingpong.XXXXXX)
cleanup() {
  "$VM" stop >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT

"$VM" prepare >/dev/null
"$VM" start
eval "$("$VM" env)"
mkdir -p "$WORK/rt"

host() {
  # Line-buffered, with the network transport's diagnostics: a pair that times out still
  # shows how far it got and what the protocol saw.
  ip netns exec "$RVX_NETNS" env LD_LIBRARY_PATH="$DROPIN" RVERBS_RUNTIME_DIR="$WORK/rt" \
    RVERBS_LOG="${RVERBS_LOG:-rverbs::transport::net=debug}" timeout -k 5 "$TIMEOUT" stdbuf -oL "$@"
}
host_gid=$(host ibv_devinfo -v | grep -F "::ffff:$HOST_IP," | sed -E 's/.*GID\[ *([0-9]+)\].*/\1/' | head -1)
echo "rxe_pingpong.sh: rverbs0 GID index $host_gid ($HOST_IP), rxe0 GID index $RVX_GID_INDEX ($GUEST_IP), -n $ITERS"

passed=0 failed=0 reruns=0 port=18700
# pair LABEL SERVER(host|guest) PROGRAM ARGS...: a ping-pong (-g GID), or with
# KIND=perftest a perftest program (-x GID -F); -n ITERS either way.
pair() {
  local label=$1 server=$2 prog=$3
  shift 3
  [ -z "$FILTER" ] || [[ $label =~ $FILTER ]] || return 0
  local slog=$WORK/s.log clog=$WORK/c.log src=0 crc=0 why=() spid start=$SECONDS
  local kind=${KIND:-pingpong} gflag=-g extra=()
  [ "$kind" = perftest ] && gflag=-x extra=(-F)
  port=$((port + 1))
  if [ "$server" = host ]; then
    host "$prog" -d rverbs0 "$gflag" "$host_gid" "${extra[@]}" -n "$ITERS" -p "$port" "$@" >"$slog" 2>&1 &
    spid=$!
    for _ in $(seq 100); do
      ip netns exec "$RVX_NETNS" ss -ltn "sport = :$port" | grep -q LISTEN && break
      sleep 0.05
    done
    "$VM" run timeout "$TIMEOUT" stdbuf -oL "$prog" -d rxe0 "$gflag" "$RVX_GID_INDEX" "${extra[@]}" -n "$ITERS" -p "$port" "$@" "$HOST_IP" >"$clog" 2>&1 || crc=$?
  else
    "$VM" run timeout "$TIMEOUT" stdbuf -oL "$prog" -d rxe0 "$gflag" "$RVX_GID_INDEX" "${extra[@]}" -n "$ITERS" -p "$port" "$@" >"$slog" 2>&1 &
    spid=$!
    for _ in $(seq 200); do
      "$VM" run ss -ltn "sport = :$port" 2>/dev/null | grep -q LISTEN && break
      sleep 0.1
    done
    host "$prog" -d rverbs0 "$gflag" "$host_gid" "${extra[@]}" -n "$ITERS" -p "$port" "$@" "$GUEST_IP" >"$clog" 2>&1 || crc=$?
  fi
  wait "$spid" || src=$?
  if [ "$kind" = perftest ]; then
    perftest_checks "$src" "$crc" "$clog" "$ITERS"
  else
    pingpong_checks "$src" "$crc" "$slog" "$clog" "$ITERS"
  fi
  if [ ${#why[@]} -gt 0 ] && [ "$kind" = pingpong ] && [ -z "${RERUN:-}" ] && rxe_wedged "$server" "$src" "$crc" "$slog" "$clog"; then
    # rxe's end-of-run wedge (tests/interop/README.md, "rxe's stalled send queue"): rverbs'
    # side finished every iteration and exited; rxe's re-send of its last message lost the
    # second ACK its completer needs, so rxe's side waits for ever. Reported, run once more.
    echo "RERUN $label: rxe's side timed out after rverbs' side finished every iteration (${why[*]}; rxe's end-of-run wedge, tests/interop/README.md)"
    reruns=$((reruns + 1))
    RERUN=1 pair "$label" "$server" "$prog" "$@"
    return
  fi
  verdict "$label ($((SECONDS - start)) s)" "$slog" "$clog"
}

# rxe_wedged SERVER SRC CRC SLOG CLOG: rverbs' side of a ping-pong exited 0 having printed
# "ITERS iters in", and rxe's side was killed by the timeout without printing it: the
# signature of rxe's end-of-run wedge (a bug of the kernel's rxe, not of either program).
rxe_wedged() {
  local server=$1 src=$2 crc=$3 slog=$4 clog=$5 ours theirs ours_rc theirs_rc
  if [ "$server" = host ]; then
    ours=$slog ours_rc=$src theirs=$clog theirs_rc=$crc
  else
    ours=$clog ours_rc=$crc theirs=$slog theirs_rc=$src
  fi
  [ "$ours_rc" = 0 ] && grep -q "^$ITERS iters in" "$ours" &&
    [ "$theirs_rc" = 124 ] && ! grep -q "^$ITERS iters in" "$theirs"
}

for s in 1 512 1024; do
  pair "ud -s $s -c: rverbs server, rxe client" host ibv_ud_pingpong -c -s "$s"
  pair "ud -s $s -c: rxe server, rverbs client" guest ibv_ud_pingpong -c -s "$s"
done
pair "ud -e -s 1024 -c: rverbs server, rxe client" host ibv_ud_pingpong -e -c -s 1024
for s in 1 4096 65536; do
  pair "rc -s $s -c: rverbs server, rxe client" host ibv_rc_pingpong -c -s "$s"
  pair "rc -s $s -c: rxe server, rverbs client" guest ibv_rc_pingpong -c -s "$s"
done
pair "srq -s 4096 -c (16 QPs): rverbs server, rxe client" host ibv_srq_pingpong -c -s 4096
pair "srq -s 4096 -c (16 QPs): rxe server, rverbs client" guest ibv_srq_pingpong -c -s 4096

# RVERBS_PCAP of an rc -s 65536 pair (rverbs as client): tshark decodes rverbs' packets and
# rxe's (non-zero IPv4 IDs, solved from the ICRC) as RoCE, every ICRC right.
trace_check() {
  local label="RVERBS_PCAP of rc -s 65536 against rxe: tshark decodes it, every ICRC right"
  [ -z "$FILTER" ] || [[ $label =~ $FILTER ]] || return 0
  local cap=$WORK/rxe.pcap why=()
  RVERBS_PCAP=$cap pair "rc -s 65536 -c, traced: rxe server, rverbs client" guest ibv_rc_pingpong -c -s 65536
  # Each of the ITERS messages each way is 64 packets and at least one ACK.
  pcap_checks "$cap" infiniband $((2 * ITERS * 64)) "$WORK" "$HOST_IP" "$GUEST_IP"
  verdict "$label ($pcap_packets packets; $(tail -n 1 "$WORK/icrc.log"))" "$WORK/icrc.log"
}
trace_check
pair "rc -e -s 4096 -c: rverbs server, rxe client" host ibv_rc_pingpong -e -c -s 4096
pair "uc -s 4096 -c: rverbs server, rxe client" host ibv_uc_pingpong -c -s 4096
pair "uc -s 4096 -c: rxe server, rverbs client" guest ibv_uc_pingpong -c -s 4096
# perftest (RC): WRITE, READ and SEND bandwidth at 64 KiB, READ latency, both atomics —
# rverbs' requester against rxe's responder and the reverse. The bandwidth pairs leave the
# MTU to perftest (rxe's port says 1024, rverbs' 4096 capped by the 1500-byte link to
# 1024: both sides must agree), the others ask for 1024.
for where in host guest; do
  if [ "$where" = host ]; then who="rverbs server, rxe client"; else who="rxe server, rverbs client"; fi
  for t in ib_write_bw ib_read_bw ib_send_bw; do
    KIND=perftest pair "$t -s 65536: $who" "$where" "$t" -s 65536
  done
  KIND=perftest pair "ib_read_lat -s 4096: $who" "$where" ib_read_lat -m 1024 -s 4096
  KIND=perftest pair "ib_write_lat -s 8: $who" "$where" ib_write_lat -s 8
  KIND=perftest pair "ib_send_lat -s 8: $who" "$where" ib_send_lat -s 8
  KIND=perftest pair "ib_atomic_bw: $who" "$where" ib_atomic_bw -m 1024
  KIND=perftest pair "ib_atomic_bw -A CMP_AND_SWAP: $who" "$where" ib_atomic_bw -m 1024 -A CMP_AND_SWAP
done
again=
[ "$reruns" = 0 ] || again=", $reruns run again after rxe's end-of-run wedge"
echo "$passed passed, $failed failed$again"
[ "$failed" = 0 ]
