#!/usr/bin/env bash
# The fault plan of the verbs (RVERBS_FAULTS `fail=`, `wc=`, `wc_delay=` and `event=` items,
# docs/fault-injection.md) driving the error paths of unmodified programs on the drop-in
# libraries: Debian's ibv_rc_pingpong (ibverbs-utils) and rping (rdmacm-utils). librpma's
# are driven from crates/rverbs-rpma/tests/interop.rs (its C peer), the Rust API's from
# crates/rverbs/tests/fault_plan.rs.
#
# Each case puts one plan on one process. The faulted process must meet the fault as the
# error a verbs provider returns (NULL and errno from a creating verb, an error from a
# post, an error completion), report it with its own message, and exit non-zero within
# TIMEOUT; and the drop-in must log the injection on stderr ("fault injected: …"). Where
# the program has a peer:
#   - rping: the peer must end too, within TIMEOUT, once they were connected (the
#     connection manager tells it); a client that fails before connecting leaves the
#     server waiting for a client, which the script stops;
#   - ibv_rc_pingpong: the peer waits for ever for messages that will not come, on any
#     device (an RC connection has no keep-alive and the program no timeout), so the
#     script stops it once the faulted side has ended (a stopped peer is no failure).
# Events (`event=`) leave the verb successful and put the QP or CQ in error after it,
# which ibv_rc_pingpong meets as a flushed completion or a failed poll (the device's
# events: a port down shows in ibv_devinfo and runs RC retries out; a dead device flushes); rdma_cm failures
# (`fail=resolve_addr|resolve_route|connect`) end in the error event rping prints; an
# injected DISCONNECTED ends both rping processes before their last ping.
# Last, a probabilistic plan with a seed, run twice, must inject the same faults at the
# same calls (the replay promise of the plan).
#
# usage: verb_faults.sh [FILTER]   (FILTER: a bash regex on the case labels)
#
# Environment: DROPIN_DIR (default: scripts/build-dropin.sh), VERB_FAULTS_TIMEOUT
# (seconds per process, default 20).
set -euo pipefail
cd "$(dirname "$0")/../.."

FILTER=${1:-}
NAME=verb_faults.sh
FIRST_PORT=
TIMEOUT=${VERB_FAULTS_TIMEOUT:-20}
for p in ibv_rc_pingpong rping timeout; do
  command -v "$p" >/dev/null || { echo "$NAME: $p not found (apt-get install ibverbs-utils rdmacm-utils)" >&2; exit 2; }
done
# shellcheck source=lib/pairs.bash
source tests/conformance/lib/pairs.bash
# shellcheck source=lib/cm.bash
source tests/conformance/lib/cm.bash

# faulted_checks LOG RC MESSAGE LOGGED: the faulted process exited non-zero before the
# timeout, printed MESSAGE, and the drop-in logged "fault injected: LOGGED".
# Optional: EXIT_ANY=1, the program may exit 0 (rping ends a disconnected run with 0);
# EXIT_ZERO=1, it must exit 0 (a fault that only delays);
# UNLESS_MSG, what the faulted process prints only if the fault did not stop it; OR_MSG,
# other messages (one per line) that may stand for MESSAGE (where the program's timing
# picks which of its clean failures it meets).
faulted_checks() {
  local log=$1 rc=$2 msg=$3 logged=$4
  case $rc in
    0) [ -n "${EXIT_ANY:-}${EXIT_ZERO:-}" ] || why+=("the faulted process exited 0: the fault did not reach it") ;;
    124 | 137) why+=("the faulted process $(exit_text "$rc")") ;;
    *) [ -z "${EXIT_ZERO:-}" ] || why+=("the faulted process exited $rc: the fault must only slow it down") ;;
  esac
  [ -z "${UNLESS_MSG:-}" ] || ! grep -qF -- "$UNLESS_MSG" "$log" || why+=("the faulted process printed \"$UNLESS_MSG\": the fault did not stop it")
  grep -qF -- "$msg" "$log" || { [ -n "${OR_MSG:-}" ] && grep -qF -- "$OR_MSG" "$log"; } ||
    why+=("the faulted process did not print \"$msg\"${OR_MSG:+ (or \"${OR_MSG//$'\n'/\" or \"}\")}")
  grep -qF -- "fault injected: $logged" "$log" || why+=("no \"fault injected: $logged\" on its stderr")
}

# alone LABEL SPEC MESSAGE LOGGED PROGRAM ARGS...: one process under RVERBS_FAULTS=SPEC.
alone() {
  local label=$1 spec=$2 msg=$3 logged=$4 rc=0
  shift 4
  [ -z "$FILTER" ] || [[ $label =~ $FILTER ]] || return 0
  n=$((n + 1))
  slog=$WORK/logs/$n.faulted clog=$WORK/logs/$n.none
  start=$EPOCHREALTIME why=()
  scmd=(RVERBS_FAULTS="$spec" "$@") ccmd=("(no peer)")
  echo "(no peer)" >"$clog"
  RVERBS_FAULTS=$spec timeout -k 5 "$TIMEOUT" "${linebuf[@]}" "$@" </dev/null >"$slog" 2>&1 || rc=$?
  faulted_checks "$slog" "$rc" "$msg" "$logged"
  report_pair "$label"
}

# pair LABEL FAULTED(server|client) SPEC MESSAGE LOGGED PEER(ends|stopped) WAIT SERVER -- CLIENT:
# the SERVER command in the background, then the CLIENT once WAIT says the server is
# ready ("tcp PORT": a TCP listener; "cm PORT": an rdma_cm listener), RVERBS_FAULTS=SPEC on
# the FAULTED side. PEER: "ends" = the other side must exit within TIMEOUT (any status);
# "stopped" = it is stopped once the faulted side has ended.
pair() {
  local label=$1 faulted=$2 spec=$3 msg=$4 logged=$5 peer=$6 wait=$7
  shift 7
  [ -z "$FILTER" ] || [[ $label =~ $FILTER ]] || return 0
  local s=() c=() src=0 crc=0 senv=() cenv=() flog frc
  while [ "$1" != -- ]; do s+=("$1"); shift; done
  shift
  c=("$@")
  n=$((n + 1))
  slog=$WORK/logs/$n.server clog=$WORK/logs/$n.client
  start=$EPOCHREALTIME why=()
  if [ "$faulted" = server ]; then senv=(RVERBS_FAULTS="$spec"); else cenv=(RVERBS_FAULTS="$spec"); fi
  scmd=("${senv[@]}" "${s[@]}") ccmd=("${cenv[@]}" "${c[@]}")
  env "${senv[@]}" timeout -k 5 "$TIMEOUT" "${linebuf[@]}" "${s[@]}" >"$slog" 2>&1 &
  server_pid=$!
  case ${wait%% *} in
    tcp) wait_listen "${wait#* }" "$server_pid" || why+=("the server did not listen on TCP port ${wait#* }") ;;
    cm) cm_wait_listen tcp "${wait#* }" 10 || why+=("the server did not listen on rdma_cm port ${wait#* }") ;;
  esac
  env "${cenv[@]}" timeout -k 5 "$TIMEOUT" "${linebuf[@]}" "${c[@]}" >"$clog" 2>&1 &
  client_pid=$!
  # The faulted side ends first; a peer that waits for ever is stopped then.
  if [ "$faulted" = server ]; then
    wait "$server_pid" || src=$?
    [ "$peer" = ends ] || kill "$client_pid" 2>/dev/null || true
    wait "$client_pid" || crc=$?
  else
    wait "$client_pid" || crc=$?
    [ "$peer" = ends ] || kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" || src=$?
  fi
  server_pid= client_pid=
  if [ "$faulted" = server ]; then flog=$slog frc=$src; else flog=$clog frc=$crc; fi
  faulted_checks "$flog" "$frc" "$msg" "$logged"
  if [ "$peer" = ends ]; then
    local orc=$crc olog=$clog
    [ "$faulted" = server ] || orc=$src olog=$slog
    case $orc in 124 | 137) why+=("the peer $(exit_text "$orc")") ;; esac
    # PEER_MSG (optional): what the peer must print when the fault reaches it too.
    [ -z "${PEER_MSG:-}" ] || grep -qF -- "$PEER_MSG" "$olog" || why+=("the peer did not print \"$PEER_MSG\"")
  fi
  report_pair "$label"
}


# One process: each creating verb, and the first posts, refused as a provider refuses them.
pp=(ibv_rc_pingpong -d rverbs0 -g 1)
# LABEL|SPEC|MESSAGE|LOGGED per line.
while IFS='|' read -r label spec msg logged; do
  pick_port
  alone "$label" "$spec" "$msg" "$logged" "${pp[@]}" -p "$port"
done <<'CASES'
ibv_alloc_pd ENOMEM|fail=alloc_pd:ENOMEM|Couldn't allocate PD|ibv_alloc_pd fails with ENOMEM
ibv_reg_mr ENOMEM|fail=reg_mr:ENOMEM|Couldn't register MR|ibv_reg_mr fails with ENOMEM
ibv_create_cq ENOMEM|fail=create_cq:ENOMEM|Couldn't create CQ|ibv_create_cq fails with ENOMEM
ibv_create_qp ENOMEM|fail=create_qp:ENOMEM|Couldn't create QP|ibv_create_qp fails with ENOMEM
ibv_modify_qp EINVAL (to INIT)|fail=modify_qp:EINVAL:nth=1|Failed to modify QP to INIT|ibv_modify_qp fails with EINVAL
ibv_post_recv ENOMEM (the 5th receive)|fail=post_recv:ENOMEM:nth=5|Couldn't post receive (4)|ibv_post_recv fails with ENOMEM
CASES

# A connected ibv_rc_pingpong: a post refused mid-run, and a SEND completed in error.
pick_port; p=$port
pair "ibv_post_send ENOMEM (the 3rd send), client" client "fail=post_send:ENOMEM:nth=3" "Couldn't post send" \
  "ibv_post_send fails with ENOMEM" stopped "tcp $p" "${pp[@]}" -n 50 -p "$p" -- "${pp[@]}" -n 50 -p "$p" 127.0.0.1
pick_port; p=$port
pair "SEND completed with RETRY_EXC_ERR (the 5th), client" client "wc=RETRY_EXC_ERR:nth=5" \
  "Failed status transport retry counter exceeded (12) for wr_id 2" "send work request completes with RETRY_EXC_ERR" stopped "tcp $p" \
  "${pp[@]}" -n 50 -p "$p" -- "${pp[@]}" -n 50 -p "$p" 127.0.0.1
pick_port; p=$port
pair "SEND completed with RNR_RETRY_EXC_ERR, server" server "wc=RNR_RETRY_EXC_ERR:nth=2" \
  "Failed status RNR retry counter exceeded (13) for wr_id 2" "send work request completes with RNR_RETRY_EXC_ERR" stopped "tcp $p" \
  "${pp[@]}" -n 50 -p "$p" -- "${pp[@]}" -n 50 -p "$p" 127.0.0.1

# rping: the connection manager ends the peer too.
pick_port; p=$port
pair "rping: the server's ibv_reg_mr ENOMEM" server "fail=reg_mr:ENOMEM" "recv_buf reg_mr failed" \
  "ibv_reg_mr fails with ENOMEM" ends "cm $p" \
  rping -s -a 127.0.0.1 -p "$p" -C 3 -v -- rping -c -a 127.0.0.1 -p "$p" -C 3 -v
pick_port; p=$port
pair "rping: the client's first SEND completed with REM_ACCESS_ERR" client "wc=REM_ACCESS_ERR:nth=1" \
  "cq completion failed status 10" "send work request completes with REM_ACCESS_ERR" ends "cm $p" \
  rping -s -a 127.0.0.1 -p "$p" -C 3 -v -- rping -c -a 127.0.0.1 -p "$p" -C 3 -v
pick_port; p=$port
pair "rping: the client's ibv_create_qp ENOMEM" client "fail=create_qp:ENOMEM" "rdma_create_qp: Cannot allocate memory" \
  "ibv_create_qp fails with ENOMEM" stopped "cm $p" \
  rping -s -a 127.0.0.1 -p "$p" -C 3 -v -- rping -c -a 127.0.0.1 -p "$p" -C 3 -v

# Asynchronous events on demand: the verb succeeds, then the device acts (ibv_rc_pingpong
# reads no async event; what it meets is the QP or CQ in error).
pick_port; p=$port
pair "ibv_rc_pingpong: QP_FATAL after the 5th send, client" client "event=QP_FATAL:nth=5" \
  "Failed status Work Request Flushed Error (5)" "IBV_EVENT_QP_FATAL after ibv_post_send" stopped "tcp $p" \
  "${pp[@]}" -n 50 -p "$p" -- "${pp[@]}" -n 50 -p "$p" 127.0.0.1
pick_port; p=$port
pair "ibv_rc_pingpong: CQ_ERR after the 3rd receive, server" server "event=CQ_ERR:on=post_recv:from=3" \
  "poll CQ failed" "IBV_EVENT_CQ_ERR after ibv_post_recv" stopped "tcp $p" \
  "${pp[@]}" -n 50 -p "$p" -- "${pp[@]}" -n 50 -p "$p" 127.0.0.1

# The device's own events (docs/fault-injection.md, "Port and device events"): a port
# taken down, and a device dead. ibv_devinfo calls no verb but ibv_open_device that the
# plan can follow, so it shows the port DOWN under on=open_device (and exits 0); a
# connected ibv_rc_pingpong whose port goes down before its first SEND meets that SEND's
# retries running out; one whose device dies meets its receive flushed or its next post
# refused with EIO (which comes first is the peer's timing; both end the run); rping's
# client, whose device dies, is disconnected or has its next post refused with EIO
# (rping skips flushed completions silently), and both rping processes end.
EXIT_ANY=1 UNLESS_MSG="PORT_ACTIVE" alone "ibv_devinfo: PORT_ERR after ibv_open_device, the port DOWN" \
  "event=PORT_ERR:on=open_device" "PORT_DOWN (1)" "IBV_EVENT_PORT_ERR after ibv_open_device" ibv_devinfo -d rverbs0
EXIT_ANY=1 UNLESS_MSG="LINK_UP" alone "ibv_devinfo -v: its physical state POLLING" \
  "event=PORT_ERR:on=open_device" "POLLING (2)" "IBV_EVENT_PORT_ERR after ibv_open_device" ibv_devinfo -v -d rverbs0
pick_port; p=$port
pair "ibv_rc_pingpong: PORT_ERR after the client's move to RTS, its first SEND runs out of retries" client "event=PORT_ERR:on=modify_qp:nth=3" \
  "Failed status transport retry counter exceeded (12)" "IBV_EVENT_PORT_ERR after ibv_modify_qp" stopped "tcp $p" \
  "${pp[@]}" -n 50 -p "$p" -- "${pp[@]}" -n 50 -p "$p" 127.0.0.1
pick_port; p=$port
pair "ibv_rc_pingpong: DEVICE_FATAL after the 5th send, client" client "event=DEVICE_FATAL:nth=5" \
  "parse WC failed" "IBV_EVENT_DEVICE_FATAL after ibv_post_send" stopped "tcp $p" \
  "${pp[@]}" -n 50 -p "$p" -- "${pp[@]}" -n 50 -p "$p" 127.0.0.1
pick_port
alone "ibv_rc_pingpong: DEVICE_FATAL after the 3rd receive, the 4th fails (EIO)" "event=DEVICE_FATAL:on=post_recv:nth=3" \
  "Couldn't post receive (3)" "IBV_EVENT_DEVICE_FATAL after ibv_post_recv" "${pp[@]}" -p "$port"
pick_port; p=$port
# A dead device fails every later post with EIO: rping's main thread (its next SEND) or
# its completion thread (the receive it posts again) meets it first, as timing decides.
EXIT_ANY=1 UNLESS_MSG="rdma-ping-49:" OR_MSG=$'post send error 5\npost recv error: 5' pair "rping: DEVICE_FATAL after the client's 4th send" client \
  "event=DEVICE_FATAL:on=post_send:nth=4" "client DISCONNECT EVENT" "IBV_EVENT_DEVICE_FATAL after ibv_post_send" ends "cm $p" \
  rping -s -a 127.0.0.1 -p "$p" -C 50 -v -- rping -c -a 127.0.0.1 -p "$p" -C 50 -v

# Held-back completions (wc_delay=): the programs only slow down; both rping (which sleeps
# in its completion channel) and ibv_rc_pingpong -e (the same) must finish their run.
pick_port; p=$port
EXIT_ZERO=1 PEER_MSG="server DISCONNECT EVENT" pair "rping: every 3rd completion of the client held back 20 ms" client "wc_delay=20:every=3" \
  "ping data: rdma-ping-9:" "send work request's completion held back 20 ms" ends "cm $p" \
  rping -s -a 127.0.0.1 -p "$p" -C 10 -v -- rping -c -a 127.0.0.1 -p "$p" -C 10 -v
pick_port; p=$port
EXIT_ZERO=1 pair "ibv_rc_pingpong -e: every 5th completion of the client held back 10 ms" client "wc_delay=10:every=5" \
  "50 iters in" "send work request's completion held back 10 ms" ends "tcp $p" \
  "${pp[@]}" -e -n 50 -p "$p" -- "${pp[@]}" -e -n 50 -p "$p" 127.0.0.1

# rdma_cm failures: each call ends with its error event, which rping prints.
rp=(rping -c -a 127.0.0.1 -C 3 -v)
pick_port
alone "rping: rdma_resolve_addr ETIMEDOUT" "fail=resolve_addr:ETIMEDOUT" "RDMA_CM_EVENT_ADDR_ERROR, error -110" \
  "rdma_resolve_addr ends with RDMA_CM_EVENT_ADDR_ERROR (ETIMEDOUT)" "${rp[@]}" -p "$port"
pick_port
alone "rping: rdma_resolve_route ETIMEDOUT" "fail=resolve_route:ETIMEDOUT" "RDMA_CM_EVENT_ROUTE_ERROR, error -110" \
  "rdma_resolve_route ends with RDMA_CM_EVENT_ROUTE_ERROR (ETIMEDOUT)" "${rp[@]}" -p "$port"
pick_port; p=$port
pair "rping: rdma_connect ETIMEDOUT (UNREACHABLE)" client "fail=connect:ETIMEDOUT" "RDMA_CM_EVENT_UNREACHABLE, error -110" \
  "rdma_connect ends with RDMA_CM_EVENT_UNREACHABLE (ETIMEDOUT)" stopped "cm $p" \
  rping -s -a 127.0.0.1 -p "$p" -C 3 -v -- rping -c -a 127.0.0.1 -p "$p" -C 3 -v
pick_port; p=$port
pair "rping: rdma_connect ECONNREFUSED (REJECTED)" client "fail=connect:ECONNREFUSED" "RDMA_CM_EVENT_REJECTED, error 28" \
  "rdma_connect ends with RDMA_CM_EVENT_REJECTED (ECONNREFUSED)" stopped "cm $p" \
  rping -s -a 127.0.0.1 -p "$p" -C 3 -v -- rping -c -a 127.0.0.1 -p "$p" -C 3 -v
# A connection disconnected mid-run: both sides learn it and end, the client before its
# 50th ping (rping exits 0 after a disconnection).
pick_port; p=$port
EXIT_ANY=1 UNLESS_MSG="rdma-ping-49:" PEER_MSG="server DISCONNECT EVENT" pair "rping: DISCONNECTED after the client's 4th send" client "event=DISCONNECTED:on=post_send:nth=4" \
  "client DISCONNECT EVENT" "RDMA_CM_EVENT_DISCONNECTED after ibv_post_send" ends "cm $p" \
  rping -s -a 127.0.0.1 -p "$p" -C 50 -v -- rping -c -a 127.0.0.1 -p "$p" -C 50 -v

# Replay: the same seeded, probabilistic plan twice meets the same calls.
label="replay: seed=11 wc=RETRY_EXC_ERR:p=2% twice, the same injection"
if [ -z "$FILTER" ] || [[ $label =~ $FILTER ]]; then
  spec="seed=11,wc=RETRY_EXC_ERR:p=2%"
  for run in 1 2; do
    pick_port; p=$port
    pair "$label (run $run)" client "$spec" "Failed status transport retry counter exceeded (12)" \
      "send work request completes with RETRY_EXC_ERR" stopped "tcp $p" "${pp[@]}" -n 500 -p "$p" -- "${pp[@]}" -n 500 -p "$p" 127.0.0.1
    grep -F "fault injected:" "$clog" | sed 's/QP 0x[0-9a-f]*, //' >"$WORK/replay.$run"
  done
  n=$((n + 1)) start=$EPOCHREALTIME why=()
  [ -s "$WORK/replay.1" ] || why+=("no injection in the first run")
  cmp -s "$WORK/replay.1" "$WORK/replay.2" || why+=("the runs injected differently: $(paste -d'|' "$WORK/replay.1" "$WORK/replay.2" | head -3)")
  slog=$WORK/replay.1 clog=$WORK/replay.2 scmd=(run 1) ccmd=(run 2)
  report_pair "$label"
fi

finish
