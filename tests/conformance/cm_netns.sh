#!/usr/bin/env bash
# rdma_cm across hosts: Debian's rdmacm-utils and perftest -R, unmodified, between two
# "hosts" — two network namespaces joined by a veth pair that this script creates
# (10.69.0.1 and 10.69.0.2, fd69::1/2, addresses only inside them, link MTU 1500) and
# removes. Each side runs on rverbs' drop-in libibverbs.so.1 + librdmacm.so.1 with its
# own runtime directory, so the connection manager's MADs (REQ, MRA, REP, RTU, DREQ,
# DREP, SIDR_REQ/REP) cross the link as RoCEv2 UD packets to QP1 (rverbs::qp1,
# transport::gsi) and the data as RC or UD packets (transport::net, transport::udp).
#
# Pairs: rping -C 10 -v (traced: tshark decodes the CM MADs; every packet duplicated; the
# server's REP lost and resent; -S 65000: READs and WRITEs of many packets; -q: the program's
# own QP moved by rdma_init_qp_attr and rdma_establish; roles swapped; over IPv6), rping
# -P with 3 clients in turn, ucmatose (4 connections, 20 messages each; IPv6),
# rdma_server/rdma_client (synchronous API), udaddy (UD, SIDR), cmtime -c 20 (many
# connections at once), perftest -R (ib_send_lat, ib_write_bw, ib_read_lat), and the GSI
# dispatcher: a request for a listener in a process that does not own the host's RoCEv2
# port, reached through the owner (another rping server, or a process without a
# connection manager at all: ibv_rc_pingpong).
#
# usage: cm_netns.sh [FILTER]   (FILTER: a bash regex on the labels)
#
# The client starts once the server listens (lib/cm.bash reads the server host's
# listener table); every process is bounded by timeout (CM_NETNS_TIMEOUT, default 30 s).
# A pair passes when both sides exit 0 and print their success lines. Needs root (ip
# netns, veth). Prints one line per pair, then "N passed, N failed"; exits 1 if any
# pair failed.
set -euo pipefail
cd "$(dirname "$0")/../.."

FILTER=${1:-}
TIMEOUT=${CM_NETNS_TIMEOUT:-30}
NAME=cm_netns.sh
FIRST_PORT=
A=rvc-a B=rvc-b
IP_A=10.69.0.1 IP_B=10.69.0.2
IP6_A=fd69::1 IP6_B=fd69::2
if [ "$(id -u)" != 0 ]; then
  echo "$NAME: SKIPPED: needs root to create network namespaces"
  exit 0
fi
for p in rping ucmatose udaddy rdma_server rdma_client cmtime ib_send_lat ib_write_bw ib_read_lat ibv_rc_pingpong; do
  command -v "$p" >/dev/null || { echo "$NAME: $p not found (apt-get install rdmacm-utils perftest ibverbs-utils)" >&2; exit 2; }
done
# shellcheck source=lib/pairs.bash
source tests/conformance/lib/pairs.bash
# shellcheck source=lib/cm.bash
source tests/conformance/lib/cm.bash
# shellcheck source=lib/netns.bash
source tests/conformance/lib/netns.bash
# shellcheck source=lib/verdict.bash
source tests/conformance/lib/verdict.bash
[ -e "$dropin/librdmacm.so.1" ] || { echo "$NAME: no librdmacm.so.1 in $dropin" >&2; exit 2; }

RT_A=$WORK/rt-a RT_B=$WORK/rt-b
mkdir -m 700 "$RT_A" "$RT_B"
extra_pids=()
netns_cleanup() {
  local pid
  for pid in "${extra_pids[@]}"; do
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  netns_del "$A" "$B"
  cleanup
}
trap netns_cleanup EXIT
netns_pair "$A" "$B" 1500 "$IP_A" "$IP_B" "$IP6_A" "$IP6_B"

# Namespace A is the server's host and B the client's, unless a pair swaps them.
on_a=(ip netns exec "$A" env RVERBS_RUNTIME_DIR="$RT_A")
on_b=(ip netns exec "$B" env RVERBS_RUNTIME_DIR="$RT_B")
server_prefix=("${on_a[@]}") client_prefix=("${on_b[@]}")
server_rt=$RT_A
in_server_rt() { RVERBS_RUNTIME_DIR=$server_rt "$@"; }

port=18700 n=0 passed=0 failed=0
# listen_ready SPACE: the ready[] command for the server's listener on $port.
listen_ready() { ready=(in_server_rt cm_wait_listen "$1" "$port" 10); }

rping_pair() {  # LABEL ADDR COUNT EXTRA...
  local label=$1 addr=$2 count=$3
  shift 3
  scmd=(rping -s -a "$addr" -p "$port" -v -C "$count" "$@")
  ccmds=("rping -c -a $addr -p $port -v -C $count $*")
  listen_ready tcp
  cm_pair "$label" tcp
  if [[ -z $FILTER || $label =~ $FILTER ]]; then
    expect_in client "^ping data: rdma-ping-$((count - 1)): "
    expect_in server "^server ping data: rdma-ping-$((count - 1)): "
    pair_done "$label"
  fi
}

rping_pair "rping -C 10 -v" "$IP_A" 10
rping_pair "rping -S 65000 -C 3" "$IP_A" 3 -S 65000
rping_pair "rping -q -C 10" "$IP_A" 10 -q
rping_pair "rping -C 10 over IPv6" "$IP6_A" 10

# The same, traced on the server (RVERBS_PCAP): tshark decodes the handshake and the
# release as CM MADs to QP1 — REQ, MRA, REP, RTU, DREQ, DREP (attribute IDs 0x10, 0x11,
# 0x13, 0x14, 0x15, 0x16) — with nothing malformed, and every ICRC is right. The server
# sees all six before it exits (it answers the DREQ before its DISCONNECTED event);
# rping's client exits right after its DREQ, so whether its own trace holds the DREP is a
# race its exit can lose (it did in a CI run on a loaded machine).
label="rping -C 3, the CM messages traced and decoded by tshark"
if [[ -z $FILTER || $label =~ $FILTER ]]; then
  cap=$WORK/cm.pcap
  server_prefix=("${on_a[@]}" RVERBS_PCAP="$cap")
  scmd=(rping -s -a "$IP_A" -p "$port" -v -C 3)
  ccmds=("rping -c -a $IP_A -p $port -v -C 3")
  listen_ready tcp
  cm_pair "$label" tcp
  server_prefix=("${on_a[@]}")
  expect_in client '^ping data: rdma-ping-2: '
  pcap_checks "$cap" 'infiniband.bth.destqp == 1' 6 "$WORK" "$IP_A" "$IP_B"
  for attr in 0x0010 0x0011 0x0013 0x0014 0x0015 0x0016; do
    tshark -r "$cap" -d udp.port==4791,infiniband -Y "infiniband.bth.destqp == 1 && infiniband.mad.attributeid == $attr" \
      2>/dev/null | grep -q . || why+=("no CM MAD with attribute ID $attr in the capture")
  done
  pair_done "$label"
fi

# The network may lose or repeat any MAD (docs/connection-manager.md, "Across hosts"). Every
# packet of both sides sent twice: the repeated REQ, MRA, REP, RTU, DREQ and DREP must
# change nothing. The server's REP lost: RVERBS_FAULTS seed 8 at 10 % keeps the server's
# first packet (its MRA) and loses its second (the REP), so the REP must be sent again
# after the CM response timeout (4.3 s) — the MRA told the client to wait, so the client
# does not resend its REQ — and the connection comes up; the rest of the run loses 10 %
# of the server's packets, which RC's retransmissions cover. (Losses on the client's side
# are left out: rping's client exits right after its DREQ, and a lost DREQ of a process
# that is gone leaves the server waiting, with the kernel's CM as with ours.)
# Both sides log the C layer's refusals (RVERBS_LOG): one CI run saw the server's
# rdma_get_cm_event fail with EINVAL after its DISCONNECTED event, which 490 runs here
# (loaded, pinned to one CPU) did not repeat; a repeat names its reason in the log.
server_prefix=("${on_a[@]}" RVERBS_FAULTS=dup=100% RVERBS_LOG=rverbs_capi=debug) client_prefix=("${on_b[@]}" RVERBS_FAULTS=dup=100% RVERBS_LOG=rverbs_capi=debug)
rping_pair "rping -C 10, every packet of both sides duplicated" "$IP_A" 10
server_prefix=("${on_a[@]}" RVERBS_FAULTS=seed=8,drop=10% RVERBS_LOG=rverbs_cm=debug) client_prefix=("${on_b[@]}")
label="rping -C 10, the server's REP lost and sent again, 10 % of its packets lost"
rping_pair "$label" "$IP_A" 10
if [[ -z $FILTER || $label =~ $FILTER ]] && ! grep -q 'CM message resent' "$slog"; then
  echo "FAIL $label: the lost REP was not sent again (no 'CM message resent' in the server's log)"
  failed=$((failed + 1))
fi
server_prefix=("${on_a[@]}")

server_prefix=("${on_b[@]}") client_prefix=("${on_a[@]}") server_rt=$RT_B
rping_pair "rping -C 10 -v (roles swapped)" "$IP_B" 10
server_prefix=("${on_a[@]}") client_prefix=("${on_b[@]}") server_rt=$RT_A

label="rping -P (persistent server, 3 clients in turn)"
scmd=(rping -s -P -a "$IP_A" -p "$port" -v -C 5)
ccmds=("rping -c -a $IP_A -p $port -v -C 5" "rping -c -a $IP_A -p $port -v -C 5" "rping -c -a $IP_A -p $port -v -C 5")
keep_server=1
listen_ready tcp
cm_pair "$label" tcp
if [[ -z $FILTER || $label =~ $FILTER ]]; then
  [ "$(grep -c 'ping data: rdma-ping-4:' "$clog")" = 3 ] || why+=("not every client completed 5 pings")
  pair_done "$label"
fi

ok='^return status 0$'
simple_pair() {  # LABEL SPACE SERVER-CMD SERVER-EXPECT CLIENT-CMD CLIENT-EXPECT
  local label=$1 space=$2
  read -ra scmd <<<"$3"
  ccmds=("$5")
  listen_ready "$space"
  cm_pair "$label" "$space"
  if [[ -z $FILTER || $label =~ $FILTER ]]; then
    expect_in server "$4"
    expect_in client "$6"
    pair_done "$label"
  fi
}
simple_pair "ucmatose -c 4 -C 20" tcp "ucmatose -p $port -c 4 -C 20" "$ok" "ucmatose -s $IP_A -p $port -c 4 -C 20" "$ok"
simple_pair "ucmatose over IPv6" tcp "ucmatose -f ipv6 -b $IP6_A -p $port" "$ok" "ucmatose -f ipv6 -s $IP6_A -p $port" "$ok"
simple_pair "rdma_server/rdma_client" tcp "rdma_server -p $port" '^rdma_server: end 0$' \
  "rdma_client -s $IP_A -p $port" '^rdma_client: end 0$'
# udaddy has no port option (its -p is the port space): it serves on port 7174.
saved_port=$port port=7174
simple_pair "udaddy -c 2 -C 10" udp "udaddy -c 2 -C 10" "$ok" "udaddy -s $IP_A -c 2 -C 10" "$ok"
port=$saved_port

# cmtime: many connections at once (its v44 server serves until killed).
label="cmtime -c 20"
scmd=(cmtime -b "$IP_A" -p "$port")
ccmds=("cmtime -s $IP_A -p $port -c 20")
keep_server=1
listen_ready tcp
cm_pair "$label" tcp
if [[ -z $FILTER || $label =~ $FILTER ]]; then
  expect_in client '^connect +:'
  expect_in client '^disconnect +:'
  pair_done "$label"
fi

# perftest -R: the out-of-band exchange and the data QPs both connect with rdma_cm. The
# retry of perftest's own REJECTED-8 race (see rdmacm.sh: up to two more runs) applies here too.
for t in "ib_send_lat" "ib_write_bw" "ib_read_lat"; do
  label="$t -R"
  [[ -z $FILTER || $label =~ $FILTER ]] || continue
  read -ra prog <<<"$t"
  for attempt in 1 2 3; do
    scmd=("${prog[@]}" -R -d rverbs0 -p "$port" -n 200)
    ccmds=("${prog[*]} -R -d rverbs0 -p $port -n 200 $IP_A")
    listen_ready tcp
    cm_pair "$label" tcp
    expect_in client '^-{20,}'
    if [ "$attempt" -lt 3 ] && [ ${#why[@]} -gt 0 ] && grep -q 'RDMA_CM_EVENT_REJECTED; error: 8' "$clog" &&
      printf '%s\n' "${why[@]}" | grep -Eqx 'client 1 exit (139|1)'; then
      echo "(perftest's retry-after-REJECTED crash; running $label once more)"
      n=$((n - 1))
      continue
    fi
    break
  done
  pair_done "$label"
done

# The GSI dispatcher: host A's RoCEv2 port belongs to the first rverbs process there;
# a request from B for a listener in a later process reaches it through that owner.
# OWNER-CMD runs first, in the background, and must have the port (its endpoint is 0);
# then an rping pair on another port runs beside it.
behind_owner() {  # LABEL OWNER-READY-SPACE-PORT OWNER-CMD...
  local label=$1 owner_wait=$2 opid
  shift 2
  [[ -z $FILTER || $label =~ $FILTER ]] || return 0
  "${on_a[@]}" timeout -k 5 $((TIMEOUT + 10)) "$@" >"$WORK/logs/owner.log" 2>&1 &
  opid=$!
  extra_pids+=("$opid")
  if ! eval "$owner_wait"; then
    n=$((n + 1)) start=$EPOCHREALTIME why=("the owner process did not start: $*") slog=$WORK/logs/owner.log clog=/dev/null
    pair_done "$label"
  else
    port=$((port + 1))
    rping_pair "$label" "$IP_A" 10
  fi
  kill "$opid" 2>/dev/null || true
  wait "$opid" 2>/dev/null || true
  extra_pids=()
}
owner_port=$port
behind_owner "rping behind another rping server (the port's owner dispatches)" \
  "in_server_rt cm_wait_listen tcp $owner_port 10" rping -s -a "$IP_A" -p "$owner_port" -C 1
owner_port=$((port + 1))
behind_owner "rping behind ibv_rc_pingpong (an owner without a connection manager)" \
  "wait_listen $A $owner_port" ibv_rc_pingpong -d rverbs0 -g 1 -p "$owner_port"

# rdma_resolve_addr(3) towards an address of the link that nobody holds: the kernel's
# rdma_cm resolves the next hop's neighbour within the caller's timeout (rping: 2 s) and
# fails with ADDR_ERROR (-ETIMEDOUT, or -EHOSTUNREACH once ARP or neighbour discovery
# gave up); it must not resolve at once and leave rping silent until the CM's retries run
# out a minute later. Over IPv6 rverbs reads the kernel's neighbour table over rtnetlink.
unreachable_case() {  # LABEL ADDRESS
  local label=$1
  [[ -z $FILTER || $label =~ $FILTER ]] || return 0
  n=$((n + 1)) start=$EPOCHREALTIME why=()
  slog=/dev/null clog=$WORK/logs/$n.client scmd=(none) ccmd=(rping -c -a "$2" -p "$port" -C 1 -v)
  local rc=0
  "${on_b[@]}" timeout -k 5 15 "${ccmd[@]}" >"$clog" 2>&1 || rc=$?
  [ "$rc" != 124 ] && [ "$rc" != 137 ] || why+=("rping still waiting after 15 s")
  [ "$rc" != 0 ] || why+=("rping succeeded")
  grep -Eq 'RDMA_CM_EVENT_ADDR_ERROR, error -(110|113)' "$clog" || why+=("no ADDR_ERROR with -ETIMEDOUT or -EHOSTUNREACH")
  report_pair "$label"
}
unreachable_case "rping to an address nobody answers: ADDR_ERROR within rping's 2 s timeout" 10.69.0.99
unreachable_case "rping to an IPv6 address nobody answers: ADDR_ERROR within rping's 2 s timeout" fd69::99

finish
