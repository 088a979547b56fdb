#!/usr/bin/env bash
# NCCL's and RCCL's sysfs reads under `rverbs run` (docs/environment.md, "The launcher:
# rverbs run"): nccl_sysfs.c reads, as NCCL's topology detection does, the real path of
# /sys/class/infiniband/rverbs0/device (a PCI function DDDD:BB:DD.F), the same function
# through /sys/class/pci_bus, its class, ids, link speed and width and its port's,
# numa_node, the root complex above it and that node's cpumap, and device/net/ (pyverbs).
# NCCL itself is not installed here: the program stands in for its reads. With
# --no-namespace the same program must fail (the host has no such device).
#
# usage: nccl_sysfs.sh   (root, or a kernel that allows unprivileged user namespaces;
# gcc). DROPIN_DIR, if set, is passed to rverbs run as --lib-dir.
set -euo pipefail
cd "$(dirname "$0")/../.."
NAME=nccl_sysfs.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

scripts/build-dropin.sh >/dev/null   # the drop-in and the CLI
target=$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
rverbs=${target:-target}/release/rverbs
libarg=()
[ -n "${DROPIN_DIR:-}" ] && libarg=(--lib-dir "$DROPIN_DIR")
gcc -O1 -Wall -Werror -o "$work/nccl_sysfs" tests/conformance/nccl_sysfs.c

pass=0 fail=0
rc=0
timeout 30 "$rverbs" run "${libarg[@]}" -- "$work/nccl_sysfs" rverbs0 >"$work/out" 2>"$work/err" || rc=$?
cat "$work/out"
if [ "$rc" = 0 ] && grep -q '^nccl_sysfs: ok' "$work/out"; then
  echo "ok - rverbs run -- nccl_sysfs rverbs0"; pass=$((pass + 1))
else
  echo "FAIL - rverbs run -- nccl_sysfs rverbs0 (rc $rc)"; cat "$work/err"; fail=$((fail + 1))
fi
rc=0
timeout 30 "$rverbs" run "${libarg[@]}" --no-namespace -- "$work/nccl_sysfs" rverbs0 >"$work/out2" 2>&1 || rc=$?
if [ "$rc" != 0 ]; then
  echo "ok - without the namespace the reads fail (rc $rc: $(grep -m1 FAIL "$work/out2"))"; pass=$((pass + 1))
else
  echo "FAIL - nccl_sysfs passed without the namespace: the check checks nothing"; fail=$((fail + 1))
fi
echo "$NAME: $pass passed, $fail failed"
[ "$fail" = 0 ]
