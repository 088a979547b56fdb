#!/usr/bin/env bash
# Exhaustion (issue 20): every resource the device takes from the host is used up, one kind
# at a time, in a process whose runtime directory is a 4 MiB tmpfs and whose descriptor
# limit is 64 (`rverbs-chaos exhaust`, crates/rverbs-chaos/src/exhaust.rs):
#   allocated regions, CQ rings, QPs (receive rings, table records): ENOMEM at the verb,
#   never SIGBUS at a later store into a page the tmpfs cannot supply;
#   completion channels (descriptors): EMFILE;
#   memory keys of caller memory (records in the sparse tables): ENOMEM;
# and after each kind is released the runtime directory holds what it held before and a
# checked RDMA WRITE goes through (freed keys register again).
# The small tmpfs is mounted in a private mount namespace (unshare -m): needs root.
set -euo pipefail
cd "$(dirname "$0")/../.."

if [ "$(id -u)" != 0 ] || ! command -v unshare >/dev/null; then
  echo "exhaustion.sh: SKIPPED: needs root and unshare(1) for a private tmpfs"
  exit 0
fi
scripts/build-dropin.sh >/dev/null   # builds rverbs-chaos
target_dir=$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
bin="$target_dir/release/rverbs-chaos"

dir=$(mktemp -d /tmp/rverbs-exhaust.XXXXXX)
trap 'umount "$dir" 2>/dev/null || true; rmdir "$dir" 2>/dev/null || true' EXIT
log="$dir.log"
# Two descriptor limits, one apart: a channel takes two descriptors (its FIFO's read and
# write ends, opened after the FIFO exists), so one limit runs out at the read end and the
# other at the write end; neither may leave the FIFO behind (it did, found by CI).
for limit in 64 65; do
  rc=0
  unshare -m sh -c "mount -t tmpfs -o size=4m tmpfs '$dir' && ulimit -n $limit && RVERBS_RUNTIME_DIR='$dir' timeout 120 '$bin' exhaust --dir '$dir'" >"$log" 2>&1 || rc=$?
  sed "s/^/[ulimit -n $limit] /" "$log"
  rm -f "$log"
  if [ "$rc" != 0 ]; then
    echo "exhaustion.sh: FAIL (exit $rc, ulimit -n $limit)"
    exit 1
  fi
done
echo "exhaustion.sh: PASS"
