#!/usr/bin/env bash
# rdma-core 44's rdma_cm tests of the pyverbs suite (test_rdmacm.py, Debian
# python3-pyverbs), unmodified, against the drop-in libibverbs.so.1 and librdmacm.so.1.
#
# pyverbs finds a device's IP address through /sys/class/infiniband/<dev>/device/net/
# (the network interface a kernel RDMA device sits on), which a user-space device cannot
# create. The harness provides it, not the library: in a private mount namespace
# (unshare -m, so nothing outside this script sees it) a tmpfs replaces /sys/class and
# holds /sys/class/infiniband/rverbs0/device/net/lo; pyverbs then reads lo's address
# (127.0.0.1) with `ip` (netlink, unaffected) and the tests connect over it.
#
# usage: pyverbs_rdmacm.sh   (as root; otherwise in a user namespace, `unshare -rm`,
#                            where the kernel allows unprivileged user namespaces)
#
# Passes when every test of test_rdmacm runs and passes (the multicast ones included:
# a receiving and a sending process join a group over 127.0.0.1) and at least
# MIN_PASSED (10) pass.
set -euo pipefail
cd "$(dirname "$0")/../.."
MIN_PASSED=10
command -v unshare >/dev/null || { echo "pyverbs_rdmacm.sh: needs unshare(1) (util-linux)" >&2; exit 1; }
ns=(-m --propagation private)
[ "$(id -u)" = 0 ] || ns=(-r "${ns[@]}")
dropin=${DROPIN_DIR:-$(scripts/build-dropin.sh)}
[ -e "$dropin/librdmacm.so.1" ] || { echo "pyverbs_rdmacm.sh: no librdmacm.so.1 in $dropin" >&2; exit 2; }
runtime=$(mktemp -d "${TMPDIR:-/tmp}/rverbs-pyverbs-rdmacm.XXXXXX")
trap 'rm -rf "$runtime"' EXIT
RVERBS_RUNTIME_DIR=$runtime unshare "${ns[@]}" bash -c '
  set -e
  mount -t tmpfs rverbs-sysclass /sys/class
  mkdir -p /sys/class/infiniband/rverbs0/device/net/lo
  exec bash tests/conformance/run_pyverbs.sh "$1" rverbs0 "$2" test_rdmacm
' pyverbs_rdmacm "$dropin" "$MIN_PASSED"
