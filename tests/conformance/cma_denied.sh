#!/usr/bin/env bash
# Cross-memory attach refused by the kernel: the fallback must be detected and work.
#
# Two unprivileged processes (user nobody, no capabilities) run Debian's unmodified
# ibv_rc_pingpong and ib_read_lat against each other with our libibverbs.so.1. Each is
# started from an execute-only copy of its binary, which makes the kernel mark the
# process non-dumpable: process_vm_readv/writev on it fail with EPERM even for a
# process of the same user. rverbs must notice this when it first reaches the peer (the
# log line checked below) and reach the peer's private memory through the peer
# (crate rverbs, mr/proxy.rs); data is validated by the programs (-c) and both exit 0.
#
# Needs root (to switch to the unprivileged user); prints SKIP otherwise.
set -euo pipefail
cd "$(dirname "$0")/../.."

if [ "$(id -u)" != 0 ] || ! command -v setpriv >/dev/null; then
	echo "cma_denied: SKIP (needs root and setpriv to run two processes as an unprivileged user)"
	exit 0
fi

dropin=$(scripts/build-dropin.sh)
work=$(mktemp -d /tmp/rverbs-cma-denied.XXXXXX)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	rm -rf "$work"
}
trap cleanup EXIT
chmod 0755 "$work"
mkdir "$work/rt"
chown 65534:65534 "$work/rt"
for b in ibv_rc_pingpong ib_read_lat; do
	install -m 0711 "$(command -v $b)" "$work/$b"
done
# The unprivileged user may not be able to reach the checkout (a 0700 home or temporary
# directory): it loads a copy of the library from the work directory.
mkdir -m 0755 "$work/lib"
install -m 0644 "$(readlink -f "$dropin/libibverbs.so.1")" "$work/lib/libibverbs.so.1"

as_nobody() {
	env RVERBS_RUNTIME_DIR="$work/rt" LD_LIBRARY_PATH="$work/lib" RVERBS_LOG=info \
		setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=-all "$@"
}

wait_port() {
	for _ in $(seq 100); do
		ss -ltn "sport = :$1" 2>/dev/null | grep -q ":$1" && return 0
		sleep 0.05
	done
	return 1
}

failed=0
run_pair() {
	local name=$1 port=$2
	shift 2
	as_nobody timeout 60 "$work/$1" "${@:2}" -p "$port" >"$work/srv.log" 2>&1 &
	pids+=($!)
	local srv=$!
	wait_port "$port" || true
	local cli_rc=0 srv_rc=0
	as_nobody timeout 60 "$work/$1" "${@:2}" -p "$port" 127.0.0.1 >"$work/cli.log" 2>&1 || cli_rc=$?
	wait "$srv" || srv_rc=$?
	# Both sides must have detected the refusal and used the fallback.
	local detected=0
	grep -q "cross-memory attach to this peer is refused" "$work/cli.log" && detected=$((detected + 1))
	grep -q "cross-memory attach to this peer is refused" "$work/srv.log" && detected=$((detected + 1))
	if [ "$cli_rc" = 0 ] && [ "$srv_rc" = 0 ] && [ "$detected" = 2 ]; then
		echo "PASS $name"
	else
		echo "FAIL $name (client $cli_rc, server $srv_rc, detected on $detected of 2 sides)"
		tail -n 20 "$work/srv.log" "$work/cli.log" >&2
		failed=$((failed + 1))
	fi
}

run_pair "rc_pingpong -c (non-dumpable peers)" 19311 ibv_rc_pingpong -d rverbs0 -g 1 -n 50 -c
run_pair "ib_read_lat (non-dumpable peers)" 19312 ib_read_lat -d rverbs0 -x 1 -n 200

if [ "$failed" != 0 ]; then
	echo "cma_denied: $failed failed"
	exit 1
fi
echo "cma_denied: all passed"
