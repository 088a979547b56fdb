#!/usr/bin/env bash
# rdma-core 44's rdma_cm tests of the pyverbs suite (test_rdmacm.py, Debian
# python3-pyverbs), unmodified, against the drop-in libibverbs.so.1 and librdmacm.so.1.
#
# pyverbs finds a device's IP address through /sys/class/infiniband/<dev>/device/net/
# (the network interface a kernel RDMA device sits on), which a user-space device cannot
# create. The harness provides it, not the library: in a private mount and network
# namespace (unshare -mn, so nothing outside this script sees it) a veth interface
# rvpy0 holds 10.98.0.1/24, and a tmpfs replaces /sys/class and holds
# /sys/class/infiniband/rverbs0/device/net/rvpy0; pyverbs then reads rvpy0's address with
# `ip` (netlink, unaffected) and the tests connect over it. (Not lo: as in the kernel's
# rdma_cm, an id bound to a loopback address has no device, and the tests create their
# resources on the bound id's device, which on a real host is a NIC's address.)
#
# usage: pyverbs_rdmacm.sh   (as root; otherwise in a user namespace, `unshare -rm`,
#                            where the kernel allows unprivileged user namespaces)
#
# Passes when every test of test_rdmacm runs and passes (the multicast ones included:
# a receiving and a sending process join a group over rvpy0's address) and at least
# MIN_PASSED (10) pass.
set -euo pipefail
cd "$(dirname "$0")/../.."
MIN_PASSED=10
command -v unshare >/dev/null || { echo "pyverbs_rdmacm.sh: needs unshare(1) (util-linux)" >&2; exit 1; }
ns=(-m -n --propagation private)
[ "$(id -u)" = 0 ] || ns=(-r "${ns[@]}")
dropin=${DROPIN_DIR:-$(scripts/build-dropin.sh)}
[ -e "$dropin/librdmacm.so.1" ] || { echo "pyverbs_rdmacm.sh: no librdmacm.so.1 in $dropin" >&2; exit 2; }
runtime=$(mktemp -d "${TMPDIR:-/tmp}/rverbs-pyverbs-rdmacm.XXXXXX")
trap 'rm -rf "$runtime"' EXIT
RVERBS_RUNTIME_DIR=$runtime unshare "${ns[@]}" bash -c '
  set -e
  ip link set lo up
  ip link add rvpy0 type veth peer name rvpy1
  ip link set rvpy1 up
  ip addr add 10.98.0.1/24 dev rvpy0
  ip link set rvpy0 up
  mount -t tmpfs rverbs-sysclass /sys/class
  mkdir -p /sys/class/infiniband/rverbs0/device/net/rvpy0
  exec bash tests/conformance/run_pyverbs.sh "$1" rverbs0 "$2" test_rdmacm
' pyverbs_rdmacm "$dropin" "$MIN_PASSED"
