# Shared by the scripts that stand two hosts up as two network namespaces (udp_netns.sh,
# rc_netns.sh, xrc_netns.sh, mcast_netns.sh, net_errors.sh, ucx_netns.sh,
# scripts/bench/net_side_by_side.sh). Needs root.

# netns_pair A B MTU IP_A IP_B [IP6_A IP6_B]: creates namespaces A and B joined by a veth
# pair (A0 in A, B0 in B: the namespace names with a 0), IPv4 addresses IP_A/24 and
# IP_B/24, and the IPv6 ones /64 (no duplicate detection) when given; loopback and the
# link up with MTU. Whatever was left under those names is removed first.
netns_pair() {
  local a=$1 b=$2 mtu=$3 ip_a=$4 ip_b=$5 ip6_a=${6:-} ip6_b=${7:-}
  netns_del "$a" "$b"
  ip netns add "$a"
  ip netns add "$b"
  ip link add "${a}0" type veth peer name "${b}0"
  ip link set "${a}0" netns "$a"
  ip link set "${b}0" netns "$b"
  ip -n "$a" addr add "$ip_a/24" dev "${a}0"
  ip -n "$b" addr add "$ip_b/24" dev "${b}0"
  if [ -n "$ip6_a" ]; then
    ip -n "$a" addr add "$ip6_a/64" dev "${a}0" nodad
    ip -n "$b" addr add "$ip6_b/64" dev "${b}0" nodad
  fi
  local ns
  for ns in "$a" "$b"; do
    ip -n "$ns" link set lo up
  done
  ip -n "$a" link set "${a}0" mtu "$mtu" up
  ip -n "$b" link set "${b}0" mtu "$mtu" up
}

# netns_del NS...: removes the namespaces (their veth ends go with them).
netns_del() {
  local ns
  for ns in "$@"; do
    ip netns del "$ns" 2>/dev/null || true
  done
}

# wait_listen NS PORT: until a TCP socket listens on PORT in NS (at most 10 s).
wait_listen() {
  local _
  for _ in $(seq 200); do
    ip netns exec "$1" ss -ltn "sport = :$2" | grep -q LISTEN && return 0
    sleep 0.05
  done
}

# in_ns NS RUNTIME CMD...: CMD in namespace NS on the drop-in library ($DROPIN), as its own
# host (runtime directory RUNTIME), bounded by $TIMEOUT seconds; with RVERBS_FAULTS=$FAULTS,
# RVERBS_PCAP=$PCAP and RVERBS_LOG=$LOGF when those are set, and line-buffered output when
# LINEBUF is set (for checks that read a log while the program runs).
in_ns() {
  local ns=$1 rt=$2
  shift 2
  ip netns exec "$ns" env LD_LIBRARY_PATH="$DROPIN" RVERBS_RUNTIME_DIR="$rt" ${FAULTS:+RVERBS_FAULTS="$FAULTS"} \
    ${PCAP:+RVERBS_PCAP="$PCAP"} ${LOGF:+RVERBS_LOG="$LOGF"} timeout -k 5 "$TIMEOUT" ${LINEBUF:+stdbuf -oL -eL} "$@"
}

# gid_index NS RUNTIME ADDR: the index of ADDR's GID in the device's table inside NS.
gid_index() {
  local gid=$3
  [[ $gid == *:* ]] || gid=::ffff:$gid
  in_ns "$1" "$2" ibv_devinfo -v | grep -E "[[:space:]]$gid," | sed -E 's/.*GID\[ *([0-9]+)\].*/\1/' | head -1
}
