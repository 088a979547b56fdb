#!/usr/bin/env bash
# Runs every libFuzzer target of fuzz/ for a bounded time and fails if any crashes.
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]
#
# SECONDS_PER_TARGET defaults to 20 (the CI's short mode); TARGETs default to every
# fuzz/fuzz_targets/*.rs. Each target first replays its kept crash inputs
# (fuzz/regressions/<target>/, each must run clean), then runs on a copy of its committed seed corpus
# (fuzz/corpus/<target>/) in a temporary directory, so nothing is ever written into the
# repository; a crash input is copied to $FUZZ_ARTIFACTS (default: target dir's
# fuzz-artifacts/) and its path printed. Keep a crash as fuzz/regressions/<target>/<file>
# (replayed by `cargo test --manifest-path fuzz/Cargo.toml`) and as a unit test in the
# crate that had the bug.
#
# FUZZ_RUNS=N stops each target after N executions as well (the recorded long runs:
# `FUZZ_RUNS=10000000 scripts/fuzz.sh 600`).
#
# FUZZ_JOBS=N fuzzes N targets at once, each on a core of its own (default: the
# machine's cores, at most 4).
#
# Toolchain: the stable one. Targets are built as `cargo fuzz build -O -a -s none` builds
# them (optimized, with debug assertions and overflow checks, without a sanitizer: the
# code the targets exercise is safe Rust except the C ABI's struct readers, which
# `capi_structs` and `capi_send` were also run under AddressSanitizer for, recorded in
# tests/conformance/README.md; AddressSanitizer would halve the speed), with plain cargo and the same flags, so CI needs no cargo-fuzz (`cargo fuzz
# run <target>` works too for a developer who has it). Build jobs: CARGO_BUILD_JOBS
# (default 2).
set -euo pipefail

secs=${1:-20}
shift || true
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

if [ $# -gt 0 ]; then
    targets=("$@")
else
    targets=()
    for f in fuzz/fuzz_targets/*.rs; do
        targets+=("$(basename "$f" .rs)")
    done
fi

tdir=${CARGO_TARGET_DIR:-$root/target}/fuzz
artifacts=${FUZZ_ARTIFACTS:-${CARGO_TARGET_DIR:-$root/target}/fuzz-artifacts}
mkdir -p "$artifacts"
export CARGO_BUILD_JOBS=${CARGO_BUILD_JOBS:-2}

start=$(date +%s)
# What `cargo fuzz build -O -a -s none` does, without installing cargo-fuzz: libFuzzer's
# coverage instrumentation (SanitizerCoverage: 8-bit counters, PC table, comparisons),
# `cfg(fuzzing)`, debug assertions and overflow checks, optimized; for the host triple
# given explicitly so that build scripts are not instrumented.
host=$(rustc -vV | sed -n 's/^host: //p')
RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing -Cdebug-assertions -Coverflow-checks" \
    cargo build --release --manifest-path fuzz/Cargo.toml --target "$host" --target-dir "$tdir" --bins
echo "fuzz.sh: built in $(( $(date +%s) - start )) s"

bin=$tdir/$host/release
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failed=()
# Every crash input kept as a regression, replayed first by its target's binary (given
# files, libFuzzer runs each once and exits; the committed corpus is replayed below, as
# the start of each target's run).
for t in "${targets[@]}"; do
    [ -d "fuzz/regressions/$t" ] || continue
    mapfile -t inputs < <(find "fuzz/regressions/$t" -type f | sort)
    [ ${#inputs[@]} -gt 0 ] || continue
    if "$bin/$t" -timeout=10 -rss_limit_mb=2048 "${inputs[@]}" >"$work/$t.replay.log" 2>&1; then
        echo "fuzz.sh: $t: ${#inputs[@]} regressions replayed"
    else
        echo "fuzz.sh: $t: a regression fails again" >&2
        grep -E "panicked|ERROR|SUMMARY|Running: " "$work/$t.replay.log" | tail -n 20 >&2
        failed+=("$t (regressions)")
    fi
done
# FUZZ_JOBS targets at once (see the top): each writes its own log and its summary row
# to its own file, printed in target order at the end; what a crash prints is prefixed
# with its target's name, as the targets' output interleaves.
row='%-16s %14s %10s %8s %8s\n'
jobs=${FUZZ_JOBS:-$(nproc)}
[ "$jobs" -ge 1 ] || jobs=1
[ "$jobs" -le 4 ] || jobs=4
fuzz_one() {
    local t=$1 status=ok t0 execs rate
    local runs=()
    mkdir -p "$work/$t"
    if [ -d "fuzz/corpus/$t" ]; then
        cp -r "fuzz/corpus/$t/." "$work/$t/"
    fi
    echo "fuzz.sh: $t for ${secs} s"
    t0=$(date +%s)
    if [ -n "${FUZZ_RUNS:-}" ]; then
        runs=(-runs="$FUZZ_RUNS")
    fi
    # -timeout: one input taking 10 s is a hang; -rss_limit_mb: a leak or a huge allocation.
    if ! "$bin/$t" "$work/$t" -max_total_time="$secs" -print_final_stats=1 -timeout=10 \
        -rss_limit_mb=2048 -artifact_prefix="$artifacts/$t-" "${runs[@]}" >"$work/$t.log" 2>&1; then
        status=CRASH
        { grep -E "panicked|ERROR|SUMMARY|Test unit written" "$work/$t.log" || tail -n 30 "$work/$t.log"; } | sed "s/^/$t: /"
    fi
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/$t.log" | tail -n 1)
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$work/$t.log" | tail -n 1)
    printf "$row" "$t" "${execs:-?}" "${rate:-?}" "$(( $(date +%s) - t0 ))" "$status" > "$work/$t.row"
}
running=0
for t in "${targets[@]}"; do
    if [ "$running" -ge "$jobs" ]; then
        wait -n || true
        running=$((running - 1))
    fi
    fuzz_one "$t" &
    running=$((running + 1))
done
wait
printf "$row" target executions exec/s seconds status > "$work/summary"
for t in "${targets[@]}"; do
    if [ -f "$work/$t.row" ]; then
        cat "$work/$t.row" >> "$work/summary"
        grep -q ' CRASH$' "$work/$t.row" && failed+=("$t")
    else
        # The run itself did not finish (its shell was killed): a failure, never a pass.
        printf "$row" "$t" '?' '?' '?' 'NO-RUN' >> "$work/summary"
        failed+=("$t")
    fi
done
cat "$work/summary"
echo "fuzz.sh: done in $(( $(date +%s) - start )) s"
if [ ${#failed[@]} -gt 0 ]; then
    echo "fuzz.sh: crashed: ${failed[*]} (inputs in $artifacts)" >&2
    exit 1
fi
