#!/usr/bin/env bash
# XRC (and tag matching, tm_net.c) over RoCEv2/UDP between two "hosts": two network namespaces joined by a veth pair
# that this script creates (rvx-a 10.68.0.1 and rvx-b 10.68.0.2, fd68::1/2, link MTU
# 1500) and removes. Each side runs on rverbs' drop-in libibverbs.so.1 with its own
# runtime directory, so every XRC message crosses the link: XRC opcodes (0xA0 + operation)
# with an XRCETH naming the target's SRQ on every request packet, RC's rules otherwise
# (docs/rocev2-wire.md §1.8; transport::net).
#
# Pairs (server = XRC targets and SRQs in rvx-a, client = XRC initiators in rvx-b):
# - Debian's ibv_xsrq_pingpong at -s 1, 4096 (its default) and 65536 (64 segments of the
#   1024-byte path MTU), polling and with -e; one over IPv6 GIDs; -c 2 with two client
#   processes in rvx-b, where the server reaches one client's SRQ through the other's
#   target QP (two processes of one host, the second behind the first's RoCEv2 port). The program has no data check (its -c is the client count): both sides must
#   print "success" and exit 0.
# - tests/conformance/xrc_net.c (compiled here against the system's verbs.h), which
#   checks every byte: SEND at 1 B, 4 KiB and 64 KiB and SEND with immediate into the
#   SRQ the XRCETH names (completing on that SRQ's CQ with the target QP's number), RDMA
#   WRITE and READ of 64 KiB, fetch-and-add and compare-and-swap (original values and the
#   word after), and a SEND naming an SRQ of another XRC domain, which must complete
#   REM_INV_REQ_ERR (the target NAKs invalid request); polling and with -e; once with the
#   client's packets dropped, duplicated, reordered and corrupted by the injector.
# - The capture of one xrc_net client (RVERBS_PCAP): tshark decodes the XRC packets
#   (opcode >= 0xA0) and nothing else, every ICRC checks, and every request packet has an
#   XRCETH naming the server's SRQ (or, in phase 3, its foreign one).
#
# rxe (Linux 6.1) does not implement XRC, so the peer is rverbs itself.
# Needs root (ip netns, veth). Prints one line per pair, "N passed, N failed"; exits 1 if
# any pair failed. XRC_FILTER: a bash regex on the labels; XRC_ITERS: -n of the pingpongs.
set -euo pipefail
cd "$(dirname "$0")/../.."

ITERS=${XRC_ITERS:-100}
FILTER=${XRC_FILTER:-}
TIMEOUT=${XRC_TIMEOUT:-60}
A=rvx-a B=rvx-b
IP_A=10.68.0.1 IP_B=10.68.0.2
IP6_A=fd68::1 IP6_B=fd68::2
if [ "$(id -u)" != 0 ]; then
  echo "xrc_netns.sh: SKIPPED: needs root to create network namespaces"
  exit 0
fi
for p in ibv_xsrq_pingpong ibv_devinfo cc; do
  command -v "$p" >/dev/null || { echo "xrc_netns.sh: $p not found (apt-get install ibverbs-utils libibverbs-dev gcc)" >&2; exit 2; }
done
DROPIN=${DROPIN_DIR:-$(bash scripts/build-dropin.sh | tail -1)}
# shellcheck source=tests/conformance/lib/netns.bash
source tests/conformance/lib/netns.bash
# shellcheck source=lib/verdict.bash
source tests/conformance/lib/verdict.bash

WORK=$(mktemp -d /tmp/xrc-netns.XXXXXX)
cleanup() {
  netns_del "$A" "$B"
  rm -rf "$WORK"
}
trap cleanup EXIT
cleanup
mkdir -p "$WORK/rt-a" "$WORK/rt-b"
cc -O2 -Wall -Werror -o "$WORK/xrc_net" tests/conformance/xrc_net.c -libverbs
cc -O2 -Wall -Werror -o "$WORK/tm_net" tests/conformance/tm_net.c -libverbs

netns_pair "$A" "$B" 1500 "$IP_A" "$IP_B" "$IP6_A" "$IP6_B"

# Commands run in a namespace with `in_ns` (lib/netns.bash), without faults or capture
# unless a pair sets FAULTS or PCAP.
FAULTS= PCAP= LOGF=
passed=0 failed=0 port=18900
# pair CHECK LABEL SIP CIP PROG ARGS...: PROG -d rverbs0 -g GID -p PORT ARGS in rvx-a
# (server, GID of SIP) and in rvx-b (client, GID of CIP, connecting to rvx-a's IPv4
# address); the client runs with RVERBS_FAULTS=$FAULTS and RVERBS_PCAP=$PCAP. CHECK:
# the line both sides must print ("success" for ibv_xsrq_pingpong, "xrc_net: all checks
# passed" for xrc_net).
pair() {
  local check=$1 label=$2 sip=$3 cip=$4 prog=$5
  shift 5
  [ -z "$FILTER" ] || [[ $label =~ $FILTER ]] || return 0
  local sgid cgid slog=$WORK/s.log clog=$WORK/c.log src=0 crc=0
  why=()
  sgid=$(gid_index "$A" "$WORK/rt-a" "$sip")
  cgid=$(gid_index "$B" "$WORK/rt-b" "$cip")
  port=$((port + 1))
  FAULTS= PCAP= in_ns "$A" "$WORK/rt-a" "$prog" -d rverbs0 -g "$sgid" -p "$port" "$@" >"$slog" 2>&1 &
  local spid=$!
  wait_listen "$A" "$port"
  in_ns "$B" "$WORK/rt-b" "$prog" -d rverbs0 -g "$cgid" -p "$port" "$@" "$IP_A" >"$clog" 2>&1 || crc=$?
  wait "$spid" || src=$?
  [ "$src" = 0 ] || why+=("server exit $src")
  [ "$crc" = 0 ] || why+=("client exit $crc")
  grep -qx "$check" "$slog" || why+=("server printed no \"$check\"")
  grep -qx "$check" "$clog" || why+=("client printed no \"$check\"")
  verdict "$label" "$slog" "$clog"
}

echo "xrc_netns.sh: XRC between netns $A ($IP_A) and $B ($IP_B), link MTU 1500, -n $ITERS"
for ev in "" -e; do
  for s in 1 4096 65536; do
    pair success "xsrq${ev:+ $ev} -s $s" "$IP_A" "$IP_B" ibv_xsrq_pingpong -n "$ITERS" -s "$s" ${ev:+"$ev"}
  done
done
pair success "xsrq -s 4096 over IPv6 GIDs ($IP6_A, $IP6_B)" "$IP6_A" "$IP6_B" ibv_xsrq_pingpong -n "$ITERS" -s 4096

# ibv_xsrq_pingpong -c 2: the server in rvx-a, two client processes in rvx-b. The server
# sends to each client's XRC SRQ through the *other* client's target QP (the clients share
# one domain through the file both open, /tmp/xrc_domain): the target QP and the SRQ an
# XRCETH names are in two processes of one host, and the second client's packets reach it
# through the first's RoCEv2 port (relayed).
xsrq_two_clients() {
  local label="xsrq -c 2 (two client processes on one host, SRQ and target QP in different processes)"
  [ -z "$FILTER" ] || [[ $label =~ $FILTER ]] || return 0
  local sgid cgid slog=$WORK/s.log clog=$WORK/c.log clog2=$WORK/c2.log src=0 crc=0 crc2=0 pid2
  why=()
  sgid=$(gid_index "$A" "$WORK/rt-a" "$IP_A")
  cgid=$(gid_index "$B" "$WORK/rt-b" "$IP_B")
  port=$((port + 1))
  rm -f /tmp/xrc_domain
  in_ns "$A" "$WORK/rt-a" ibv_xsrq_pingpong -d rverbs0 -g "$sgid" -p "$port" -n "$ITERS" -c 2 >"$slog" 2>&1 &
  local spid=$!
  wait_listen "$A" "$port"
  in_ns "$B" "$WORK/rt-b" ibv_xsrq_pingpong -d rverbs0 -g "$cgid" -p "$port" -n "$ITERS" "$IP_A" >"$clog2" 2>&1 &
  pid2=$!
  in_ns "$B" "$WORK/rt-b" ibv_xsrq_pingpong -d rverbs0 -g "$cgid" -p "$port" -n "$ITERS" "$IP_A" >"$clog" 2>&1 || crc=$?
  wait "$pid2" || crc2=$?
  wait "$spid" || src=$?
  [ "$src$crc$crc2" = 000 ] || why+=("exit codes: server $src, clients $crc $crc2")
  local f
  for f in "$slog" "$clog" "$clog2"; do
    grep -qx success "$f" || why+=("$(basename "$f" .log) printed no \"success\"")
  done
  verdict "$label" "$slog" "$clog" "$clog2"
}
xsrq_two_clients

ok="xrc_net: all checks passed"
pair "$ok" "xrc_net (SEND, SEND_WITH_IMM, WRITE, READ, atomics, a foreign SRQ), data checked" "$IP_A" "$IP_B" "$WORK/xrc_net"
pair "$ok" "xrc_net -e, data checked" "$IP_A" "$IP_B" "$WORK/xrc_net" -e
pair "$ok" "xrc_net over IPv6 GIDs, data checked" "$IP6_A" "$IP6_B" "$WORK/xrc_net"
FAULTS="seed=68,drop=5%,dup=5%,reorder=5%,reorder_by=1ms,corrupt=5%" \
  pair "$ok" "xrc_net, client faults drop/dup/reorder/corrupt 5%, data checked" "$IP_A" "$IP_B" "$WORK/xrc_net"

# Tag matching over the link (an RC QP on a tag-matching SRQ, docs/tag-matching.md): a
# three-packet EAGER message placed without its header across packet boundaries, an
# unexpected one, and a RNDV request left to software; once under client faults.
tm="tm_net: all checks passed"
pair "$tm" "tm_net (tag matching: 3-packet EAGER, unexpected, RNDV left to software), data checked" "$IP_A" "$IP_B" "$WORK/tm_net"
FAULTS="seed=69,drop=5%,dup=5%,reorder=5%,reorder_by=1ms,corrupt=5%" \
  pair "$tm" "tm_net, client faults drop/dup/reorder/corrupt 5%, data checked" "$IP_A" "$IP_B" "$WORK/tm_net"

# The wire: every packet is an XRC opcode; every request the client sent has an XRCETH
# naming the SRQ it meant (tshark 4.0 decodes XRC opcodes but not the XRCETH, so its
# bytes are read from the UDP payload); every ICRC checks.
label="xrc_net capture: XRC opcodes, an XRCETH on every request, ICRCs"
if [ -z "$FILTER" ] || [[ $label =~ $FILTER ]]; then
  PCAP=$WORK/xrc.pcap pair "$ok" "xrc_net capture run (RVERBS_PCAP on the client)" "$IP_A" "$IP_B" "$WORK/xrc_net"
  why=()
  pcap_checks "$WORK/xrc.pcap" "infiniband.bth.opcode >= 0xa0" 20 "$WORK" "$IP_A" "$IP_B"
  # Each request: the BTH (12 bytes), then the XRCETH: a zero byte and the 24-bit SRQ
  # number, which is the SRQ the server printed, or its foreign one (phase 3).
  tsk=(tshark -r "$WORK/xrc.pcap" -d udp.port==4791,infiniband)
  srqs=$(sed -n 's/^xrc_net: srqn \([0-9a-f]*\) foreign \([0-9a-f]*\)$/00\1 00\2/p' "$WORK/s.log")
  read -r srq foreign <<<"${srqs:-x y}"
  "${tsk[@]}" -Y "ip.src == $IP_B && infiniband.bth.opcode >= 0xa0" -T fields -e udp.payload >"$WORK/req.hex" 2>/dev/null || true
  reqs=$(wc -l <"$WORK/req.hex")
  to_srq=$(cut -c25-32 "$WORK/req.hex" | grep -cx "$srq" || true)
  to_foreign=$(cut -c25-32 "$WORK/req.hex" | grep -cx "$foreign" || true)
  other=$("${tsk[@]}" -Y "infiniband && infiniband.bth.opcode < 0xa0" 2>/dev/null | wc -l || true)
  [ "$reqs" -gt 0 ] || why+=("no XRC request from $IP_B in the capture")
  [ "$to_srq" -gt 0 ] && [ "$to_foreign" -gt 0 ] && [ $((to_srq + to_foreign)) = "$reqs" ] ||
    why+=("of $reqs XRC requests, $to_srq have the XRCETH of SRQ $srq and $to_foreign of SRQ $foreign")
  [ "$other" = 0 ] || why+=("$other packets with a non-XRC opcode")
  verdict "$label ($pcap_packets packets)"
fi

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
