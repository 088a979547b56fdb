#!/usr/bin/env bash
# The sanitizer on correct programs (issue 22, "no false positives"): Debian's
# ibverbs-utils ping-pongs (pingpong.sh), rdmacm-utils (rdmacm_utils.sh), pyverbs
# (run_pyverbs.sh, below) and every perftest program as server and client (and those
# that can, with -e: completion events), unmodified, under RVERBS_SANITIZE=1 and the free watch (librverbs_free.so) with the
# reports collected in RVERBS_SANITIZE_LOG (docs/sanitizer.md). Every pair must pass as it
# does without the sanitizer, and the sanitizer must find nothing — except two leaks at
# exit that perftest 4.5 really has, which must be found (they show that the sanitizer is
# on in these processes, so a clean log means something):
#   - ib_send_bw's client exits with its context and one CQ alive (perftest destroys the
#     receive CQ it created only for latency tests, servers, duplex or event runs);
#   - ib_atomic_lat's server exits with every object it created alive.
# Each is required to be exactly one leak-at-exit report, in that process only.
# ibv_srq_pingpong has a real bug the sanitizer may find, depending on timing: it counts
# send completions over all its QPs against one total, so up to 15 of its 16 QPs can have
# a SEND (wr_id 2) in flight when it stops, and it destroys them so (destroy-qp-in-use).
# Its pairs run apart from the other ping-pongs and may report that, and only that.
#
# pyverbs (rdma-core 44's suite, run_pyverbs.sh) passes under the sanitizer as without
# it, and every finding must be one that docs/sanitizer.md ("Correct programs: no finding") explains, by test
# and kind (lib/pyverbs_findings.py): its error-path tests provoke some on purpose, and its
# resources break three rules by design (CQs smaller than their queues, deregistration and
# re-registration under receives still posted). None at all fails too (the sanitizer off).
#
# Environment: DROPIN_DIR (default: scripts/build-dropin.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."

NAME=sanitizer_clean.sh
FIRST_PORT=
TIMEOUT=30
FILTER=
for p in ibv_rc_pingpong rping ib_write_bw fi_info timeout /usr/bin/python3; do
  command -v "$p" >/dev/null || { echo "$NAME: $p not found (apt-get install ibverbs-utils rdmacm-utils perftest libfabric-bin python3-pyverbs)" >&2; exit 2; }
done
# shellcheck source=lib/pairs.bash
source tests/conformance/lib/pairs.bash
export DROPIN_DIR=$dropin RVERBS_SANITIZE=1
# The free watch (mr-memory-freed), preloaded as `rverbs run --sanitize` does; processes
# without the drop-in (the shell, timeout) only pass their calls on.
[ -f "$dropin/librverbs_free.so" ] || { echo "$NAME: $dropin/librverbs_free.so missing (scripts/build-dropin.sh)" >&2; exit 2; }
export LD_PRELOAD=$dropin/librverbs_free.so

# suite LABEL ALLOW SCRIPT ARGS...: a whole conformance script under the sanitizer; it
# must pass and the sanitizer must report nothing but findings matching the extended
# regex ALLOW ("-": nothing).
suite() {
  local label=$1 allow=$2 log others
  shift 2
  n=$((n + 1)) start=$EPOCHREALTIME why=()
  log=$WORK/logs/$n.findings slog=$WORK/logs/$n.out clog=$log
  scmd=("$@") ccmd=("(the sanitizer's reports)")
  RVERBS_SANITIZE_LOG=$log bash "$@" >"$slog" 2>&1 || why+=("$1 failed under the sanitizer: $(tail -n 1 "$slog")")
  [ -e "$log" ] || : >"$log"
  others=$(grep '^==[0-9]*==RVERBS SANITIZER:' "$log" | { [ "$allow" = - ] && cat || grep -Ev "$allow"; } || true)
  [ -z "$others" ] || why+=("$(wc -l <<<"$others") finding(s): $(head -n 1 <<<"$others")")
  report_pair "$label"
}

suite "ibverbs-utils ping-pongs but srq (pingpong.sh, 26 pairs)" - tests/conformance/pingpong.sh '^(rc|uc|ud|xsrq)( |$)'
suite "ibv_srq_pingpong (pingpong.sh, 6 pairs): at most its own SENDs destroyed in flight" \
  'RVERBS SANITIZER: destroy-qp-in-use: ibv_destroy_qp of QPN 0x[0-9a-f]+ while the device has not finished 1 send work request\(s\) \(the first: wr_id 0x2, signaled\)' \
  tests/conformance/pingpong.sh '^srq '
suite "rdmacm-utils (rdmacm_utils.sh)" - tests/conformance/rdmacm_utils.sh

# libfabric's fi_getinfo probes the device with QPs on one-entry CQs that it never posts
# to: no finding (cq-too-small is a finding at a queue's first post, docs/sanitizer.md).
n=$((n + 1)) start=$EPOCHREALTIME why=()
slog=$WORK/logs/$n.out clog=$WORK/logs/$n.findings
scmd=(fi_info -p verbs) ccmd=("(the sanitizer's reports)")
RVERBS_SANITIZE_LOG=$clog fi_info -p verbs >"$slog" 2>&1 || why+=("fi_info -p verbs failed: $(tail -n 1 "$slog")")
grep -q 'provider: verbs' "$slog" || why+=("fi_info listed no verbs endpoint")
[ -s "$clog" ] && why+=("$(grep -c '^==[0-9]*==RVERBS SANITIZER:' "$clog") finding(s): $(grep -m1 '^==[0-9]*==RVERBS SANITIZER:' "$clog")")
report_pair "libfabric's fi_info -p verbs (its probe QPs on one-entry CQs) under the sanitizer: nothing found"

# pyverbs: the reports on stderr beside unittest's verbose lines, so that each is
# attributed to the test that was running.
n=$((n + 1)) start=$EPOCHREALTIME why=()
slog=$WORK/logs/$n.out clog=$WORK/logs/$n.unexplained
scmd=(tests/conformance/run_pyverbs.sh "$dropin") ccmd=("(the findings no note explains)")
bash tests/conformance/run_pyverbs.sh "$dropin" >"$slog" 2>&1 || why+=("run_pyverbs.sh failed under the sanitizer: $(tail -n 1 "$slog")")
/usr/bin/python3 tests/conformance/lib/pyverbs_findings.py "$slog" >"$clog" 2>"$clog.kinds" || why+=("no finding at all: the sanitizer was not on in pyverbs")
[ -s "$clog" ] && why+=("$(wc -l <"$clog") finding(s) no note explains, the first: $(head -n 1 "$clog")")
report_pair "pyverbs (run_pyverbs.sh) under the sanitizer: only the findings docs/sanitizer.md explains ($(cat "$clog.kinds"))"

# A perftest pair's commands on `$port`, each side with its own log of findings (none yet).
sanitized_pair() {
  rm -f "$slog.findings" "$clog.findings"
  scmd=(env RVERBS_SANITIZE_LOG="$slog.findings" "$prog" -d rverbs0 -x 1 -F -n 5 "${extra[@]}" -p "$port")
  ccmd=(env RVERBS_SANITIZE_LOG="$clog.findings" "$prog" -d rverbs0 -x 1 -F -n 5 "${extra[@]}" -p "$port" 127.0.0.1)
}

# perftest: each program once as server and client (-n 5, its default size), each side
# with its own log of findings. EXPECT: "server" or "client", the side whose leak is
# perftest's own, or "-". OPTS: more options ("-" for none); -e sleeps on completion
# events (arm, then poll: no lost-wakeup; perftest refuses -e for WRITE and atomics).
while read -r prog opts expect; do
  extra=()
  [ "$opts" = - ] || read -r -a extra <<<"$opts"
  n=$((n + 1)) start=$EPOCHREALTIME why=()
  slog=$WORK/logs/$n.server clog=$WORK/logs/$n.client
  serve_on_free_port sanitized_pair
  for side in server client; do
    f=$WORK/logs/$n.$side.findings
    count=0
    [ -s "$f" ] && count=$(grep -c '^==[0-9]*==RVERBS SANITIZER:' "$f")
    if [ "$side" = "$expect" ]; then
      [ "$count" = 1 ] && grep -q 'RVERBS SANITIZER: leak-at-exit' "$f" ||
        why+=("$side: expected perftest's own leak at exit, found $count report(s)")
    elif [ "$count" != 0 ]; then
      why+=("$side: $count finding(s): $(grep -m1 '^==[0-9]*==RVERBS SANITIZER:' "$f")")
    fi
  done
  if [ "$expect" = - ]; then
    report_pair "$prog${extra[*]:+ ${extra[*]}} under the sanitizer: nothing found"
  else
    report_pair "$prog${extra[*]:+ ${extra[*]}} under the sanitizer: only perftest's own leak in the $expect"
  fi
done <<'PROGRAMS'
ib_write_bw - -
ib_write_lat - -
ib_read_bw - -
ib_read_lat - -
ib_send_bw - client
ib_send_lat - -
ib_atomic_bw - -
ib_atomic_lat - server
ib_send_bw -e -
ib_send_lat -e -
ib_read_lat -e -
PROGRAMS

finish
