#!/usr/bin/env bash
# UCX 1.13 (Debian ucx-utils), unmodified, between two "hosts": two network namespaces
# joined by a veth pair that this script creates (rvq-a 10.70.0.1, rvq-b 10.70.0.2,
# addresses only inside them, link MTU 1500) and removes. Each side runs ucx_perftest on
# rverbs' drop-in libibverbs.so.1 with its own runtime directory, server in rvq-a, client
# in rvq-b, so every UCX message crosses the link as RoCEv2 packets over UDP.
#
# The port's active MTU is the smallest link's IB MTU, 1024 over 1500 bytes
# (docs/device.md, "Active MTU"), and UCX's ud_verbs takes it as its largest datagram:
# the script checks that each namespace's port says 1024 and that `ucx_info -d` sizes
# ud_verbs' active messages by it. Before that rule the port said 4096, ud_verbs took
# active messages of up to 4088 bytes, and the link dropped every datagram above 1500
# bytes: against such a build (the old constant) the first check and the 2048-byte
# refusal below fail, and every ud_verbs pair whose messages pass 1 KiB times out (UCT
# at 4088 bytes, UCP tag_lat at 4 KiB, tag_bw at 64 KiB and 1 MiB); the 8-byte ones pass.
#
# Pairs (ucx_perftest -n ITERS):
#   - UCT over ud_verbs: am_lat and am_bw with am_short (-D short), am_bcopy (-D bcopy)
#     and am_zcopy (-D zcopy) at 8 bytes and at the largest size ud_verbs takes for each
#     (read from `ucx_info -d`: 88 for am_short, and 1016 for the others, the UD MTU
#     less UCX's 8-byte header). UCT does not fragment: a UCT active message is one
#     datagram, and ucx_perftest refuses a larger size on both sides once they are
#     connected, before anything is sent ("Message size (2048) is larger than max
#     supported (1016)"); one pair asks for 2048 bytes over am_bcopy and expects exactly
#     that refusal;
#   - UCT over rc_verbs: am_lat, put_lat, am_bw, put_bw (as ucx.sh); get with -D bcopy
#     and -D zcopy at 4 KiB (READs of four packets) and -D zcopy at 1 MiB; put_bw -D
#     zcopy at 1 MiB; am_bw -D zcopy at 4 KiB; the atomics add_lat, add_mr, fadd, cswap.
#     Not swap: UCX's rc_verbs has no 64-bit atomic swap (verbs have only fetch-and-add
#     and compare-and-swap); ucx_perftest says "does not support required 64-bit atomic";
#   - UCP tag_lat (8 bytes, 4 KiB), tag_bw (8 bytes, 64 KiB, 1 MiB), ucp_am_bw and
#     ucp_put_bw (64 KiB) over rc_verbs,ud_verbs,self, and over ud_verbs,self alone:
#     there UCP cuts every message above 1016 bytes into datagrams of the UD MTU
#     (2048-byte ones would be lost). UCP put_bw and get at 1 MiB, fadd, cswap and
#     am_bw over rc_verbs,ud_verbs,self (UCP needs ud_verbs beside rc_verbs: it connects
#     rc_verbs endpoints through an auxiliary transport, "no auxiliary transport"
#     without);
#   - UCP tag_lat and tag_bw under RVERBS_FAULTS on the client, 200 iterations (see
#     the pairs for why UD's are 4 KiB).
# A pair passes when both sides exit 0, the client prints its "Final: ITERS" line, and
# the client's veth counted at least ITERS times the message size (sent and received).
#
# UCX needs /dev/infiniband/uverbs0 and the GIDs' sysfs attributes (lib/ucx.bash); each
# command runs in a private mount namespace set up from its own namespace's GID table
# and network devices. ud_verbs runs with UCX_UD_VERBS_ETH_DGID_CHECK=n, as in ucx.sh
# (its header says why UCX 1.13 needs it on rxe and rverbs).
#
# Needs root (ip netns, veth, mount namespaces). Prints one line per pair, "N passed, N
# failed"; exits 1 if any pair failed. UCX_NETNS_FILTER=<regex> runs only the pairs whose
# label matches.
set -euo pipefail
cd "$(dirname "$0")/../.."

ITERS=${UCX_ITERS:-1000}
FILTER=${UCX_NETNS_FILTER:-}
TIMEOUT=${UCX_TIMEOUT:-60}
A=rvq-a B=rvq-b
IP_A=10.70.0.1 IP_B=10.70.0.2
if [ "$(id -u)" != 0 ]; then
  echo "ucx_netns.sh: SKIPPED: needs root to create network namespaces"
  exit 0
fi
for p in ucx_perftest ucx_info; do
  command -v "$p" >/dev/null || { echo "ucx_netns.sh: $p not found (apt-get install ucx-utils)" >&2; exit 2; }
done
DROPIN=${DROPIN_DIR:-$(bash scripts/build-dropin.sh | tail -1)}
# shellcheck source=lib/netns.bash
source tests/conformance/lib/netns.bash
# shellcheck source=lib/verdict.bash
source tests/conformance/lib/verdict.bash
# shellcheck source=lib/ucx.bash
source tests/conformance/lib/ucx.bash

WORK=$(mktemp -d /tmp/ucx-netns.XXXXXX)
cleanup() {
  netns_del "$A" "$B"
  rm -rf "$WORK"
}
trap cleanup EXIT
netns_del "$A" "$B"
mkdir -p "$WORK/rt-a" "$WORK/rt-b"

netns_pair "$A" "$B" 1500 "$IP_A" "$IP_B"

# host_a, host_b: the prefixes that run a command in a namespace on the drop-in, as its
# own host (a runtime directory each); run_a, run_b: the same inside the mount namespace
# UCX needs, described from that namespace's GID table and netdevs.
host_a=(ip netns exec "$A" env LD_LIBRARY_PATH="$DROPIN" RVERBS_RUNTIME_DIR="$WORK/rt-a" UCX_UD_VERBS_ETH_DGID_CHECK=n)
host_b=(ip netns exec "$B" env LD_LIBRARY_PATH="$DROPIN" RVERBS_RUNTIME_DIR="$WORK/rt-b" UCX_UD_VERBS_ETH_DGID_CHECK=n)
ucx_mount_setup "$WORK" "${host_a[@]}" || exit 2
run_a=("${host_a[@]}" "${ucx_argv[@]}")
ucx_mount_setup "$WORK" "${host_b[@]}" || exit 2
run_b=("${host_b[@]}" "${ucx_argv[@]}")

passed=0 failed=0 port=19700
echo "ucx_netns.sh: UCX between netns $A ($IP_A) and $B ($IP_B), link MTU 1500, -n $ITERS"

# The port's active MTU in each namespace, and what UCX makes of it.
why=()
for side in a b; do
  declare -n run=run_$side
  active=$("${run[@]}" ibv_devinfo -d rverbs0 | awk '/active_mtu:/ { print $2; exit }') || true
  [ "$active" = 1024 ] || why+=("active_mtu in rvq-$side is ${active:-unknown}, expected 1024")
  unset -n run
done
"${run_a[@]}" timeout "$TIMEOUT" ucx_info -d >"$WORK/ucx_info" 2>&1 || why+=("ucx_info -d failed in $A")
# ud_verbs' limits: the lines between its "Transport: ud_verbs" and the next transport.
ud_caps=$(awk '/Transport: /{ t = ($NF == "ud_verbs") } t' "$WORK/ucx_info")
max_of() {  # OPERATION: the largest size ud_verbs takes for it ("am_bcopy: <= 1016")
  awk -v op="$1:" '$2 == op { for (i = 3; i <= NF; i++) if ($i == "<=") { v = $(i + 1); break } } END { print v }' <<<"$ud_caps" |
    awk '{ n = $1 + 0; if ($1 ~ /K$/) n *= 1024; print n }'
}
max_short=$(max_of am_short) max_bcopy=$(max_of am_bcopy) max_zcopy=$(max_of am_zcopy)
for v in "$max_short" "$max_bcopy" "$max_zcopy"; do
  if ! { [ -n "$v" ] && [ "$v" -gt 8 ] && [ "$v" -le 1024 ]; }; then
    why+=("ud_verbs am sizes in ucx_info -d: short ${max_short:-?}, bcopy ${max_bcopy:-?}, zcopy ${max_zcopy:-?} (expected 9..1024)")
    break
  fi
done
verdict "active MTU 1024 in both namespaces; ud_verbs am_short <= $max_short, am_bcopy <= $max_bcopy, am_zcopy <= $max_zcopy" "$WORK/ucx_info"

# pair LABEL [ENV=VALUE...] -- PERFTEST_ARGS...: ucx_perftest PERFTEST_ARGS as server in
# $A, then as client in $B (to $IP_A), with the ENV settings on both sides. With REFUSED
# set, the pair passes when instead both sides fail saying REFUSED. Otherwise the
# messages must have crossed the link: $B's veth counts at least ITERS times the message
# size (-s, 8 by default) sent and received together.
REFUSED= FAULTS=
link_bytes() {
  local dir="/sys/class/net/${B}0/statistics"
  echo $(($(ip netns exec "$B" cat "$dir/rx_bytes") + $(ip netns exec "$B" cat "$dir/tx_bytes")))
}
pair() {
  local label=$1 envs=() slog=$WORK/s.log clog=$WORK/c.log src=0 crc=0 spid size=8 before a prev= crossed
  shift
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  [ -z "$FILTER" ] || [[ $label =~ $FILTER ]] || return 0
  why=()
  for a in "$@"; do
    [ "$prev" = -s ] && size=$a
    prev=$a
  done
  before=$(link_bytes)
  port=$((port + 1))
  "${run_a[@]}" env "${envs[@]}" timeout -k 5 $((TIMEOUT + 5)) ucx_perftest "$@" -n "$ITERS" -p "$port" >"$slog" 2>&1 &
  spid=$!
  wait_listen "$A" "$port"
  "${run_b[@]}" env "${envs[@]}" ${FAULTS:+RVERBS_FAULTS="$FAULTS"} timeout -k 5 "$TIMEOUT" ucx_perftest "$IP_A" "$@" -n "$ITERS" -p "$port" >"$clog" 2>&1 || crc=$?
  wait "$spid" || src=$?
  if [ -n "$REFUSED" ]; then
    for side in server:"$src":"$slog" client:"$crc":"$clog"; do
      IFS=: read -r name rc log <<<"$side"
      [ "$rc" != 0 ] || why+=("$name exit 0")
      grep -qF "$REFUSED" "$log" || why+=("$name did not say \"$REFUSED\"")
    done
  else
    [ "$src" = 0 ] || why+=("server exit $src")
    [ "$crc" = 0 ] || why+=("client exit $crc")
    grep -q "^Final: *$ITERS " "$clog" || why+=("client printed no \"Final: $ITERS\" line")
    crossed=$(($(link_bytes) - before))
    [ "$crossed" -ge $((ITERS * size)) ] || why+=("$crossed bytes on ${B}0, expected >= $((ITERS * size))")
  fi
  verdict "$label" "$slog" "$clog"
}

# UCT over ud_verbs, each active-message flavour at 8 bytes and at its largest size.
for t in am_lat am_bw; do
  for d in short:"$max_short" bcopy:"$max_bcopy" zcopy:"$max_zcopy"; do
    for s in 8 "${d#*:}"; do
      pair "uct $t -D ${d%%:*} -s $s (ud_verbs)" -- -t "$t" -x ud_verbs -d rverbs0:1 -D "${d%%:*}" -s "$s"
    done
  done
done
# Above the UD MTU: refused by ucx_perftest on both sides once connected, never sent.
REFUSED="Message size (2048) is larger than max supported ($max_bcopy)" \
  pair "uct am_bw -D bcopy -s 2048 (ud_verbs) refused" -- -t am_bw -x ud_verbs -d rverbs0:1 -D bcopy -s 2048

# UCT over rc_verbs.
for t in am_lat put_lat am_bw put_bw; do
  pair "uct $t (rc_verbs)" -- -t "$t" -x rc_verbs -d rverbs0:1
done
for d in bcopy zcopy; do
  pair "uct get -D $d -s 4096 (rc_verbs)" -- -t get -x rc_verbs -d rverbs0:1 -D "$d" -s 4096
done
pair "uct put_bw -D zcopy -s 1048576 (rc_verbs)" -- -t put_bw -x rc_verbs -d rverbs0:1 -D zcopy -s 1048576
pair "uct get -D zcopy -s 1048576 (rc_verbs)" -- -t get -x rc_verbs -d rverbs0:1 -D zcopy -s 1048576
pair "uct am_bw -D zcopy -s 4096 (rc_verbs)" -- -t am_bw -x rc_verbs -d rverbs0:1 -D zcopy -s 4096
for t in add_lat add_mr fadd cswap; do
  pair "uct $t (rc_verbs)" -- -t "$t" -x rc_verbs -d rverbs0:1
done

# UCP tag matching, over RC and UD and over UD alone.
for t in ucp_put_bw ucp_get; do
  pair "ucp $t -s 1048576 (rc_verbs,ud_verbs,self)" UCX_TLS=rc_verbs,ud_verbs,self UCX_NET_DEVICES=rverbs0:1 -- -t "$t" -s 1048576
done
for t in ucp_fadd ucp_cswap ucp_am_bw; do
  pair "ucp $t (rc_verbs,ud_verbs,self)" UCX_TLS=rc_verbs,ud_verbs,self UCX_NET_DEVICES=rverbs0:1 -- -t "$t"
done
for tls in rc_verbs,ud_verbs,self ud_verbs,self; do
  sel=(UCX_TLS="$tls" UCX_NET_DEVICES=rverbs0:1)
  for s in 8 4096; do
    pair "ucp tag_lat -s $s ($tls)" "${sel[@]}" -- -t tag_lat -s "$s"
  done
  for s in 8 65536 1048576; do
    pair "ucp tag_bw -s $s ($tls)" "${sel[@]}" -- -t tag_bw -s "$s"
  done
  pair "ucp ucp_am_bw -s 65536 ($tls)" "${sel[@]}" -- -t ucp_am_bw -s 65536
  pair "ucp ucp_put_bw -s 65536 ($tls)" "${sel[@]}" -- -t ucp_put_bw -s 65536
done

# UCX's own reliability over UD (its acknowledgements and resends), and RC's in rverbs,
# with the client's packets lost, duplicated, reordered and corrupted by rverbs' fault
# injector (RVERBS_FAULTS, docs/network.md, "Capture and fault injection"), 200
# iterations. Over UD with 4 KiB messages (four datagrams): UCX learns of a lost datagram
# only from its timers (UCX_UD_TIMER_TICK 10 ms, backed off; acknowledgement requests at
# most every UCX_UD_MIN_POKE_TIME, 250 ms), so a loss costs it tens to hundreds of
# milliseconds, and 64 KiB messages (64 datagrams, most messages losing one) ran at 6 a
# second and did not finish in the timeout.
FAULTS="seed=7,drop=2%,dup=2%,reorder=2%,reorder_by=1ms,corrupt=2%"
for tls in ud_verbs,self rc_verbs,ud_verbs,self; do
  sel=(UCX_TLS="$tls" UCX_NET_DEVICES=rverbs0:1)
  s=4096
  [ "$tls" = ud_verbs,self ] || s=65536
  ITERS=200 pair "ucp tag_lat -s 8 ($tls), client faults drop/dup/reorder/corrupt 2%" "${sel[@]}" -- -t tag_lat -s 8
  ITERS=200 pair "ucp tag_bw -s $s ($tls), client faults drop/dup/reorder/corrupt 2%" "${sel[@]}" -- -t tag_bw -s "$s"
done
FAULTS=

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
