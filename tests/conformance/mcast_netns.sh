#!/usr/bin/env bash
# UD multicast across hosts: two network namespaces (rvm-a, rvm-b) joined by a veth pair
# this script creates (10.70.0.1 and 10.70.0.2, fd70::1/2, link MTU 1500) and removes;
# each side runs rdmacm-utils' mckey, unmodified, on rverbs' drop-in libibverbs.so.1 +
# librdmacm.so.1 with its own runtime directory, so the two namespaces are two hosts and
# a send to the group reaches the other host only as a RoCEv2 packet to the group's IP
# address (transport::mcast_net): the receivers' processes join the group on their
# interface, the sender sends once to group:4791.
#
# Cases (the receivers in A are attached before the sender starts: lib/cm.bash's
# multicast record, never a fixed sleep; mckey itself sleeps 3 s after joining):
# - receiver in A, sender in B (mckey -m 239.70.1.1, 10 messages of 100 bytes);
# - the port's active MTU (1024 over the 1500-byte veth): -C 20 -S 1024, the sender
#   send-only (-o);
# - two receivers in A (two processes of one host, each with its own group socket) and one
#   in B, next to the sender (reached through the same-host path, not the network): all
#   three receive every message;
# - the receiver's host traced (RVERBS_PCAP): tshark decodes the packets to the group as
#   RoCE with DestQP 0xFFFFFF, and every ICRC, computed over the group address, is right;
# - a hostile network: datagrams to group:4791 that are not RoCEv2, and RoCEv2 packets
#   with a wrong ICRC, reach the receiver before the sender's: they are dropped (the bad
#   ICRCs logged) and the receiver still gets exactly the sender's messages.
# - through the verbs (tests/c/mcast_peer.c): an IPv6 group with two receivers in A, and an
#   IPv4 group; the sender's first messages carry a Q_Key the receivers do not have, and
#   none of them is taken. (rdma_join_multicast refuses IPv6 groups on a RoCE v2 port,
#   EOPNOTSUPP as with the kernel's rdma_cm, so mckey cannot join one.)
#
# usage: mcast_netns.sh [FILTER]   (FILTER: a bash regex on the labels)
# Needs root (ip netns, veth). Prints one line per case, then "N passed, N failed"; exits
# 1 if any failed. MCAST_NETNS_TIMEOUT bounds every process (default 30 s).
set -euo pipefail
cd "$(dirname "$0")/../.."

FILTER=${1:-}
TIMEOUT=${MCAST_NETNS_TIMEOUT:-30}
NAME=mcast_netns.sh
A=rvm-a B=rvm-b
IP_A=10.70.0.1 IP_B=10.70.0.2
IP6_A=fd70::1 IP6_B=fd70::2
if [ "$(id -u)" != 0 ]; then
  echo "$NAME: SKIPPED: needs root to create network namespaces"
  exit 0
fi
for p in mckey ibv_devinfo python3 cc; do
  command -v "$p" >/dev/null || { echo "$NAME: $p not found (apt-get install rdmacm-utils ibverbs-utils python3 gcc)" >&2; exit 2; }
done
[ -e /usr/include/infiniband/verbs.h ] || { echo "$NAME: no <infiniband/verbs.h> (apt-get install libibverbs-dev)" >&2; exit 2; }
DROPIN=${DROPIN_DIR:-$(bash scripts/build-dropin.sh | tail -1)}
[ -e "$DROPIN/librdmacm.so.1" ] || { echo "$NAME: no librdmacm.so.1 in $DROPIN" >&2; exit 2; }
# shellcheck source=lib/netns.bash
source tests/conformance/lib/netns.bash
# shellcheck source=lib/verdict.bash
source tests/conformance/lib/verdict.bash
# shellcheck source=lib/cm.bash
source tests/conformance/lib/cm.bash

WORK=$(mktemp -d /tmp/mcast-netns.XXXXXX)
pids=()
cleanup() {
  local pid
  for pid in "${pids[@]}"; do
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  netns_del "$A" "$B"
  rm -rf "$WORK"
}
trap cleanup EXIT
netns_pair "$A" "$B" 1500 "$IP_A" "$IP_B" "$IP6_A" "$IP6_B"
RT_A=$WORK/rt-a RT_B=$WORK/rt-b
mkdir -m 700 "$RT_A" "$RT_B"

# Commands run in a namespace with `in_ns` (lib/netns.bash), line-buffered (the checks
# read the logs while the programs run), with capture or logging when a case sets PCAP or
# LOGF.
PCAP= LOGF= FAULTS= LINEBUF=1

# members RUNTIME GROUP: how many QPs of live processes of that host are attached to the
# IPv4 group (the device's multicast record, lib/cm.bash).
members() {
  local a b c d f k=0
  IFS=. read -r a b c d <<<"$2"
  for f in "$1/mcast/$(printf '00000000000000000000ffff%02x%02x%02x%02x' "$a" "$b" "$c" "$d")"/*.*; do
    [ -e "$f" ] && _cm_pid_alive "${f##*.}" && k=$((k + 1))
  done
  echo "$k"
}

# wait_members RUNTIME GROUP N: until N QPs of that host are attached (at most 10 s).
wait_members() {
  local i
  for ((i = 0; i < 200; i++)); do
    [ "$(members "$1" "$2")" -ge "$3" ] && return 0
    sleep 0.05
  done
  return 1
}

passed=0 failed=0 n=0
selected() { [[ -z $FILTER || $1 =~ $FILTER ]]; }

# mckey_case LABEL GROUP RX_A RX_B "RX_ARGS" "TX_ARGS" [BEFORE_SEND]: RX_A receivers in A
# and RX_B in B (mckey -m GROUP RX_ARGS), then, once all are attached, BEFORE_SEND (a
# command, if given) and the sender in B (mckey -m GROUP -s TX_ARGS). Every process must
# exit 0 and print mckey's success lines; each receiver has received every message.
mckey_case() {
  local label=$1 group=$2 rx_a=$3 rx_b=$4 rx_args=$5 tx_args=$6 before=${7:-}
  selected "$label" || return 0
  n=$((n + 1))
  local i log logs=() rx_pids=() rc why=() tx=$WORK/$n.tx
  read -ra rxa <<<"$rx_args"
  read -ra txa <<<"$tx_args"
  for ((i = 0; i < rx_a + rx_b; i++)); do
    log=$WORK/$n.rx$i
    logs+=("$log")
    if [ "$i" -lt "$rx_a" ]; then
      in_ns "$A" "$RT_A" mckey -m "$group" -b "$IP_A" "${rxa[@]}" >"$log" 2>&1 &
    else
      LOGF= PCAP= in_ns "$B" "$RT_B" mckey -m "$group" -b "$IP_B" "${rxa[@]}" >"$log" 2>&1 &
    fi
    rx_pids+=($!)
    pids+=($!)
  done
  wait_members "$RT_A" "$group" "$rx_a" || why+=("$rx_a receivers in $A not attached after 10 s")
  wait_members "$RT_B" "$group" "$rx_b" || why+=("$rx_b receivers in $B not attached after 10 s")
  [ -z "$before" ] || $before "$group"
  rc=0
  LOGF= PCAP= in_ns "$B" "$RT_B" mckey -m "$group" -b "$IP_B" -s "${txa[@]}" >"$tx" 2>&1 || rc=$?
  [ "$rc" = 0 ] || why+=("sender exit $rc")
  grep -q "joined dgid: ::ffff:$group" "$tx" || why+=("sender did not join")
  grep -q '^data transfers complete' "$tx" || why+=("sender did not complete")
  for i in "${!rx_pids[@]}"; do
    rc=0
    wait "${rx_pids[$i]}" || rc=$?
    log=${logs[$i]}
    [ "$rc" = 0 ] || why+=("receiver $i exit $rc")
    for line in "joined dgid: ::ffff:$group" '^receiving data transfers' '^data transfers complete' '^return status 0'; do
      grep -q "$line" "$log" || why+=("receiver $i did not print /$line/")
    done
  done
  pids=()
  verdict "$label" "$tx" "${logs[@]}"
}

G=239.70.1.1
mckey_case "mckey -m $G: receiver in $A, sender in $B" "$G" 1 0 "" ""
mtu=$(in_ns "$A" "$RT_A" ibv_devinfo -d rverbs0 -i 1 | awk '/active_mtu:/ { print $2; exit }')
[[ $mtu =~ ^(256|512|1024|2048|4096)$ ]] || { echo "$NAME: ibv_devinfo reports no active_mtu (\"$mtu\")" >&2; exit 2; }
mckey_case "mckey -m 239.70.1.2 -C 20 -S $mtu (the port MTU; send-only sender -o)" 239.70.1.2 1 0 "-C 20 -S $mtu" "-o -C 20 -S $mtu"
mckey_case "mckey -m 239.70.1.3: two receivers in $A, one in $B next to the sender" 239.70.1.3 2 1 "" ""

# The receiver's host traced: the packets to the group decode as RoCE UD SENDs to QPN
# 0xFFFFFF, and every record's ICRC (over the group as destination) is right.
label="mckey -m 239.70.1.4 -C 5, traced in $A: tshark decodes the group's packets, every ICRC right"
if selected "$label"; then
  cap=$WORK/mcast.pcap
  PCAP=$cap mckey_case "$label (the pair)" 239.70.1.4 1 0 "-C 5" "-C 5"
  why=()
  pcap_checks "$cap" "infiniband.bth.destqp == 0xffffff && ip.dst == 239.70.1.4" 5 "$WORK" "$IP_B"
  verdict "$label ($pcap_packets packets; $(tail -n 1 "$WORK/icrc.log"))" "$WORK/icrc.log"
fi

# hostile GROUP: from B to GROUP:4791, five datagrams that are not RoCEv2 and five UD
# SEND_ONLY packets to QPN 0xFFFFFF whose ICRC is wrong.
hostile() {
  ip netns exec "$B" python3 - "$1" "$IP_B" <<'EOF'
import socket, struct, sys
group, src = sys.argv[1], sys.argv[2]
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(src))
s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 0)
for i in range(5):
    s.sendto(bytes([0xFF, i]) * 7, (group, 4791))
    # BTH: UD SEND_ONLY (0x64), P_Key 0xFFFF, DestQP 0xFFFFFF, PSN i; DETH: RDMA_UDP_QKEY,
    # source QP 2; 100 bytes of payload; an ICRC of zeros.
    bth = struct.pack('>BBHII', 0x64, 0, 0xFFFF, 0xFFFFFF, i)
    deth = struct.pack('>II', 0x01234567, 2)
    s.sendto(bth + deth + b'x' * 100 + b'\0' * 4, (group, 4791))
EOF
}
label="mckey -m 239.70.1.5 on a hostile network: junk and bad ICRCs to the group are dropped"
if selected "$label"; then
  LOGF=rverbs::transport::udp=debug mckey_case "$label (the pair)" 239.70.1.5 1 0 "" "" hostile
  why=()
  drops=$(grep -c "dropped: bad ICRC" "$WORK/$n.rx0" || true)
  [ "$drops" -ge 5 ] || why+=("the receiver logged $drops bad-ICRC drops, expected 5")
  verdict "$label ($drops bad ICRCs logged)" "$WORK/$n.rx0"
fi

# Through the verbs (tests/c/mcast_peer.c, compiled here against the installed
# <infiniband/verbs.h>): an IPv6 group, which rdma_cm does not join on RoCE v2, and an IPv4
# one; the sender first sends messages with a Q_Key the receivers do not have, which they
# must not take (each receiver checks the first message it gets is "message 0").
PEER=$WORK/mcast_peer
cc -O1 -Wall -o "$PEER" tests/c/mcast_peer.c -libverbs
# wait_line FILE TEXT: until FILE has a line TEXT (at most 10 s).
wait_line() {
  local i
  for ((i = 0; i < 200; i++)); do
    grep -qx "$2" "$1" 2>/dev/null && return 0
    sleep 0.05
  done
  return 1
}
# peer_case LABEL GROUP FROM RX_A COUNT WRONG: RX_A receivers in A, the sender in B from
# address FROM.
peer_case() {
  local label=$1 group=$2 from=$3 rx_a=$4 count=$5 wrong=$6
  selected "$label" || return 0
  n=$((n + 1))
  local i rc idx why=() logs=() rx_pids=() tx=$WORK/$n.tx
  for ((i = 0; i < rx_a; i++)); do
    logs+=("$WORK/$n.rx$i")
    in_ns "$A" "$RT_A" "$PEER" recv "$group" "$from" "$count" >"${logs[$i]}" 2>&1 &
    rx_pids+=($!)
    pids+=($!)
  done
  for ((i = 0; i < rx_a; i++)); do
    wait_line "${logs[$i]}" attached || why+=("receiver $i not attached after 10 s")
  done
  idx=$(gid_index "$B" "$RT_B" "$from")
  rc=0
  in_ns "$B" "$RT_B" "$PEER" send "$group" "$idx" "$count" "$wrong" >"$tx" 2>&1 || rc=$?
  [ "$rc" = 0 ] || why+=("sender exit $rc")
  for i in "${!rx_pids[@]}"; do
    rc=0
    wait "${rx_pids[$i]}" || rc=$?
    [ "$rc" = 0 ] || why+=("receiver $i exit $rc")
    grep -qx "received $count" "${logs[$i]}" || why+=("receiver $i did not receive $count")
  done
  pids=()
  verdict "$label" "$tx" "${logs[@]}"
}
peer_case "verbs, IPv6 group ff0e::7001 from $IP6_B: 2 receivers in $A, 3 wrong Q_Keys first" ff0e::7001 "$IP6_B" 2 10 3
peer_case "verbs, IPv4 group 239.70.2.1 from $IP_B: receiver in $A, 3 wrong Q_Keys first" 239.70.2.1 "$IP_B" 1 10 3

[ "$n" -gt 0 ] || { echo "$NAME: no case matches \"$FILTER\"" >&2; exit 2; }
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
