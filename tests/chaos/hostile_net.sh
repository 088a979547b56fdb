#!/usr/bin/env bash
# The hostile-network harness: two "hosts" as network namespaces joined by a veth pair
# that this script creates (10.71.0.1 in A; 10.71.0.2 and, once the peer runs, 10.71.0.3
# in B) and always removes.
#
#   A: the victim (`rverbs-chaos victim`, crates/rverbs-chaos): rverbs with its own
#      runtime directory; regions with canaries on both sides; RC QPs T1 and T2 whose
#      path names the attacker's address; one legitimate RC QP to the peer.
#   B: the legitimate peer (`rverbs-chaos peer`, 10.71.0.2): WRITE + SEND rounds the
#      victim checks and echoes, throughout the attack.
#   B: the attacker (`rverbs-chaos attack`, 10.71.0.3:4791, seeded): malformed and forged
#      RoCEv2 packets and CM MADs with valid ICRCs (every opcode byte, truncations at every
#      length, bad ICRCs, RETHs past the region, wrapping VA + length, zero and huge DMA
#      lengths, neighbouring and foreign keys, the real key through another PD's QP, READs
#      of neighbouring memory, PSNs out of the window, duplicate READs with other RETHs,
#      QPNs of every endpoint number, relay headers, garbage MADs to QP1 of every size).
#
# Fails if the victim or the peer crashes or fails its checks, any canary byte changed,
# the legitimate connection failed or stalled (a round longer than 3 s), a datagram the
# attacker received carries canary bytes, fewer than half of the attacker's control WRITEs
# were ACKed (the attack must reach the responder), or the victim's runtime directory
# gained or lost an entry during the attack.
#
# Short by default (CI): CHAOS_COUNT=3000 datagrams, capped at 40 s. Long by hand:
# CHAOS_LONG=1 (200 000 datagrams, capped at 600 s), or set CHAOS_COUNT / CHAOS_SECONDS.
# CHAOS_SEED (default 1) seeds the attacker and the victim's PSNs; CHAOS_KEEP=1 keeps the logs.
# Needs root (ip netns, veth). Prints the counts and "PASS"/"FAIL"; exits 1 on failure.
set -euo pipefail
cd "$(dirname "$0")/../.."

if [ -n "${CHAOS_LONG:-}" ]; then
  COUNT=${CHAOS_COUNT:-200000} SECONDS_CAP=${CHAOS_SECONDS:-600}
else
  COUNT=${CHAOS_COUNT:-3000} SECONDS_CAP=${CHAOS_SECONDS:-40}
fi
SEED=${CHAOS_SEED:-1}
A=rvchaos-a B=rvchaos-b
IP_A=10.71.0.1 IP_B=10.71.0.2 IP_C=10.71.0.3
CTL_PORT=18990
if [ "$(id -u)" != 0 ]; then
  echo "hostile_net.sh: SKIPPED: needs root to create network namespaces"
  exit 0
fi
scripts/build-dropin.sh >/dev/null   # builds rverbs-chaos
target_dir=$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
BIN=${target_dir:-target}/release/rverbs-chaos
# shellcheck source=tests/conformance/lib/netns.bash
source tests/conformance/lib/netns.bash

WORK=$(mktemp -d /tmp/hostile-net.XXXXXX)
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do
    kill "$p" 2>/dev/null || true
  done
  for p in "${pids[@]}"; do
    wait "$p" 2>/dev/null || true
  done
  netns_del "$A" "$B"
  if [ -n "${CHAOS_KEEP:-}" ]; then echo "logs kept in $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
netns_del "$A" "$B"
mkdir -p "$WORK/rt-a" "$WORK/rt-b"
netns_pair "$A" "$B" 1500 "$IP_A" "$IP_B"

# Each role is bounded by its own limits and by timeout(1) beyond them.
LIMIT=$((SECONDS_CAP + 60))
echo "hostile_net.sh: victim in $A ($IP_A), peer ($IP_B) and attacker ($IP_C) in $B; seed $SEED, $COUNT datagrams, cap ${SECONDS_CAP}s"
ip netns exec "$A" env RVERBS_RUNTIME_DIR="$WORK/rt-a" timeout -k 5 "$LIMIT" \
  "$BIN" victim --dir "$WORK" --local "$IP_A" --peer "$IP_B" --attacker "$IP_C" \
  --ctl-port "$CTL_PORT" --seed "$SEED" --seconds "$LIMIT" >"$WORK/victim.log" 2>&1 &
vpid=$!
pids+=("$vpid")
ip netns exec "$B" env RVERBS_RUNTIME_DIR="$WORK/rt-b" timeout -k 5 "$LIMIT" \
  "$BIN" peer --dir "$WORK" --local "$IP_B" --victim "$IP_A" --seed "$SEED" \
  --min-rounds 20 --stall-ms 3000 --seconds "$LIMIT" >"$WORK/peer.log" 2>&1 &
ppid_=$!
pids+=("$ppid_")

why=()
# Both up (files the roles create when ready; bounded, and given up if one exits).
for _ in $(seq 600); do
  [ -e "$WORK/peer.ready" ] && [ -e "$WORK/victim.ready" ] && break
  kill -0 "$vpid" 2>/dev/null && kill -0 "$ppid_" 2>/dev/null || break
  sleep 0.05
done
if ! [ -e "$WORK/peer.ready" ] || ! [ -e "$WORK/victim.ready" ]; then
  why+=("victim or peer did not come up")
else
  # The attacker's address exists only now: the peer's device (started above) has no
  # socket on it, so the attacker's own socket owns 10.71.0.3:4791 and gets the answers.
  ip -n "$B" addr add "$IP_C/24" dev "${B}0"
  ls -A "$WORK/rt-a" | sort >"$WORK/rt-before"
  start=$(date +%s%N)
  arc=0
  ip netns exec "$B" timeout -k 5 "$LIMIT" "$BIN" attack --local "$IP_C" --victim "$IP_A" \
    --ctl-port "$CTL_PORT" --seed "$SEED" --count "$COUNT" --seconds "$SECONDS_CAP" >"$WORK/attack.log" 2>&1 || arc=$?
  attack_ms=$(( ($(date +%s%N) - start) / 1000000 ))
  ls -A "$WORK/rt-a" | sort >"$WORK/rt-after"
  [ "$arc" = 0 ] || why+=("attacker exit $arc: $(grep -h FAIL "$WORK/attack.log" | head -1)")
  if ! cmp -s "$WORK/rt-before" "$WORK/rt-after"; then
    why+=("the victim's runtime directory changed: $(wc -l <"$WORK/rt-before") entries before, $(wc -l <"$WORK/rt-after") after ($( { diff "$WORK/rt-before" "$WORK/rt-after" || true; } | grep '^[<>]' | head -5 | tr '\n' ' '))")
  fi
fi
touch "$WORK/stop-peer"
prc=0
wait "$ppid_" || prc=$?
touch "$WORK/stop-victim"
vrc=0
wait "$vpid" || vrc=$?
pids=()
[ "$prc" = 0 ] || why+=("peer exit $prc: $(grep -h FAIL "$WORK/peer.log" | head -1)")
[ "$vrc" = 0 ] || why+=("victim exit $vrc: $(grep -h FAIL "$WORK/victim.log" | head -1)")
grep -q '^VICTIM .* outside_changed=0 ' "$WORK/victim.log" || why+=("no clean VICTIM line")

grep -h '^victim: region\|^VICTIM\|^PEER\|^ATTACK' "$WORK/victim.log" "$WORK/peer.log" "$WORK/attack.log" 2>/dev/null || true
echo "runtime directory of the victim: $(wc -l <"$WORK/rt-before" 2>/dev/null || echo '?') entries before the attack, $(wc -l <"$WORK/rt-after" 2>/dev/null || echo '?') after; attack took ${attack_ms:-?} ms"
if [ ${#why[@]} -eq 0 ]; then
  echo "PASS hostile_net.sh (seed $SEED)"
else
  echo "FAIL hostile_net.sh (seed $SEED): ${why[*]}"
  tail -n 20 "$WORK/victim.log" "$WORK/peer.log" "$WORK/attack.log" >&2 || true
  exit 1
fi
