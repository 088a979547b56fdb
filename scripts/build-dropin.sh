#!/bin/sh
# Builds the drop-in libibverbs.so.1 (crates/rverbs-capi) in release mode and lays it
# out for LD_LIBRARY_PATH:
#
#   <target>/dropin/libibverbs.so.1 -> ../release/libibverbs.so
#
# cargo names the cdylib libibverbs.so; the dynamic loader opens the NEEDED name
# libibverbs.so.1, hence the link (a symlink, so a rebuild is picked up and running
# processes keep their mapping). Prints the directory on stdout, e.g.
#
#   LD_LIBRARY_PATH=$(scripts/build-dropin.sh) ibv_devices
#
# Honours CARGO_TARGET_DIR / build.target-dir (asks cargo where the target dir is).
set -eu

repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"

cargo build --release -p rverbs-capi >&2

target_dir=$(cargo metadata --format-version 1 --no-deps |
	sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
[ -n "$target_dir" ] || target_dir=${CARGO_TARGET_DIR:-$repo/target}

lib="$target_dir/release/libibverbs.so"
[ -f "$lib" ] || { echo "build-dropin: $lib was not built" >&2; exit 1; }

dropin="$target_dir/dropin"
mkdir -p "$dropin"
ln -sfn ../release/libibverbs.so "$dropin/libibverbs.so.1"

echo "build-dropin: LD_LIBRARY_PATH=$dropin <program>" >&2
echo "$dropin"
