#!/usr/bin/env bash
# RC error completions between rverbs and the kernel's Soft-RoCE: the pyverbs program
# tests/conformance/net_errors.py on rverbs0 (the drop-in, in the host-side network
# namespace of the rxe guest, 10.77.0.1) and on rxe0 in the QEMU guest (10.77.0.2,
# tests/interop/rxe-vm; the guest sees the host's file system, so the same script and
# Debian's python3-pyverbs run there on the real libibverbs and rxe's provider).
#
# Three runs of every scenario (net_errors.py's doc: a control with SEND, WRITE and READ;
# RNR with rnr_retry 0 and 1; retries exhausted against a QP moved to ERR and to RESET;
# WRITE with a bad rkey; READ out of bounds; SEND larger than the receive):
#   0. the reference, rxe server and rxe client both in the guest (rxe's loopback): the
#      expectations must be what rxe gives rxe, or the test is wrong, not rverbs.
#   1. rxe server, rverbs client: rverbs' requester must turn rxe's RNR NAKs, remote
#      access and invalid request NAKs, and rxe's silence, into the statuses rxe itself
#      reports (docs/rocev2-wire.md §3.3-§4); rverbs' vendor_err codes are checked.
#   2. rverbs server, rxe client: rverbs' responder must send the NAKs (and stay silent)
#      so that rxe's completer reports those same statuses; the server's own receive
#      status for the oversized SEND (LOC_LEN_ERR, docs/rxe-differences.md) is checked.
# The client-side statuses required are the ones docs/rocev2-wire.md §4 lists for rxe
# (RNR_RETRY_EXC_ERR, RETRY_EXC_ERR, REM_ACCESS_ERR, REM_INV_REQ_ERR), except for the
# SEND larger than the receive against rxe's responder: this rxe (6.1) answers NAK remote
# operational error there, so the client must report REM_OP_ERR as rxe's completer does
# (net_errors.py, expected()). Against rverbs' responder an rxe client gets
# REM_INV_REQ_ERR (rverbs NAKs invalid request: IBTA; docs/rxe-differences.md).
#
# Prints each run's PASS/FAIL lines per scenario, then "N passed, N failed" over the three
# runs; exits 1 if anything failed. Needs root (netns, tap). Boots its own guest
# (rvx-err, rvx-err0, /run/rverbs-vm-err). NET_ERRORS_ONLY: comma-separated scenario
# names (default: all).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
VM=$HERE/rxe-vm/vm.sh
export RVERBS_VM_NETNS=${RVERBS_VM_NETNS:-rvx-err}
export RVERBS_VM_TAP=${RVERBS_VM_TAP:-rvx-err0}
export RVERBS_VM_STATE=${RVERBS_VM_STATE:-/run/rverbs-vm-err}
export RVERBS_VM_RUN_TIMEOUT=${RVERBS_VM_RUN_TIMEOUT:-300}
HOST_IP=10.77.0.1 GUEST_IP=10.77.0.2
TIMEOUT=${RXE_TIMEOUT:-240}
PY=/usr/bin/python3   # the pyenv python3 on PATH cannot see dist-packages
PROG=$ROOT/tests/conformance/net_errors.py
ONLY=()
[ -z "${NET_ERRORS_ONLY:-}" ] || ONLY=(--only "$NET_ERRORS_ONLY")

[ "$(id -u)" = 0 ] || { echo "rxe_errors.sh: needs root (netns, tap)" >&2; exit 1; }
"$PY" -c 'import pyverbs' 2>/dev/null || { echo "rxe_errors.sh: no pyverbs (apt-get install python3-pyverbs)" >&2; exit 2; }
DROPIN=${DROPIN_DIR:-$(bash "$ROOT/scripts/build-dropin.sh" | tail -1)}
WORK=$(mktemp -d /tmp/rxe-errors.XXXXXX)
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
  ip netns exec "$RVX_NETNS" env LD_LIBRARY_PATH="$DROPIN" RVERBS_RUNTIME_DIR="$WORK/rt" \
    RVERBS_LOG="${RVERBS_LOG:-rverbs::transport::net=debug}" timeout -k 5 "$TIMEOUT" "$PY" "$PROG" "$@"
}
guest() {
  "$VM" run timeout "$TIMEOUT" "$PY" "$PROG" "$@"
}

passed=0 failed=0 port=18960
# run LABEL SERVER(host|guest|reference): one server and one client of net_errors.py, the
# server on SERVER's device, the client on the other's (reference: both on rxe0 in the
# guest, through rxe's loopback); counts the client's PASS/FAIL lines and
# fails the run when either side exits non-zero.
run() {
  local label=$1 server=$2 src=0 crc=0 spid start=$SECONDS
  local slog=$WORK/$server-server.log clog=$WORK/client.log
  port=$((port + 1))
  echo "== $label"
  if [ "$server" = reference ]; then
    guest server --dev rxe0 --ip "$GUEST_IP" --port "$port" >"$slog" 2>&1 &
    spid=$!
    guest client --dev rxe0 --ip "$GUEST_IP" --server "$GUEST_IP" --port "$port" \
      --connect-timeout 150 "${ONLY[@]}" >"$clog" 2>&1 || crc=$?
  elif [ "$server" = guest ]; then
    guest server --dev rxe0 --ip "$GUEST_IP" --port "$port" >"$slog" 2>&1 &
    spid=$!
    host client --dev rverbs0 --ip "$HOST_IP" --server "$GUEST_IP" --port "$port" \
      --connect-timeout 150 "${ONLY[@]}" >"$clog" 2>"$WORK/host.err" || crc=$?
  else
    host server --dev rverbs0 --ip "$HOST_IP" --listen "$HOST_IP" --port "$port" \
      --accept-timeout 180 >"$slog" 2>"$WORK/host.err" &
    spid=$!
    guest client --dev rxe0 --ip "$GUEST_IP" --server "$HOST_IP" --port "$port" \
      "${ONLY[@]}" >"$clog" 2>&1 || crc=$?
  fi
  wait "$spid" || src=$?
  grep -v -E '^[0-9]+ passed, [0-9]+ failed$' "$clog" || true
  local p f
  p=$(grep -c '^PASS ' "$clog" || true)
  f=$(grep -c '^FAIL ' "$clog" || true)
  passed=$((passed + p)) failed=$((failed + f))
  if [ "$src" != 0 ] || [ "$crc" != 0 ] || [ "$p" = 0 ]; then
    failed=$((failed + 1))
    echo "FAIL $label: server exit $src, client exit $crc, $p scenarios passed"
    echo "--- server output:"; cat "$slog"
    echo "--- rverbs stderr (last 40 lines):"; tail -n 40 "$WORK/host.err"
  fi
  echo "   ($((SECONDS - start)) s)"
}

echo "rxe_errors.sh: rverbs0 ($HOST_IP) and rxe0 ($GUEST_IP, GID index $RVX_GID_INDEX)"
# The reference: rxe against rxe must meet the same expectations, or they are not rxe's.
run "reference: rxe server, rxe client (both in the guest)" reference
run "rxe server, rverbs client" guest
run "rverbs server, rxe client" host
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
