#!/usr/bin/env bash
# UCX 1.13 (Debian ucx-utils, libucx0), unmodified, on rverbs' drop-in libibverbs.so.1:
# `ucx_info -d` lists the rc_verbs and ud_verbs transports of rverbs0, and ucx_perftest
# runs UCT tests over rc_verbs and ud_verbs, and UCP tag tests over rc_verbs + ud_verbs,
# between a server and a client process; UCP also connects by socket address through
# UCX's rdmacm connection manager.
#
# UCX looks for two things a kernel RDMA device has and a user-space device cannot
# create (/dev/infiniband/uverbs0 and the GIDs' sysfs attributes); the harness provides
# them, not the library, in a private mount namespace (lib/ucx.bash).
# The client starts when the server's TCP control port listens (ss, lib/pairs.bash).
#
# ud_verbs runs with UCX_UD_VERBS_ETH_DGID_CHECK=n, as it must on rxe: UCX 1.13's RoCE
# receive filter (uct_ud_iface_check_grh) takes the packet's IP version from wc.sl,
# which it reads as the mlx5 CQE "RoCE packet type" (2 = IPv4). rxe leaves 0 there and
# rverbs the sender's service level (ibv_poll_cq(3)), 0 for UCX, so UCX compares the 16
# bytes at offset 24 of the IPv4 area (IP header bytes 4..19) with its GIDs and drops
# every packet: the client never answers and both sides time out. UCX 1.19 fixed this
# (openucx/ucx#10209, "some RoCE device drivers fail to set the service level").
# UCT put/get tests do not run over ud_verbs: UCX's UD transport has no put or get.
set -euo pipefail
cd "$(dirname "$0")/../.."

NAME=ucx.sh
TIMEOUT=${UCX_TIMEOUT:-30}
FIRST_PORT=
# shellcheck source=lib/pairs.bash
# Not on /dev/shm: the mount namespace below lays an overlay over /dev, which hides the
# /dev/shm mount (and a runtime directory there) from the programs.
RVERBS_TEST_TMP=${RVERBS_TEST_TMP:-${TMPDIR:-/tmp}}
source tests/conformance/lib/pairs.bash
export UCX_UD_VERBS_ETH_DGID_CHECK=n
command -v ucx_perftest >/dev/null || { echo "$NAME: ucx_perftest missing (apt-get install ucx-utils)" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "$NAME: needs root (mknod and overlay mounts in a private mount namespace)" >&2; exit 2; }

# The mount namespace set-up, run before each command (lib/ucx.bash).
# shellcheck source=lib/ucx.bash
source tests/conformance/lib/ucx.bash
ucx_mount_setup "$WORK" || exit 2
in_ns() { "${ucx_argv[@]}" "$@"; }
# In the background: the job's shell becomes the command (exec), so its pid is the
# command's (unshare and bash exec too) and killing it stops the program.
in_ns_bg() { exec "${ucx_argv[@]}" "$@"; }

n=$((n + 1))
start=$EPOCHREALTIME why=()
slog=$WORK/logs/ucx_info.out clog=$WORK/logs/ucx_info.err
scmd=(ucx_info -d) ccmd=()
if in_ns timeout "$TIMEOUT" ucx_info -d >"$slog" 2>"$clog"; then
  grep -q 'Memory domain: rverbs0' "$slog" || why+=("no memory domain rverbs0")
  for tl in rc_verbs ud_verbs; do
    grep -q "Transport: $tl" "$slog" || why+=("no $tl transport")
  done
else
  why+=("ucx_info failed")
fi
report_pair "ucx_info -d (rverbs0: rc_verbs, ud_verbs)"

ucx_pair() {  # TEST TRANSPORT (TRANSPORT "ucp": a UCP test over rc_verbs,ud_verbs,self)
  local t=$1 tl=$2 port sel
  n=$((n + 1))
  slog=$WORK/logs/$n.server clog=$WORK/logs/$n.client
  start=$EPOCHREALTIME why=()
  pick_port
  if [ "$tl" = ucp ]; then
    sel=(env UCX_TLS=rc_verbs,ud_verbs,self UCX_NET_DEVICES=rverbs0:1 ucx_perftest)
    scmd=("${sel[@]}" -t "$t" -n 1000 -p "$port")
    ccmd=("${sel[@]}" 127.0.0.1 -t "$t" -n 1000 -p "$port")
  else
    scmd=(ucx_perftest -t "$t" -x "$tl" -d rverbs0:1 -n 1000 -p "$port")
    ccmd=(ucx_perftest 127.0.0.1 -t "$t" -x "$tl" -d rverbs0:1 -n 1000 -p "$port")
  fi
  serve_and_connect "$port" in_ns
  grep -q '^Final: *1000 ' "$clog" || why+=("client printed no final result")
  if [ "$tl" = ucp ]; then
    report_pair "ucx_perftest -t $t (UCP: rc_verbs,ud_verbs,self)"
  else
    report_pair "ucx_perftest -t $t -x $tl"
  fi
}

for t in am_lat put_lat am_bw put_bw; do
  ucx_pair "$t" rc_verbs
done
for t in am_lat am_bw; do
  ucx_pair "$t" ud_verbs
done
for t in tag_lat tag_bw; do
  ucx_pair "$t" ucp
done

# UCX's rdmacm connection manager: UCP client/server connections by socket address
# (ucp_listener / ucp_ep_create with a sockaddr), through rverbs' rdma_cm. The program is
# the example Debian's libucx-dev ships (compiled here from /usr/share/doc, as installed);
# its server serves clients until stopped. The client starts once the server's rdma_cm
# listener is in the connection manager's table (lib/cm.bash); it must exit 0 after
# receiving the server's test string.
example=/usr/share/doc/libucx-dev/examples/ucp_client_server.c
n=$((n + 1))
start=$EPOCHREALTIME why=()
slog=$WORK/logs/$n.server clog=$WORK/logs/$n.client
if [ -f "$example" ] && gcc -O1 -o "$WORK/ucp_client_server" "$example" -lucp -lucs >"$clog" 2>&1; then
  # shellcheck source=lib/cm.bash
  source tests/conformance/lib/cm.bash
  port=$next_port
  scmd=(env UCX_TLS=rc_verbs,ud_verbs,self "$WORK/ucp_client_server" -l 127.0.0.1 -p "$port" -c tag)
  ccmd=(env UCX_TLS=rc_verbs,ud_verbs,self "$WORK/ucp_client_server" -a 127.0.0.1 -p "$port" -c tag)
  in_ns_bg timeout -k 5 $((TIMEOUT + 5)) "${scmd[@]}" >"$slog" 2>&1 &
  server_pid=$!
  if cm_wait_listen tcp "$port" 10 >/dev/null 2>&1; then
    crc=0
    in_ns timeout -k 5 "$TIMEOUT" "${ccmd[@]}" >"$clog" 2>&1 || crc=$?
    [ "$crc" = 0 ] || why+=("client $(exit_text "$crc")")
    grep -q 'ABCDEFGHIJKLMNO' "$clog" || why+=("client did not receive the test string")
  else
    why+=("server not listening through rdma_cm on port $port")
  fi
  kill "$server_pid" 2>/dev/null || true
  wait "$server_pid" 2>/dev/null || true
  server_pid=
else
  why+=("cannot compile $example (apt-get install libucx-dev)")
  scmd=(gcc "$example") ccmd=()
fi
report_pair "ucp_client_server -c tag (UCX rdmacm connection manager)"
finish
