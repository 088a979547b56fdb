#!/usr/bin/env bash
# rverbs-proto's RC machines (requester + responder, driven over a real UDP socket by
# crates/rverbs-probe) against the kernel's Soft-RoCE in the rxe guest (rxe-vm/vm.sh):
#   1. our side as ibv_rc_pingpong's server, the guest's unmodified ibv_rc_pingpong as the
#      client, sizes 1, 4096 and 65536 (MTU 1024: SEND_ONLY, and FIRST/MIDDLE/LAST both
#      ways), N iterations; both sides must succeed, each message's bytes are checked
#      (rc_pingpong echoes what it received), no packet may have a bad ICRC;
#   2. our side as the client (our PSN starts at 0xffffc0, so it wraps), the guest's
#      ibv_rc_pingpong as the server;
#   3. faults: we corrupt the ICRC of every 5th request packet we send (rxe must drop them
#      and our requester retry until done), and we drop every 7th packet we receive (our
#      responder must NAK the gaps, rxe retry);
#   and for every clean run: a capture on the tap (tshark) whose ICRCs are recomputed by our
#   own code (both directions, with the IPv4 IDs really on the wire), our driver's own pcap
#   (RVERBS_PCAP's format) with as many RoCEv2 packets as the tap saw, and tshark decoding
#   both without a malformed packet.
# Prints "N passed, N failed" last; exits non-zero if any check failed. Every wait is
# bounded, and the whole script runs under `timeout` (RVERBS_PROTO_TIMEOUT, 900 s).
# Knobs: RVERBS_PROTO_ITERS (100), RVERBS_PROTO_SIZES ("1 4096 65536"), RVERBS_PROTO_KEEP=1
# (keep the work directory with outputs and captures).
set -euo pipefail

if [ -z "${PROTO_RXE_BOUNDED:-}" ]; then
    export PROTO_RXE_BOUNDED=1
    exec timeout -k 10 "${RVERBS_PROTO_TIMEOUT:-900}" bash "$0" "$@"
fi

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
VM=$HERE/rxe-vm/vm.sh
# Own names, so a guest started by hand (or the smoke's) is left alone.
export RVERBS_VM_NETNS=${RVERBS_VM_NETNS:-rvx-proto}
export RVERBS_VM_TAP=${RVERBS_VM_TAP:-rvx-proto0}
export RVERBS_VM_STATE=${RVERBS_VM_STATE:-/run/rverbs-vm-proto}
export RVERBS_VM_RUN_TIMEOUT=${RVERBS_VM_RUN_TIMEOUT:-120}
ITERS=${RVERBS_PROTO_ITERS:-100}
SIZES=${RVERBS_PROTO_SIZES:-1 4096 65536}
# tshark's heuristic payload dissectors misread RC payloads (docs/rocev2-wire.md §6).
NOHEUR=(--disable-heuristic rpcrdma_infiniband --disable-heuristic iser_infiniband
    --disable-heuristic smb_direct_infiniband --disable-heuristic sdp_infiniband
    --disable-heuristic smcr_infiniband --disable-heuristic lnet_ib
    --disable-heuristic fc_infiniband --disable-heuristic eth_over_ib --disable-heuristic nvme_rdma)

[ "$(id -u)" = 0 ] || { echo "proto_rxe: needs root (netns, tap)" >&2; exit 1; }
command -v tshark >/dev/null || { echo "proto_rxe: needs tshark (apt-get install tshark)" >&2; exit 1; }

TMP=$(mktemp -d /tmp/proto-rxe.XXXXXX)
BG_PIDS=()
cleanup() {
    local p
    for p in "${BG_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    "$VM" stop >/dev/null 2>&1 || true
    if [ "${RVERBS_PROTO_KEEP:-}" = 1 ]; then echo "kept $TMP"; else rm -rf "$TMP"; fi
}
trap cleanup EXIT
trap 'exit 143' TERM INT

passed=0 failed=0
pass() { passed=$((passed + 1)); echo "ok: $*"; }
fail() { failed=$((failed + 1)); echo "FAIL: $*"; }

t0=$SECONDS
(cd "$REPO" && cargo build --release --locked -q -p rverbs-probe)
PROBE=${CARGO_TARGET_DIR:-$REPO/target}/release/rverbs-probe
[ -x "$PROBE" ] || { echo "proto_rxe: no $PROBE" >&2; exit 1; }
t_build=$((SECONDS - t0))

t0=$SECONDS
"$VM" prepare
"$VM" stop >/dev/null 2>&1 || true
if ! "$VM" start; then
    fail "guest boot"
    echo "$passed passed, $failed failed"
    exit 1
fi
eval "$("$VM" env)"
G=$RVX_GID_INDEX HOST=$RVX_HOST_IP GUEST=$RVX_GUEST_IP
t_boot=$((SECONDS - t0))
pass "guest booted in ${t_boot} s (rxe0 GID index $G on $GUEST; we are $HOST in netns $RVX_NETNS)"
in_ns() { ip netns exec "$RVX_NETNS" "$@"; }

# wait_for FILE PATTERN: bounded (10 s) wait for a line in a file a background job writes.
wait_for() {
    local i
    for i in $(seq 100); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
    return 1
}

# Capture on the tap: start_capture NAME; stop_capture waits (bounded) until the capture
# holds at least $1 RoCEv2 packets, then stops it.
CAP_PID=
start_capture() {
    # Not through in_ns: `FUNCTION &` is a subshell whose PID is not tshark's, so killing
    # it left the capture running (it recorded every later pair until the tap went away).
    ip netns exec "$RVX_NETNS" tshark -q -i "$RVX_TAP" -F pcap -w "$TMP/$1" -f "udp port 4791" \
        > /dev/null 2> "$TMP/$1.err" &
    CAP_PID=$!
    BG_PIDS+=("$CAP_PID")
    wait_for "$TMP/$1.err" "Capturing on" || echo "note: capture on $RVX_TAP did not report start"
}
roce_count() { tshark -r "$1" -Y 'udp.port == 4791' 2>/dev/null | wc -l; }
stop_capture() {
    local want=$1 file=$2 i
    for i in $(seq 50); do [ "$(roce_count "$file")" -ge "$want" ] && break; sleep 0.1; done
    # TERM: an asynchronous job of a non-interactive shell ignores SIGINT.
    kill -TERM "$CAP_PID" 2>/dev/null || true
    wait "$CAP_PID" 2>/dev/null || true
}

# check_captures NAME OURS REAL: ICRCs of both (our code), same RoCEv2 packet count,
# tshark decodes both without malformed packets or warnings.
check_captures() {
    local name=$1 ours=$2 real=$3 n_ours n_real bad
    if "$PROBE" check-pcap "$real" "$ours" > "$TMP/$name.icrc" 2>&1; then
        pass "$name: every ICRC valid, tap capture and our pcap ($(grep -o 'ok [0-9]*' "$TMP/$name.icrc" | head -1 | cut -d' ' -f2) packets on the wire)"
    else
        fail "$name: ICRC check"; cat "$TMP/$name.icrc"
    fi
    n_ours=$(roce_count "$ours") n_real=$(roce_count "$real")
    if [ "$n_ours" -gt 0 ] && [ "$n_ours" = "$n_real" ]; then
        pass "$name: our pcap holds every RoCEv2 packet the tap saw ($n_ours)"
    else
        fail "$name: our pcap has $n_ours RoCEv2 packets, the tap $n_real"
    fi
    local filter='_ws.malformed || _ws.expert.severity >= warning || !infiniband' rc1=0 rc2=0
    tshark -r "$ours" -d udp.port==4791,infiniband "${NOHEUR[@]}" -Y "$filter" \
        > "$TMP/$name.bad-ours" 2> "$TMP/$name.tshark.err" || rc1=$?
    tshark -r "$real" "${NOHEUR[@]}" -Y "$filter" > "$TMP/$name.bad-tap" 2>> "$TMP/$name.tshark.err" || rc2=$?
    if [ "$rc1" = 0 ] && [ "$rc2" = 0 ] && [ ! -s "$TMP/$name.bad-ours" ] && [ ! -s "$TMP/$name.bad-tap" ]; then
        pass "$name: tshark decodes both captures as InfiniBand, nothing malformed"
    else
        fail "$name: tshark (exit $rc1, $rc2): $(wc -l < "$TMP/$name.bad-ours") bad packets in our pcap, $(wc -l < "$TMP/$name.bad-tap") on the tap"
        head -5 "$TMP/$name.bad-ours" "$TMP/$name.bad-tap" "$TMP/$name.tshark.err"
    fi
}

# 1. Our server, the guest's client.
t_tests=$SECONDS
server_pair() {
    S=$1
    name=server-$S
    start_capture "$name.tap.pcap"
    in_ns "$PROBE" pingpong-server --local "$HOST" --size "$S" --iters "$ITERS" \
        --pcap "$TMP/$name.pcap" --timeout 90 > "$TMP/$name.out" 2>&1 &
    pid=$!
    BG_PIDS+=("$pid")
    wait_for "$TMP/$name.out" listening || echo "note: our server did not report listening"
    guest_rc=0
    "$VM" run ibv_rc_pingpong -d rxe0 -g "$G" -n "$ITERS" -s "$S" "$HOST" > "$TMP/$name.guest" 2>&1 || guest_rc=$?
    probe_rc=0
    wait "$pid" || probe_rc=$?
    n=$(grep -o 'pcap records: [0-9]*' "$TMP/$name.out" | grep -o '[0-9]*$' || echo 0)
    stop_capture "${n:-0}" "$TMP/$name.tap.pcap"
    if [ "$guest_rc" = 0 ] && grep -q "^$ITERS iters in" "$TMP/$name.guest"; then
        pass "$name: guest ibv_rc_pingpong client, -s $S -n $ITERS: $(grep 'iters in' "$TMP/$name.guest")"
    else
        fail "$name: guest ibv_rc_pingpong client exited $guest_rc"; cat "$TMP/$name.guest"
    fi
    if [ "$probe_rc" = 0 ] && grep -q '^RESULT ok' "$TMP/$name.out"; then
        pass "$name: our server: $(grep '^RESULT' "$TMP/$name.out" | cut -d' ' -f3-)"
    else
        fail "$name: our server exited $probe_rc"
    fi
    sed 's/^/    /' "$TMP/$name.out"
    check_captures "$name" "$TMP/$name.pcap" "$TMP/$name.tap.pcap"
}
for S in $SIZES; do
    server_pair "$S"
done

# 2. The guest's server, our client (our PSN wraps during the run).
client_pair() {
    S=$1
    name=client-$S
    start_capture "$name.tap.pcap"
    "$VM" run bash -c "rm -f /tmp/srv-$S.*; (ibv_rc_pingpong -d rxe0 -g $G -n $ITERS -s $S > /tmp/srv-$S.log 2>&1; echo \$? > /tmp/srv-$S.rc) &
        for i in \$(seq 100); do ss -ltn | grep -q ':18515 ' && exit 0; sleep 0.1; done; exit 1" ||
        echo "note: the guest server did not listen"
    probe_rc=0
    in_ns "$PROBE" pingpong-client --local "$HOST" --server "$GUEST" --size "$S" --iters "$ITERS" \
        --psn 0xffffc0 --pcap "$TMP/$name.pcap" --timeout 90 > "$TMP/$name.out" 2>&1 || probe_rc=$?
    guest_rc=0
    "$VM" run bash -c "for i in \$(seq 100); do [ -e /tmp/srv-$S.rc ] && break; sleep 0.1; done
        cat /tmp/srv-$S.log; exit \$(cat /tmp/srv-$S.rc 2>/dev/null || echo 124)" > "$TMP/$name.guest" 2>&1 || guest_rc=$?
    n=$(grep -o 'pcap records: [0-9]*' "$TMP/$name.out" | grep -o '[0-9]*$' || echo 0)
    stop_capture "${n:-0}" "$TMP/$name.tap.pcap"
    if [ "$guest_rc" = 0 ] && grep -q "^$ITERS iters in" "$TMP/$name.guest"; then
        pass "$name: guest ibv_rc_pingpong server, -s $S -n $ITERS: $(grep 'iters in' "$TMP/$name.guest")"
    else
        fail "$name: guest ibv_rc_pingpong server exited $guest_rc"; cat "$TMP/$name.guest"
    fi
    if [ "$probe_rc" = 0 ] && grep -q '^RESULT ok' "$TMP/$name.out"; then
        pass "$name: our client: $(grep '^RESULT' "$TMP/$name.out" | cut -d' ' -f3-)"
    else
        fail "$name: our client exited $probe_rc"
    fi
    sed 's/^/    /' "$TMP/$name.out"
    check_captures "$name" "$TMP/$name.pcap" "$TMP/$name.tap.pcap"
}
for S in $SIZES; do
    client_pair "$S"
done

# 3. Faults (our server, the guest's client, 4 KiB: four packets a message).
FAULT_ITERS=$(( ITERS < 50 ? ITERS : 50 ))
for fault in "corrupt-tx 5" "drop-rx 7"; do
    set -- $fault
    name=fault-$1
    in_ns "$PROBE" pingpong-server --local "$HOST" --size 4096 --iters "$FAULT_ITERS" \
        --"$1" "$2" --timeout 90 > "$TMP/$name.out" 2>&1 &
    pid=$!
    BG_PIDS+=("$pid")
    wait_for "$TMP/$name.out" listening || echo "note: our server did not report listening"
    guest_rc=0
    "$VM" run ibv_rc_pingpong -d rxe0 -g "$G" -n "$FAULT_ITERS" -s 4096 "$HOST" > "$TMP/$name.guest" 2>&1 || guest_rc=$?
    probe_rc=0
    wait "$pid" || probe_rc=$?
    sed 's/^/    /' "$TMP/$name.out"
    recovered=$(grep -o 'retransmits=[0-9]*' "$TMP/$name.out" | cut -d= -f2 || echo 0)
    case $1 in
        corrupt-tx) evidence=$recovered what="our requester retransmitted ${recovered:-0} packets" ;;
        drop-rx) evidence=$(grep -o 'on purpose [0-9]*' "$TMP/$name.out" | grep -o '[0-9]*$' || echo 0)
            what="${evidence:-0} packets dropped, rxe retried" ;;
    esac
    if [ "$guest_rc" = 0 ] && grep -q "^$FAULT_ITERS iters in" "$TMP/$name.guest" &&
        [ "$probe_rc" = 0 ] && grep -q '^RESULT ok' "$TMP/$name.out" && [ "${evidence:-0}" -gt 0 ]; then
        pass "$name $2: both sides complete $FAULT_ITERS iterations with every byte right; $what"
    else
        fail "$name $2: guest exited $guest_rc, we exited $probe_rc ($what)"; cat "$TMP/$name.guest"
    fi
done
t_tests=$((SECONDS - t_tests))

echo "timings: build ${t_build} s, boot to ready ${t_boot} s, tests ${t_tests} s"
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
