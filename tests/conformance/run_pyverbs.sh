#!/usr/bin/env bash
# Runs rdma-core 44's pyverbs test suite (Debian python3-pyverbs) against a drop-in
# libibverbs.so.1, through rdma-core's tests/run_tests.py.
#
# usage: run_pyverbs.sh [DROPIN_DIR [DEV [MIN_PASSED [unittest names / -k pattern ...]]]]
#
#   DROPIN_DIR  directory holding libibverbs.so.1 (the built rverbs-capi cdylib); absent
#               or "": `cargo build -p rverbs-capi` and use the built library
#   DEV         device name passed as --dev (default rverbs0; "" = let the suite pick)
#   MIN_PASSED  fail unless at least this many tests pass (default: DEFAULT_MIN_PASSED
#               for the default module set, else 0)
#   names       unittest names (default: the generic verbs modules listed below)
#
# Prints the closing line "N passed, N failed, N skipped" and exits non-zero on any
# failure or error, on fewer than MIN_PASSED passes, or on a malformed skip_list.txt
# entry. skip_list.txt ("test.id  reason", one per line) names tests that are not run
# (reported as skipped with that reason); an entry without a reason fails the run.
# tests/conformance/README.md lists every test that skips, with the reason.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
# Passing tests of the default module set when this floor was last raised (131 passed,
# 0 failed, 20 skipped: device-memory import, dma-buf, raw packet QPs, one GID-table bad
# flow, the parent-domain and two ODP tests that need 2 MiB huge pages).
DEFAULT_MIN_PASSED=131

DROPIN_DIR=${1:-}
DEV=${2-rverbs0}
MIN_PASSED=${3:-}
shift $(( $# < 3 ? $# : 3 ))
if [ $# -eq 0 ]; then
  set -- test_device test_pd test_cq test_cq_events test_cqex test_qp test_qpex test_mr \
         test_atomic test_addr test_fork test_parent_domain test_odp test_tag_matching \
         test_shared_pd
  MIN_PASSED=${MIN_PASSED:-$DEFAULT_MIN_PASSED}
fi
MIN_PASSED=${MIN_PASSED:-0}

WORK=$(mktemp -d); trap 'rm -rf "$WORK"' EXIT
if [ -z "$DROPIN_DIR" ]; then
  # Build the drop-in and point a fresh directory at it.
  ROOT=$(cd "$HERE/../.." && pwd)
  (cd "$ROOT" && cargo build -q -p rverbs-capi)
  TARGET=$(cd "$ROOT" && cargo metadata -q --format-version 1 --no-deps |
           "${PY:-/usr/bin/python3}" -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
  DROPIN_DIR=$WORK/dropin
  mkdir -p "$DROPIN_DIR"
  ln -s "$TARGET/debug/libibverbs.so" "$DROPIN_DIR/libibverbs.so.1"
fi
DROPIN_DIR=$(cd "$DROPIN_DIR" && pwd)
[ -e "$DROPIN_DIR/libibverbs.so.1" ] || { echo "no libibverbs.so.1 in $DROPIN_DIR" >&2; exit 2; }
SRC=/usr/share/doc/rdma-core/tests
[ -f "$SRC/run_tests.py" ] || { echo "$SRC missing: install python3-pyverbs" >&2; exit 2; }
PY=/usr/bin/python3   # the pyenv python3 on PATH cannot see dist-packages

# skip_list.txt: "test.id  reason"; a line without a reason is a broken list.
SKIPS="$HERE/skip_list.txt"
if [ -f "$SKIPS" ]; then
  if grep -vE '^\s*(#|$)' "$SKIPS" | grep -qvE '^\S+\s+\S'; then
    echo "skip_list.txt: every entry needs a reason:" >&2
    grep -vE '^\s*(#|$)' "$SKIPS" | grep -vE '^\S+\s+\S' >&2
    exit 2
  fi
fi

cp -r "$SRC" "$WORK/tests"
gunzip -f "$WORK"/tests/*.gz
# Vendor and GPU tests open provider contexts on our device; utils.py still imports
# mlx5_base.py and efa_base.py, so those stay.
rm -f "$WORK"/tests/test_mlx5_*.py "$WORK"/tests/test_efa*.py "$WORK"/tests/test_cuda_dmabuf.py

cat > "$WORK/drive.py" <<'PY'
import os, sys, unittest
from importlib.machinery import SourceFileLoader
tdir = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'tests')
sys.path.insert(0, tdir)
from args_parser import parser
parser.parse_args()                     # eats --dev/--port/--gid/-v; the rest stays in sys.argv
tests = SourceFileLoader('tests', os.path.join(tdir, '__init__.py')).load_module()
loader = unittest.defaultTestLoader
names = [a for a in sys.argv[1:] if not a.startswith('-')]
suite = loader.loadTestsFromNames(names, tests) if names else loader.loadTestsFromModule(tests)

# skip_list.txt entries: the test is not run and reports the listed reason.
skips = {}
sf = os.environ.get('SKIP_LIST', '')
if sf and os.path.exists(sf):
    for line in open(sf):
        line = line.strip()
        if line and not line.startswith('#'):
            tid, reason = line.split(None, 1)
            skips[tid] = reason

def short(t):
    return t.id().split('.', 1)[-1]          # drop the 'tests.' package prefix

def mark(s):
    for t in s:
        if isinstance(t, unittest.TestSuite):
            mark(t)
        elif short(t) in skips:
            def skipped(*_a, **_k):
                pass
            skipped.__unittest_skip__ = True
            skipped.__unittest_skip_why__ = 'skip_list.txt: ' + skips[short(t)]
            setattr(t, t._testMethodName, skipped)
mark(suite)

r = unittest.TextTestRunner(verbosity=2, stream=sys.stdout).run(suite)
failed = [t for t, _ in r.failures + r.errors] + list(r.unexpectedSuccesses)
for t in failed:
    print(f"FAILED {short(t)}")
for t, why in r.skipped:
    print(f"SKIPPED {short(t)}: {why}")
passed = r.testsRun - len(failed) - len(r.skipped) - len(r.expectedFailures)
print(f"{passed} passed, {len(failed)} failed, {len(r.skipped)} skipped")
sys.exit(1 if failed or passed < int(os.environ.get('MIN_PASSED', '0')) else 0)
PY

cd "$WORK"
DEVARG=(); [ -n "$DEV" ] && DEVARG=(--dev "$DEV")
MIN_PASSED=$MIN_PASSED SKIP_LIST="$SKIPS" \
  LD_LIBRARY_PATH="$DROPIN_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
  timeout "${PYVERBS_TIMEOUT:-900}" "$PY" drive.py "${DEVARG[@]}" "$@"
