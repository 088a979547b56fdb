#!/usr/bin/env bash
# RoCEv2/UDP between two network namespaces (a veth pair, link MTU 1500), side by side
# with the peer an RDMA engineer would compare it with on the same link: UCX over the
# kernel's TCP (ucx_perftest, UCX_TLS=tcp). Same machine, same run, same link.
#
#   rverbs: ib_send_lat / ib_write_lat -s 8 (perftest, path MTU 1024; "busy" rows with
#           RVERBS_BUSY_POLL=1, docs/progress-and-events.md), ib_write_bw and
#           ib_send_bw -s 65536, ib_write_bw -s 1 MiB, ib_read_bw -s 65536 and 1 MiB (READ
#           responses against WRITE requests, issue 24), on the drop-in libibverbs.so.1 in
#           each namespace.
#   8 KiB:  ib_write_bw and ib_send_bw -s 8192, UCP tag_bw -s 8192 over tcp and over
#           rc_verbs: the size UCX cuts a larger eager message into over rc_verbs (8 KiB
#           SENDs), so UCP tag_bw at 64 KiB follows the 8 KiB rows.
#   UCX:    ucx_perftest tag_lat -s 8, tag_bw -s 65536 and 1 MiB over tcp.
#   UCX on rverbs: the same UCP tests and ucp_put_bw over rc_verbs (UCX_TLS=
#           rc_verbs,ud_verbs,self: UCP connects RC through UD) on the drop-in in each
#           namespace, by default and with RVERBS_BUSY_POLL=1 ("busy"): what an MPI job
#           over UCX would get, against UCX over TCP on the same link (issue 24). UCX
#           looks for the device node and sysfs GID attributes a kernel device has; each
#           command runs in a private mount namespace that provides them
#           (tests/conformance/lib/ucx.bash).
#   UDP:    scripts/bench/udp_probe.c: 8-byte ping-pongs, and sendmmsg of RoCEv2-sized
#           datagrams (the floor a UDP transport stands on).
#
# BENCH_LINK_MTU=9000 runs the same on a jumbo link (path MTU 4096, 4124-byte datagrams).
# BENCH_BASE_DIR=<dir holding libibverbs.so.1 and librdmacm.so.1 of another build> runs each
# rverbs row with that build too, just before the current one ("base" rows): a before/after
# in one run, on the same link (the UCX rows over rc_verbs too). BENCH_ROWS=bw runs only the bandwidth rows.
#
# Prints one line per measurement. Needs root (netns). Not a test: numbers go to
# BENCHMARKS.md with the command that produced them.
set -euo pipefail
cd "$(dirname "$0")/../.."

N=${BENCH_ITERS:-20000}
LINK_MTU=${BENCH_LINK_MTU:-1500}
# The largest IB path MTU whose packets the link carries (rxe's rule: link MTU - 80).
if [ "$LINK_MTU" -ge 4176 ]; then PMTU=4096; else PMTU=1024; fi
DGRAM=$((PMTU + 28))
A=rvb-a B=rvb-b IP_A=10.68.0.1 IP_B=10.68.0.2
DROPIN=${DROPIN_DIR:-$(bash scripts/build-dropin.sh | tail -1)}
BASE=${BENCH_BASE_DIR:-}
ROWS=${BENCH_ROWS:-all}
# shellcheck source=tests/conformance/lib/netns.bash
source tests/conformance/lib/netns.bash
WORK=$(mktemp -d /tmp/net-bench.XXXXXX)
cleanup() {
  netns_del "$A" "$B"
  rm -rf "$WORK"
}
trap cleanup EXIT
netns_pair "$A" "$B" "$LINK_MTU" "$IP_A" "$IP_B"
mkdir -p "$WORK/rt-a" "$WORK/rt-b"

port=19100
# perftest_on LABEL LIBDIR PROG ARGS...: server in A, client in B, both on the libraries
# of LIBDIR (and the environment BUSY, if set); prints the client's result row.
perftest_on() {
  local label=$1 lib=$2 prog=$3
  shift 3
  port=$((port + 1))
  ip netns exec "$A" env LD_LIBRARY_PATH="$lib" RVERBS_RUNTIME_DIR="$WORK/rt-a" ${BUSY:+RVERBS_BUSY_POLL=1} timeout 120 \
    "$prog" -d rverbs0 -x 1 -F -m "$PMTU" -p "$port" "$@" >"$WORK/s.log" 2>&1 &
  local spid=$!
  wait_listen "$A" "$port"
  ip netns exec "$B" env LD_LIBRARY_PATH="$lib" RVERBS_RUNTIME_DIR="$WORK/rt-b" ${BUSY:+RVERBS_BUSY_POLL=1} timeout 120 \
    "$prog" -d rverbs0 -x 1 -F -m "$PMTU" -p "$port" "$@" "$IP_A" >"$WORK/c.log" 2>&1 || true
  wait "$spid" || true
  printf '%-6s %-12s %-22s %s\n' "$label" "$prog" "$*" "$(grep -E '^ +[0-9]+ +[0-9]+ ' "$WORK/c.log" | tail -1 | tr -s ' ')"
}

# perftest PROG ARGS...: PROG on the drop-in libraries, after the base build's if one is set.
perftest() {
  [ -z "$BASE" ] || perftest_on base "$BASE" "$@"
  perftest_on rverbs "$DROPIN" "$@"
}

# ucx TEST SIZE: ucx_perftest over TCP, server in A, client in B.
ucx() {
  local t=$1 s=$2
  port=$((port + 1))
  ip netns exec "$A" env UCX_TLS=tcp,self UCX_NET_DEVICES=rvb-a0 timeout 120 \
    ucx_perftest -t "$t" -s "$s" -n "$N" -p "$port" >"$WORK/us.log" 2>&1 &
  local spid=$!
  wait_listen "$A" "$port"
  ip netns exec "$B" env UCX_TLS=tcp,self UCX_NET_DEVICES=rvb-b0 timeout 120 \
    ucx_perftest "$IP_A" -t "$t" -s "$s" -n "$N" -p "$port" >"$WORK/uc.log" 2>&1 || true
  wait "$spid" || true
  printf 'ucx-tcp %-11s -s %-19s %s\n' "$t" "$s" "$(grep -E '^Final:' "$WORK/uc.log" | tr -s ' ')"
}

# ucx_rc TEST SIZE: ucx_perftest over rc_verbs on the drop-in libraries (those of RC_LIB
# if set, labelled "base"), server in A, client in B, each in the mount namespace UCX
# needs (and RVERBS_BUSY_POLL=1 if BUSY is set); prints the client's "Final:" line.
ucx_rc() {
  local t=$1 s=$2 lib=${RC_LIB:-$DROPIN}
  port=$((port + 1))
  "${rc_a[@]}" env LD_LIBRARY_PATH="$lib" ${BUSY:+RVERBS_BUSY_POLL=1} UCX_TLS=rc_verbs,ud_verbs,self UCX_NET_DEVICES=rverbs0:1 timeout 120 \
    ucx_perftest -t "$t" -s "$s" -n "$N" -p "$port" >"$WORK/us.log" 2>&1 &
  local spid=$!
  wait_listen "$A" "$port"
  "${rc_b[@]}" env LD_LIBRARY_PATH="$lib" ${BUSY:+RVERBS_BUSY_POLL=1} UCX_TLS=rc_verbs,ud_verbs,self UCX_NET_DEVICES=rverbs0:1 timeout 120 \
    ucx_perftest "$IP_A" -t "$t" -s "$s" -n "$N" -p "$port" >"$WORK/uc.log" 2>&1 || true
  wait "$spid" || true
  printf '%-7s %-11s -s %-19s %s\n' "${RC_LIB:+base-}${BUSY:+busy-}rc" "$t" "$s" "$(grep -E '^Final:' "$WORK/uc.log" | tr -s ' ')"
}

# ucx_rcs TEST SIZE: ucx_rc on the base build's libraries first, if one is set, then on
# the drop-in's.
ucx_rcs() {
  [ -z "$BASE" ] || RC_LIB=$BASE ucx_rc "$@"
  ucx_rc "$@"
}
# shellcheck source=tests/conformance/lib/ucx.bash
source tests/conformance/lib/ucx.bash
host_a=(ip netns exec "$A" env LD_LIBRARY_PATH="$DROPIN" RVERBS_RUNTIME_DIR="$WORK/rt-a" UCX_UD_VERBS_ETH_DGID_CHECK=n)
host_b=(ip netns exec "$B" env LD_LIBRARY_PATH="$DROPIN" RVERBS_RUNTIME_DIR="$WORK/rt-b" UCX_UD_VERBS_ETH_DGID_CHECK=n)
ucx_mount_setup "$WORK" "${host_a[@]}"
rc_a=("${host_a[@]}" "${ucx_argv[@]}")
ucx_mount_setup "$WORK" "${host_b[@]}"
rc_b=("${host_b[@]}" "${ucx_argv[@]}")

# udp LAT|LATPOLL|BW|GSO: raw UDP on the same link (scripts/bench/udp_probe.c): 8-byte
# ping-pongs (sleeping in recv, or both sides busy-polling),
# sendmmsg of 1052-byte datagrams (a RoCEv2 MIDDLE packet at MTU 1024: BTH, payload, ICRC),
# and the same datagrams as UDP GSO trains received whole with UDP_GRO (what rverbs sends).
gcc -O2 -o "$WORK/udp_probe" scripts/bench/udp_probe.c
udp() {
  port=$((port + 1))
  local mode=
  [ "$1" = latpoll ] && mode=poll
  ip netns exec "$A" timeout 120 "$WORK/udp_probe" server "$port" $mode &
  local spid=$!
  sleep 0.2   # a UDP server has no listen state to wait for; the client retries nothing
  if [ "$1" = lat ] || [ "$1" = latpoll ]; then
    ip netns exec "$B" timeout 120 "$WORK/udp_probe" "$1" "$IP_A" "$port" "$N" || true
  else
    ip netns exec "$B" timeout 120 "$WORK/udp_probe" "$1" "$IP_A" "$port" 200000 "$DGRAM" || true
  fi
  kill "$spid" 2>/dev/null || true
  wait "$spid" 2>/dev/null || true
}

echo "# $(date -u +%FT%TZ) $(git rev-parse --short HEAD) N=$N link MTU $LINK_MTU, path MTU $PMTU${BASE:+, base $BASE}"
if [ "$ROWS" != bw ]; then
  perftest ib_send_lat -s 8 -n "$N"
  perftest ib_write_lat -s 8 -n "$N"
  perftest ib_send_lat -s 8 -n "$N" -e
  BUSY=1 perftest_on busy "$DROPIN" ib_send_lat -s 8 -n "$N"
  BUSY=1 perftest_on busy "$DROPIN" ib_write_lat -s 8 -n "$N"
  ucx tag_lat 8
  ucx_rcs tag_lat 8
  BUSY=1 ucx_rcs tag_lat 8
  udp lat
  udp latpoll
fi
perftest ib_write_bw -s 8192 -n 20000
perftest ib_send_bw -s 8192 -n 20000
ucx tag_bw 8192
ucx_rcs tag_bw 8192
perftest ib_write_bw -s 65536 -n 5000
perftest ib_read_bw -s 65536 -n 5000
perftest ib_send_bw -s 65536 -n 5000
ucx tag_bw 65536
ucx ucp_put_bw 65536
for busy in '' 1; do
  BUSY=$busy ucx_rcs tag_bw 65536
  BUSY=$busy ucx_rcs ucp_put_bw 65536
done
perftest ib_write_bw -s 1048576 -n 1000
perftest ib_read_bw -s 1048576 -n 1000
ucx tag_bw 1048576
ucx ucp_put_bw 1048576
for busy in '' 1; do
  BUSY=$busy ucx_rcs tag_bw 1048576
  BUSY=$busy ucx_rcs ucp_put_bw 1048576
done
udp bw
udp gso
