#!/usr/bin/env bash
# CPU per message of a bandwidth test between two network namespaces (a veth pair, link
# MTU 1500, path MTU 1024): each side's task-clock (perf stat, every thread of the
# process) divided by the messages sent, with the bandwidth of the same run. On a 2-vCPU
# machine both ends of ib_write_bw 64 KiB are CPU-bound, so this is what a change to the
# per-packet path moves even when single bandwidth figures drift (BENCHMARKS.md, "Across
# hosts, CPU per message").
#
# usage: scripts/bench/net_cpu.sh DROPIN_DIR|ucx SIZE N [PROG]
#   DROPIN_DIR  a directory holding the drop-in libibverbs.so.1 (scripts/build-dropin.sh),
#               running PROG (default ib_write_bw) in each namespace;
#   ucx         UCX over the kernel's TCP instead (ucx_perftest tag_bw; UCX busy-polls
#               both ends, so its CPU is its wall-clock time).
# Prints: bw <MB/s> server_cpu_ms <ms> client_cpu_ms <ms> per_msg_us server <µs> client <µs>
# Needs root (netns) and perf.
set -euo pipefail
cd "$(dirname "$0")/../.."
D=$1 S=$2 N=$3 PROG=${4:-ib_write_bw}
A=rvn-a B=rvn-b IP_A=10.75.0.1 IP_B=10.75.0.2
# shellcheck source=tests/conformance/lib/netns.bash
source tests/conformance/lib/netns.bash
WORK=$(mktemp -d /tmp/net_cpu.XXXXXX)
cleanup() { netns_del "$A" "$B"; rm -rf "$WORK"; }
trap cleanup EXIT
netns_pair "$A" "$B" 1500 "$IP_A" "$IP_B"
mkdir -p "$WORK/rt-a" "$WORK/rt-b"
port=$((26000 + RANDOM % 1000))
stat=(perf stat -x, -e task-clock)
if [ "$D" = ucx ]; then
	ip netns exec "$A" env UCX_TLS=tcp,self UCX_NET_DEVICES=${A}0 timeout 120 "${stat[@]}" -o "$WORK/s.stat" \
		ucx_perftest -t tag_bw -s "$S" -n "$N" -p "$port" >"$WORK/s.log" 2>&1 &
	spid=$!
	wait_listen "$A" "$port"
	ip netns exec "$B" env UCX_TLS=tcp,self UCX_NET_DEVICES=${B}0 timeout 120 "${stat[@]}" -o "$WORK/c.stat" \
		ucx_perftest "$IP_A" -t tag_bw -s "$S" -n "$N" -p "$port" >"$WORK/c.log" 2>&1 || true
	wait $spid || true
	bw=$(awk '/Final:/ {print $7}' "$WORK/c.log")
else
	ip netns exec "$A" env LD_LIBRARY_PATH="$D" RVERBS_RUNTIME_DIR="$WORK/rt-a" timeout 120 "${stat[@]}" -o "$WORK/s.stat" \
		"$PROG" -d rverbs0 -x 1 -F -m 1024 -p "$port" -s "$S" -n "$N" >"$WORK/s.log" 2>&1 &
	spid=$!
	wait_listen "$A" "$port"
	ip netns exec "$B" env LD_LIBRARY_PATH="$D" RVERBS_RUNTIME_DIR="$WORK/rt-b" timeout 120 "${stat[@]}" -o "$WORK/c.stat" \
		"$PROG" -d rverbs0 -x 1 -F -m 1024 -p "$port" -s "$S" -n "$N" "$IP_A" >"$WORK/c.log" 2>&1 || true
	wait $spid || true
	bw=$(grep -E '^ +[0-9]+ +[0-9]+ ' "$WORK/c.log" | tail -1 | awk '{print $4}')
fi
sc=$(grep task-clock "$WORK/s.stat" | cut -d, -f1)
cc=$(grep task-clock "$WORK/c.stat" | cut -d, -f1)
awk -v bw="$bw" -v sc="$sc" -v cc="$cc" -v n="$N" 'BEGIN {
	printf "bw %s server_cpu_ms %.0f client_cpu_ms %.0f per_msg_us server %.2f client %.2f\n", bw, sc, cc, sc * 1000 / n, cc * 1000 / n }'
