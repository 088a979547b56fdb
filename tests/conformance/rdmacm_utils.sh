#!/usr/bin/env bash
# Debian's rdmacm-utils (rdma-core 44), unmodified, against the drop-in pair
# libibverbs.so.1 + librdmacm.so.1: for each case a server (in the background) and a
# client process on this host, connected over 127.0.0.1 (or ::1) by the rdma_cm.
#
#   rping        -v -V -C 10; -S 65000; -q (self-created QP: rdma_init_qp_attr,
#                rdma_establish); over ::1
#   ucmatose     default; -c 10 -C 100; -m (migration); -t/-a (TOS, ACK timeout
#                options) -S 4000; IPv6 (-f ipv6, ::1)
#   rdma_server / rdma_client   (synchronous API: rdma_create_ep, rdma_get_request)
#   udaddy       default; -c 4 -C 20 -S 1024 (UD, SIDR)
#
# Builds the drop-in with scripts/build-dropin.sh (or takes DROPIN_DIR) and points
# RVERBS_RUNTIME_DIR at a fresh temporary directory (removed at exit with any leftover
# process), so the connection manager's port table is this run's own and the programs'
# default ports cannot collide with anything else. The client starts once the server
# listens (tests/conformance/lib/cm.bash: cm_listening); both sides are bounded by
# `timeout` (RDMACM_TIMEOUT, default 30 s), both exit codes must be 0 and each side must
# print its success line (the last ping, "return status 0", "end 0"). One
# `PASS label (s)` / `FAIL label (s): reasons` line per case (a failing case's last 20
# lines of each side on stderr), then `N passed, N failed`; exit 1 if any failed. An
# optional argument is a bash regex on the labels, e.g.
# `bash tests/conformance/rdmacm_utils.sh '^rping'`.
set -uo pipefail
cd "$(dirname "$0")/../.."
NAME=rdmacm_utils.sh
TIMEOUT=${RDMACM_TIMEOUT:-30}
filter=${1:-}

source tests/conformance/lib/cm.bash

WORK=$(mktemp -d "${TMPDIR:-/tmp}/rverbs-rdmacm.XXXXXX")
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

dropin=${DROPIN_DIR:-$(scripts/build-dropin.sh)}
for lib in libibverbs.so.1 librdmacm.so.1; do
  [ -e "$dropin/$lib" ] || { echo "$NAME: no $lib in $dropin" >&2; exit 2; }
done
export LD_LIBRARY_PATH=$dropin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export RVERBS_RUNTIME_DIR=$WORK/runtime
mkdir -m 700 "$RVERBS_RUNTIME_DIR"

linebuf=()
command -v stdbuf >/dev/null && linebuf=(stdbuf -oL -eL)

# Waits until port $2 of space $1 has a listener (cm.bash: cm_listening), polling every
# 50 ms for up to 10 s; fails at once if the server ($3) exits first.
wait_listen() {
  local i
  for ((i = 0; i < 200; i++)); do
    cm_listening "$1" "$2" && return 0
    kill -0 "$3" 2>/dev/null || return 1
    sleep 0.05
  done
  return 1
}

passed=0 failed=0
# case LABEL SPACE PORT SERVER-CMD SERVER-EXPECT CLIENT-CMD CLIENT-EXPECT
# (commands are word-split; EXPECT is an extended regex one output line must match)
case_() {
  local label=$1 space=$2 port=$3 scmd=$4 sexp=$5 ccmd=$6 cexp=$7
  local slog=$WORK/server.log clog=$WORK/client.log t0=$EPOCHREALTIME src crc
  local -a why=()
  [[ -z $filter || $label =~ $filter ]] || return 0
  # shellcheck disable=SC2086
  timeout "$TIMEOUT" "${linebuf[@]}" $scmd >"$slog" 2>&1 &
  server_pid=$!
  if wait_listen "$space" "$port" "$server_pid"; then
    # shellcheck disable=SC2086
    timeout "$TIMEOUT" "${linebuf[@]}" $ccmd >"$clog" 2>&1 &
    client_pid=$!
    wait "$client_pid"; crc=$?
  else
    crc=-1
    why+=("the server never listened")
    kill "$server_pid" 2>/dev/null
    : >"$clog"
  fi
  client_pid=
  wait "$server_pid"; src=$?
  server_pid=
  [ "$src" -eq 0 ] || why+=("server exit $src")
  [ "$crc" -eq 0 ] || [ "$crc" -eq -1 ] || why+=("client exit $crc")
  grep -Eq -- "$sexp" "$slog" || why+=("server did not print /$sexp/")
  grep -Eq -- "$cexp" "$clog" || why+=("client did not print /$cexp/")
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

ok='^return status 0$'
case_ "rping" tcp 7174 \
  "rping -s -a 127.0.0.1 -v -V -C 10 -p 7174" '^server ping data: rdma-ping-9: ' \
  "rping -c -a 127.0.0.1 -v -V -C 10 -p 7174" '^ping data: rdma-ping-9: '
case_ "rping -S 65000" tcp 7174 \
  "rping -s -a 127.0.0.1 -v -V -S 65000 -C 3 -p 7174" '^server ping data: rdma-ping-2: ' \
  "rping -c -a 127.0.0.1 -v -V -S 65000 -C 3 -p 7174" '^ping data: rdma-ping-2: '
case_ "rping -q" tcp 7174 \
  "rping -s -q -a 127.0.0.1 -v -V -C 10 -p 7174" '^server ping data: rdma-ping-9: ' \
  "rping -c -q -a 127.0.0.1 -v -V -C 10 -p 7174" '^ping data: rdma-ping-9: '
case_ "rping ::1" tcp 7174 \
  "rping -s -a ::1 -v -C 3 -p 7174" '^server ping data: rdma-ping-2: ' \
  "rping -c -a ::1 -v -C 3 -p 7174" '^ping data: rdma-ping-2: '
case_ "ucmatose" tcp 7471 "ucmatose" "$ok" "ucmatose -s 127.0.0.1" "$ok"
case_ "ucmatose -c 10 -C 100" tcp 7471 \
  "ucmatose -c 10 -C 100" "$ok" "ucmatose -s 127.0.0.1 -c 10 -C 100" "$ok"
case_ "ucmatose -m" tcp 7471 "ucmatose -m -c 3" "$ok" "ucmatose -s 127.0.0.1 -m -c 3" "$ok"
case_ "ucmatose -t 32 -a 14 -S 4000" tcp 7471 \
  "ucmatose -t 32 -a 14 -S 4000 -C 20" "$ok" \
  "ucmatose -s 127.0.0.1 -t 32 -a 14 -S 4000 -C 20" "$ok"
case_ "ucmatose ipv6" tcp 7471 \
  "ucmatose -f ipv6 -b ::1" "$ok" "ucmatose -f ipv6 -s ::1" "$ok"
case_ "rdma_server/rdma_client" tcp 7471 \
  "rdma_server" '^rdma_server: end 0$' "rdma_client -s 127.0.0.1" '^rdma_client: end 0$'
case_ "udaddy" udp 7174 "udaddy" "$ok" "udaddy -s 127.0.0.1" "$ok"
case_ "udaddy -c 4 -C 20 -S 1024" udp 7174 \
  "udaddy -c 4 -C 20 -S 1024" "$ok" "udaddy -s 127.0.0.1 -c 4 -C 20 -S 1024" "$ok"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
