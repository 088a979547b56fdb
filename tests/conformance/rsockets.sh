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

source tests/conformance/lib/cm.bash

WORK=$(mktemp -d "${TMPDIR:-/tmp}/rverbs-rsockets.XXXXXX")
server_pid= client_pid=
cleanup() {
  local pid
  for pid in $client_pid $server_pid; do
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

for tool in rstream riostream rcopy python3 cc; do
  command -v "$tool" >/dev/null || { echo "$NAME: $tool is missing" >&2; exit 2; }
done
[ -e "$PRELOAD" ] || { echo "$NAME: no $PRELOAD (package librdmacm1)" >&2; exit 2; }
cc -O2 -Wall -Werror -o "$WORK/tcpcopy" tests/conformance/lib/tcpcopy.c || exit 2

dropin=${DROPIN_DIR:-$(scripts/build-dropin.sh)}
for lib in libibverbs.so.1 librdmacm.so.1; do
  [ -e "$dropin/$lib" ] || { echo "$NAME: no $lib in $dropin" >&2; exit 2; }
done
export LD_LIBRARY_PATH=$dropin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export RVERBS_RUNTIME_DIR=$WORK/runtime
mkdir -m 700 "$RVERBS_RUNTIME_DIR"
SERVER_NS=${RSOCKETS_SERVER_NS:-} CLIENT_NS=${RSOCKETS_CLIENT_NS:-}
ADDR=${RSOCKETS_SERVER_ADDR:-127.0.0.1}
on_server=() on_client=()
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

linebuf=()
command -v stdbuf >/dev/null && linebuf=(stdbuf -oL -eL)

# Waits until tcp port $1 has a listener, polling every 50 ms for up to 10 s; fails at
# once if the server ($2) exits first.
wait_listen() {
  local i
  for ((i = 0; i < 200; i++)); do
    cm_listening tcp "$1" && return 0
    kill -0 "$2" 2>/dev/null || return 1
    sleep 0.05
  done
  return 1
}

passed=0 failed=0
# case_ LABEL PORT SERVER-CMD SERVER-EXPECT CLIENT-CMD CLIENT-EXPECT [persistent] [cmp]
# Commands are word-split; EXPECT is an extended regex one output line must match. With
# `persistent` the server keeps serving (rcopy): it is stopped once the client is done
# and its exit status is not checked. With `cmp` $WORK/dst.bin must equal
# $WORK/src.bin.
case_() {
  local label=$1 port=$2 scmd=$3 sexp=$4 ccmd=$5 cexp=$6 persistent=${7:-} check=${8:-}
  local slog=$WORK/server.log clog=$WORK/client.log t0=$EPOCHREALTIME src crc
  local -a why=()
  [[ -z $filter || $label =~ $filter ]] || return 0
  rm -f "$WORK/dst.bin"
  # shellcheck disable=SC2086
  (cd "$WORK" && exec "${on_server[@]}" timeout "$TIMEOUT" "${linebuf[@]}" $scmd) >"$slog" 2>&1 &
  server_pid=$!
  if wait_listen "$port" "$server_pid"; then
    # shellcheck disable=SC2086
    "${on_client[@]}" timeout "$TIMEOUT" "${linebuf[@]}" $ccmd >"$clog" 2>&1 &
    client_pid=$!
    wait "$client_pid"; crc=$?
  else
    crc=-1
    why+=("the server never listened")
    kill "$server_pid" 2>/dev/null
    : >"$clog"
  fi
  client_pid=
  if [ "$persistent" = persistent ]; then
    kill "$server_pid" 2>/dev/null
    wait "$server_pid"
    src=0
  else
    wait "$server_pid"; src=$?
  fi
  server_pid=
  [ "$src" -eq 0 ] || why+=("server exit $src")
  [ "$crc" -eq 0 ] || [ "$crc" -eq -1 ] || why+=("client exit $crc")
  grep -Eq -- "$sexp" "$slog" || why+=("server did not print /$sexp/")
  grep -Eq -- "$cexp" "$clog" || why+=("client did not print /$cexp/")
  if [ "$check" = cmp ] && ! cmp -s "$WORK/src.bin" "$WORK/dst.bin"; then
    why+=("the received file differs from the sent one")
  fi
  local secs
  secs=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')
  if [ ${#why[@]} -eq 0 ]; then
    echo "PASS $label (${secs}s)"
    passed=$((passed + 1))
  else
    echo "FAIL $label (${secs}s): $(printf '%s; ' "${why[@]}" | sed 's/; $//')"
    {
      echo "--- server: $scmd"; tail -n 20 "$slog"
      echo "--- client: $ccmd"; tail -n 20 "$clog"
    } >&2
    failed=$((failed + 1))
  fi
}

bw='^1m_bw +1m +100 '
custom='^custom '
case_ "rstream blocking" 7471 "rstream -T b -T v" "$bw" "rstream -s $ADDR -T b -T v" "$bw"
case_ "rstream non-blocking" 7471 "rstream -T v -S 100000 -C 300" "$custom" \
  "rstream -s $ADDR -T v -S 100000 -C 300" "$custom"
case_ "rstream rpoll" 7471 "rstream -T a -T v -S 100000 -C 300" "$custom" \
  "rstream -s $ADDR -T a -T v -S 100000 -C 300" "$custom"
case_ "rstream rpoll small" 7471 "rstream -T a -T v -S 64 -C 2000" "$custom" \
  "rstream -s $ADDR -T a -T v -S 64 -C 2000" "$custom"
case_ "riostream" 7471 "riostream -T v -S 1000000 -C 100" "$custom" \
  "riostream -s $ADDR -T v -S 1000000 -C 100" "$custom"
case_ "riostream blocking" 7471 "riostream -T b -T v -S 4096 -C 1000" "$custom" \
  "riostream -s $ADDR -T b -T v -S 4096 -C 1000" "$custom"
case_ "rcopy" 7427 "rcopy" '^waiting for connection' \
  "rcopy $WORK/src.bin $ADDR:$WORK/dst.bin" '^[0-9]+ bytes in ' persistent cmp
case_ "preload tcpcopy" 7600 "env LD_PRELOAD=$PRELOAD $WORK/tcpcopy server 7600 $WORK/dst.bin" \
  '^server: received 4000000 bytes$' \
  "env LD_PRELOAD=$PRELOAD $WORK/tcpcopy client $ADDR 7600 $WORK/src.bin" \
  '^client: sent 4000000 bytes, server said: got 4000000$' "" cmp
case_ "preload python3 client" 7600 "env LD_PRELOAD=$PRELOAD $WORK/tcpcopy server 7600 $WORK/dst.bin" \
  '^server: received 4000000 bytes$' \
  "env LD_PRELOAD=$PRELOAD python3 $WORK/client.py $ADDR 7600 $WORK/src.bin" \
  '^client: sent 4000000 bytes, server said: got 4000000$' "" cmp

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
