#!/bin/sh
# Builds the drop-in libibverbs.so.1 (crates/rverbs-capi) and librdmacm.so.1
# (crates/rverbs-rdmacm) in release mode, with the `rverbs` CLI and rverbs-chaos
# (<target>/release/), and lays the libraries out for LD_LIBRARY_PATH:
#
#   <target>/dropin/libibverbs.so.1 -> ../release/libibverbs.so
#   <target>/dropin/librdmacm.so.1  -> ../release/librdmacm.so
#   <target>/dropin/librverbs_free.so             (the sanitizer's free watch, if gcc is
#                                                  there: crates/rverbs-capi/preload/)
#
# cargo names the cdylibs libibverbs.so and librdmacm.so; the dynamic loader opens the
# NEEDED names libibverbs.so.1 and librdmacm.so.1, hence the links (symlinks, so a
# rebuild is picked up and running processes keep their mapping). librdmacm.so.1 is a
# shim that forwards every rdma_* call into libibverbs.so.1 (where the connection
# manager lives), so the two are used together. Prints the directory on stdout, e.g.
#
#   LD_LIBRARY_PATH=$(scripts/build-dropin.sh) ibv_devices
#   LD_LIBRARY_PATH=$(scripts/build-dropin.sh) rping -s -a 127.0.0.1
#
# Honours CARGO_TARGET_DIR / build.target-dir (asks cargo where the target dir is).
set -eu

repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"

# With the release tools the test scripts run, the rverbs CLI (`rverbs run`, `rverbs stat`)
# and rverbs-chaos, in the same build: built one at a time, each package's own feature
# set (rverbs-chaos has no C ABI) rebuilt the stack under it and overwrote the others'
# outputs, 183 s against 109 s for the four at once on a 2-core machine. The scripts
# that need the CLI or rverbs-chaos call this script for them.
cargo build --release -p rverbs-capi -p rverbs-rdmacm -p rverbs-cli -p rverbs-chaos >&2

target_dir=$(cargo metadata --format-version 1 --no-deps |
	sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
[ -n "$target_dir" ] || target_dir=${CARGO_TARGET_DIR:-$repo/target}

for lib in libibverbs.so librdmacm.so; do
	[ -f "$target_dir/release/$lib" ] ||
		{ echo "build-dropin: $target_dir/release/$lib was not built" >&2; exit 1; }
done

dropin="$target_dir/dropin"
mkdir -p "$dropin"
ln -sfn ../release/libibverbs.so "$dropin/libibverbs.so.1"
ln -sfn ../release/librdmacm.so "$dropin/librdmacm.so.1"
# The verbs sanitizer's watch of free(3) (docs/sanitizer.md, mr-memory-freed), which
# `rverbs run --sanitize` preloads; C, so built here rather than by cargo.
if command -v gcc >/dev/null; then
	gcc -shared -fPIC -O2 -g -Wall -Werror -o "$dropin/librverbs_free.so" \
		crates/rverbs-capi/preload/free_watch.c -ldl >&2
else
	echo "build-dropin: no gcc, so no librverbs_free.so (the sanitizer's free watch)" >&2
fi

echo "build-dropin: LD_LIBRARY_PATH=$dropin <program>" >&2
echo "$dropin"
