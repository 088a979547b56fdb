#!/usr/bin/env bash
# One RC scenario, two links, the same completions (issue 21): rc_rules.c runs its
# scenarios (ordering of a mixed chain, RNR with rnr_retry 0 and 7, NAKs for a wrong rkey,
# a READ out of bounds and a SEND too large, and retries against a QP in ERR) three times:
#
# (a) same host: server and client as two processes in namespace rvs-a with one runtime
#     directory, so the client's send queue reaches the server's QP through the same-host
#     link (transport::host: requests handed to the responder machine inside
#     ibv_post_send). Checked: the namespace's UDP counters (/proc/net/snmp, Udp and Udp6
#     OutDatagrams) do not move during the run, so no RoCEv2 packet was sent;
# (b) across hosts: the server in rvs-a (10.71.0.1), the client in rvs-b (10.71.0.2), a
#     runtime directory each, joined by a veth with a 1500-byte MTU (path MTU 1024), so
#     every request and response is a RoCEv2 packet (transport::net). Checked: the UDP
#     counters of rvs-b do move;
# (c) as (b), with the client's packets dropped, duplicated, reordered and corrupted at 5 %
#     each (RVERBS_FAULTS, fixed seed): the retransmissions must leave the completions as
#     they are.
#
# Every run must pass rc_rules' own checks (statuses, opcodes, lengths, immediates, data,
# QP states), and the client transcripts of (b) and (c) must be identical to that of (a),
# and so must the server transcripts (`diff`; a difference is printed on stderr).
# docs/queue-pairs.md, "One requester, two links". About 3 s.
#
# Needs root (ip netns, veth). Prints one line per check, "N passed, N failed"; exits 1 if
# any check failed. RC_RULES_KEEP=1 keeps the work directory (transcripts, logs).
set -euo pipefail
cd "$(dirname "$0")/../.."

TIMEOUT=${RC_RULES_TIMEOUT:-60}
A=rvs-a B=rvs-b
IP_A=10.71.0.1 IP_B=10.71.0.2
if [ "$(id -u)" != 0 ]; then
  echo "rc_rules.sh: SKIPPED: needs root to create network namespaces"
  exit 0
fi
for p in ibv_devinfo cc ip; do
  command -v "$p" >/dev/null || { echo "rc_rules.sh: $p not found (apt-get install ibverbs-utils libibverbs-dev gcc iproute2)" >&2; exit 2; }
done
DROPIN=${DROPIN_DIR:-$(bash scripts/build-dropin.sh | tail -1)}
# shellcheck source=tests/conformance/lib/netns.bash
source tests/conformance/lib/netns.bash
# shellcheck source=lib/verdict.bash
source tests/conformance/lib/verdict.bash

WORK=$(mktemp -d /tmp/rc-rules.XXXXXX)
cleanup() {
  netns_del "$A" "$B"
  if [ -n "${RC_RULES_KEEP:-}" ]; then
    echo "rc_rules.sh: kept $WORK" >&2
  else
    rm -rf "$WORK"
  fi
}
trap cleanup EXIT
netns_del "$A" "$B"
cc -O2 -Wall -Werror -o "$WORK/rc_rules" tests/conformance/rc_rules.c -libverbs

netns_pair "$A" "$B" 1500 "$IP_A" "$IP_B"

FAULTS= PCAP= LOGF=
passed=0 failed=0 port=18950
ok="rc_rules: all checks passed"

# udp_out NS: UDP datagrams sent in NS so far (IPv4 and IPv6).
udp_out() {
  ip netns exec "$1" awk '
    $1 == "Udp:" && !h { for (i = 2; i <= NF; i++) col[$i] = i; h = 1; next }
    $1 == "Udp:" && h { n += $col["OutDatagrams"] }
    END { print n + 0 }' /proc/net/snmp
  ip netns exec "$1" awk '$1 == "Udp6OutDatagrams" { print $2 }' /proc/net/snmp6
}
udp_total() { udp_out "$1" | awk '{ s += $1 } END { print s + 0 }'; }

# run TAG CLIENT_NS CLIENT_RT CLIENT_IP: the server in rvs-a (runtime $WORK/rt-TAG-s, which
# the client shares when CLIENT_RT is "shared") and the client in CLIENT_NS with runtime
# directory CLIENT_RT, the client's GID that of CLIENT_IP, RVERBS_FAULTS=$FAULTS on the
# client only; transcripts in $WORK/TAG.{server,client}.out.
run() {
  local tag=$1 cns=$2 crt=$3 cip=$4 srt=$WORK/rt-$1-s sgid cgid src=0 crc=0
  [ "$crt" = shared ] && crt=$srt
  mkdir -p "$srt" "$crt"
  why=()
  sgid=$(gid_index "$A" "$srt" "$IP_A")
  cgid=$(gid_index "$cns" "$crt" "$cip")
  [ -n "$sgid" ] && [ -n "$cgid" ] || { why+=("no GID index for $IP_A or $cip"); return; }
  port=$((port + 1))
  FAULTS= in_ns "$A" "$srt" "$WORK/rc_rules" -d rverbs0 -g "$sgid" -p "$port" \
    >"$WORK/$tag.server.out" 2>"$WORK/$tag.server.err" &
  local spid=$!
  wait_listen "$A" "$port"
  in_ns "$cns" "$crt" "$WORK/rc_rules" -d rverbs0 -g "$cgid" -p "$port" "$IP_A" \
    >"$WORK/$tag.client.out" 2>"$WORK/$tag.client.err" || crc=$?
  wait "$spid" || src=$?
  [ "$src" = 0 ] || why+=("server exit $src")
  [ "$crc" = 0 ] || why+=("client exit $crc")
  grep -qx "$ok" "$WORK/$tag.server.err" || why+=("server printed no \"$ok\"")
  grep -qx "$ok" "$WORK/$tag.client.err" || why+=("client printed no \"$ok\"")
  local lines
  lines=$(cat "$WORK/$tag.server.out" "$WORK/$tag.client.out" | wc -l)
  [ "$lines" -ge 30 ] || why+=("only $lines transcript lines")
}

echo "rc_rules.sh: the same RC scenarios on one host ($A) and across $A ($IP_A) / $B ($IP_B), link MTU 1500"

before=$(udp_total "$A")
run same-host "$A" shared "$IP_A"
after=$(udp_total "$A")
[ "$before" = "$after" ] || why+=("$((after - before)) UDP datagrams sent in $A: not the same-host link")
verdict "(a) same host: two processes in $A, one runtime directory, no UDP datagram sent" \
  "$WORK/same-host.server.err" "$WORK/same-host.client.err"

before=$(udp_total "$B")
run net "$B" "$WORK/rt-net-c" "$IP_B"
after=$(udp_total "$B")
[ "$after" -gt "$before" ] || why+=("no UDP datagram sent in $B: not the network link")
verdict "(b) across hosts: server in $A, client in $B, RoCEv2 over the veth (UdpOutDatagrams +$((after - before)) in $B)" \
  "$WORK/net.server.err" "$WORK/net.client.err"

# (c) as (b), the client's packets dropped, duplicated, reordered and corrupted (fixed
# seed): the requester's retransmissions recover, the completions stay the same (a
# duplicated atomic is answered from the responder's replay, not executed twice: the
# server checks the word).
before=$(udp_total "$B")
FAULTS="seed=71,drop=5%,dup=5%,reorder=5%,reorder_by=1ms,corrupt=5%" run faults "$B" "$WORK/rt-faults-c" "$IP_B"
after=$(udp_total "$B")
[ "$after" -gt "$before" ] || why+=("no UDP datagram sent in $B: not the network link")
verdict "(c) across hosts as (b), client faults drop/dup/reorder/corrupt 5%" \
  "$WORK/faults.server.err" "$WORK/faults.client.err"

# same TAG ROLE: the transcripts of ROLE in (a) and in run TAG are identical.
same() {
  local tag=$1 role=$2
  why=()
  if ! diff -u --label "same-host $role" --label "$tag $role" \
    "$WORK/same-host.$role.out" "$WORK/$tag.$role.out" >"$WORK/$tag.$role.diff"; then
    why+=("the transcripts differ")
    cat "$WORK/$tag.$role.diff" >&2
  fi
  [ -s "$WORK/same-host.$role.out" ] || why+=("empty transcript")
  verdict "$role transcripts of (a) and ($3) identical ($(wc -l <"$WORK/same-host.$role.out") lines)"
}
for role in client server; do
  same net "$role" b
  same faults "$role" c
done

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
