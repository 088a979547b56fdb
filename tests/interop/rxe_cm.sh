#!/usr/bin/env bash
# rdma_cm against the kernel's own: unmodified rdmacm-utils and perftest -R on rverbs (the
# drop-in libibverbs.so.1 + librdmacm.so.1, in the host-side network namespace of the rxe
# guest, 10.77.0.1) and on rxe0 in the QEMU guest (10.77.0.2, tests/interop/rxe-vm), whose
# connection manager is the kernel's ib_cm + rdma_cm (librdmacm over /dev/infiniband/
# rdma_cm). The IBTA CM messages cross the link as MADs to QP1 (RoCEv2 UD, Q_Key
# 0x80010000): REQ/MRA/REP/RTU/REJ/DREQ/DREP for connected services, SIDR_REQ/SIDR_REP
# for udaddy; then the data runs over the QPs they connected (RC, UD), checked by the
# programs themselves.
#
# Pairs, each with rverbs as server and as client: rping -C 10 -v, rping -S 65000 -C 3,
# ucmatose -c 2 -C 10, udaddy -c 1 -C 10, rdma_server/rdma_client; ib_send_lat -R and
# ib_write_bw -R with rverbs as the server (below: perftest's own race); a REQ for a port nobody listens on is rejected with status 8 both ways;
# and an RVERBS_PCAP of rping against rxe that tshark decodes (the kernel's CM MADs
# included, nothing malformed) with every ICRC right.
#
# usage: rxe_cm.sh   (RXE_FILTER=<regex>: only the pairs whose label matches)
# Prints one line per pair, then "N passed, N failed"; exits 1 if any failed. Needs root.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
VM=$HERE/rxe-vm/vm.sh
export RVERBS_VM_NETNS=${RVERBS_VM_NETNS:-rvx-cm}
export RVERBS_VM_TAP=${RVERBS_VM_TAP:-rvx-cm0}
export RVERBS_VM_STATE=${RVERBS_VM_STATE:-/run/rverbs-vm-cm}
export RVERBS_VM_RUN_TIMEOUT=${RVERBS_VM_RUN_TIMEOUT:-150}
HOST_IP=10.77.0.1 GUEST_IP=10.77.0.2
FILTER=${RXE_FILTER:-}
TIMEOUT=${RXE_TIMEOUT:-60}

[ "$(id -u)" = 0 ] || { echo "rxe_cm.sh: needs root (netns, tap)" >&2; exit 1; }
DROPIN=${DROPIN_DIR:-$(bash "$ROOT/scripts/build-dropin.sh" | tail -1)}
[ -e "$DROPIN/librdmacm.so.1" ] || { echo "rxe_cm.sh: no librdmacm.so.1 in $DROPIN" >&2; exit 2; }
# shellcheck source=../conformance/lib/verdict.bash
source "$ROOT/tests/conformance/lib/verdict.bash"
# shellcheck source=../conformance/lib/cm.bash
source "$ROOT/tests/conformance/lib/cm.bash"
WORK=$(mktemp -d /tmp/rxe-cm.XXXXXX)
cleanup() {
  "$VM" stop >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT

"$VM" prepare >/dev/null
"$VM" stop >/dev/null 2>&1 || true   # a guest of this script's own names left by a killed run
"$VM" start
mkdir -m 700 "$WORK/rt"

# host CMD...: CMD on rverbs in the guest's host-side namespace (line-buffered). In the
# background, run "${host_argv[@]}" CMD (after `host_prefix`) instead, so that $! is the
# process chain that ends in `timeout`, which passes a kill on to CMD (a backgrounded
# shell function is a subshell: killing it would leave CMD running, holding the port).
host_prefix() {
  host_argv=(ip netns exec "$RVERBS_VM_NETNS" env LD_LIBRARY_PATH="$DROPIN" RVERBS_RUNTIME_DIR="$WORK/rt"
    ${PCAP:+RVERBS_PCAP="$PCAP"} timeout -k 5 "$TIMEOUT" stdbuf -oL)
}
host() {
  local host_argv
  host_prefix
  "${host_argv[@]}" "$@"
}
# guest CMD...: CMD in the guest, on rxe0 and the kernel's rdma_cm.
guest() {
  "$VM" run timeout "$TIMEOUT" stdbuf -oL "$@"
}
# guest_listening PORT: the guest's rdma_cm has a listener on PORT (rdma(8) resource view).
guest_listening() {
  "$VM" run rdma res show cm_id 2>/dev/null | grep -q "state LISTEN .*src-addr [^ ]*:$1 "
}

passed=0 failed=0 port=18900
# pair LABEL SERVER(host|guest) SPACE SERVER-EXPECT CLIENT-EXPECT SERVER-CMD -- CLIENT-CMD:
# the server in the background, the client once the server listens (on the host: the
# listener table; in the guest: rdma res); PORT in the commands is replaced by this
# pair's port and SERVER_IP by the server's address. Both must exit 0 and print their
# EXPECT (extended regexes; empty: nothing to check).
pair() {
  local label=$1 server=$2 space=$3 sexp=$4 cexp=$5
  shift 5
  [ -z "$FILTER" ] || [[ $label =~ $FILTER ]] || return 0
  local -a scmd=() ccmd=()
  while [ "$1" != -- ]; do scmd+=("$1"); shift; done
  shift
  ccmd=("$@")
  port=$((port + 1))
  local sip=$HOST_IP
  [ "$server" = guest ] && sip=$GUEST_IP
  scmd=("${scmd[@]//PORT/$port}") ccmd=("${ccmd[@]//PORT/$port}")
  scmd=("${scmd[@]//SERVER_IP/$sip}") ccmd=("${ccmd[@]//SERVER_IP/$sip}")
  local slog=$WORK/s.log clog=$WORK/c.log src=0 crc=0 spid start=$SECONDS i
  why=()
  : >"$clog"
  if [ "$server" = host ]; then
    host_prefix
    "${host_argv[@]}" "${scmd[@]}" >"$slog" 2>&1 &
    spid=$!
    RVERBS_RUNTIME_DIR=$WORK/rt cm_wait_listen "$space" "$port" 10 2>/dev/null || why+=("the rverbs server did not listen")
    [ ${#why[@]} -gt 0 ] || guest "${ccmd[@]}" >"$clog" 2>&1 || crc=$?
  else
    guest "${scmd[@]}" >"$slog" 2>&1 &
    spid=$!
    for ((i = 0; i < 100; i++)); do
      guest_listening "$port" && break
      sleep 0.2
    done
    [ "$i" -lt 100 ] || why+=("the rxe server did not listen")
    [ ${#why[@]} -gt 0 ] || host "${ccmd[@]}" >"$clog" 2>&1 || crc=$?
  fi
  [ ${#why[@]} -eq 0 ] || kill "$spid" 2>/dev/null || true
  wait "$spid" || src=$?
  [ "$src" = 0 ] || why+=("server exit $src")
  [ "$crc" = 0 ] || why+=("client exit $crc")
  [ -z "$sexp" ] || grep -Eq -- "$sexp" "$slog" || why+=("server did not print /$sexp/")
  [ -z "$cexp" ] || grep -Eq -- "$cexp" "$clog" || why+=("client did not print /$cexp/")
  # perftest -R's own race (tests/conformance/rdmacm.sh): its server destroys the listener
  # of the out-of-band exchange and listens again for the data QPs; a client that is
  # quicker meets no listener and gets REJECTED 8, and perftest does not retry correctly.
  # That signature gets the pair one more run, which must pass in full. So does perftest's
  # clock check failing in the emulated guest: to report bandwidth it samples the cycle
  # counter against gettimeofday, and under QEMU on a loaded host the samples can scatter
  # ("Correlation coefficient r^2: ... < 0.9", "Can't produce a report", CI 2026-12-01):
  # the guest's client exits 1 after the transfer, before the closing exchange, and the
  # rverbs server waits for it until its timeout. The client's own clock, not a verbs outcome.
  if [ "${PERFTEST_RACE_RETRY:-1}" = 1 ] && [ ${#why[@]} -gt 0 ] && [[ ${scmd[0]} == ib_* ]] &&
    { grep -q 'RDMA_CM_EVENT_REJECTED; error: 8' "$clog" || grep -q "Can't produce a report" "$clog"; } &&
    { [ "$crc" = 1 ] || [ "$crc" = 139 ]; }; then
    echo "($label: perftest's REJECTED-8 race or clock check; once more)"
    PERFTEST_RACE_RETRY=0 pair "$label" "$server" "$space" "$sexp" "$cexp" "${scmd[@]//$port/PORT}" -- "${ccmd[@]//$port/PORT}"
    return
  fi
  verdict "$label ($((SECONDS - start)) s)" "$slog" "$clog"
}

both() {  # LABEL SPACE SERVER-EXPECT CLIENT-EXPECT SERVER-CMD -- CLIENT-CMD
  local label=$1
  shift
  pair "$label: rverbs server, rxe client" host "$@"
  pair "$label: rxe server, rverbs client" guest "$@"
}

ok='^return status 0$'
both "rping -C 10 -v" tcp '^server ping data: rdma-ping-9: ' '^ping data: rdma-ping-9: ' \
  rping -s -a SERVER_IP -p PORT -v -C 10 -- rping -c -a SERVER_IP -p PORT -v -C 10
both "rping -S 65000 -C 3" tcp '^server ping data: rdma-ping-2: ' '^ping data: rdma-ping-2: ' \
  rping -s -a SERVER_IP -p PORT -v -S 65000 -C 3 -- rping -c -a SERVER_IP -p PORT -v -S 65000 -C 3
both "ucmatose -c 2 -C 10" tcp "$ok" "$ok" \
  ucmatose -b SERVER_IP -p PORT -c 2 -C 10 -- ucmatose -s SERVER_IP -p PORT -c 2 -C 10
both "rdma_server/rdma_client" tcp '^rdma_server: end 0$' '^rdma_client: end 0$' \
  rdma_server -s SERVER_IP -p PORT -- rdma_client -s SERVER_IP -p PORT
# perftest -R with rverbs as the server only: its server destroys the exchange's listener
# and listens again for the data QPs, and a client quicker than that meets no listener
# (REJECTED 8; see `pair`). Against a server in the emulated guest an rverbs client is
# quicker nearly every time (20 ms after the exchange), so that direction tests
# perftest's race, not rdma_cm; the kernel's rdma_cm as the passive side is covered by the
# other pairs.
pair "ib_send_lat -R: rverbs server, rxe client" host tcp '' '^-{20,}' \
  ib_send_lat -R -p PORT -n 200 -- ib_send_lat -R -p PORT -n 200 SERVER_IP
pair "ib_write_bw -R: rverbs server, rxe client" host tcp '' '^-{20,}' \
  ib_write_bw -R -p PORT -n 200 -- ib_write_bw -R -p PORT -n 200 SERVER_IP

# udaddy has no port option: port 7174 of the UDP port space, bound to the server's address.
udaddy_pair() {  # SERVER(host|guest)
  local saved=$port
  port=7173
  pair "udaddy -c 1 -C 10: $2" "$1" udp "$ok" "$ok" udaddy -b SERVER_IP -c 1 -C 10 -- udaddy -s SERVER_IP -c 1 -C 10
  port=$saved
}
udaddy_pair host "rverbs server, rxe client"
udaddy_pair guest "rxe server, rverbs client"

# Nobody listens: the REQ is rejected with "invalid service ID" (8) whoever answers. On
# the host, the answer comes from the connection manager of an rverbs process there (the
# GSI dispatcher, docs/connection-manager.md), here an rping server on another port.
reject_check() {
  local label="a REQ to a port nobody listens on: REJECTED 8, $1"
  [ -z "$FILTER" ] || [[ $label =~ $FILTER ]] || return 0
  local log=$WORK/rej.log rc=0 start=$SECONDS dpid=
  why=()
  if [ "$1" = "answered by rverbs" ]; then
    host_prefix
    "${host_argv[@]}" rping -s -a "$HOST_IP" -p 18998 -C 1 >"$WORK/dispatcher.log" 2>&1 &
    dpid=$!
    RVERBS_RUNTIME_DIR=$WORK/rt cm_wait_listen tcp 18998 10 2>/dev/null || why+=("the rverbs process did not listen")
    guest rping -c -a "$HOST_IP" -p 18999 -C 1 -v >"$log" 2>&1 || rc=$?
    kill "$dpid" 2>/dev/null || true
    wait "$dpid" 2>/dev/null || true
  else
    host rping -c -a "$GUEST_IP" -p 18999 -C 1 -v >"$log" 2>&1 || rc=$?
  fi
  [ "$rc" != 0 ] || why+=("the client succeeded")
  grep -Eq 'RDMA_CM_EVENT_REJECTED, error 8' "$log" || why+=("no REJECTED with status 8")
  verdict "$label ($((SECONDS - start)) s)" "$log"
}
reject_check "answered by rverbs"
reject_check "answered by the kernel"

# A capture of rping against rxe, as rverbs sent and received it.
trace_check() {
  local label="RVERBS_PCAP of rping against rxe: the CM MADs both ways decoded by tshark, every ICRC right"
  [ -z "$FILTER" ] || [[ $label =~ $FILTER ]] || return 0
  local cap=$WORK/cm.pcap attr who
  PCAP=$cap pair "rping -C 3, traced: rxe server, rverbs client" guest tcp '^server ping data: rdma-ping-2: ' '^ping data: rdma-ping-2: ' \
    rping -s -a SERVER_IP -p PORT -v -C 3 -- rping -c -a SERVER_IP -p PORT -v -C 3
  why=()
  pcap_checks "$cap" 'infiniband.bth.destqp == 1' 4 "$WORK" "$HOST_IP" "$GUEST_IP"
  # REQ, RTU, DREQ from rverbs; the REP from the kernel (its DREP may come after the
  # client exited).
  for attr in "0x0010 $HOST_IP" "0x0014 $HOST_IP" "0x0015 $HOST_IP" "0x0013 $GUEST_IP"; do
    read -r attr who <<<"$attr"
    tshark -r "$cap" -d udp.port==4791,infiniband -Y "infiniband.mad.attributeid == $attr && ip.src == $who" 2>/dev/null |
      grep -q . || why+=("no CM MAD $attr from $who in the capture")
  done
  verdict "$label ($pcap_packets QP1 packets; $(tail -n 1 "$WORK/icrc.log"))" "$WORK/icrc.log"
}
trace_check

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
