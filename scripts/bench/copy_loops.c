/* The device's ordered copy loop against memcpy, in C, one process, hot buffers: the
 * AVX2 loop of `fault.rs` (32-byte aligned stores, 128 bytes per step, in increasing
 * address order), the same loop with a PREFETCHW of the destination 512 bytes ahead
 * (what `fault.rs` does from 64 KiB on), and glibc's memcpy (`rep movsb` or non-temporal
 * stores at these sizes, which do not keep store order). GB/s of wall time, 3 rounds.
 *
 *   gcc -O2 -o /tmp/copy_loops scripts/bench/copy_loops.c
 *   taskset -c 1 /tmp/copy_loops 1048576
 */
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

__attribute__((target("avx2"))) static void ordered(char *d, const char *s, size_t n, int prefetch)
{
	while (((size_t)d & 31) && n) {
		*d++ = *s++;
		n--;
	}
	for (; n >= 128; n -= 128, d += 128, s += 128) {
		if (prefetch) {
			__builtin_prefetch(d + 512, 1, 3);
			__builtin_prefetch(d + 576, 1, 3);
		}
		__m256i a = _mm256_loadu_si256((const void *)s), b = _mm256_loadu_si256((const void *)(s + 32));
		__m256i c = _mm256_loadu_si256((const void *)(s + 64)), e = _mm256_loadu_si256((const void *)(s + 96));
		_mm256_store_si256((void *)d, a);
		_mm256_store_si256((void *)(d + 32), b);
		_mm256_store_si256((void *)(d + 64), c);
		_mm256_store_si256((void *)(d + 96), e);
	}
	while (n--)
		*d++ = *s++;
}

int main(int argc, char **argv)
{
	size_t n = argc > 1 ? strtoul(argv[1], NULL, 0) : 1 << 20;
	char *s = aligned_alloc(4096, (n + 4095) & ~4095ul), *d = aligned_alloc(4096, (n + 4095) & ~4095ul);
	memset(s, 1, n);
	memset(d, 2, n);
	const char *name[] = { "memcpy", "ordered", "ordered+prefetchw" };
	for (int round = 0; round < 3; round++) {
		for (int k = 0; k < 3; k++) {
			long it = (long)(2e9 / n);
			if (it < 20)
				it = 20;
			double t = now();
			for (long i = 0; i < it; i++) {
				if (k == 0)
					memcpy(d, s, n);
				else
					ordered(d, s, n, k == 2);
				__asm__ volatile("" : : "r"(d) : "memory");
			}
			t = now() - t;
			printf("%zu B: %-18s %6.2f GB/s\n", n, name[k], n * (double)it / t / 1e9);
		}
	}
	return 0;
}
