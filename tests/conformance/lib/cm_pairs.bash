# Shared by the conformance scripts that run an unmodified rdma_cm program as a server
# (in the background) and a client, each checked by its exit status and one expected
# output line (rdmacm_utils.sh, rsockets.sh). Sourced, not run: it sets up the run (work
# directory, drop-in pair libibverbs.so.1 + librdmacm.so.1, private rverbs runtime
# directory, cleanup) and provides `cm_case` and `cm_finish`.
#
# The sourcing script sets before sourcing:
#   NAME     its name, for messages (e.g. rsockets.sh)
#   TIMEOUT  seconds each side may run
#   filter   a bash regex on the labels, or empty for every case
# and may set after sourcing:
#   on_server, on_client  command prefixes (arrays) that run a side elsewhere, e.g.
#                         `ip netns exec NS env …` (rsockets_netns.sh); empty: this host
# The client is started once the server's listener is in the connection manager's
# binding table (lib/cm.bash: cm_listening), so no sleep decides the order.

source tests/conformance/lib/cm.bash

source tests/conformance/lib/workdir.bash

dropin=${DROPIN_DIR:-$(scripts/build-dropin.sh)}
for lib in libibverbs.so.1 librdmacm.so.1; do
  [ -e "$dropin/$lib" ] || { echo "$NAME: no $lib in $dropin" >&2; exit 2; }
done
export LD_LIBRARY_PATH=$dropin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# This run's shared-memory endpoints, registry and CM table live here, apart from any
# other rverbs user of the machine.
export RVERBS_RUNTIME_DIR=$WORK/runtime
mkdir -m 700 "$RVERBS_RUNTIME_DIR"
on_server=() on_client=()

# Line-buffered stdout, so that a side killed by `timeout` still leaves its output.
linebuf=()
command -v stdbuf >/dev/null && linebuf=(stdbuf -oL -eL)

# Waits until port $2 of space $1 (tcp, udp, ib) has a listener, polling every 50 ms for
# up to 10 s; fails at once if the server ($3) exits first.
cm_wait_listen() {
  local i
  for ((i = 0; i < 200; i++)); do
    cm_listening "$1" "$2" && return 0
    kill -0 "$3" 2>/dev/null || return 1
    sleep 0.05
  done
  return 1
}

passed=0 failed=0
# cm_case LABEL SPACE PORT SERVER-CMD SERVER-EXPECT CLIENT-CMD CLIENT-EXPECT [persistent] [cmp]
# Commands are word-split; the server runs in $WORK. EXPECT is an extended regex one
# output line must match. With `persistent` the server keeps serving (rcopy): it is
# stopped once the client is done and its exit status is not checked. With `cmp`
# $WORK/dst.bin must equal $WORK/src.bin. One `PASS label (s)` or `FAIL label (s):
# reasons` line, with both sides' last 20 lines on stderr for a failure.
cm_case() {
  local label=$1 space=$2 port=$3 scmd=$4 sexp=$5 ccmd=$6 cexp=$7 persistent=${8:-} check=${9:-}
  local slog=$WORK/server.log clog=$WORK/client.log t0=$EPOCHREALTIME src crc
  local -a why=()
  [[ -z $filter || $label =~ $filter ]] || return 0
  rm -f "$WORK/dst.bin"
  # shellcheck disable=SC2086
  (cd "$WORK" && exec "${on_server[@]}" timeout "$TIMEOUT" "${linebuf[@]}" $scmd) >"$slog" 2>&1 &
  server_pid=$!
  if cm_wait_listen "$space" "$port" "$server_pid"; then
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

# cm_finish: the summary line and the exit status of the script.
cm_finish() {
  echo "$passed passed, $failed failed"
  [ "$failed" -eq 0 ]
}
