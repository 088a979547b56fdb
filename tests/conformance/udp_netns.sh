#!/usr/bin/env bash
# RoCEv2 over UDP between two "hosts": two network namespaces joined by a veth pair that
# this script creates (10.66.0.1 and 10.66.0.2, addresses only inside them) and removes.
# Each side is an unmodified Debian ibv_ud_pingpong on rverbs' drop-in libibverbs.so.1,
# with its own runtime directory, so the two processes are two hosts' devices: no shared
# memory between them, every message crosses the link as a RoCEv2 packet.
#
# Pairs: sizes 1, 1024 and 4096 (veth MTU 9000), polling and with -e, with -c (the
# client validates the buffer); then the roles swapped; one over IPv6 GIDs (fd66::1/2);
# two server processes behind one port; RVERBS_PCAP over IPv4 and over IPv6; RVERBS_FAULTS
# (delay and reorder: still complete; corruption: every packet dropped and logged by the
# receiver). A pair passes when both sides exit 0, print "<iters> iters in" and the client
# reports no invalid data.
#
# Then the port's active MTU against the link's, as rxe derives it from its netdev (the
# netdev MTU less 80 bytes of headers, down to an IB MTU): ibv_devinfo in each namespace
# reports 4096 over the 9000-byte veth; one process that keeps the device open sees the
# value follow the veth from 9000 to 1500 (as rxe's port follows its netdev's MTU); with
# the veth set to 1500 every new process reports 1024,
# `ibv_ud_pingpong -s 1024` passes across the namespaces and `-s 2048` (the program's
# default) is refused by the program itself ("Requested size larger than port MTU"), as on
# an rxe port on a 1500-byte link.
#
# Needs root (ip netns, veth). Prints one line per pair, "N passed, N failed"; exits 1 if
# any pair failed.
set -euo pipefail
cd "$(dirname "$0")/../.."

ITERS=${UDP_ITERS:-200}
TIMEOUT=${UDP_TIMEOUT:-30}
A=rvu-a B=rvu-b
IP_A=10.66.0.1 IP_B=10.66.0.2
IP6_A=fd66::1 IP6_B=fd66::2
if [ "$(id -u)" != 0 ]; then
  echo "udp_netns.sh: SKIPPED: needs root to create network namespaces"
  exit 0
fi
command -v ibv_ud_pingpong >/dev/null || { echo "udp_netns.sh: ibv_ud_pingpong not found (apt-get install ibverbs-utils)" >&2; exit 2; }
DROPIN=${DROPIN_DIR:-$(bash scripts/build-dropin.sh | tail -1)}
# shellcheck source=tests/conformance/lib/netns.bash
source tests/conformance/lib/netns.bash
# shellcheck source=lib/verdict.bash
source tests/conformance/lib/verdict.bash

WORK=$(mktemp -d /tmp/udp-netns.XXXXXX)
cleanup() {
  netns_del "$A" "$B"
  rm -rf "$WORK"
}
trap cleanup EXIT
cleanup
mkdir -p "$WORK/rt-a" "$WORK/rt-b"

netns_pair "$A" "$B" 9000 "$IP_A" "$IP_B" "$IP6_A" "$IP6_B"

# Commands run in a namespace with `in_ns` (lib/netns.bash), without capture, faults or
# logging unless a pair sets PCAP, FAULTS or LOGF.
PCAP= FAULTS= LOGF=
passed=0 failed=0 port=18600
# pair LABEL SERVER_NS SERVER_RUNTIME SERVER_IP CLIENT_NS CLIENT_RUNTIME CLIENT_IP ARGS...:
# the GIDs are those of the IPs (IPv4 or IPv6); the TCP exchange goes to SERVER_IP's
# IPv4 side ($GID_VIA, default the IPv4 address itself).
pair() {
  local label=$1 sns=$2 srt=$3 sip=$4 cns=$5 crt=$6 cip=$7
  shift 7
  local sgid cgid slog=$WORK/s.log clog=$WORK/c.log src=0 crc=0 why=()
  sgid=$(gid_index "$sns" "$srt" "$sip")
  cgid=$(gid_index "$cns" "$crt" "$cip")
  [[ $sip == *:* ]] && sip=$IP_A
  port=$((port + 1))
  PCAP= FAULTS= in_ns "$sns" "$srt" ibv_ud_pingpong -d rverbs0 -g "$sgid" -n "$ITERS" -p "$port" "$@" >"$slog" 2>&1 &
  local spid=$!
  # The server listens on its TCP port before the client may connect.
  wait_listen "$sns" "$port"
  in_ns "$cns" "$crt" ibv_ud_pingpong -d rverbs0 -g "$cgid" -n "$ITERS" -p "$port" "$@" "$sip" >"$clog" 2>&1 || crc=$?
  wait "$spid" || src=$?
  pingpong_checks "$src" "$crc" "$slog" "$clog" "$ITERS"
  verdict "$label" "$slog" "$clog"
}

echo "udp_netns.sh: ibv_ud_pingpong between netns $A ($IP_A) and $B ($IP_B), -n $ITERS"
for ev in "" -e; do
  for s in 1 1024 4096; do
    pair "ud${ev:+ $ev} -s $s -c, server in $A" "$A" "$WORK/rt-a" "$IP_A" "$B" "$WORK/rt-b" "$IP_B" -c -s "$s" ${ev:+"$ev"}
  done
done
pair "ud -s 2048 -c, server in $B" "$B" "$WORK/rt-b" "$IP_B" "$A" "$WORK/rt-a" "$IP_A" -c -s 2048
pair "ud -s 1024 -c over IPv6 GIDs ($IP6_A, $IP6_B)" "$A" "$WORK/rt-a" "$IP6_A" "$B" "$WORK/rt-b" "$IP6_B" -c -s 1024

# Two processes of one host behind one port 4791: the first server to start owns
# 10.66.0.1:4791; the second one's QP is reached through it (the owner delivers into the
# other process's queues through shared memory). The client talks to the second first.
two_servers() {
  local label="ud -s 1024 -c, two server processes in $A behind one port"
  local gid_a gid_b l1=$WORK/s1.log l2=$WORK/s2.log c1=$WORK/c1.log c2=$WORK/c2.log
  local p1=$((port + 1)) p2=$((port + 2)) r1=0 r2=0 rc1=0 rc2=0 why=() pid1 pid2
  port=$p2
  gid_a=$(gid_index "$A" "$WORK/rt-a" "$IP_A")
  gid_b=$(gid_index "$B" "$WORK/rt-b" "$IP_B")
  in_ns "$A" "$WORK/rt-a" ibv_ud_pingpong -d rverbs0 -g "$gid_a" -n "$ITERS" -p "$p1" -c -s 1024 >"$l1" 2>&1 &
  pid1=$!
  wait_listen "$A" "$p1"
  in_ns "$A" "$WORK/rt-a" ibv_ud_pingpong -d rverbs0 -g "$gid_a" -n "$ITERS" -p "$p2" -c -s 1024 >"$l2" 2>&1 &
  pid2=$!
  wait_listen "$A" "$p2"
  in_ns "$B" "$WORK/rt-b" ibv_ud_pingpong -d rverbs0 -g "$gid_b" -n "$ITERS" -p "$p2" -c -s 1024 "$IP_A" >"$c2" 2>&1 || rc2=$?
  wait "$pid2" || r2=$?
  in_ns "$B" "$WORK/rt-b" ibv_ud_pingpong -d rverbs0 -g "$gid_b" -n "$ITERS" -p "$p1" -c -s 1024 "$IP_A" >"$c1" 2>&1 || rc1=$?
  wait "$pid1" || r1=$?
  for f in "$l1" "$l2" "$c1" "$c2"; do
    grep -q "^$ITERS iters in" "$f" || why+=("$(basename "$f" .log) printed no \"$ITERS iters in\"")
  done
  [ "$r1$r2$rc1$rc2" = 0000 ] || why+=("exit codes: servers $r1 $r2, clients $rc1 $rc2")
  ! grep -q "invalid data" "$c1" "$c2" || why+=("invalid data (-c)")
  verdict "$label" "$l1" "$l2" "$c1" "$c2"
}
two_servers

# RVERBS_PCAP: the client records what it sends and receives; tshark decodes every record
# as RoCE (heuristic payload dissectors off, docs/rocev2-wire.md §6) with nothing malformed, and
# the ICRC of every record, recomputed from the record alone (rverbs-probe check-pcap),
# is right: the ones rverbs sent and the ones it received.
# trace_check LABEL SERVER_IP CLIENT_IP DISPLAY_FILTER [NOTE]: one traced pair between the
# namespaces over the GIDs of the two IPs (NOTE added to the pair's label); DISPLAY_FILTER
# selects the RoCE packets, which must number at least 2 * ITERS; check-pcap must count
# good ICRCs, and no bad one, from both IPs.
trace_check() {
  local label=$1 sip=$2 cip=$3 filter=$4
  local cap=$WORK/trace.pcap why=()
  PCAP=$cap pair "ud -s 512 -c, traced${5:+, $5}" "$A" "$WORK/rt-a" "$sip" "$B" "$WORK/rt-b" "$cip" -c -s 512
  PCAP=
  # Both processes record: the client's file holds its ITERS sends and ITERS receives
  # (the server's end is traced by nobody: only the client has RVERBS_PCAP).
  pcap_checks "$cap" "$filter" $((2 * ITERS)) "$WORK" "$sip" "$cip"
  local n=$pcap_packets
  verdict "$label ($n packets; $(tail -n 1 "$WORK/icrc.log"))" "$WORK/icrc.log"
}
trace_check "RVERBS_PCAP of a ud -s 512 pair: tshark decodes it, every ICRC right" "$IP_A" "$IP_B" infiniband
trace_check "RVERBS_PCAP of a ud -s 512 pair over IPv6 GIDs: tshark decodes it as RoCE over IPv6, every ICRC right" \
  "$IP6_A" "$IP6_B" "infiniband && (ipv6.src == $IP6_A || ipv6.src == $IP6_B)" "over IPv6 GIDs ($IP6_A, $IP6_B)"

# RVERBS_FAULTS on the client's send path. Delayed and reordered packets (held back by the
# injector, released by the progress thread) still arrive: the pair completes. Corrupted
# ones are dropped by the receiver, which logs each drop, and delivers none of them.
FAULTS="seed=7,delay=300us,reorder=50%,reorder_by=2ms" pair "ud -s 1024 -c, client packets delayed and reordered" "$A" "$WORK/rt-a" "$IP_A" "$B" "$WORK/rt-b" "$IP_B" -c -s 1024
corrupt_check() {
  local label="RVERBS_FAULTS corrupt=100%: the receiver drops every packet (bad ICRC) and delivers none"
  local slog=$WORK/cs.log clog=$WORK/cc.log why=() sgid cgid drops
  sgid=$(gid_index "$A" "$WORK/rt-a" "$IP_A")
  cgid=$(gid_index "$B" "$WORK/rt-b" "$IP_B")
  port=$((port + 1))
  TIMEOUT=6 LOGF=rverbs::transport::udp=debug in_ns "$A" "$WORK/rt-a" ibv_ud_pingpong -d rverbs0 -g "$sgid" -n 5 -p "$port" -s 64 >"$slog" 2>&1 &
  local spid=$!
  wait_listen "$A" "$port"
  TIMEOUT=4 FAULTS="seed=3,corrupt=100%" in_ns "$B" "$WORK/rt-b" ibv_ud_pingpong -d rverbs0 -g "$cgid" -n 5 -p "$port" -s 64 "$IP_A" >"$clog" 2>&1 || true
  wait "$spid" || true
  drops=$(grep -c "dropped: bad ICRC" "$slog" || true)
  [ "$drops" -ge 1 ] || why+=("the server logged no bad-ICRC drop")
  ! grep -q "iters in" "$slog" || why+=("the server completed: corrupted packets were delivered")
  verdict "$label ($drops drops logged)" "$slog" "$clog"
}
corrupt_check
# port_mtu NS RUNTIME: the active_mtu ibv_devinfo reports for port 1 in NS.
port_mtu() {
  in_ns "$1" "$2" ibv_devinfo -d rverbs0 -i 1 | awk '/active_mtu:/ { print $2; exit }'
}

# mtu_check LINK_MTU PORT_MTU: both namespaces' ports report PORT_MTU over the veth at
# LINK_MTU.
mtu_check() {
  local link=$1 want=$2 why=() got_a got_b
  got_a=$(port_mtu "$A" "$WORK/rt-a")
  got_b=$(port_mtu "$B" "$WORK/rt-b")
  [ "$got_a" = "$want" ] || why+=("$A: active_mtu ${got_a:-none}, expected $want")
  [ "$got_b" = "$want" ] || why+=("$B: active_mtu ${got_b:-none}, expected $want")
  verdict "veth MTU $link: the port's active_mtu is $want on both sides" /dev/null
}
# mtu_follows: one process that keeps the device open sees the port follow its link, as
# rxe's port follows its netdev: pyverbs queries port 1 over a 9000-byte veth (4096, code
# 5), the veth goes to 1500, the same context queries again (1024, code 3).
mtu_follows() {
  local label="one process: the port's active_mtu follows the veth from 9000 to 1500 (4096, then 1024)"
  local log=$WORK/follow.log why=() first second
  coproc FOLLOW { TIMEOUT=10 in_ns "$A" "$WORK/rt-a" /usr/bin/python3 -c '
import sys
from pyverbs.device import Context
ctx = Context(name="rverbs0")
print(int(ctx.query_port(1).active_mtu), flush=True)
sys.stdin.readline()
print(int(ctx.query_port(1).active_mtu), flush=True)' 2>"$log"; }
  read -r -t 8 first <&"${FOLLOW[0]}" || true
  ip -n "$A" link set "${A}0" mtu 1500
  echo go >&"${FOLLOW[1]}"
  read -r -t 8 second <&"${FOLLOW[0]}" || true
  wait "$FOLLOW_PID" || true
  [ "$first" = 5 ] || why+=("first query: ${first:-nothing}, expected 5 (4096)")
  [ "$second" = 3 ] || why+=("after the change: ${second:-nothing}, expected 3 (1024)")
  verdict "$label" "$log"
}
mtu_check 9000 4096
mtu_follows
ip -n "$A" link set "${A}0" mtu 1500
ip -n "$B" link set "${B}0" mtu 1500
mtu_check 1500 1024
pair "ud -s 1024 -c over a 1500-byte veth (port MTU 1024)" "$A" "$WORK/rt-a" "$IP_A" "$B" "$WORK/rt-b" "$IP_B" -c -s 1024
too_big() {
  local label="ud -s 2048 over a 1500-byte veth: refused by ibv_ud_pingpong (port MTU 1024)"
  local log=$WORK/big.log rc=0 why=() gid
  gid=$(gid_index "$A" "$WORK/rt-a" "$IP_A")
  port=$((port + 1))
  in_ns "$A" "$WORK/rt-a" ibv_ud_pingpong -d rverbs0 -g "$gid" -n 1 -p "$port" -s 2048 >"$log" 2>&1 || rc=$?
  [ "$rc" != 0 ] || why+=("exit 0")
  grep -q "^Requested size larger than port MTU (1024)" "$log" || why+=("no \"Requested size larger than port MTU (1024)\"")
  verdict "$label" "$log"
}
too_big

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
