#!/usr/bin/env bash
# The hostile-segment harness (hardening issue: "hostile peers"): a same-user process
# scribbles over, truncates and deletes the shared segments of victims doing checked RC
# traffic on the drop-in libibverbs.so.1, and writes garbage into their FIFOs. The
# victims may report errors (error completions, failed verbs, a stall they notice, data
# that changed: counted, expected); they must not crash, spin, hang, or write outside
# their registered regions, and a connection the scribbler does not touch must keep
# working.
#
# usage: tests/chaos/hostile_seg.sh            (short mode, for CI: < 2 minutes)
#        CHAOS_MODE=long tests/chaos/hostile_seg.sh
#
# Per epoch (a fresh runtime directory of the run's own, under /dev/shm):
#   a  (tests/chaos/victim.c)  server of connection "ab", RVERBS_SHARED_MR=1 (its buffer
#      lives in an mr-* segment): attacked as a whole, every file, every record;
#   b  client of "ab" and server of "bc", RVERBS_CMA=off (peers reach its private memory
#      through it, so its own key checks guard every write into it: a peer that may use
#      cross-memory attach takes the address from the key record, and a process able to
#      rewrite that record can then write the memory itself, docs/shared-state.md):
#      attacked only through the segments and records of "ab" (its inventory, b.inv),
#      its doorbell and other FIFOs;
#   c  client of "bc": never attacked; "bc" must complete every message, checked.
# Each victim runs under `timeout -s KILL`; the scribbler (tests/chaos/scribbler.py,
# seeded) runs CHAOS_ROUNDS rounds spread over the traffic. Then, while the victims still
# run, each one's progress thread is sampled for a second: busy more than half of it is
# a spin, and `rverbs stat` reads every endpoint's counters segment (scribbled, truncated
# and deleted in a): it may leave an endpoint out, never crash or hang. Failures (exit 1): a victim killed by a signal or printing a crash (SIGBUS,
# SIGSEGV, abort, a Rust panic in any thread), a victim killed by the timeout (a hang:
# the last attack before it is printed), a spinning progress thread, `rverbs stat` crashing or hanging, a canary page
# changed, "bc" not ok on both ends, a setup failure.
#
# As root, also checks that another user cannot reach anything: the runtime directory
# and segment modes, a uid-65534 process opening the segment files, and a uid-65534
# process on the drop-in connecting to a root victim's QP (its own runtime directory).
#
# Environment:
#   CHAOS_MODE     short (default: 8 epochs x 30 rounds, ~85 s) or long (150 epochs x 40
#                  rounds, ~25 min)
#   CHAOS_EPOCHS, CHAOS_ROUNDS   override the mode's counts
#   CHAOS_SEED     base seed (default 1; epoch e uses seed*100003 + e)
#   CHAOS_SECONDS  traffic per epoch (default 3)
#   DROPIN_DIR     directory holding libibverbs.so.1 (default: scripts/build-dropin.sh)
#   CHAOS_KEEP     1: keep the work directory (logs of every epoch)
set -uo pipefail
cd "$(dirname "$0")/../.."


MODE=${CHAOS_MODE:-short}
case $MODE in
short) EPOCHS=${CHAOS_EPOCHS:-8} ROUNDS=${CHAOS_ROUNDS:-30} ;;
long) EPOCHS=${CHAOS_EPOCHS:-150} ROUNDS=${CHAOS_ROUNDS:-40} ;;
*) echo "hostile_seg: CHAOS_MODE is short or long" >&2; exit 2 ;;
esac
SEED=${CHAOS_SEED:-1}
SECONDS_PER_EPOCH=${CHAOS_SECONDS:-3}
STALL=4 STALL_OTHER=10
# A victim ends by itself within traffic + 3 stalls (victim.c); beyond this it hangs.
LIMIT=$((SECONDS_PER_EPOCH + 3 * STALL_OTHER + 15))
start_time=$(date +%s)

DROPIN=${DROPIN_DIR:-$(scripts/build-dropin.sh)} || { echo "hostile_seg: build failed" >&2; exit 1; }
work=$(mktemp -d /tmp/hostile_seg.XXXXXX)
shm=$(mktemp -d /dev/shm/rverbs-chaos.XXXXXX)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
	wait 2>/dev/null
	rm -rf "$shm"
	if [ "${CHAOS_KEEP:-0}" = 1 ]; then echo "hostile_seg: logs kept in $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

gcc -O2 -Wall -Wextra -Werror -o "$work/victim" tests/chaos/victim.c -libverbs || exit 1
# `rverbs stat`, the reader of every endpoint's counters segment (attacked in a).
scripts/build-dropin.sh >/dev/null || exit 1   # builds the CLI
target=$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
STAT=${target:-target}/release/rverbs
export LD_LIBRARY_PATH=$DROPIN
# Stalls: 4 s on "ab"; 10 s on "bc", whose ends share a process (b) with "ab", where a
# verb on an attacked object may block b's only thread up to the bounds of
# docs/shared-state.md (4 s for a CQ left "resizing").
export VICTIM_STALL=$STALL
# The victims' warnings (what they noticed and survived) go to their logs.
export RVERBS_LOG=${RVERBS_LOG:-info}

failures=0 crashes=0 hangs=0 spins=0 canaries=0 reported=0 third_msgs=0 ab_msgs=0
declare -A kinds=() errors=()
fail() { echo "FAIL - $*"; failures=$((failures + 1)); }

# Samples (20 x 50 ms) the state of `pid`'s progress thread; prints how many samples
# found it running or runnable (R). Idle, it sleeps in epoll (S); a loop that spins or
# yields is R even when busy-polling threads leave it little CPU. -1: no such thread.
progress_running() {
	local t tp=
	for t in /proc/"$1"/task/*; do
		[ "$(cat "$t/comm" 2>/dev/null)" = rverbs-progress ] && tp=$t && break
	done
	[ -n "$tp" ] || { echo -1; return; }
	local n=0 i s
	for i in $(seq 1 20); do
		s=$(awk '{ print $3 }' "$tp/stat" 2>/dev/null)
		[ "$s" = R ] && n=$((n + 1))
		sleep 0.05
	done
	echo $n
}

# The last attack the scribbler made (for a failure report).
last_attack() {
	grep -v -e '\.\.\.$' -e '^done' -e 'skipped' "$1" | tail -1
}

epoch() {
	local e=$1 x=$work/e$1 rt=$shm/e$1 seed=$((SEED * 100003 + $1))
	mkdir -p "$x" "$rt"
	chmod 700 "$rt"
	local -A pid=()
	local t0
	t0=$(date +%s)
	RVERBS_RUNTIME_DIR=$rt RVERBS_SHARED_MR=1 timeout -s KILL "$LIMIT" "$work/victim" "$x" a "$SECONDS_PER_EPOCH" s:ab >"$x/a.out" 2>"$x/a.err" &
	pid[a]=$!
	RVERBS_RUNTIME_DIR=$rt RVERBS_CMA=off timeout -s KILL "$LIMIT" "$work/victim" "$x" b "$SECONDS_PER_EPOCH" c:ab "s:bc:$STALL_OTHER" >"$x/b.out" 2>"$x/b.err" &
	pid[b]=$!
	RVERBS_RUNTIME_DIR=$rt timeout -s KILL "$LIMIT" "$work/victim" "$x" c "$SECONDS_PER_EPOCH" "c:bc:$STALL_OTHER" >"$x/c.out" 2>"$x/c.err" &
	pid[c]=$!
	pids=("${pid[@]}")
	# Wait (bounded) until all three are connected.
	local i
	for i in $(seq 1 300); do
		grep -q READY "$x/a.out" && grep -q READY "$x/b.out" && grep -q READY "$x/c.out" && break
		sleep 0.1
	done
	if ! { grep -q READY "$x/a.out" && grep -q READY "$x/b.out" && grep -q READY "$x/c.out"; }; then
		fail "epoch $e: victims never connected"; tail -3 "$x"/*.out "$x"/*.err
		return
	fi
	timeout 60 /usr/bin/python3 tests/chaos/scribbler.py "$x" "$seed" "$ROUNDS" \
		"$(awk "BEGIN { print $SECONDS_PER_EPOCH * 0.8 }")" "$x/attacks.log" ||
		fail "epoch $e: the scribbler itself failed (seed $seed)"
	find "$rt" >"$x/runtime-dir.after" 2>&1
	# The counters of every endpoint, read from the attacked directory as `rverbs stat`
	# reads them: an error or an endpoint left out is fine, a crash or a hang is not.
	RVERBS_RUNTIME_DIR=$rt timeout -s KILL 10 "$STAT" stat --json >"$x/stat.out" 2>"$x/stat.err"
	local src=$?
	if [ $src = 137 ]; then
		hangs=$((hangs + 1))
		fail "epoch $e: rverbs stat hung; last attack: $(last_attack "$x/attacks.log")"
	elif [ $src -gt 128 ] || grep -Eqi 'bus error|segmentation fault|panicked' "$x/stat.err"; then
		crashes=$((crashes + 1))
		fail "epoch $e: rverbs stat crashed (status $src): $(head -2 "$x/stat.err" | tr '\n' ' ')"
	fi
	# Spin check: each victim's progress thread, for a second, while the victims still
	# run (their own threads busy-poll by design; the progress thread sleeps when idle).
	local v n child
	for v in a b c; do
		child=$(pgrep -P "${pid[$v]}" victim || echo 0)
		n=$(progress_running "$child")
		if [ "$n" -ge 15 ]; then
			spins=$((spins + 1))
			fail "epoch $e: victim $v's progress thread spins (running in $n of 20 samples); last attack: $(last_attack "$x/attacks.log")"
		fi
	done
	# A victim still running shortly before its timeout hangs: keep its stacks (gdb, if
	# installed) for the report, then let the timeout kill it.
	for v in a b c; do
		while kill -0 "${pid[$v]}" 2>/dev/null && [ $(($(date +%s) - t0)) -lt $((LIMIT - 4)) ]; do sleep 0.2; done
		child=$(pgrep -P "${pid[$v]}" victim) || continue
		command -v gdb >/dev/null &&
			timeout 30 gdb -p "$child" -batch -ex 'thread apply all bt 12' 2>/dev/null | grep -E '^#|^Thread' >"$x/$v.stack"
	done
	for v in a b c; do
		wait "${pid[$v]}"
		local rc=$?
		local out=$x/$v.out err=$x/$v.err
		if [ $rc = 137 ]; then
			hangs=$((hangs + 1))
			fail "epoch $e: victim $v hung (killed after ${LIMIT}s); last attack: $(last_attack "$x/attacks.log")"
			# Every thread, with its first frames in rverbs or the victim: the stuck one
			# is not always the first gdb shows.
			[ -s "$x/$v.stack" ] && awk '/^Thread/ { print; n = 0; next } /rverbs|ibverbs|victim/ && n < 4 { print; n++ }' "$x/$v.stack" | sed 's/^/      /'
		elif [ $rc -gt 128 ] || grep -Eqi 'bus error|segmentation fault|core dumped|panicked' "$err"; then
			crashes=$((crashes + 1))
			fail "epoch $e: victim $v crashed (status $rc): $(grep -Ei 'bus error|segmentation|core dumped|panicked' "$err" | head -2 | tr '\n' ' '); last attack: $(last_attack "$x/attacks.log")"
		fi
		case $rc in
		0 | 3 | 137) ;;
		10) fail "epoch $e: victim $v: the untouched connection failed: $(grep LINK "$out" | tr '\n' ' ')" ;;
		11) canaries=$((canaries + 1)); fail "epoch $e: victim $v: $(grep CANARY "$out"); attacks: $(grep -c . "$x/attacks.log") lines" ;;
		12) fail "epoch $e: victim $v: $(grep SETUP "$out")" ;;
		*) [ $rc -gt 128 ] || fail "epoch $e: victim $v exited $rc" ;;
		esac
		[ $rc = 0 ] || [ $rc = 3 ] || { [ "${CHAOS_KEEP:-0}" = 1 ] || tail -5 "$out" "$err" >&2; }
	done
	pids=()
	# Counts: attacks by kind, errors the victims reported, messages.
	local line k n
	line=$(grep '^done' "$x/attacks.log")
	for k in ${line#done }; do n=${k#*=}; k=${k%%=*}; kinds[$k]=$((${kinds[$k]:-0} + n)); done
	while read -r _ name tag role msgs result; do
		msgs=${msgs#msgs=} result=${result#result=}
		if [ "$tag" = ab ]; then
			[ "$role" = client ] && ab_msgs=$((ab_msgs + msgs))
			if [ "$result" != ok ]; then
				reported=$((reported + 1))
				k=${result%%:*}:${result#*:}
				k=${k%%-seq-*}
				errors[$k]=$((${errors[$k]:-0} + 1))
			fi
		elif [ "$tag" = bc ]; then
			[ "$role" = client ] && third_msgs=$((third_msgs + msgs))
			[ "$result" = ok ] || fail "epoch $e: untouched connection bc, $name ($role): $result"
		fi
	done < <(grep -h '^LINK' "$x/a.out" "$x/b.out" "$x/c.out")
	grep -q '^LINK c bc client msgs=[1-9].* result=ok' "$x/c.out" ||
		fail "epoch $e: the third party exchanged no checked message"
	rm -rf "$rt"
}

# Another user: cannot open the segments, cannot reach the QPs through them.
other_user() {
	local x=$work/ou rt=$shm/ou nobody=65534 own=/tmp/rverbs-chaos-nobody-$$
	mkdir -p "$x" "$rt"
	chmod 700 "$rt"
	chmod 755 "$work" && chmod 777 "$x" && chmod 755 "$work/victim"
	# A filler holds endpoint 0, so the root server is endpoint 1: a uid-65534 process
	# with a runtime directory of its own is endpoint 0 there, and QPNs of endpoint 0
	# would name its own QPs.
	RVERBS_RUNTIME_DIR=$rt timeout -s KILL 40 "$work/victim" "$x" f 1 s:nobody-comes >"$x/f.out" 2>&1 &
	local f=$!
	local i
	for i in $(seq 1 100); do [ -f "$x/f.inv" ] && break; sleep 0.1; done
	VICTIM_STALL=3 RVERBS_RUNTIME_DIR=$rt timeout -s KILL 60 "$work/victim" "$x" a 3 s:ou1 s:ou2 >"$x/a.out" 2>"$x/a.err" &
	local a=$!
	pids=("$a" "$f")
	for i in $(seq 1 100); do [ -f "$x/a.inv" ] && break; sleep 0.1; done
	local dir
	dir=$(sed -n 's/^dir //p' "$x/a.inv")
	# Modes: the runtime directory 0700, the endpoint directory 0700, every segment and
	# FIFO 0600 (owner only).
	local m bad=0 f
	m=$(stat -c %a "$rt"); [ "$m" = 700 ] || { fail "other user: runtime directory mode $m"; bad=1; }
	m=$(stat -c %a "$dir"); [ "$m" = 700 ] || { fail "other user: endpoint directory mode $m"; bad=1; }
	for f in "$dir"/*; do
		m=$(stat -c %a "$f")
		[ "$m" = 600 ] || { fail "other user: $(basename "$f") mode $m"; bad=1; }
	done
	[ $bad = 1 ] || echo "ok - other user: runtime directory 0700, endpoint directory 0700, $(ls "$dir" | wc -l) segments and FIFOs 0600"
	# A process of uid 65534 cannot open any of them, even knowing their names.
	local opened
	opened=$(setpriv --reuid=$nobody --regid=$nobody --clear-groups /usr/bin/python3 - "$dir" "$(ls "$dir")" <<-'EOF'
	import os, sys
	d, names = sys.argv[1], sys.argv[2].split()
	n = 0
	for name in names:
	    for flags in (os.O_RDONLY, os.O_WRONLY | os.O_NONBLOCK):
	        try:
	            os.close(os.open(os.path.join(d, name), flags))
	            n += 1
	            print("opened", name, flags)
	        except OSError:
	            pass
	for p in (d, os.path.dirname(d)):
	    try:
	        os.listdir(p)
	        print("listed", p)
	        n += 1
	    except OSError:
	        pass
	print("opened-count", n)
	EOF
	)
	if grep -q '^opened-count 0$' <<<"$opened"; then
		echo "ok - other user: uid $nobody can neither list the runtime and endpoint directories nor open any of $(ls "$dir" | wc -l) files"
	else
		fail "other user: uid $nobody reached files: $opened"
	fi
	# Two uid-65534 processes on the drop-in, told the root server's QPNs, connect to
	# them: one with a runtime directory of its own (a device of its own, where the
	# root's endpoint does not exist), one pointed at the root's runtime directory
	# (which it cannot enter: the device runs privately, in-process only).
	setpriv --reuid=$nobody --regid=$nobody --clear-groups env RVERBS_RUNTIME_DIR=$own VICTIM_STALL=3 \
		timeout -s KILL 40 "$work/victim" "$x" n1 1 c:ou1 >"$x/n1.out" 2>"$x/n1.err" &
	local n1=$!
	setpriv --reuid=$nobody --regid=$nobody --clear-groups env RVERBS_RUNTIME_DIR=$rt VICTIM_STALL=3 \
		timeout -s KILL 40 "$work/victim" "$x" n2 1 c:ou2 >"$x/n2.out" 2>"$x/n2.err" &
	local n2=$!
	pids=("$a" "$f" "$n1" "$n2")
	wait "$n1"; local rc1=$?
	wait "$n2"; local rc2=$?
	wait "$a"; local arc=$?
	kill -KILL "$f" 2>/dev/null; wait "$f" 2>/dev/null
	pids=()
	rm -rf "$own"
	echo "   uid $nobody, own runtime dir:  status $rc1, $(grep '^LINK' "$x/n1.out")"
	echo "   uid $nobody, root's dir:       status $rc2, $(grep -h -e '^LINK' -e WARN "$x/n2.out" "$x/n2.err" | cut -c1-160 | tr '\n' ' ')"
	echo "   root server:                 status $arc, $(grep '^LINK' "$x/a.out" | tr '\n' ' ')"
	if grep -q 'result=ok' "$x/n1.out" "$x/n2.out" || grep '^LINK' "$x/a.out" | grep -qv ' msgs=0 '; then
		fail "other user: uid $nobody exchanged messages with a root QP"
	else
		echo "ok - other user: no request of uid $nobody reached the root QPs (root server: 0 messages on both)"
	fi
	grep -Eqi 'panicked|bus error|segmentation' "$x"/*.err && fail "other user: a crash"
}

for e in $(seq 1 "$EPOCHS"); do
	epoch "$e"
	if [ $((e % 25)) = 0 ] || [ "$e" = "$EPOCHS" ]; then
		echo "# epoch $e/$EPOCHS: failures $failures, reported errors $reported, ab messages $ab_msgs, bc messages $third_msgs, $(($(date +%s) - start_time)) s"
	fi
done
if [ "$(id -u)" = 0 ]; then
	other_user
else
	echo "# other-user check skipped (needs root)"
fi

total=0
echo "# mode $MODE, seed $SEED, $EPOCHS epochs x $ROUNDS rounds"
printf '# attacks:'
for k in "${!kinds[@]}"; do printf ' %s=%s' "$k" "${kinds[$k]}"; total=$((total + ${kinds[$k]})); done
echo " (total $total)"
printf '# victim errors reported on ab: %s:' "$reported"
for k in "${!errors[@]}"; do printf ' %s=%s' "$k" "${errors[$k]}"; done
echo
echo "# crashes $crashes, hangs $hangs, spins $spins, canary changes $canaries"
echo "# messages: ab (attacked) $ab_msgs, bc (third party, checked) $third_msgs"
echo "# $failures failures, $(($(date +%s) - start_time)) s"
[ "$failures" = 0 ]
