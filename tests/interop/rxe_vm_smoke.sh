#!/usr/bin/env bash
# Proves the rxe guest recipe (tests/interop/rxe-vm/vm.sh) on this machine:
#   1. prepare (idempotent) and boot the guest in its own netns (rvx-smoke),
#   2. inside the guest: rxe0 listed by ibv_devices, PORT_ACTIVE, a RoCE v2 GID for the
#      guest address at the index the guest reported, rxe0 bound to eth0 (rdma link),
#   3. inside the guest: ibv_rc_pingpong server and client over rxe0 (rxe loopback),
#   4. host -> guest -> host: a management datagram with a correct ICRC sent from the host
#      netns to the guest's QP1 is counted by rxe0 (hw_counters/rcvd_pkts grows) and
#      answered by the guest kernel (GetResp, valid ICRC, our transaction id),
#   5. guest -> host: the guest's ibv_rc_pingpong client, given a made-up peer by a host
#      stand-in for its TCP exchange, sends its first RC packet over the tap: right QP,
#      right PSN, valid ICRC.
# Every wait is bounded; the guest, the netns and the tap are removed on exit. Prints
# "N passed, N failed" last and exits non-zero if any check failed.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
VM=$HERE/rxe-vm/vm.sh
PROBE=$HERE/rxe-vm/roce_probe.py
# Own names, so a guest started by hand with the defaults is left alone.
export RVERBS_VM_NETNS=${RVERBS_VM_NETNS:-rvx-smoke}
export RVERBS_VM_TAP=${RVERBS_VM_TAP:-rvx-smoke0}
export RVERBS_VM_STATE=${RVERBS_VM_STATE:-/run/rverbs-vm-smoke}
export RVERBS_VM_RUN_TIMEOUT=${RVERBS_VM_RUN_TIMEOUT:-60}
HOST_IP=${RVERBS_VM_HOST_IP:-10.77.0.1}
GUEST_IP=${RVERBS_VM_GUEST_IP:-10.77.0.2}

[ "$(id -u)" = 0 ] || { echo "rxe_vm_smoke: needs root (netns, tap)" >&2; exit 1; }

TMP=$(mktemp -d /tmp/rxe-vm-smoke.XXXXXX)
PEER_PID=
cleanup() {
    if [ -n "$PEER_PID" ]; then kill "$PEER_PID" 2>/dev/null || true; fi
    "$VM" stop >/dev/null 2>&1 || true
    rm -rf "$TMP"
}
trap cleanup EXIT

passed=0 failed=0
pass() { passed=$((passed + 1)); echo "ok: $*"; }
fail() { failed=$((failed + 1)); echo "FAIL: $*"; }
# run_in_guest NAME CMD...: the command's output in $TMP/NAME (stdout + stderr).
run_in_guest() {
    local name=$1; shift
    "$VM" run "$@" > "$TMP/$name" 2>&1
}
counter() { "$VM" run cat "/sys/class/infiniband/rxe0/ports/1/hw_counters/$1"; }

t0=$SECONDS
"$VM" prepare
t_prepare=$((SECONDS - t0))

t0=$SECONDS
"$VM" stop >/dev/null 2>&1 || true
if ! "$VM" start; then
    fail "guest boot"
    echo "$passed passed, $failed failed"
    exit 1
fi
t_boot=$((SECONDS - t0))
pass "guest booted, rxe0 ready in ${t_boot} s"
eval "$("$VM" env)"
echo "guest: $GUEST_IP, RoCE v2 GID index $RVX_GID_INDEX; host: $HOST_IP in netns $RVX_NETNS"
t_checks=$SECONDS

# 2. Device, port, GID, link.
if run_in_guest devices ibv_devices && grep -qw rxe0 "$TMP/devices"; then
    pass "ibv_devices lists rxe0"
else
    fail "ibv_devices lists rxe0"; cat "$TMP/devices"
fi
cat "$TMP/devices"
if run_in_guest devinfo ibv_devinfo -v -d rxe0; then
    grep -E 'hca_id|transport|state|active_mtu|GID\[' "$TMP/devinfo" || true
    if grep -q 'state:.*PORT_ACTIVE' "$TMP/devinfo"; then
        pass "rxe0 port 1 PORT_ACTIVE"
    else
        fail "rxe0 port 1 PORT_ACTIVE"
    fi
    if grep -Eq "GID\[ *$RVX_GID_INDEX\]:[[:space:]]+::ffff:$GUEST_IP, RoCE v2" "$TMP/devinfo"; then
        pass "GID[$RVX_GID_INDEX] = ::ffff:$GUEST_IP, RoCE v2"
    else
        fail "GID[$RVX_GID_INDEX] = ::ffff:$GUEST_IP, RoCE v2"
    fi
else
    fail "ibv_devinfo -d rxe0"; cat "$TMP/devinfo"
fi
if run_in_guest link rdma link show rxe0/1 && grep -q 'state ACTIVE.*netdev eth0' "$TMP/link"; then
    pass "rdma link: $(cat "$TMP/link")"
else
    fail "rdma link show rxe0/1"; cat "$TMP/link"
fi

# 3. RC ping-pong inside the guest: the server in the background, the client once the
# server listens on its TCP port (bounded poll), both must succeed.
G=$RVX_GID_INDEX
if run_in_guest pingpong bash -c "
    ibv_rc_pingpong -d rxe0 -g $G -n 100 > /tmp/server.log 2>&1 & server=\$!
    for i in \$(seq 100); do ss -ltn | grep -q ':18515 ' && break; sleep 0.1; done
    ibv_rc_pingpong -d rxe0 -g $G -n 100 $GUEST_IP; client=\$?
    wait \$server; server_rc=\$?
    echo '--- server:'; cat /tmp/server.log
    echo \"client=\$client server=\$server_rc\"
    [ \$client = 0 ] && [ \$server_rc = 0 ]" &&
    [ "$(grep -c '100 iters in' "$TMP/pingpong")" = 2 ]; then
    pass "ibv_rc_pingpong server + client on rxe0 (100 iterations each)"
else
    fail "ibv_rc_pingpong in the guest"
fi
cat "$TMP/pingpong"

# 4. Host -> guest: a valid RoCEv2 datagram reaches rxe0 and its answer reaches the host.
before=$(counter rcvd_pkts)
if ip netns exec "$RVX_NETNS" python3 "$PROBE" gsi-ping "$RVX_TAP" "$HOST_IP" "$GUEST_IP" 15 \
    > "$TMP/gsi" 2>&1; then
    pass "host MAD to the guest's QP1 answered by the guest (valid ICRC both ways)"
else
    fail "host MAD to the guest's QP1"
fi
cat "$TMP/gsi"
after=$(counter rcvd_pkts)
if [ "$after" -gt "$before" ]; then
    pass "rxe0 rcvd_pkts grew ($before -> $after)"
else
    fail "rxe0 rcvd_pkts did not grow ($before -> $after)"
fi

# 5. Guest -> host: the guest's RC client talks to a stand-in peer on the host.
ip netns exec "$RVX_NETNS" python3 "$PROBE" rc-peer "$RVX_TAP" "$HOST_IP" "$GUEST_IP" 30 \
    > "$TMP/rcpeer" 2>&1 &
PEER_PID=$!
for _ in $(seq 100); do grep -q listening "$TMP/rcpeer" && break; sleep 0.1; done
# The client never gets an ACK (no QP on the host; rxe 6.1 retries forever with
# retry_cnt 7): start it detached, stop it by its pid once the peer has seen its packet.
"$VM" run bash -c "ibv_rc_pingpong -d rxe0 -g $G -s 64 -n 1 $HOST_IP > /tmp/client.log 2>&1 &
    echo \$! > /tmp/client.pid" || true
if wait "$PEER_PID"; then
    pass "guest RC packet seen on the host tap (right QP and PSN, valid ICRC)"
else
    fail "guest RC packet on the host tap"
fi
PEER_PID=
cat "$TMP/rcpeer"
"$VM" run bash -c 'kill $(cat /tmp/client.pid) 2>/dev/null; cat /tmp/client.log' || true
t_checks=$((SECONDS - t_checks))

echo "timings: prepare ${t_prepare} s, boot to ready ${t_boot} s, checks ${t_checks} s"
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
