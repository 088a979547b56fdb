#!/usr/bin/env bash
# UCX 1.13 (Debian ucx-utils, libucx0), unmodified, on rverbs' drop-in libibverbs.so.1:
# `ucx_info -d` lists the rc_verbs and ud_verbs transports of rverbs0, and ucx_perftest
# runs UCT tests over rc_verbs between a server and a client process.
#
# UCX looks for two things a kernel RDMA device has and a user-space device cannot
# create; the harness provides them, not the library, in a private mount namespace (as
# root: `unshare -m`; nothing outside the script sees them):
#   - /dev/infiniband/<dev_name> (uverbs0), which UCX stats and requires to be a
#     readable and writable character device before it considers the device usable: a
#     node with /dev/null's numbers, in an overlay over /dev (UCX never opens it);
#   - /sys/class/infiniband/rverbs0/ports/1/gid_attrs/{types,ndevs}/<index>, from which
#     UCX learns each GID's RoCE version and network device (for reachability): written
#     from the device's own GID table (ibv_devinfo -v) and the host's addresses, in an
#     overlay over /sys/class.
# The client starts when the server's TCP control port listens (ss, lib/pairs.bash).
#
# Not run yet: ud_verbs (and so UCP-level tag tests, which need ud_verbs to wire up RC):
# a ud_verbs client spins in ibv_poll_cq on its CQ's consumer lock (see the closing notes
# of the connection-management issue).
set -euo pipefail
cd "$(dirname "$0")/../.."

NAME=ucx.sh
TIMEOUT=${UCX_TIMEOUT:-30}
FIRST_PORT=
# shellcheck source=lib/pairs.bash
source tests/conformance/lib/pairs.bash
command -v ucx_perftest >/dev/null || { echo "$NAME: ucx_perftest missing (apt-get install ucx-utils)" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "$NAME: needs root (mknod and overlay mounts in a private mount namespace)" >&2; exit 2; }

# The namespace set-up, run inside `unshare -m` before each command.
gids=$(ibv_devinfo -v -d rverbs0 | sed -n 's/.*GID\[ *\([0-9]*\)\]:[[:space:]]*\([^,]*\), \(RoCE v[12]\).*/\1 \2 \3/p')
[ -n "$gids" ] || { echo "$NAME: no GIDs from ibv_devinfo" >&2; exit 2; }
first_if=$(ip -o link | awk -F': ' '$2 != "lo" { print $2; exit }')
setup="set -e
ovl=\$(mktemp -d -p $WORK)
mount -t tmpfs rverbs-ucx \$ovl
mkdir -p \$ovl/du \$ovl/dw \$ovl/su \$ovl/sw
mount -t overlay rverbs-dev -o lowerdir=/dev,upperdir=\$ovl/du,workdir=\$ovl/dw /dev
mkdir -p /dev/infiniband && mknod -m 666 /dev/infiniband/uverbs0 c 1 3
mount -t overlay rverbs-sys -o lowerdir=/sys/class,upperdir=\$ovl/su,workdir=\$ovl/sw /sys/class
d=/sys/class/infiniband/rverbs0/ports/1/gid_attrs
mkdir -p \$d/types \$d/ndevs"
while read -r idx gid type; do
  case $gid in
    ::ffff:*) ndev=$(ip -o -4 addr | awk -v a="${gid#::ffff:}" '{ split($4, p, "/"); if (p[1] == a) { print $2; exit } }') ;;
    fe80:*) ndev=${first_if%@*} ;;
    *) ndev=$(ip -o -6 addr | awk -v a="$gid" '{ split($4, p, "/"); if (p[1] == a) { print $2; exit } }') ;;
  esac
  setup+="
echo '$type' > \$d/types/$idx
echo '${ndev:-lo}' > \$d/ndevs/$idx"
done <<<"$gids"
in_ns() { unshare -m --propagation private bash -c "$setup
exec \"\$@\"" in_ns "$@"; }

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

ucx_pair() {  # TEST TRANSPORT
  local t=$1 tl=$2 src=0 crc=0 port ready=0
  n=$((n + 1))
  slog=$WORK/logs/$n.server clog=$WORK/logs/$n.client
  start=$EPOCHREALTIME why=()
  port=$next_port
  while port_busy "$port"; do port=$((port + 1)); done
  next_port=$((port + 1))
  scmd=(ucx_perftest -t "$t" -x "$tl" -d rverbs0:1 -n 1000 -p "$port")
  ccmd=(ucx_perftest 127.0.0.1 -t "$t" -x "$tl" -d rverbs0:1 -n 1000 -p "$port")
  in_ns timeout -k 5 $((TIMEOUT + 5)) "${scmd[@]}" >"$slog" 2>&1 &
  server_pid=$!
  wait_listen "$port" "$server_pid" || ready=$?
  if [ "$ready" = 0 ]; then
    in_ns timeout -k 5 "$TIMEOUT" "${ccmd[@]}" >"$clog" 2>&1 &
    client_pid=$!
    wait "$client_pid" || crc=$?
    client_pid=
    [ "$crc" = 0 ] || why+=("client $(exit_text "$crc")")
  else
    why+=("server not listening on port $port")
    kill "$server_pid" 2>/dev/null || true
  fi
  wait "$server_pid" || src=$?
  server_pid=
  [ "$src" = 0 ] || why+=("server $(exit_text "$src")")
  grep -q '^Final: *1000 ' "$clog" || why+=("client printed no final result")
  report_pair "ucx_perftest -t $t -x $tl"
}

for t in am_lat put_lat am_bw put_bw; do
  ucx_pair "$t" rc_verbs
done
finish
