#!/usr/bin/env bash
# RC and UC over RoCEv2/UDP between two "hosts": two network namespaces joined by a veth
# pair that this script creates (10.67.0.1 and 10.67.0.2, fd67::1/2, addresses only inside
# them, link MTU 1500) and removes. Each side runs unmodified Debian programs on rverbs'
# drop-in libibverbs.so.1 with its own runtime directory, so every message crosses the link
# as RoCEv2 packets: segmented at the path MTU (1024), acknowledged, retransmitted when
# lost (the protocol core's requester and responder, transport::net).
#
# Pairs: ibv_rc_pingpong -c at 1 B, 4 KiB and 64 KiB, polling and with -e, both
# directions; ibv_uc_pingpong -c; ibv_srq_pingpong -c (16 QPs on one SRQ), polling and
# -e; one over IPv6 GIDs; perftest ib_write_bw, ib_read_bw, ib_send_bw, ib_atomic_bw
# (fetch-and-add and compare-and-swap), ib_read_lat, ib_write_bw -c UC, the bw and lat
# tests with -a (2 B to 8 MiB), ib_atomic_lat; two rc_pingpong server processes behind one RoCEv2 port (the second reached
# through the first's relay), over IPv4 and IPv6 GIDs; the port taken over by one of two
# such processes when its owner exits, over IPv4 and IPv6 GIDs; a polling rc_pingpong
# whose server is traced, with RVERBS_BUSY_POLL=1 and with busy polling detected (unset):
# some of its ACKs must leave after its next SEND (coalesced, docs/network.md "Coalesced
# ACKs"), and every one of them must leave (the pair completes: the client waits for each
# ACK); with RVERBS_BUSY_POLL=0 none may; held_ack.c with RVERBS_BUSY_POLL=1: a server
# that holds an ACK and then sleeps outside the library must still send it by its deadline
# (each client SEND completes within 100 ms, against the server's 200 ms pauses); and
# rc_pingpong -c through the fault injector
# (RVERBS_FAULTS on the client's packets: drop, duplicate, reorder, corrupt at 1, 5 and 10 %, alone and together; WRITE and READ bandwidth at 5 % of all
# four, and READ bandwidth with them on the server's READ responses) — reliable delivery
# must hide them.
# A pair passes when both sides exit 0 and print their result lines (ping-pongs: "<iters>
# iters in", no invalid data with -c; perftest: a result row).
#
# Needs root (ip netns, veth). Prints one line per pair, "N passed, N failed"; exits 1 if
# any pair failed.
set -euo pipefail
cd "$(dirname "$0")/../.."

ITERS=${RC_ITERS:-200}
# RC_FILTER: run only the pairs whose label matches this bash regular expression.
FILTER=${RC_FILTER:-}
TIMEOUT=${RC_TIMEOUT:-60}
A=rvr-a B=rvr-b
IP_A=10.67.0.1 IP_B=10.67.0.2
IP6_A=fd67::1 IP6_B=fd67::2
if [ "$(id -u)" != 0 ]; then
  echo "rc_netns.sh: SKIPPED: needs root to create network namespaces"
  exit 0
fi
for p in ibv_rc_pingpong ibv_uc_pingpong ib_write_bw ib_read_bw ib_send_bw ib_atomic_bw ib_read_lat; do
  command -v "$p" >/dev/null || { echo "rc_netns.sh: $p not found (apt-get install ibverbs-utils perftest)" >&2; exit 2; }
done
DROPIN=${DROPIN_DIR:-$(bash scripts/build-dropin.sh | tail -1)}
# shellcheck source=tests/conformance/lib/netns.bash
source tests/conformance/lib/netns.bash
# shellcheck source=lib/verdict.bash
source tests/conformance/lib/verdict.bash

WORK=$(mktemp -d /tmp/rc-netns.XXXXXX)
cleanup() {
  netns_del "$A" "$B"
  rm -rf "$WORK"
}
trap cleanup EXIT
cleanup
mkdir -p "$WORK/rt-a" "$WORK/rt-b"

netns_pair "$A" "$B" 1500 "$IP_A" "$IP_B" "$IP6_A" "$IP6_B"

# Commands run in a namespace with `in_ns` (lib/netns.bash), without faults unless a pair
# sets FAULTS (the client's packets) or SFAULTS (the server's).
FAULTS= SFAULTS= PCAP= LOGF=
passed=0 failed=0 port=18800
# pair KIND LABEL SERVER_NS SERVER_RT SERVER_IP CLIENT_NS CLIENT_RT CLIENT_IP PROG ARGS...:
# KIND is pingpong (PROG -g GID -n ITERS) or perftest (PROG -x GID -F -n ITERS); the
# GIDs are those of the IPs; the TCP exchange goes to the server's IPv4 address. The
# client runs with RVERBS_FAULTS=$FAULTS, the server with RVERBS_FAULTS=$SFAULTS.
pair() {
  local kind=$1 label=$2 sns=$3 srt=$4 sip=$5 cns=$6 crt=$7 cip=$8 prog=$9
  shift 9
  [ -z "$FILTER" ] || [[ $label =~ $FILTER ]] || return 0
  local sgid cgid slog=$WORK/s.log clog=$WORK/c.log src=0 crc=0 why=() gflag=-g extra=()
  sgid=$(gid_index "$sns" "$srt" "$sip")
  cgid=$(gid_index "$cns" "$crt" "$cip")
  [[ $sip == *:* ]] && sip=$IP_A
  [ "$kind" = perftest ] && gflag=-x extra=(-F)
  port=$((port + 1))
  FAULTS=$SFAULTS in_ns "$sns" "$srt" "$prog" -d rverbs0 "$gflag" "$sgid" "${extra[@]}" -n "$ITERS" -p "$port" "$@" >"$slog" 2>&1 &
  local spid=$!
  wait_listen "$sns" "$port"
  in_ns "$cns" "$crt" "$prog" -d rverbs0 "$gflag" "$cgid" "${extra[@]}" -n "$ITERS" -p "$port" "$@" "$sip" >"$clog" 2>&1 || crc=$?
  wait "$spid" || src=$?
  if [ "$kind" = pingpong ] && [ -n "$FAULTS" ] && [ "$src" != 0 ] && [ "$crc" = 0 ] \
     && grep -q "^$ITERS iters in" "$clog" && ! grep -q "invalid data" "$clog" \
     && grep -q "transport retry counter exceeded" "$slog"; then
    # The client received and checked all ITERS messages, so the server sent them all;
    # what failed is the server's last SEND, whose ACK the client's injector lost just
    # before the client exited (nobody is left to answer the retries: RETRY_EXC_ERR, as
    # on any lossy network). Not a protocol failure; said in the verdict line.
    label="$label (the server's last ACK was lost as the client exited)"
  elif [ "$kind" = pingpong ]; then
    pingpong_checks "$src" "$crc" "$slog" "$clog" "$ITERS"
  else
    perftest_checks "$src" "$crc" "$clog" "$ITERS"
  fi
  verdict "$label" "$slog" "$clog"
}

ab=("$A" "$WORK/rt-a" "$IP_A" "$B" "$WORK/rt-b" "$IP_B")
ba=("$B" "$WORK/rt-b" "$IP_B" "$A" "$WORK/rt-a" "$IP_A")
echo "rc_netns.sh: RC/UC between netns $A ($IP_A) and $B ($IP_B), link MTU 1500, -n $ITERS"
for ev in "" -e; do
  for s in 1 4096 65536; do
    pair pingpong "rc${ev:+ $ev} -s $s -c, server in $A" "${ab[@]}" ibv_rc_pingpong -c -s "$s" ${ev:+"$ev"}
  done
done
pair pingpong "rc -s 10000 -c, server in $B" "${ba[@]}" ibv_rc_pingpong -c -s 10000
pair pingpong "uc -s 4096 -c, server in $A" "${ab[@]}" ibv_uc_pingpong -c -s 4096
pair pingpong "uc -e -s 1 -c, server in $A" "${ab[@]}" ibv_uc_pingpong -e -c -s 1
for ev in "" -e; do
  pair pingpong "srq${ev:+ $ev} -s 4096 -c (16 QPs, one SRQ), server in $A" "${ab[@]}" ibv_srq_pingpong -c -s 4096 ${ev:+"$ev"}
done
pair pingpong "rc -s 4096 -c over IPv6 GIDs ($IP6_A, $IP6_B)" "$A" "$WORK/rt-a" "$IP6_A" "$B" "$WORK/rt-b" "$IP6_B" ibv_rc_pingpong -c -s 4096

# No -m: perftest takes the port's active MTU, 1024 in each namespace as on an rxe port
# over a 1500-byte link (docs/device.md, "Active MTU"); each network connection is capped at its
# link's anyway (docs/network.md). One pair asks for 1024 itself.
for t in ib_write_bw ib_read_bw ib_send_bw; do
  pair perftest "$t -s 65536" "${ab[@]}" "$t" -s 65536
done
pair perftest "ib_read_lat -m 1024 -s 4096" "${ab[@]}" ib_read_lat -m 1024 -s 4096
pair perftest "ib_atomic_bw (fetch-and-add)" "${ab[@]}" ib_atomic_bw
pair perftest "ib_atomic_bw -A CMP_AND_SWAP" "${ab[@]}" ib_atomic_bw -A CMP_AND_SWAP
pair perftest "ib_write_bw -c UC -s 4096" "${ab[@]}" ib_write_bw -c UC -s 4096
# -a: every size from 2 bytes to 8 MiB (one result row each); the latency tests with 50
# iterations a size (an 8 MiB ping-pong is ~0.1 s a round trip here).
for t in ib_write_bw ib_read_bw ib_send_bw; do
  pair perftest "$t -a" "${ab[@]}" "$t" -a
done
for t in ib_write_lat ib_read_lat ib_send_lat; do
  ITERS=50 pair perftest "$t -a -n 50" "${ab[@]}" "$t" -a
done
pair perftest "ib_atomic_lat" "${ab[@]}" ib_atomic_lat

# two_servers SERVER_IP CLIENT_IP: two ibv_rc_pingpong -c -s 4096 server processes in $A
# behind one RoCEv2 port: the first owns SERVER_IP:4791, the second sends from a port of
# its own and gets its packets relayed by the first (transport::udp, "Demultiplexing").
# The client in $B talks to the second first (while the owner waits), then to the first;
# both pairs must pass. The GIDs are those of the IPs; TCP goes to $IP_A.
two_servers() {
  local sip=$1 cip=$2
  local label="rc -s 4096 -c, two server processes in $A behind one port${3:+, $3}"
  [ -z "$FILTER" ] || [[ $label =~ $FILTER ]] || return 0
  local sgid cgid l1=$WORK/s1.log l2=$WORK/s2.log c1=$WORK/c1.log c2=$WORK/c2.log
  local p1=$((port + 1)) p2=$((port + 2)) r1=0 r2=0 rc1=0 rc2=0 why=() pid1 pid2
  port=$p2
  sgid=$(gid_index "$A" "$WORK/rt-a" "$sip")
  cgid=$(gid_index "$B" "$WORK/rt-b" "$cip")
  in_ns "$A" "$WORK/rt-a" ibv_rc_pingpong -d rverbs0 -g "$sgid" -n "$ITERS" -p "$p1" -c -s 4096 >"$l1" 2>&1 &
  pid1=$!
  wait_listen "$A" "$p1"
  in_ns "$A" "$WORK/rt-a" ibv_rc_pingpong -d rverbs0 -g "$sgid" -n "$ITERS" -p "$p2" -c -s 4096 >"$l2" 2>&1 &
  pid2=$!
  wait_listen "$A" "$p2"
  in_ns "$B" "$WORK/rt-b" ibv_rc_pingpong -d rverbs0 -g "$cgid" -n "$ITERS" -p "$p2" -c -s 4096 "$IP_A" >"$c2" 2>&1 || rc2=$?
  wait "$pid2" || r2=$?
  in_ns "$B" "$WORK/rt-b" ibv_rc_pingpong -d rverbs0 -g "$cgid" -n "$ITERS" -p "$p1" -c -s 4096 "$IP_A" >"$c1" 2>&1 || rc1=$?
  wait "$pid1" || r1=$?
  for f in "$l1" "$l2" "$c1" "$c2"; do
    grep -q "^$ITERS iters in" "$f" || why+=("$(basename "$f" .log) printed no \"$ITERS iters in\"")
  done
  [ "$r1$r2$rc1$rc2" = 0000 ] || why+=("exit codes: servers $r1 $r2, clients $rc1 $rc2")
  ! grep -q "invalid data" "$c1" "$c2" || why+=("invalid data (-c)")
  verdict "$label" "$l1" "$l2" "$c1" "$c2"
}
two_servers "$IP_A" "$IP_B"
two_servers "$IP6_A" "$IP6_B" "over IPv6 GIDs ($IP6_A, $IP6_B)"

# port_holder NS ADDR: the pid of the process holding UDP ADDR:4791 in namespace NS
# (empty if none).
port_holder() {
  local addr=$2
  [[ $addr == *:* ]] && addr="[$addr]"
  ip netns exec "$1" ss -Hnaup "src $addr:4791" | { grep -oE 'pid=[0-9]+' || true; } | head -1 | cut -d= -f2
}

# descends PID ANCESTOR: whether process PID is ANCESTOR or runs under it (a background
# in_ns is a subshell, then timeout, then the program).
descends() {
  local p=$1
  for _ in 1 2 3 4 5; do
    [ "$p" = "$2" ] && return 0
    p=$(ps -o ppid= -p "$p" 2>/dev/null | tr -d ' ')
    [ -n "$p" ] && [ "$p" != 0 ] || return 1
  done
  return 1
}

# takeover SERVER_IP CLIENT_IP: the owner of SERVER_IP:4791 exits while two other
# processes of $A send from ports of their own; one of them must take the port over
# (transport::udp, "Takeover") and relay to the other. P1, an ibv_rc_pingpong server that
# never gets a client, binds the port; servers P2 and P3 start behind it; P1 is stopped.
# Once a process of $A holds the port again (waited for at most 5 s, ten takeover
# periods), it must be P2 or P3; a client in $B talks to the other one (relayed by the new
# owner), then another to the new owner: both pairs must pass. The GIDs are those of the
# IPs; TCP goes to $IP_A.
takeover() {
  local sip=$1 cip=$2
  local label="rc -s 4096 -c, the port taken over when its owner exits${3:+, $3}"
  [ -z "$FILTER" ] || [[ $label =~ $FILTER ]] || return 0
  local sgid cgid l1=$WORK/s1.log l2=$WORK/s2.log l3=$WORK/s3.log c2=$WORK/c2.log c3=$WORK/c3.log
  local p1=$((port + 1)) p2=$((port + 2)) p3=$((port + 3)) r2=0 r3=0 rc2=0 rc3=0 why=()
  local pid1 pid2 pid3 holder= owner new_owner other
  port=$p3
  sgid=$(gid_index "$A" "$WORK/rt-a" "$sip")
  cgid=$(gid_index "$B" "$WORK/rt-b" "$cip")
  in_ns "$A" "$WORK/rt-a" ibv_rc_pingpong -d rverbs0 -g "$sgid" -n "$ITERS" -p "$p1" -c -s 4096 >"$l1" 2>&1 &
  pid1=$!
  wait_listen "$A" "$p1"
  owner=$(port_holder "$A" "$sip")
  [ -n "$owner" ] && descends "$owner" "$pid1" || why+=("P1 does not own $sip:4791 (holder: ${owner:-none})")
  in_ns "$A" "$WORK/rt-a" ibv_rc_pingpong -d rverbs0 -g "$sgid" -n "$ITERS" -p "$p2" -c -s 4096 >"$l2" 2>&1 &
  pid2=$!
  in_ns "$A" "$WORK/rt-a" ibv_rc_pingpong -d rverbs0 -g "$sgid" -n "$ITERS" -p "$p3" -c -s 4096 >"$l3" 2>&1 &
  pid3=$!
  wait_listen "$A" "$p2"
  wait_listen "$A" "$p3"
  # The subshell's child is timeout, which passes SIGTERM on to P1 and waits for it.
  pkill -TERM -P "$pid1" || true
  wait "$pid1" || true
  for _ in $(seq 100); do
    holder=$(port_holder "$A" "$sip")
    [ -n "$holder" ] && break
    sleep 0.05
  done
  new_owner=
  if [ -n "$holder" ] && descends "$holder" "$pid2"; then
    new_owner=$p2 other=$p3
  elif [ -n "$holder" ] && descends "$holder" "$pid3"; then
    new_owner=$p3 other=$p2
  fi
  if [ -z "$new_owner" ]; then
    why+=("neither P2 nor P3 took $sip:4791 over within 5 s (holder: ${holder:-none})")
    pkill -TERM -P "$pid2" || true
    pkill -TERM -P "$pid3" || true
    wait "$pid2" || true
    wait "$pid3" || true
    verdict "$label" "$l1" "$l2" "$l3"
    return 0
  fi
  for p in "$other" "$new_owner"; do
    local crc=0
    in_ns "$B" "$WORK/rt-b" ibv_rc_pingpong -d rverbs0 -g "$cgid" -n "$ITERS" -p "$p" -c -s 4096 "$IP_A" >"$WORK/c-$p.log" 2>&1 || crc=$?
    if [ "$p" = "$p2" ]; then rc2=$crc; wait "$pid2" || r2=$?; else rc3=$crc; wait "$pid3" || r3=$?; fi
  done
  mv "$WORK/c-$p2.log" "$c2"
  mv "$WORK/c-$p3.log" "$c3"
  for f in "$l2" "$l3" "$c2" "$c3"; do
    grep -q "^$ITERS iters in" "$f" || why+=("$(basename "$f" .log) printed no \"$ITERS iters in\"")
  done
  [ "$r2$r3$rc2$rc3" = 0000 ] || why+=("exit codes: servers $r2 $r3, clients $rc2 $rc3")
  ! grep -q "invalid data" "$c2" "$c3" || why+=("invalid data (-c)")
  verdict "$label" "$l1" "$l2" "$l3" "$c2" "$c3"
}
takeover "$IP_A" "$IP_B"
takeover "$IP6_A" "$IP6_B" "over IPv6 GIDs ($IP6_A, $IP6_B)"

# docs/network.md, "Coalesced ACKs": a polling server that busy-polls (RVERBS_BUSY_POLL=1,
# or found out by its device: docs/progress-and-events.md, "Busy-polling applications")
# receives the client's SENDs itself and holds their ACKs for its own next SEND, one
# sendmmsg for both (the SEND first). In its capture, what it sends right after receiving
# a request is then its SEND, not the ACK, whenever its poll received the request (without
# coalescing: always the ACK, sent before the receive completion). The pair must pass too:
# each client SEND waits for its ACK, the last one leaving when the server destroys its QP.
# coalesced SETTING ITERS: RVERBS_BUSY_POLL=SETTING ("" unset: detected, after 1 ms of
# polling, so more iterations); with 0 no ACK may be held.
coalesced() {
  local setting=$1 ITERS=$2 label
  case $setting in
    1) label="rc -s 1 polling, RVERBS_BUSY_POLL=1: the server's ACKs coalesced with its next SEND" ;;
    '') label="rc -s 1 polling, busy polling detected: the server's ACKs coalesced with its next SEND" ;;
    0) label="rc -s 1 polling, RVERBS_BUSY_POLL=0: no ACK held" ;;
  esac
  [ -z "$FILTER" ] || [[ $label =~ $FILTER ]] || return 0
  local cap=$WORK/coalesced.pcap slog=$WORK/s.log clog=$WORK/c.log src=0 crc=0 why=() sgid cgid
  sgid=$(gid_index "$A" "$WORK/rt-a" "$IP_A")
  cgid=$(gid_index "$B" "$WORK/rt-b" "$IP_B")
  port=$((port + 1))
  PCAP=$cap in_ns "$A" "$WORK/rt-a" env ${setting:+RVERBS_BUSY_POLL=$setting} ibv_rc_pingpong -d rverbs0 -g "$sgid" -n "$ITERS" -p "$port" -s 1 >"$slog" 2>&1 &
  local spid=$!
  wait_listen "$A" "$port"
  in_ns "$B" "$WORK/rt-b" env ${setting:+RVERBS_BUSY_POLL=$setting} ibv_rc_pingpong -d rverbs0 -g "$cgid" -n "$ITERS" -p "$port" -s 1 "$IP_A" >"$clog" 2>&1 || crc=$?
  wait "$spid" || src=$?
  pingpong_checks "$src" "$crc" "$slog" "$clog" "$ITERS"
  # After each request received from the client (opcode 4, SEND_ONLY), the server's next
  # sent packet: its own SEND (4: the ACK was held) or an ACK (17).
  local after
  after=$(tshark -r "$cap" -d udp.port==4791,infiniband -T fields -e ip.src -e infiniband.bth.opcode 2>/dev/null |
    awk -v me="$IP_A" '$1 != me && $2 == 4 { want = 1; next } want && $1 == me { n[$2]++; want = 0 }
      END { printf "%d %d", n[4], n[17] }')
  local held=${after% *} acked=${after#* }
  [ $((held + acked)) -ge $((ITERS / 2)) ] || why+=("only $((held + acked)) requests answered in the capture")
  # Without coalescing the ACK always leaves first (before the receive completion the
  # SEND waits for); how often the server's own poll receives the request, rather than
  # its progress thread, depends on the scheduler, so one coalesced ACK is what is asked.
  if [ "$setting" = 0 ]; then
    [ "$held" = 0 ] || why+=("after a request the server sent its SEND first $held times: an ACK was held")
  else
    [ "$held" -ge 1 ] || why+=("after a request the server never sent its SEND first (the ACK first $acked times)")
  fi
  label="$label ($held of $((held + acked)))"
  verdict "$label" "$slog" "$clog"
}
coalesced 1 "$ITERS"
coalesced '' 2000
coalesced 0 "$ITERS"

# docs/network.md, "Coalesced ACKs": an ACK held by a busy-polling server (RVERBS_BUSY_POLL=1)
# that then leaves the library
# (held_ack.c: it sleeps 200 ms after each receive) leaves by its deadline, from the
# progress thread, which the holder wakes if it planned to sleep past it. Each client SEND
# must complete within 100 ms, and the server's log must show held ACKs sent at their
# deadline (its polls, not its progress thread, received at least one SEND).
held_deadline() {
  local label="held_ack, RVERBS_BUSY_POLL=1: a held ACK leaves by its deadline while the server sleeps outside the library"
  [ -z "$FILTER" ] || [[ $label =~ $FILTER ]] || return 0
  local slog=$WORK/s.log clog=$WORK/c.log src=0 crc=0 why=() sgid cgid
  sgid=$(gid_index "$A" "$WORK/rt-a" "$IP_A")
  cgid=$(gid_index "$B" "$WORK/rt-b" "$IP_B")
  port=$((port + 1))
  LOGF=rverbs::transport::net=debug in_ns "$A" "$WORK/rt-a" env RVERBS_BUSY_POLL=1 "$WORK/held_ack" -g "$sgid" -p "$port" >"$slog" 2>&1 &
  local spid=$!
  wait_listen "$A" "$port"
  in_ns "$B" "$WORK/rt-b" env RVERBS_BUSY_POLL=1 "$WORK/held_ack" -g "$cgid" -p "$port" "$IP_A" >"$clog" 2>&1 || crc=$?
  wait "$spid" || src=$?
  [ "$src" = 0 ] || why+=("server exit $src")
  [ "$crc" = 0 ] || why+=("client exit $crc")
  grep -q '^held_ack: all 10 sends completed within 100 ms' "$clog" || why+=("$(grep -m1 '^held_ack' "$clog" || echo 'no result line')")
  local held
  held=$(grep -c 'held ACKs sent at their deadline' "$slog" || true)
  [ "$held" -ge 1 ] || why+=("no ACK was held (the progress thread received every SEND)")
  verdict "$label ($held of 10 held)" "$slog" "$clog"
}
cc -O2 -Wall -Werror -o "$WORK/held_ack" tests/conformance/held_ack.c -libverbs
held_deadline

# Loss, duplication, reordering and corruption of the client's packets: RC recovers
# (NAK sequence error and go-back-N, duplicate detection, the retransmit timer).
# Each fault alone at 1, 5 and 10 %, then all four together, fixed seeds; the ping-pong's
# -c checks every byte received, in order.
for r in 1 5 10; do
  for spec in "drop=$r%" "dup=$r%" "reorder=$r%,reorder_by=1ms" "corrupt=$r%" \
              "drop=$r%,dup=$r%,reorder=$r%,reorder_by=1ms,corrupt=$r%"; do
    FAULTS="seed=$r$((${#spec} % 10)),$spec" pair pingpong "rc -s 4096 -c, client faults $spec" "${ab[@]}" ibv_rc_pingpong -c -s 4096
  done
done
# Multi-packet WRITEs and READs (64 packets a message) under all four faults at 5 %.
for t in ib_write_bw ib_read_bw; do
  FAULTS="seed=21,drop=5%,dup=5%,reorder=5%,reorder_by=1ms,corrupt=5%" \
    pair perftest "$t -s 65536, client faults drop/dup/reorder/corrupt 5%" "${ab[@]}" "$t" -s 65536
done
# The same faults on the READ responder's packets (its READ responses): a lost response is
# asked for again from where the data stopped, the rest of the abandoned stream ignored
# (docs/rocev2-wire.md §3.4, "READ responses").
SFAULTS="seed=22,drop=5%,dup=5%,reorder=5%,reorder_by=1ms,corrupt=5%" \
  pair perftest "ib_read_bw -s 65536, server (READ responder) faults drop/dup/reorder/corrupt 5%" "${ab[@]}" ib_read_bw -s 65536

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
