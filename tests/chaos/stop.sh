#!/usr/bin/env bash
# Stopped at any instant (docs/failure-model.md, the stopped-process item): unmodified
# perftest pairs on the drop-in, one side stopped with SIGSTOP and continued with SIGCONT
# over and over while traffic flows, as a debugger's breakpoints or a shell's Ctrl-Z would
# do. A stopped process goes on from where it stopped, so nothing it held may have been
# taken from it: both sides must end with status 0 (perftest fails on any completion in
# error and on a hang, which `timeout` turns into a failure here).
#
#   tests/chaos/stop.sh [STOPS]     STOPS per pair (default 30): the first 2.5 s, the others
#                                   10-90 ms, seeded
#
# Pairs: ib_write_bw and ib_read_bw at 64 KiB (the peer's memory reached directly), ib_send_bw
# at 64 B (receives taken from the other side's ring, completions written into its CQ),
# ib_atomic_bw (the host's device-atomics lock); the server stopped, then the client.
set -euo pipefail
cd "$(dirname "$0")/../.."

stops=${1:-30}
if ! command -v ib_write_bw >/dev/null; then
  echo "stop.sh: FAIL: perftest is not installed (apt-get install perftest)"
  exit 1
fi
NAME=stop.sh FIRST_PORT= TIMEOUT=60
# The work directory, the drop-in, a private runtime directory, wait_listen and pick_port.
source tests/conformance/lib/pairs.bash
RANDOM=24   # the seed of the stop lengths and gaps

run() {   # run VICTIM PROGRAM ARGS...
  local victim=$1 v src=0 crc=0 ready=0
  shift
  n=$((n + 1))
  slog=$WORK/logs/$n.server clog=$WORK/logs/$n.client
  pick_port
  timeout -k 5 "$TIMEOUT" "${linebuf[@]}" "$@" -d rverbs0 -x 1 -p "$port" -D 6 >"$slog" 2>&1 &
  server_pid=$!
  wait_listen "$port" "$server_pid" || ready=$?
  if [ "$ready" != 0 ]; then
    echo "FAIL $* ($victim stopped): the server did not listen on port $port"
    failed=$((failed + 1))
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" || true
    server_pid=
    return
  fi
  timeout -k 5 "$TIMEOUT" "${linebuf[@]}" "$@" -d rverbs0 -x 1 -p "$port" -D 6 127.0.0.1 >"$clog" 2>&1 &
  client_pid=$!
  v=$server_pid; [ "$victim" = client ] && v=$client_pid
  # Stops from the moment both run, the first one 2.5 s long (past the bounds a live
  # process is given: 1 s for a lock word, 2 s for counts and a resize); a side that
  # already ended (a failure) ends them.
  for i in $(seq "$stops"); do
    kill -STOP "$v" 2>/dev/null || break
    if [ "$i" = 1 ]; then sleep 2.5; else sleep "0.0$((RANDOM % 9 + 1))"; fi
    kill -CONT "$v" 2>/dev/null || break
    sleep "0.0$((RANDOM % 5 + 1))"
  done
  kill -CONT "$v" 2>/dev/null || true
  wait "$client_pid" || crc=$?
  wait "$server_pid" || src=$?
  client_pid= server_pid=
  if [ "$src" = 0 ] && [ "$crc" = 0 ]; then
    passed=$((passed + 1))
    echo "PASS $* ($victim stopped $stops times)"
  else
    failed=$((failed + 1))
    echo "FAIL $* ($victim stopped $stops times): server $(exit_text "$src"), client $(exit_text "$crc")"
    { echo "--- server"; tail -n 20 "$slog"; echo "--- client"; tail -n 20 "$clog"; } >&2
  fi
}

for victim in server client; do
  run "$victim" ib_write_bw -s 65536
  run "$victim" ib_read_bw -s 65536
  run "$victim" ib_send_bw -s 64
  run "$victim" ib_atomic_bw
done
finish
