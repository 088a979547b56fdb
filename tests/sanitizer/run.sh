#!/usr/bin/env bash
# The verbs sanitizer against C programs (docs/sanitizer.md): one small program per
# finding, each with exactly that bug on the line marked with a BUG comment (and
# builder_dereg: dereg-mr-in-use of a request built with ibv_wr_*), built with
# -g -O0 against the installed <infiniband/verbs.h> and run on the drop-in
# libibverbs.so.1 with RVERBS_SANITIZE=1. For each the report must name the finding's
# kind, the object the program printed (lkey, QPN) and the file:line of the BUG line in
# a backtrace (for send_buffer_changed, whose bug is a plain store the library cannot
# see, the BUG line must lie between the post and the poll the report names), and be
# the only report; the same program with --fixed must exit 0 with
# no report at all. Then: RVERBS_SANITIZE=abort ends the program with SIGABRT after the
# first report, RVERBS_SANITIZE unset reports nothing, RVERBS_SANITIZE_LOG gets a copy.
#
# unacked_events blocks for ever in ibv_destroy_cq, as it does on rdma-core
# (ibv_get_cq_event(3): destroying a CQ waits for every event to be acknowledged): the
# run is bounded by `timeout`, must have printed the report before the wait, and is
# killed.
#
# read_before_completion forks its sender (a process of its own, so that its QP answers
# 0 to ibv_query_qp_data_in_order for SENDs); its report must name the read at the BUG
# line and the ibv_post_recv, its early read must see the old bytes (placed late), and
# without the sanitizer the same read sees the message.
#
# mr_freed's bug is a free(3) the library sees only through the free watch
# (librverbs_free.so from build-dropin.sh), preloaded for every program here.
#
# Needs gcc and libibverbs-dev (the header), no root. Environment: DROPIN_DIR, the
# directory holding libibverbs.so.1 (default: scripts/build-dropin.sh builds it).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
dropin=${DROPIN_DIR:-$("$repo/scripts/build-dropin.sh")}
# Every program runs with the sanitizer's free watch preloaded, as `rverbs run
# --sanitize` starts programs (mr_freed needs it; the others must stay as they are).
watch=$dropin/librverbs_free.so
[ -f "$watch" ] || { echo "sanitizer: $watch missing (scripts/build-dropin.sh builds it with gcc)" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

pass=0 fail=0
ok() { echo "ok - $*"; pass=$((pass + 1)); }
bad() { echo "FAIL - $*"; fail=$((fail + 1)); }
check() { # check DESCRIPTION COMMAND...
	local what=$1
	shift
	if "$@"; then ok "$what"; else bad "$what"; fi
}

programs=(dereg_in_use:dereg-mr-in-use unacked_events:unacked-cq-events leak:leak-at-exit post_in_reset:post-in-bad-state
	send_buffer_changed:send-buffer-changed cq_too_small:cq-too-small poll_unfinished:cq-poll-unfinished
	single_threaded_shared:single-threaded-cq-shared lost_wakeup:lost-wakeup unsignaled_fill:unsignaled-fill
	remote_access:remote-access-explained rereg_in_use:rereg-mr-in-use dealloc_mw_in_use:dealloc-mw-in-use
	destroy_qp_in_use:destroy-qp-in-use wc_field:wc-field-not-requested builder_dereg:dereg-mr-in-use
	mr_unmapped:mr-memory-unmapped mr_freed:mr-memory-freed read_before_completion:read-before-completion)
for p in "${programs[@]}"; do
	gcc -g -O0 -Wall -Werror -pthread -o "$work/${p%%:*}" "$here/${p%%:*}.c" -libverbs
done

# run NAME OUT ERR [ARGS...]: the program on the drop-in, bounded; sets $rc.
run() {
	local name=$1 out=$2 err=$3
	shift 3
	rc=0
	LD_PRELOAD=$watch LD_LIBRARY_PATH=$dropin timeout -s KILL 10 "$work/$name" "$@" >"$out" 2>"$err" || rc=$?
}

for p in "${programs[@]}"; do
	name=${p%%:*} kind=${p#*:}
	line=$(grep -n 'BUG \*/' "$here/$name.c" | cut -d: -f1)
	out=$work/$name.out err=$work/$name.err
	if [ "$name" = unacked_events ]; then
		# In the background: wait (at most 10 s) for the report, then the program must
		# still be inside ibv_destroy_cq; it is killed.
		LD_PRELOAD=$watch LD_LIBRARY_PATH=$dropin RVERBS_SANITIZE=1 timeout -s KILL 20 "$work/$name" >"$out" 2>"$err" &
		pid=$!
		for _ in $(seq 100); do
			grep -q '^SUMMARY: RVERBS SANITIZER' "$err" && break
			kill -0 $pid 2>/dev/null || break
			sleep 0.1
		done
		alive=no
		kill -0 $pid 2>/dev/null && alive=yes
		kill -KILL $pid 2>/dev/null || true
		wait $pid 2>/dev/null || true
		check "$name: after the report, ibv_destroy_cq still waits for the acknowledgement (as rdma-core's)" test $alive = yes
	else
		RVERBS_SANITIZE=1 run "$name" "$out" "$err"
		check "$name: exits 0 with the sanitizer reporting (rc $rc)" test "$rc" = 0
	fi
	check "$name: one report, of kind $kind" test "$(grep -c '==RVERBS SANITIZER: ' "$err")" = 1 -a "$(grep -c "==RVERBS SANITIZER: $kind: " "$err")" = 1
	if [ "$name" = send_buffer_changed ]; then
		# The change itself leaves no trace the library sees: the report names the post
		# and the poll, and the BUG line must lie between them.
		at() { sed -n "/^  $1:/,/^  [a-z]/p" "$err" | sed -n "s|.*($here/$name.c:\([0-9]*\)).*|\1|p" | head -n 1; }
		posted=$(at 'posted at') polled=$(at 'completion polled at')
		check "$name: posted at line ${posted:-?} < the BUG line $line < polled at line ${polled:-?}" \
			test -n "$posted" -a -n "$polled" -a "${posted:-0}" -lt "$line" -a "$line" -lt "${polled:-0}"
	else
		check "$name: a backtrace names $name.c:$line, the BUG line" grep -q "($here/$name.c:$line)" "$err"
	fi
	case $name in
	dereg_in_use)
		lkey=$(sed -n 's/^lkey \(0x[0-9a-f]*\) qpn \(0x[0-9a-f]*\).*/\1/p' "$out")
		qpn=$(sed -n 's/^lkey \(0x[0-9a-f]*\) qpn \(0x[0-9a-f]*\).*/\2/p' "$out")
		check "$name: the report names mr lkey $lkey and wr_id 0x5a on QPN $qpn" \
			grep -q "ibv_dereg_mr of mr lkey $lkey while work request wr_id 0x5a on QPN $qpn (send queue)" "$err"
		check "$name: the post's backtrace is there" grep -q '^  posted at:' "$err" ;;
	unacked_events)
		check "$name: the report came before the wait" grep -q '^destroying the cq' "$out"
		check "$name: it names one unacknowledged event and where it was obtained" \
			grep -q 'with 1 event(s) not acknowledged' "$err"
		check "$name: where the event was obtained" grep -q '^  last unacknowledged event obtained at:' "$err" ;;
	leak)
		qpn=$(sed -n 's/^qpn \(0x[0-9a-f]*\)/\1/p' "$out")
		check "$name: the report lists qp QPN $qpn created at the BUG line" \
			grep -q -A2 "^  qp QPN $qpn created at:" "$err"
		check "$name: ... whose first frames include $name.c:$line" \
			sh -c 'grep -A2 "^  qp QPN $1 created at:" "$2" | grep -q "$3"' _ "$qpn" "$err" "$name.c:$line"
		check "$name: and the other survivors (context, pd, mr, cq)" \
			grep -q '^  context .* created at:' "$err" ;;
	send_buffer_changed)
		read -r lkey qpn addr < <(sed -n 's/^lkey \(0x[0-9a-f]*\) qpn \(0x[0-9a-f]*\) addr \(0x[0-9a-f]*\).*/\1 \2 \3/p' "$out")
		end=$(printf '0x%x' $((addr + 64)))
		check "$name: the report names wr_id 0x5b on QPN $qpn and the SGE [$addr-$end)" \
			grep -q "the buffer \[$addr-$end) of work request wr_id 0x5b on QPN $qpn (send queue) changed before its completion was polled" "$err"
		check "$name: and the region, lkey $lkey" grep -q "^  mr lkey $lkey \[$addr-" "$err"
		check "$name: the peer got the first message (the program went on)" grep -q '^done' "$out" ;;
	cq_too_small)
		cqe=$(sed -n 's/^cqe \([0-9]*\)/\1/p' "$out")
		cq=$(sed -n 's/.*cq-too-small: cq \([0-9]*\) holds.*/\1/p' "$err")
		qpn=$(sed -n 's/^qpn \(0x[0-9a-f]*\)/\1/p' "$out")
		check "$name: the report names cq ${cq:-?} of $cqe entries (ibv_cq.cqe) against 32 outstanding" \
			grep -q "cq $cq holds $cqe completions, but the queues completing to it can have 32 completing work requests outstanding" "$err"
		check "$name: and QPN $qpn's depths" sh -c 'grep -q "^  QPN $1 send queue: max_send_wr 16" "$2" && grep -q "^  QPN $1 receive queue: max_recv_wr 16" "$2"' _ "$qpn" "$err"
		check "$name: the BUG line is where cq $cq was created" \
			sh -c 'sed -n "/^  cq $1 created at:/,/^  [a-z]/p" "$2" | grep -q "$3"' _ "$cq" "$err" "$name.c:$line"
		check "$name: warned at the first post, ibv_post_recv" grep -q '^  ibv_post_recv called at:' "$err" ;;
	poll_unfinished)
		check "$name: the report names the CQ destroyed with its batch open" \
			grep -q 'ibv_destroy_cq of cq [0-9]* while a batch ibv_start_poll opened was not ended with ibv_end_poll' "$err"
		check "$name: and where the unfinished batch started, in $name.c" \
			sh -c 'sed -n "/^  unfinished poll started at:/,/^  [a-z]/p" "$1" | grep -q "$2"' _ "$err" "($here/$name.c:"
		check "$name: the program went on" grep -q '^done' "$out" ;;
	single_threaded_shared)
		check "$name: the report names the single-threaded CQ the second thread polled" \
			grep -q 'ibv_poll_cq of single-threaded cq [0-9]* while another thread is inside a poll of it' "$err"
		check "$name: and where the first thread's batch started, in $name.c" \
			sh -c 'sed -n "/^  the other thread.s poll started at:/,/^  [a-z]/p" "$1" | grep -q "$2"' _ "$err" "($here/$name.c:"
		check "$name: the second thread got the other completion" grep -q '^polled 1' "$out" ;;
	lost_wakeup)
		check "$name: the report names the channel and the CQ armed holding one completion" \
			grep -q 'ibv_get_cq_event on completion channel [0-9]* while cq [0-9]* was armed holding 1 completion(s) and not polled since' "$err"
		check "$name: and where the CQ was armed, in $name.c" \
			sh -c 'sed -n "/^  cq [0-9]* armed at:/,/^  [a-z]/p" "$1" | grep -q "$2"' _ "$err" "($here/$name.c:"
		check "$name: the program went on" grep -q '^done' "$out" ;;
	unsignaled_fill)
		read -r qpn depth < <(sed -n 's/^qpn \(0x[0-9a-f]*\) depth \([0-9]*\)/\1 \2/p' "$out")
		check "$name: the report names QPN $qpn, its depth $depth, full of $depth unsignaled requests" \
			grep -q "ibv_post_send to QPN $qpn finds its send queue of depth $depth full of $depth unsignaled work requests" "$err"
		check "$name: the first request of the run, wr_id 0x100" grep -q "^  wr_id 0x100 on QPN $qpn (send queue)" "$err"
		check "$name: the post that found no slot is the BUG line" \
			sh -c 'sed -n "/^  ibv_post_send called at:/,/^  [a-z]/p" "$1" | grep -q "$2"' _ "$err" "$name.c:$line"
		check "$name: the run began before it" \
			sh -c 'sed -n "/^  first unsignaled work request of the run posted at:/,/^  [a-z]/p" "$1" | grep -q "$2.c:"' _ "$err" "$name"
		check "$name: the program went on (rverbs took the post)" grep -q '^done' "$out" ;;
	remote_access)
		read -r rkey qpn raddr start end < <(sed -n 's/^rkey \(0x[0-9a-f]*\) qpn \(0x[0-9a-f]*\) raddr \(0x[0-9a-f]*\) region \(0x[0-9a-f]*\)-\(0x[0-9a-f]*\)/\1 \2 \3 \4 \5/p' "$out")
		rend=$(printf '0x%x' $((raddr + 64)))
		check "$name: the report names wr_id 0x5c on QPN $qpn, REM_ACCESS_ERR, the range [$raddr-$rend) beyond the region [$start-$end)" \
			grep -q "work request wr_id 0x5c (IBV_WR_RDMA_WRITE) on QPN $qpn completed with IBV_WC_REM_ACCESS_ERR: the range \[$raddr-$rend) leaves the region, which covers \[$start-$end)" "$err"
		check "$name: and rkey $rkey" grep -q "^  remote range \[$raddr-$rend) through rkey $rkey" "$err"
		check "$name: where the target region was registered" grep -q '^  target region registered at:' "$err"
		check "$name: reported when the error completion was polled" grep -q '^  error completion polled at:' "$err" ;;
	builder_dereg)
		read -r lkey qpn < <(sed -n 's/^lkey \(0x[0-9a-f]*\) qpn \(0x[0-9a-f]*\).*/\1 \2/p' "$out")
		check "$name: the report names mr lkey $lkey and wr_id 0x5f on QPN $qpn" \
			grep -q "ibv_dereg_mr of mr lkey $lkey while work request wr_id 0x5f on QPN $qpn (send queue) uses it" "$err"
		wc_line=$(grep -n 'ibv_wr_complete(qpx)' "$here/$name.c" | cut -d: -f1)
		check "$name: posted at the ibv_wr_complete line, $name.c:$wc_line" \
			sh -c 'sed -n "/^  posted at:/,/^  [a-z]/p" "$1" | grep -q "$2"' _ "$err" "($here/$name.c:$wc_line)" ;;
	rereg_in_use)
		read -r lkey qpn < <(sed -n 's/^lkey \(0x[0-9a-f]*\) qpn \(0x[0-9a-f]*\).*/\1 \2/p' "$out")
		check "$name: the report names mr lkey $lkey and wr_id 0x5d on QPN $qpn" \
			grep -q "ibv_rereg_mr (changing translation or PD) of mr lkey $lkey while work request wr_id 0x5d on QPN $qpn (send queue) uses it" "$err"
		check "$name: where the WRITE was posted and the region re-registered" \
			sh -c 'grep -q "^  posted at:" "$1" && grep -q "^  re-registered at:" "$1"' _ "$err"
		check "$name: the program went on (the region moved)" grep -q '^done' "$out" ;;
	dealloc_mw_in_use)
		read -r rkey qpn < <(sed -n 's/^rkey \(0x[0-9a-f]*\) qpn \(0x[0-9a-f]*\).*/\1 \2/p' "$out")
		check "$name: the report names mw rkey $rkey and the bind wr_id 0x71 on QPN $qpn" \
			grep -q "ibv_dealloc_mw of mw rkey $rkey while the bind work request wr_id 0x71 on QPN $qpn (send queue) is outstanding" "$err"
		check "$name: where the bind was posted, in $name.c" \
			sh -c 'sed -n "/^  bind posted at:/,/^  [a-z]/p" "$1" | grep -q "$2"' _ "$err" "($here/$name.c:"
		check "$name: the program went on (the bind's completion polled after)" grep -q '^done' "$out" ;;
	destroy_qp_in_use)
		qpn=$(sed -n 's/^qpn \(0x[0-9a-f]*\).*/\1/p' "$out")
		check "$name: the report names QPN $qpn and the unfinished SEND wr_id 0x5e" \
			grep -q "ibv_destroy_qp of QPN $qpn while the device has not finished 1 send work request(s) (the first: wr_id 0x5e, signaled): they are discarded without completions" "$err"
		check "$name: where the SEND was posted, in $name.c" \
			sh -c 'sed -n "/^  posted at:/,/^  [a-z]/p" "$1" | grep -q "$2"' _ "$err" "($here/$name.c:"
		check "$name: the receive posted at the destroy is not reported" test "$(grep -c 'receive queue' "$err")" = 0 ;;
	wc_field)
		read -r qpn wcf < <(sed -n 's/^qpn \(0x[0-9a-f]*\) wc_flags \(0x[0-9a-f]*\)/\1 \2/p' "$out")
		cq=$(sed -n 's/.*wc-field-not-requested: ibv_wc_read_qp_num of cq \([0-9]*\),.*/\1/p' "$err")
		check "$name: the report names ibv_wc_read_qp_num of cq ${cq:-?} without IBV_WC_EX_WITH_QP_NUM" \
			grep -q "ibv_wc_read_qp_num of cq $cq, created without IBV_WC_EX_WITH_QP_NUM in its wc_flags" "$err"
		check "$name: and the CQ's wc_flags, $wcf" grep -q "^  cq $cq created with wc_flags $wcf, without IBV_WC_EX_WITH_QP_NUM" "$err"
		check "$name: where cq $cq was created, in $name.c" \
			sh -c 'sed -n "/^  cq $1 created at:/,/^  [a-z]/p" "$2" | grep -q "$3"' _ "$cq" "$err" "($here/$name.c:"
		check "$name: the read still returned the field (QPN $qpn)" grep -q "^read qp_num $qpn" "$out" ;;
	mr_unmapped)
		read -r lkey pages hole < <(sed -n 's/^lkey \(0x[0-9a-f]*\) pages \(0x[0-9a-f]*\) hole \(0x[0-9a-f]*\)/\1 \2 \3/p' "$out")
		end=$(printf '0x%x' $((pages + 8192)))
		check "$name: the report names mr lkey $lkey [$pages-$end) unmapped from $hole" \
			grep -q "the memory of mr lkey $lkey \[$pages-$end) is not mapped from $hole on, while the region is registered (ibv_dereg_mr)" "$err"
		check "$name: where the region was registered, in $name.c" \
			sh -c 'sed -n "/^  mr registered at:/,/^  [a-z]/p" "$1" | grep -q "$2"' _ "$err" "($here/$name.c:"
		check "$name: the program went on (the region deregistered)" grep -q '^done' "$out" ;;
	mr_freed)
		read -r lkey qpn buf < <(sed -n 's/^lkey \(0x[0-9a-f]*\) qpn \(0x[0-9a-f]*\) buf \(0x[0-9a-f]*\)/\1 \2 \3/p' "$out")
		end=$(printf '0x%x' $((buf + 4096)))
		check "$name: the report names the block at $buf and mr lkey $lkey [$buf-$end) over it" \
			grep -q "heap block \[$buf-0x[0-9a-f]*) released while mr lkey $lkey \[$buf-$end) is registered over it" "$err"
		check "$name: and the outstanding receive wr_id 0x61 on QPN $qpn" \
			grep -q "and work request wr_id 0x61 on QPN $qpn (receive queue) uses it" "$err"
		check "$name: freed at the BUG line, first frame (the watch's own frames left out)" \
			sh -c 'sed -n "/^  freed at:/{n;p}" "$1" | grep -q "#0 main ($2)"' _ "$err" "$here/$name.c:$line"
		check "$name: where the receive was posted and the region registered" \
			sh -c 'grep -q "^  posted at:" "$1" && grep -q "^  mr registered at:" "$1"' _ "$err"
		check "$name: the program went on" grep -q '^done' "$out" ;;
	read_before_completion)
		read -r qpn lkey addr < <(sed -n 's/^qpn \(0x[0-9a-f]*\) lkey \(0x[0-9a-f]*\) addr \(0x[0-9a-f]*\).*/\1 \2 \3/p' "$out")
		end=$(printf '0x%x' $((addr + 4096)))
		check "$name: the report names the read of $addr in [$addr-$end) of wr_id 0x62 on QPN $qpn" \
			grep -q "read of $addr in the buffer \[$addr-$end) of receive work request wr_id 0x62 on QPN $qpn before its completion was polled" "$err"
		check "$name: and the SGE's lkey $lkey" grep -q "^  read of $addr (sge of lkey $lkey)" "$err"
		post_line=$(grep -n 'ibv_post_recv(r.qp' "$here/$name.c" | cut -d: -f1)
		check "$name: posted at the ibv_post_recv line, $name.c:$post_line" \
			sh -c 'sed -n "/^  posted at:/,/^  [a-z]/p" "$1" | grep -q "$2"' _ "$err" "($here/$name.c:$post_line)"
		check "$name: the read is the first site, at the BUG line" \
			sh -c 'sed -n "/^  read at:/{n;p}" "$1" | grep -q "#0 main ($2)"' _ "$err" "$here/$name.c:$line"
		check "$name: the early read saw the old bytes (placed late), the poll the message" \
			sh -c 'grep -q "^early read saw the old bytes" "$1" && grep -q "^done" "$1"' _ "$out"
		# Off, the same program reads the message early (rverbs placed it at the send),
		# so the sanitizer changed only what a late NIC could show.
		run "$name" "$work/off.out" "$work/off.err"
		check "$name: off, the early read already sees the message (rc $rc)" \
			sh -c 'test "$1" = 0 && grep -q "^early read saw the message" "$2"' _ "$rc" "$work/off.out" ;;
	post_in_reset)
		qpn=$(sed -n 's/^qpn \(0x[0-9a-f]*\)/\1/p' "$out")
		check "$name: the report names QPN $qpn in Init" grep -q "ibv_post_send to QPN $qpn in state Init" "$err"
		check "$name: the verb's answer is unchanged (EINVAL)" grep -q '^ibv_post_send returned 22' "$out"
		check "$name: the state history shows Reset -> Init (ibv_modify_qp)" grep -q 'Reset -> Init (ibv_modify_qp), at:' "$err" ;;
	esac
	RVERBS_SANITIZE=1 run "$name" "$out" "$err" --fixed
	check "$name --fixed: exits 0 (rc $rc) with no report" test "$rc" = 0 -a "$(grep -c 'RVERBS SANITIZER' "$err")" = 0
done

# RVERBS_SANITIZE=abort: the first report, then SIGABRT (128 + 6; bash says "Aborted");
# the program does not go on.
RVERBS_SANITIZE=abort run dereg_in_use "$work/a.out" "$work/a.err"
check "abort: exit status is SIGABRT's (rc $rc)" test "$rc" = 134
check "abort: the report, then ABORTING" grep -q '==ABORTING' "$work/a.err"
check "abort: the program stopped at the finding" test "$(grep -c '^done' "$work/a.out")" = 0

# Off (unset, and a value that is not a mode): no report, no change.
for v in unset 0; do
	if [ $v = unset ]; then run dereg_in_use "$work/o.out" "$work/o.err"; else RVERBS_SANITIZE=$v run dereg_in_use "$work/o.out" "$work/o.err"; fi
	check "off ($v): exits 0 (rc $rc) with no report" test "$rc" = 0 -a "$(grep -c 'RVERBS SANITIZER' "$work/o.err")" = 0
done

# RVERBS_SANITIZE_LOG: the report is appended to the file too.
RVERBS_SANITIZE=1 RVERBS_SANITIZE_LOG=$work/log run post_in_reset "$work/l.out" "$work/l.err"
check "RVERBS_SANITIZE_LOG: the file holds the report" grep -q '==RVERBS SANITIZER: post-in-bad-state: ' "$work/log"

echo "sanitizer: $pass passed, $fail failed"
[ "$fail" = 0 ]
