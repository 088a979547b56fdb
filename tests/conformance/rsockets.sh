#!/usr/bin/env bash
# rsockets (rsocket(7), docs/rsockets.md) on this host, against the drop-in pair
# libibverbs.so.1 + librdmacm.so.1: Debian's rdmacm-utils, unmodified, as server (in
# the background) and client, over 127.0.0.1:
#
#   rstream -T b -T v     blocking sockets, every default size, data verified
#   rstream -T v          non-blocking sockets (the default: EAGAIN loops, non-blocking
#                         rconnect, rpoll for POLLOUT, SO_ERROR)
#   rstream -T a -T v     non-blocking with rpoll before every transfer
#   riostream -T v / -T b -T v   riomap, riowrite into the peer's mapping, riounmap
#   rcopy                 a 4 MB random file, compared byte for byte
#   preload               rdma-core's librspreload.so under a plain TCP program
#                         (tests/conformance/lib/tcpcopy.c, accept/recv/write) as server
#                         and under python3 (unmodified) and tcpcopy as clients; the
#                         file the server wrote is compared byte for byte, and the
#                         listener must be in the rdma_cm's port table (so the bytes
#                         went over RDMA, not a TCP fallback)
#
# Set-up as tests/conformance/rdmacm_utils.sh: the drop-in from scripts/build-dropin.sh
# (or DROPIN_DIR), a fresh RVERBS_RUNTIME_DIR, the client started once the server
# listens (lib/cm.bash: cm_listening), both bounded by `timeout` (RSOCKETS_TIMEOUT,
# default 30 s), both exit codes 0 and each side's expected line printed. One
# `PASS label (s)` / `FAIL label (s): reasons` line per case, then `N passed, N failed`;
# exit 1 if any failed. An optional argument is a bash regex on the labels.
#
# Across two hosts: tests/conformance/rsockets_netns.sh creates two network namespaces
# and runs this script with RSOCKETS_SERVER_NS / RSOCKETS_CLIENT_NS (the namespaces the
# server and the client run in, each as its own host: its own runtime directory) and
# RSOCKETS_SERVER_ADDR (the address the clients connect to; default 127.0.0.1).
set -uo pipefail
cd "$(dirname "$0")/../.."
NAME=rsockets.sh
TIMEOUT=${RSOCKETS_TIMEOUT:-30}
filter=${1:-}
PRELOAD=${RSPRELOAD:-/usr/lib/x86_64-linux-gnu/rsocket/librspreload.so}

source tests/conformance/lib/cm_pairs.bash

for tool in rstream riostream rcopy python3 cc; do
  command -v "$tool" >/dev/null || { echo "$NAME: $tool is missing" >&2; exit 2; }
done
[ -e "$PRELOAD" ] || { echo "$NAME: no $PRELOAD (package librdmacm1)" >&2; exit 2; }
cc -O2 -Wall -Werror -o "$WORK/tcpcopy" tests/conformance/lib/tcpcopy.c || exit 2

SERVER_NS=${RSOCKETS_SERVER_NS:-} CLIENT_NS=${RSOCKETS_CLIENT_NS:-}
ADDR=${RSOCKETS_SERVER_ADDR:-127.0.0.1}
if [ -n "$SERVER_NS" ]; then
  # The server's host is RVERBS_RUNTIME_DIR (where cm_listening looks); the client's
  # host has its own runtime directory.
  mkdir -m 700 "$WORK/runtime-client"
  on_server=(ip netns exec "$SERVER_NS" env RVERBS_RUNTIME_DIR="$RVERBS_RUNTIME_DIR" TCPCOPY_ADDR="$ADDR")
  on_client=(ip netns exec "$CLIENT_NS" env RVERBS_RUNTIME_DIR="$WORK/runtime-client")
fi

cat >"$WORK/client.py" <<'PY'
import socket, sys
data = open(sys.argv[3], "rb").read()
c = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
c.connect((sys.argv[1], int(sys.argv[2])))
c.sendall(data)
c.shutdown(socket.SHUT_WR)
reply = b""
while True:
    b = c.recv(100)
    if not b:
        break
    reply += b
c.close()
print("client: sent %d bytes, server said: %s" % (len(data), reply.decode().strip()))
PY
head -c 4000000 /dev/urandom >"$WORK/src.bin"

bw='^1m_bw +1m +100 '
custom='^custom '
cm_case "rstream blocking" tcp 7471 "rstream -T b -T v" "$bw" "rstream -s $ADDR -T b -T v" "$bw"
cm_case "rstream non-blocking" tcp 7471 "rstream -T v -S 100000 -C 300" "$custom" \
  "rstream -s $ADDR -T v -S 100000 -C 300" "$custom"
cm_case "rstream rpoll" tcp 7471 "rstream -T a -T v -S 100000 -C 300" "$custom" \
  "rstream -s $ADDR -T a -T v -S 100000 -C 300" "$custom"
cm_case "rstream rpoll small" tcp 7471 "rstream -T a -T v -S 64 -C 2000" "$custom" \
  "rstream -s $ADDR -T a -T v -S 64 -C 2000" "$custom"
cm_case "riostream" tcp 7471 "riostream -T v -S 1000000 -C 100" "$custom" \
  "riostream -s $ADDR -T v -S 1000000 -C 100" "$custom"
cm_case "riostream blocking" tcp 7471 "riostream -T b -T v -S 4096 -C 1000" "$custom" \
  "riostream -s $ADDR -T b -T v -S 4096 -C 1000" "$custom"
cm_case "rcopy" tcp 7427 "rcopy" '^waiting for connection' \
  "rcopy $WORK/src.bin $ADDR:$WORK/dst.bin" '^[0-9]+ bytes in ' persistent cmp
cm_case "preload tcpcopy" tcp 7600 "env LD_PRELOAD=$PRELOAD $WORK/tcpcopy server 7600 $WORK/dst.bin" \
  '^server: received 4000000 bytes$' \
  "env LD_PRELOAD=$PRELOAD $WORK/tcpcopy client $ADDR 7600 $WORK/src.bin" \
  '^client: sent 4000000 bytes, server said: got 4000000$' "" cmp
cm_case "preload python3 client" tcp 7600 "env LD_PRELOAD=$PRELOAD $WORK/tcpcopy server 7600 $WORK/dst.bin" \
  '^server: received 4000000 bytes$' \
  "env LD_PRELOAD=$PRELOAD python3 $WORK/client.py $ADDR 7600 $WORK/src.bin" \
  '^client: sent 4000000 bytes, server said: got 4000000$' "" cmp

cm_finish
