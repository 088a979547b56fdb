#!/usr/bin/env bash
# Builds and runs every example of the rverbs crate (crates/rverbs/examples): each is
# self-checking and exits non-zero when a completion or a byte is wrong. Examples are
# discovered by listing the directory (NAME.rs, or NAME/main.rs), so new ones are
# picked up; shared modules (a directory without main.rs, e.g. common/) are not
# examples. Each run is bounded by `timeout 60`. Fails if any example fails.
set -euo pipefail
cd "$(dirname "$0")/../.."

dir=crates/rverbs/examples
names=()
for f in "$dir"/*.rs "$dir"/*/main.rs; do
	[ -e "$f" ] || continue
	case "$f" in
		*/main.rs) names+=("$(basename "$(dirname "$f")")") ;;
		*) names+=("$(basename "$f" .rs)") ;;
	esac
done
if [ ${#names[@]} -eq 0 ]; then
	echo "examples.sh: no examples under $dir" >&2
	exit 1
fi

cargo build -q -p rverbs --examples

failed=()
for name in "${names[@]}"; do
	echo "== $name"
	if ! timeout 60 cargo run -q -p rverbs --example "$name"; then
		failed+=("$name")
	fi
done

if [ ${#failed[@]} -gt 0 ]; then
	echo "examples.sh: FAILED: ${failed[*]}" >&2
	exit 1
fi
echo "examples.sh: all ${#names[@]} examples passed"
