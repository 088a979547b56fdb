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

# pcap_checks CAP FILTER MIN WORKDIR ADDR...: tshark decodes at least MIN packets of the
# capture CAP matching FILTER as RoCE (InfiniBand on UDP port 4791, the heuristic payload
# dissectors off, docs/rocev2-wire.md §6) with nothing malformed or warned, and the ICRC of
# every record, recomputed from the record alone (`rverbs-probe check-pcap`, its output in
# WORKDIR/icrc.log), is right — with good ICRCs counted from each ADDR and no bad one.
# Sets `pcap_packets` to the count tshark decoded.
pcap_checks() {
  local cap=$1 filter=$2 min=$3 dir=$4 bad ip
  shift 4
  local noheur=(--disable-heuristic rpcrdma_infiniband --disable-heuristic iser_infiniband
    --disable-heuristic smb_direct_infiniband --disable-heuristic sdp_infiniband
    --disable-heuristic smcr_infiniband --disable-heuristic lnet_ib
    --disable-heuristic fc_infiniband --disable-heuristic eth_over_ib --disable-heuristic nvme_rdma)
  pcap_packets=0
  if ! command -v tshark >/dev/null; then
    why+=("tshark not found (apt-get install tshark)")
  else
    pcap_packets=$(tshark -r "$cap" -d udp.port==4791,infiniband "${noheur[@]}" -Y "$filter" 2>/dev/null | wc -l)
    bad=$(tshark -r "$cap" -d udp.port==4791,infiniband "${noheur[@]}" -Y '_ws.malformed || _ws.expert.severity >= warning' 2>/dev/null | wc -l)
    [ "$pcap_packets" -ge "$min" ] || why+=("tshark decoded $pcap_packets RoCE packets ($filter), expected >= $min")
    [ "$bad" = 0 ] || why+=("$bad malformed or warned packets")
  fi
  if ! cargo run -q --release -p rverbs-probe -- check-pcap "$cap" >"$dir/icrc.log" 2>&1; then
    why+=("ICRC check: $(tail -n 1 "$dir/icrc.log")")
  fi
  for ip in "$@"; do
    grep -q "\"$ip\": ([1-9][0-9]*, 0)" "$dir/icrc.log" || why+=("check-pcap counted no good ICRC from $ip (or a bad one)")
  done
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
