/* The cost of the sanitizer's free watch (librverbs_free.so, docs/sanitizer.md
 * mr-memory-freed): malloc(64) + free in a loop, in a process that has opened rverbs0 and
 * registered one heap region (so that, sanitizing, each free is compared with a region).
 * Prints ns per malloc+free for 3 rounds of 5 000 000.
 *
 *   scripts/build-dropin.sh >/dev/null
 *   gcc -O2 -I tests/c -o /tmp/free_watch scripts/bench/free_watch.c -L target/dropin -libverbs
 *   D=target/dropin
 *   LD_LIBRARY_PATH=$D taskset -c 1 /tmp/free_watch                                  # no watch
 *   LD_PRELOAD=$D/librverbs_free.so LD_LIBRARY_PATH=$D taskset -c 1 /tmp/free_watch   # watch, off
 *   LD_PRELOAD=$D/librverbs_free.so LD_LIBRARY_PATH=$D RVERBS_SANITIZE=1 taskset -c 1 /tmp/free_watch
 */
#include "common.h"
#include <time.h>

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(void)
{
	struct ibv_context *ctx = open_ctx();
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	char *buf = malloc(BUF_LEN);
	struct ibv_mr *mr;
	const long n = 5000000;

	REQUIRE(pd && buf, "ibv_alloc_pd, malloc");
	mr = ibv_reg_mr(pd, buf, BUF_LEN, IBV_ACCESS_LOCAL_WRITE);
	REQUIRE(mr, "ibv_reg_mr");
	for (int round = 0; round < 3; round++) {
		double t0 = now();
		for (long i = 0; i < n; i++) {
			void *volatile p = malloc(64);
			free(p);
		}
		printf("%.1f ns per malloc+free\n", (now() - t0) * 1e9 / n);
	}
	REQUIRE(ibv_dereg_mr(mr) == 0, "ibv_dereg_mr");
	free(buf);
	REQUIRE(ibv_dealloc_pd(pd) == 0 && ibv_close_device(ctx) == 0, "teardown");
	return 0;
}
