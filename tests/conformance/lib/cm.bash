# Helpers for conformance scripts that run rdma_cm programs over rverbs. Sourced, not
# run. Reads the connection manager's host-wide binding table (crates/rverbs-cm/src/
# table.rs): <runtime>/cm/<space>-<port>/ holds one file per binding, one line such as
#   ep=3 pid=1234 id=17 listen=1 reuse=0 afonly=1 backlog=1024 addr=127.0.0.1:7174
# Names starting with "." are temporary files, not entries.
# And the device's host-wide multicast record (crates/rverbs/src/mcast.rs):
# <runtime>/mcast/<group GID, 32 hex digits>/<QPN, 6 hex digits>.<pid>, one empty file
# per QP attached to the group.

# The runtime directory, computed as the device does (docs/device.md, "Registry").
cm_runtime_dir() {
  if [ -n "${RVERBS_RUNTIME_DIR:-}" ]; then
    printf '%s\n' "$RVERBS_RUNTIME_DIR"
  elif [ -n "${XDG_RUNTIME_DIR:-}" ]; then
    printf '%s\n' "$XDG_RUNTIME_DIR/rverbs"
  elif [ -d /dev/shm ]; then
    printf '%s\n' "/dev/shm/rverbs-$(id -u)"
  else
    printf '%s\n' "/tmp/rverbs-$(id -u)"
  fi
}

# Is process $1 alive (and not a zombie)? With /proc: its stat exists and its state is
# not Z; without: kill -0.
_cm_pid_alive() {
  local stat
  [[ $1 =~ ^[0-9]+$ ]] && [ "$1" -gt 0 ] || return 1
  if [ -d /proc/self ]; then
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
    stat=${stat##*) }
    [ "${stat:0:1}" != Z ]
  else
    kill -0 "$1" 2>/dev/null
  fi
}

# cm_listening SPACE PORT: does a live entry of port space SPACE (tcp, udp, ib, ipoib)
# listen on PORT? An entry is live while its pid is (the table itself also checks that
# the pid still holds its endpoint).
cm_listening() {
  local dir f line pid
  dir=$(cm_runtime_dir)/cm/$1-$2
  [ -d "$dir" ] || return 1
  for f in "$dir"/*; do
    [ -f "$f" ] || continue
    IFS= read -r line <"$f" 2>/dev/null || continue
    case " $line " in
      *" listen=1 "*) ;;
      *) continue ;;
    esac
    pid=${line#*pid=}
    pid=${pid%% *}
    _cm_pid_alive "$pid" && return 0
  done
  return 1
}

# cm_wait_listen SPACE PORT [TIMEOUT_S=10]: waits until some live process listens on
# PORT in port space SPACE (tcp, udp or ib; rdma_listen(3) done), polling every 50 ms.
# TIMEOUT_S may have decimals. Returns 0 once it listens, 1 after the timeout (with a
# message on stderr), 2 on bad arguments.
cm_wait_listen() {
  local space=$1 port=$2 timeout=${3:-10} steps i
  case $space in
    tcp | udp | ib | ipoib) ;;
    *)
      echo "cm_wait_listen: unknown port space '$space' (tcp, udp, ib)" >&2
      return 2
      ;;
  esac
  if ! [[ $port =~ ^[0-9]+$ ]] || ! [[ $timeout =~ ^[0-9]+([.][0-9]*)?$ ]]; then
    echo "cm_wait_listen: usage: cm_wait_listen tcp|udp|ib PORT [TIMEOUT_S]" >&2
    return 2
  fi
  steps=$(awk -v t="$timeout" 'BEGIN { printf "%d", t * 20 }')
  for ((i = 0; ; i++)); do
    cm_listening "$space" "$port" && return 0
    [ "$i" -lt "$steps" ] || break
    sleep 0.05
  done
  echo "cm_wait_listen: nothing listens on $space port $port in $(cm_runtime_dir)/cm after ${timeout} s" >&2
  return 1
}

# cm_mcast_member GROUP: is a QP of a live process attached to the multicast group of
# IPv4 address GROUP (its MGID is the IPv4-mapped ::ffff:GROUP, as rdma_join_multicast
# makes it on RoCE v2)?
cm_mcast_member() {
  local a b c d dir f pid
  IFS=. read -r a b c d <<<"$1"
  dir=$(cm_runtime_dir)/mcast/$(printf '00000000000000000000ffff%02x%02x%02x%02x' "$a" "$b" "$c" "$d")
  [ -d "$dir" ] || return 1
  for f in "$dir"/*.*; do
    [ -e "$f" ] || continue
    pid=${f##*.}
    _cm_pid_alive "$pid" && return 0
  done
  return 1
}

# cm_wait_mcast GROUP [TIMEOUT_S=10]: waits until a live process has a QP attached to the
# multicast group of IPv4 address GROUP (rdma_join_multicast(3) completed with a QP on the
# id, or ibv_attach_mcast(3)), polling every 50 ms. Returns 0 once one is, 1 after the
# timeout (with a message on stderr), 2 on bad arguments.
cm_wait_mcast() {
  local group=$1 timeout=${2:-10} steps i
  if ! [[ $group =~ ^[0-9]{1,3}([.][0-9]{1,3}){3}$ ]] || ! [[ $timeout =~ ^[0-9]+([.][0-9]*)?$ ]]; then
    echo "cm_wait_mcast: usage: cm_wait_mcast IPV4_GROUP [TIMEOUT_S]" >&2
    return 2
  fi
  steps=$(awk -v t="$timeout" 'BEGIN { printf "%d", t * 20 }')
  for ((i = 0; ; i++)); do
    cm_mcast_member "$group" && return 0
    [ "$i" -lt "$steps" ] || break
    sleep 0.05
  done
  echo "cm_wait_mcast: no live member of $group in $(cm_runtime_dir)/mcast after ${timeout} s" >&2
  return 1
}

# cm_pair LABEL SPACE (for scripts that also source lib/pairs.bash, which provides the
# work directory, linebuf, exit_text and report_pair): runs scmd[] in the background,
# waits until it listens on $port in port space SPACE (or, when ready[] is set, until
# the command ready[] succeeds), runs each of the client commands ccmds[] (one per
# element, a string split on spaces) in turn, then waits for the server (or, with
# keep_server=1, kills it once the clients are done). Sets why[]. The server runs under
# the command prefix server_prefix[] and the clients under client_prefix[] (both empty
# unless the script sets them: e.g. `ip netns exec NS env RVERBS_RUNTIME_DIR=...` to run
# them as two hosts).
ready=()
server_prefix=()
client_prefix=()
cm_pair() {
  local label=$1 space=$2 src=0 crc i
  local wait=(cm_wait_listen "$space" "$port" 10)
  [ ${#ready[@]} -eq 0 ] || wait=("${ready[@]}")
  ready=()
  [[ -z $FILTER || $label =~ $FILTER ]] || return 0
  n=$((n + 1))
  slog=$WORK/logs/$n.server clog=$WORK/logs/$n.client
  : >"$clog"
  start=$EPOCHREALTIME why=()
  "${server_prefix[@]}" timeout -k 5 $((TIMEOUT + 5)) "${linebuf[@]}" "${scmd[@]}" >"$slog" 2>&1 &
  server_pid=$!
  if "${wait[@]}" >/dev/null 2>&1; then
    for i in "${!ccmds[@]}"; do
      read -ra ccmd <<<"${ccmds[$i]}"
      crc=0
      echo "== client $((i + 1)): ${ccmd[*]}" >>"$clog"
      "${client_prefix[@]}" timeout -k 5 "$TIMEOUT" "${linebuf[@]}" "${ccmd[@]}" >>"$clog" 2>&1 &
      client_pid=$!
      wait "$client_pid" || crc=$?
      client_pid=
      [ "$crc" = 0 ] || why+=("client $((i + 1)) $(exit_text "$crc")")
    done
  else
    why+=("server not ready after 10 s (${wait[*]})")
    kill "$server_pid" 2>/dev/null || true
  fi
  if [ "${keep_server:-0}" = 1 ]; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  else
    wait "$server_pid" || src=$?
    [ "$src" = 0 ] || why+=("server $(exit_text "$src")")
  fi
  server_pid=
  keep_server=0
  port=$((port + 1))
  return 0
}

# expect_in LOG PATTERN: adds a reason unless the (extended) regex is in the log.
expect_in() {
  local which=$1 pattern=$2 f
  [ "$which" = server ] && f=$slog || f=$clog
  grep -Eq -- "$pattern" "$f" || why+=("$which did not print /$pattern/")
}

pair_done() {
  [[ -z $FILTER || $1 =~ $FILTER ]] || return 0
  report_pair "$1"
}
