#!/usr/bin/env bash
# RC error completions across the network: tests/conformance/net_errors.py (pyverbs,
# Debian's python3-pyverbs) as server and client on rverbs' drop-in libibverbs.so.1, in two
# network namespaces joined by a veth pair this script creates (rve-a 10.69.0.1, rve-b
# 10.69.0.2, link MTU 1500) and removes; each side has its own runtime directory, so every
# request, ACK and NAK crosses the link as RoCEv2 packets (transport::net).
#
# Scenarios (net_errors.py's doc): a control (SEND, WRITE, READ succeed, bytes checked),
# RNR with rnr_retry 0 and 1 -> RNR_RETRY_EXC_ERR, a server QP moved to ERR / RESET ->
# RETRY_EXC_ERR (timeout 12, retry_cnt 1), WRITE with a bad rkey and READ out of bounds ->
# REM_ACCESS_ERR, SEND larger than the receive -> REM_INV_REQ_ERR (server: LOC_LEN_ERR).
# Server in rve-a, client in rve-b; rverbs' vendor_err codes are checked on both sides.
#
# Needs root (ip netns, veth). Prints the client's PASS/FAIL line per scenario and
# "N passed, N failed"; exits 1 if any scenario failed or either side exited non-zero.
# NET_ERRORS_ONLY: comma-separated scenario names to run (default: all); NET_ERRORS_KEEP=1
# keeps the work directory (both sides' output and rverbs' network diagnostics).
set -euo pipefail
cd "$(dirname "$0")/../.."

A=rve-a B=rve-b
IP_A=10.69.0.1 IP_B=10.69.0.2
PORT=18950
TIMEOUT=${NET_ERRORS_TIMEOUT:-120}
PY=/usr/bin/python3   # the pyenv python3 on PATH cannot see dist-packages
if [ "$(id -u)" != 0 ]; then
  echo "net_errors.sh: SKIPPED: needs root to create network namespaces"
  exit 0
fi
"$PY" -c 'import pyverbs' 2>/dev/null || { echo "net_errors.sh: no pyverbs (apt-get install python3-pyverbs)" >&2; exit 2; }
DROPIN=${DROPIN_DIR:-$(bash scripts/build-dropin.sh | tail -1)}
# shellcheck source=tests/conformance/lib/netns.bash
source tests/conformance/lib/netns.bash

WORK=$(mktemp -d /tmp/net-errors.XXXXXX)
cleanup() {
  netns_del "$A" "$B"
  if [ -n "${NET_ERRORS_KEEP:-}" ]; then echo "net_errors.sh: logs kept in $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
cleanup
mkdir -p "$WORK/rt-a" "$WORK/rt-b"

netns_pair "$A" "$B" 1500 "$IP_A" "$IP_B"
# `in_ns` (lib/netns.bash) runs each side with the network requester's debug log, which
# the checks read.
FAULTS= PCAP= LOGF=${RVERBS_LOG:-rverbs::transport::net=debug}

echo "net_errors.sh: RC error statuses between netns $A ($IP_A, server) and $B ($IP_B, client), rverbs on both"
src=0 crc=0
in_ns "$A" "$WORK/rt-a" "$PY" tests/conformance/net_errors.py server --dev rverbs0 --ip "$IP_A" \
  --listen "$IP_A" --port "$PORT" >"$WORK/server.log" 2>"$WORK/server.err" &
spid=$!
in_ns "$B" "$WORK/rt-b" "$PY" tests/conformance/net_errors.py client --dev rverbs0 --ip "$IP_B" \
  --server "$IP_A" --port "$PORT" ${NET_ERRORS_ONLY:+--only "$NET_ERRORS_ONLY"} \
  >"$WORK/client.log" 2>"$WORK/client.err" || crc=$?
wait "$spid" || src=$?
cat "$WORK/client.log"
# RTR towards an address of the link that nobody holds fails (ib_resolve_eth_dmac).
urc=0
in_ns "$B" "$WORK/rt-b" "$PY" tests/conformance/net_errors.py unreachable --dev rverbs0 --ip "$IP_B" \
  --server 10.69.0.99 >"$WORK/unreachable.log" 2>&1 || urc=$?
cat "$WORK/unreachable.log"
[ "$urc" = 0 ] || crc=1
if [ "$src" != 0 ] || [ "$crc" != 0 ]; then
  echo "net_errors.sh: FAILED (server exit $src, client exit $crc)"
  echo "--- server output:"; cat "$WORK/server.log"
  echo "--- server stderr (last 40 lines):"; tail -n 40 "$WORK/server.err"
  echo "--- client stderr (last 40 lines):"; tail -n 40 "$WORK/client.err"
  exit 1
fi
