#!/usr/bin/env bash
# Runs every test of rverbs: the Rust test suites of all crates (unit, integration,
# layout checks against the installed verbs.h, the C programs, unmodified Debian
# binaries against the drop-in library), the external conformance suites and the chaos
# harnesses in their short modes (tests/chaos: hostile peers, networks and deaths).
#
# Works on a fresh Debian 12 machine: when run as root it installs the Debian packages
# the conformance tests use (they are the peers we are compared with); otherwise it
# says which are missing.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(libibverbs-dev librdmacm-dev libfabric-bin ucx-utils libucx0 libucx-dev ibverbs-utils rdma-core ibverbs-providers rdmacm-utils perftest
          python3-pyverbs librpma-dev tshark iproute2 util-linux strace)
missing=()
for p in "${packages[@]}"; do
	dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	if [ "$(id -u)" = 0 ]; then
		apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
	else
		echo "test.sh: missing Debian packages: ${missing[*]} (run as root, or apt-get install them)" >&2
		exit 1
	fi
fi

# The tests that run C programs against the drop-in libraries of packages they do not
# depend on (rverbs-rpma's interop, rverbs-capi's librdmacm programs) take the ones this
# very build makes, instead of each building the whole stack again in a directory of its
# own (about 40 s of CI): cargo leaves the libraries of the workspace's packages in deps/.
target_dir=$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
export RVERBS_CAPI_CDYLIB="$target_dir/debug/deps/libibverbs.so" RVERBS_RDMACM_CDYLIB="$target_dir/debug/deps/librdmacm.so"
if cargo nextest --version >/dev/null 2>&1; then
	cargo nextest run --workspace --no-fail-fast
else
	cargo test --workspace --no-fail-fast
fi
echo "== test.sh: the workspace's tests done at $SECONDS s"
# Again with the fast path off (RVERBS_SHARED_MR=0: registrations of caller memory stay
# private and peers on this host reach them by cross-memory attach; docs/memory.md). The
# listed device reads the switch, so every test that opens it runs the slow path;
# tests/conformance/fast_path_off.sh does the same for the C suites.
if cargo nextest --version >/dev/null 2>&1; then
	RVERBS_SHARED_MR=0 cargo nextest run --workspace --no-fail-fast
else
	RVERBS_SHARED_MR=0 cargo test --workspace --no-fail-fast
fi
echo "== test.sh: the workspace's tests with RVERBS_SHARED_MR=0 done at $SECONDS s"
unset RVERBS_CAPI_CDYLIB RVERBS_RDMACM_CDYLIB
cargo test --workspace --doc
echo "== test.sh: doc tests done at $SECONDS s"
# The features `tokio` of rverbs and rverbs-cm (rverbs::aio, rverbs_cm::aio and ::stream)
# and `async-io` of both (their aio on any executor, the stream with the `futures`
# traits): their tests and the async
# examples need them, which the workspace run above leaves off. With both on, a type made
# inside a tokio runtime uses tokio's reactor (tests/aio.rs) and one made elsewhere
# async-io's (tests/aio_any_executor.rs, driven by a minimal block_on).
# In the same build (one compile of rverbs with the optional features), the rdma-core
# backend (feature `rdma-core`, docs/rdma-core-backend.md) runs for real: it loads the
# drop-in libibverbs.so.1 as it would any libibverbs (RVERBS_LIBIBVERBS), and fails
# when that lists no device; the examples rc_pingpong, ud_send, uc_write, cq_events and
# typed_atomics run through the public types on it (tests/rdma_core_examples.rs sets
# RVERBS_BACKEND=rdma-core for its own processes); and rverbs-cm over the drop-in
# librdmacm.so.1 (RVERBS_LIBRDMACM; crates/rverbs-cm/tests/rdma_core_cm.rs: echo.rs, a
# connection with private data and a SEND, a reject, the public types' event loop, an
# async echo, the event stream, examples/async_echo.rs and stream_echo.rs); the
# backend's own unit tests (`rdma_core::life`) build only with the feature, so run here.
dropin=$(bash scripts/build-dropin.sh)
export RVERBS_LIBIBVERBS="$dropin/libibverbs.so.1"
export RVERBS_LIBRDMACM="$dropin/librdmacm.so.1"
features=rverbs/tokio,rverbs/async-io,rverbs/rdma-core,rverbs-cm/tokio,rverbs-cm/async-io,rverbs-cm/rdma-core
if cargo nextest --version >/dev/null 2>&1; then
	# Only these targets are built: the ones that need the features (the others were
	# built and run above), and the two examples that need tokio.
	cargo nextest run -p rverbs -p rverbs-cm --features "$features" --no-fail-fast \
		--lib --example async_echo --example stream_echo --test aio --test aio_any_executor --test stream --test stream_any_executor \
		--test rdma_core_backend --test rdma_core_examples --test rdma_core_cm \
		-E 'binary(aio) | binary(aio_any_executor) | binary(stream) | binary(stream_any_executor) | binary(rdma_core_backend) | binary(rdma_core_examples) | binary(rdma_core_cm) | (kind(lib) & test(rdma_core))'
else
	cargo test -p rverbs -p rverbs-cm --features "$features" --no-fail-fast \
		--test aio --test aio_any_executor --test stream --test stream_any_executor \
		--test rdma_core_backend --test rdma_core_examples --test rdma_core_cm
fi
unset RVERBS_LIBIBVERBS RVERBS_LIBRDMACM
# The API documentation builds without a warning (broken or private intra-doc links),
# with the optional features' modules.
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --quiet
RUSTDOCFLAGS="-D warnings" cargo doc -p rverbs -p rverbs-cm --features "$features" --no-deps --quiet
echo "== test.sh: optional features and docs done at $SECONDS s"

# Every conformance and chaos script runs here; the *_netns.sh ones (UD, RC, XRC, multicast,
# rdma_cm, UCX) stand two hosts up as two network namespaces they create (needs root);
# run_launcher.sh runs UCX and pyverbs under `rverbs run` with no harness set-up;
# tests/sanitizer/run.sh: the verbs sanitizer's C programs (docs/sanitizer.md; gcc only).
# Each prints its own wall time, so a slow one shows in the CI log ("== … done in N s").
for t in tests/conformance/*.sh tests/chaos/*.sh tests/sanitizer/run.sh; do
	[ -e "$t" ] || continue
	echo "== $t"
	t0=$SECONDS
	bash "$t"
	echo "== $t done in $((SECONDS - t0)) s (test.sh at $SECONDS s)"
done
