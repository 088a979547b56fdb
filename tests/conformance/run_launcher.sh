#!/usr/bin/env bash
# `rverbs run` (docs/environment.md, "The launcher: rverbs run") as its users start it,
# with none of the set-up the other conformance scripts do by hand: no LD_LIBRARY_PATH,
# no mount namespace, no sysfs or /dev entries made by the harness. The release `rverbs`
# finds the drop-in in <target>/dropin/ by itself (scripts/build-dropin.sh makes it;
# DROPIN_DIR, if set, is passed as --lib-dir instead) and gives each program the paths of
# a kernel device.
#
#   - UCX 1.13 (Debian ucx-utils): `ucx_info -d` lists rverbs0 with rc_verbs (UCX only
#     considers the device once /dev/infiniband/uverbs0 is a character device), and
#     ucx_perftest runs UCT tests over rc_verbs between a server and a client process,
#     each `rverbs run -- ucx_perftest …` with ucx.sh's arguments;
#   - rdma-core 44's pyverbs tests (Debian python3-pyverbs), a handful of modules through
#     rdma-core's own runner, `rverbs run -- /usr/bin/python3 tests/run_tests.py …`: every
#     test passes or skips as in run_pyverbs.sh, and every test of test_rdmacm runs and
#     passes (pyverbs skips them unless /sys/class/infiniband/rverbs0/device/net/ names
#     an interface with an address).
#
# usage: run_launcher.sh   (root, or a kernel that allows unprivileged user namespaces)
# Missing UCX or pyverbs fails the run (.ci/run and scripts/test.sh install them).
set -euo pipefail
cd "$(dirname "$0")/../.."

NAME=run_launcher.sh
TIMEOUT=${RUN_LAUNCHER_TIMEOUT:-60}
FIRST_PORT=
caller_ld=${LD_LIBRARY_PATH-}
caller_ld_set=${LD_LIBRARY_PATH+x}
# Work directory, drop-in, private runtime directory, pairs and reports (lib/pairs.bash).
# shellcheck source=lib/pairs.bash
source tests/conformance/lib/pairs.bash
# pairs.bash points LD_LIBRARY_PATH at the drop-in: undone, that is rverbs run's job.
if [ -n "$caller_ld_set" ]; then export LD_LIBRARY_PATH=$caller_ld; else unset LD_LIBRARY_PATH; fi

command -v ucx_perftest >/dev/null && command -v ucx_info >/dev/null ||
  { echo "$NAME: ucx_perftest/ucx_info missing (apt-get install ucx-utils)" >&2; exit 2; }
PYSRC=/usr/share/doc/rdma-core/tests
[ -f "$PYSRC/run_tests.py" ] || { echo "$NAME: $PYSRC missing (apt-get install python3-pyverbs)" >&2; exit 2; }

scripts/build-dropin.sh >/dev/null   # builds the CLI
target=$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
rverbs=${target:-target}/release/rverbs
libarg=()
[ -n "${DROPIN_DIR:-}" ] && libarg=(--lib-dir "$DROPIN_DIR")
rv=("$rverbs" run "${libarg[@]}" --)
# report_pair shows the commands; these run under rverbs run, not with LD_LIBRARY_PATH.
dropin="(rverbs run)"

# ucx_info -d: the memory domain rverbs0 with the rc_verbs transport.
n=$((n + 1))
start=$EPOCHREALTIME why=()
slog=$WORK/logs/ucx_info.out clog=$WORK/logs/ucx_info.err
scmd=("${rv[@]}" ucx_info -d) ccmd=()
if timeout "$TIMEOUT" "${scmd[@]}" >"$slog" 2>"$clog"; then
  grep -q 'Memory domain: rverbs0' "$slog" || why+=("no memory domain rverbs0")
  grep -q 'Transport: rc_verbs' "$slog" || why+=("no rc_verbs transport")
else
  why+=("ucx_info failed")
fi
grep -q 'rverbs run: running' "$clog" && why+=("rverbs run: $(grep 'rverbs run: running' "$clog")")
report_pair "rverbs run -- ucx_info -d (rverbs0: rc_verbs)"

# ucx_perftest over rc_verbs on one host, ucx.sh's arguments, each side under rverbs run.
ucx_pair() {  # TEST
  local t=$1 port
  n=$((n + 1))
  slog=$WORK/logs/$n.server clog=$WORK/logs/$n.client
  start=$EPOCHREALTIME why=()
  pick_port
  scmd=("${rv[@]}" ucx_perftest -t "$t" -x rc_verbs -d rverbs0:1 -n 1000 -p "$port")
  ccmd=("${rv[@]}" ucx_perftest 127.0.0.1 -t "$t" -x rc_verbs -d rverbs0:1 -n 1000 -p "$port")
  # rverbs run execs ucx_perftest: timeout's child is the program itself.
  serve_and_connect "$port"
  grep -q '^Final: *1000 ' "$clog" || why+=("client printed no final result")
  report_pair "rverbs run -- ucx_perftest -t $t -x rc_verbs"
}
for t in am_lat put_lat am_bw put_bw; do
  ucx_pair "$t"
done

# pyverbs: a few modules through rdma-core's own runner (run_pyverbs.sh's copy of the
# suite: un-gzipped, vendor and GPU tests removed). unittest's last line is "OK", or
# "OK (skipped=N)" when the suite skipped tests for features the device does not have
# (tests/conformance/README.md lists them); test_rdmacm runs alone and must skip nothing.
cp -r "$PYSRC" "$WORK/pytests"
gunzip -f "$WORK"/pytests/*.gz
rm -f "$WORK"/pytests/test_mlx5_*.py "$WORK"/pytests/test_efa*.py "$WORK"/pytests/test_cuda_dmabuf.py
pyverbs() {  # SKIPS_ALLOWED(yes|no) MODULE...
  local skips=$1 rc=0 last
  shift
  n=$((n + 1))
  start=$EPOCHREALTIME why=()
  slog=$WORK/logs/$n.pyverbs clog=$slog
  scmd=("${rv[@]}" /usr/bin/python3 "$WORK/pytests/run_tests.py" --dev rverbs0 -v "$@") ccmd=()
  timeout -k 5 $((TIMEOUT * 5)) "${scmd[@]}" >"$slog" 2>&1 || rc=$?
  [ "$rc" = 0 ] || why+=("python3 $(exit_text "$rc")")
  last=$(tail -n 1 "$slog")
  case $skips:$last in
    *:OK | yes:"OK (skipped="*")") ;;
    no:"OK (skipped="*")") why+=("tests skipped: $last (no device/net/ under /sys/class/infiniband/rverbs0?)") ;;
    *) why+=("unittest ended with: $last") ;;
  esac
  grep -q '^Ran [1-9]' "$slog" || why+=("no test ran")
  report_pair "rverbs run -- python3 run_tests.py $* ($(grep -m1 '^Ran ' "$slog" || echo 'no result'); $last)"
}
pyverbs yes test_device test_pd test_cq test_qp test_mr
pyverbs no test_rdmacm
finish
