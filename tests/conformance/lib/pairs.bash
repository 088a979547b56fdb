# Shared by the conformance scripts that run an unmodified program as a server and a
# client process on this host (pingpong.sh, perftest.sh). Sourced, not run: it sets up
# the run (work directory, drop-in library, private rverbs runtime directory, cleanup)
# and provides `run_server_client` and `report_pair`.
#
# The sourcing script sets before sourcing:
#   NAME        its name, for messages (e.g. pingpong.sh)
#   FIRST_PORT  the first TCP port to try, or empty for a random one
#   TIMEOUT     seconds each side may run

# Ports for the servers: from a random base below the kernel's ephemeral range (where
# clients' local ports come from), so that no connection of this host holds them.
eph_lo=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
[ "$eph_lo" -gt 12000 ] 2>/dev/null || eph_lo=32768
next_port=${FIRST_PORT:-$((10000 + RANDOM % ((eph_lo - 11000) / 100) * 100))}

t0=$EPOCHREALTIME
source tests/conformance/lib/workdir.bash

dropin=${DROPIN_DIR:-$(scripts/build-dropin.sh)}
[ -e "$dropin/libibverbs.so.1" ] || { echo "$NAME: no libibverbs.so.1 in $dropin" >&2; exit 2; }
export LD_LIBRARY_PATH=$dropin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# This run's shared-memory endpoints, registry and FIFOs live here, apart from any other
# rverbs user of the machine.
export RVERBS_RUNTIME_DIR=$WORK/runtime
mkdir -m 700 "$RVERBS_RUNTIME_DIR" "$WORK/logs"

# Line-buffered stdout, so that a side killed by `timeout` still leaves its output.
linebuf=()
command -v stdbuf >/dev/null && linebuf=(stdbuf -oL -eL)

# Is something listening on TCP port $1 (LISTEN only)? Is any socket on it (any state)?
# ss (iproute2), else /proc/net/tcp{,6}.
if command -v ss >/dev/null; then
  listening() { [ -n "$(ss -Hltn "sport = :$1" 2>/dev/null)" ]; }
  port_busy() { [ -n "$(ss -Hatn "sport = :$1" 2>/dev/null)" ]; }
elif [ -r /proc/net/tcp ]; then
  proc_tcp() {  # PORT STATE-REGEX
    awk -v p="$(printf ':%04X' "$1")" -v st="$2" \
      'FNR > 1 && $4 ~ st && substr($2, length($2) - 4) == p { f = 1 } END { exit !f }' \
      /proc/net/tcp /proc/net/tcp6 2>/dev/null
  }
  listening() { proc_tcp "$1" '^0A$'; }
  port_busy() { proc_tcp "$1" '.'; }
else
  listening() { return 1; }
  port_busy() { return 1; }
fi

# Waits until the server ($2) listens on port $1: polls every 50 ms for up to 5 s.
# Returns 1 if the server exits first, 2 after 5 s. Without ss or /proc/net/tcp: waits
# 1 s (bounded) and returns 1 if the server is gone by then.
wait_listen() {
  local i
  if ! command -v ss >/dev/null && ! [ -r /proc/net/tcp ]; then
    sleep 1
    kill -0 "$2" 2>/dev/null
    return
  fi
  for ((i = 0; i < 100; i++)); do
    listening "$1" && return 0
    kill -0 "$2" 2>/dev/null || return 1
    sleep 0.05
  done
  return 2
}

# "exit N", naming timeout(1)'s 124 and 137.
exit_text() {
  case $1 in
    124) echo "timed out (exit 124)" ;;
    137) echo "killed after the timeout (exit 137)" ;;
    *) echo "exit $1" ;;
  esac
}

passed=0 failed=0 n=0

# pick_port: sets `port` to a TCP port no socket of this host holds, from `next_port` on
# (which moves past it).
pick_port() {
  port=$next_port
  while port_busy "$port"; do port=$((port + 1)); done
  next_port=$((port + 1))
}

# serve_and_connect PORT [PREFIX...]: the server `scmd` in the background, then, once it
# listens on TCP port PORT, the client `ccmd`, each run as `PREFIX timeout … CMD` (PREFIX:
# e.g. a function that enters a namespace) and bounded by TIMEOUT, their outputs in
# `slog` and `clog`. Adds to `why` a side that did not exit 0 and a server that never
# listened (the client is then not started and the server stopped).
serve_and_connect() {
  local at=$1 src=0 crc=0 ready=0
  shift
  "$@" timeout -k 5 $((TIMEOUT + 5)) "${linebuf[@]}" "${scmd[@]}" >"$slog" 2>&1 &
  server_pid=$!
  wait_listen "$at" "$server_pid" || ready=$?
  if [ "$ready" = 0 ]; then
    # In the background too, so that a signal to the script is handled at once.
    "$@" timeout -k 5 "$TIMEOUT" "${linebuf[@]}" "${ccmd[@]}" >"$clog" 2>&1 &
    client_pid=$!
    wait "$client_pid" || crc=$?
    client_pid=
    [ "$crc" = 0 ] || why+=("client $(exit_text "$crc")")
  else
    echo "(client not started)" >"$clog"
    [ "$ready" = 1 ] && why+=("server exited before listening on port $at")
    [ "$ready" = 2 ] && why+=("server not listening on port $at after 5 s")
    kill "$server_pid" 2>/dev/null || true
  fi
  wait "$server_pid" || src=$?
  server_pid=
  [ "$src" = 0 ] || why+=("server $(exit_text "$src")")
}

# serve_on_free_port SETUP [PREFIX...]: serve_and_connect on a port no socket holds
# (pick_port), with `scmd` and `ccmd` set by the function SETUP for `$port`. Up to 3
# ports: another program of the host may take the port between the check and the
# server's bind (perftest then says "Couldn't listen to port", and its client may meet
# that other socket); that is not a failure of the pair, so `why` is as it was before the
# attempt, and the pair runs again on the next port.
serve_on_free_port() {
  local setup=$1 attempt
  local before=("${why[@]}")
  shift
  for attempt in 1 2 3; do
    pick_port
    why=("${before[@]}")
    "$setup"
    serve_and_connect "$port" "$@"
    [ $attempt -lt 3 ] && grep -q "^Couldn't listen to port" "$slog" || break
  done
}

# run_server_client PROGRAM ARGS...: server `PROGRAM ARGS -p PORT` in the background,
# then client `PROGRAM ARGS -p PORT 127.0.0.1`, both bounded by TIMEOUT, on a free port
# (serve_on_free_port). Sets slog and clog (their outputs), scmd and ccmd, start, and
# `why`: the reasons the pair failed so far (empty if both exited 0).
run_server_client() {
  n=$((n + 1))
  slog=$WORK/logs/$n.server clog=$WORK/logs/$n.client
  start=$EPOCHREALTIME why=()
  server_client=("$@")
  serve_on_free_port server_client_commands
}

# The commands of run_server_client's pair (`server_client`) on `$port`.
server_client_commands() {
  scmd=("${server_client[@]}" -p "$port")
  ccmd=("${server_client[@]}" -p "$port" 127.0.0.1)
}

# report_pair LABEL: one PASS or FAIL line for the pair run_server_client ran (FAIL if
# `why` holds reasons), with both sides' last 20 lines on stderr for a failure.
report_pair() {
  local label=$1 secs
  secs=$(awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.2f", b - a }')
  if [ ${#why[@]} -eq 0 ]; then
    passed=$((passed + 1))
    echo "PASS $label (${secs} s)"
  else
    failed=$((failed + 1))
    local reasons
    reasons=$(printf '%s; ' "${why[@]}")
    echo "FAIL $label (${secs} s): ${reasons%; }"
    {
      echo "--- server (last 20 lines): LD_LIBRARY_PATH=$dropin ${scmd[*]}"
      tail -n 20 "$slog"
      echo "--- client (last 20 lines): LD_LIBRARY_PATH=$dropin ${ccmd[*]}"
      tail -n 20 "$clog"
      echo "---"
    } >&2
  fi
}

# finish: the summary line and the exit status of the script.
finish() {
  if [ $n -eq 0 ]; then
    echo "$NAME: no pair matches \"$FILTER\"" >&2
    exit 2
  fi
  echo "$passed passed, $failed failed"
  awk -v a="$t0" -v b="$EPOCHREALTIME" -v name="$NAME" 'BEGIN { printf "%s: total %.1f s\n", name, b - a }'
  [ "$failed" -eq 0 ]
}
