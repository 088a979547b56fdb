# Shared by the ping-pong scripts that run their own server/client pairs (udp_netns.sh,
# tests/interop/rxe_ud.sh): the checks of one pair and its PASS/FAIL line.
#
# The caller keeps `passed`, `failed` and, per pair, the array `why` (reasons it failed).

# pingpong_checks SRC CRC SLOG CLOG ITERS: both sides exited 0, printed "ITERS iters in",
# and the client (-c) found no invalid data.
pingpong_checks() {
  local src=$1 crc=$2 slog=$3 clog=$4 iters=$5
  [ "$src" = 0 ] || why+=("server exit $src")
  [ "$crc" = 0 ] || why+=("client exit $crc")
  grep -q "^$iters iters in" "$slog" || why+=("server printed no \"$iters iters in\"")
  grep -q "^$iters iters in" "$clog" || why+=("client printed no \"$iters iters in\"")
  ! grep -q "invalid data" "$clog" || why+=("client: invalid data (-c)")
}

# perftest_checks SRC CRC CLOG ITERS: both sides exited 0 and the client printed a result
# row (perftest's rows start with the message size, then the iteration count).
perftest_checks() {
  local src=$1 crc=$2 clog=$3 iters=$4
  [ "$src" = 0 ] || why+=("server exit $src")
  [ "$crc" = 0 ] || why+=("client exit $crc")
  grep -qE "^ +[0-9]+ +$iters " "$clog" || why+=("client printed no result row")
}

# verdict LABEL [LOG...]: counts the pair and prints its line; on failure, the reasons and
# the end of each LOG on stderr.
verdict() {
  local label=$1
  shift
  if [ ${#why[@]} -eq 0 ]; then
    passed=$((passed + 1))
    echo "PASS $label"
  else
    failed=$((failed + 1))
    echo "FAIL $label: ${why[*]}"
    [ $# -eq 0 ] || tail -n 20 "$@" >&2
  fi
}
