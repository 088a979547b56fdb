/*
 * pvm_probe - physical floors/ceilings for a cross-process RDMA WRITE on one host.
 *
 * Two processes (fork): the "target" (the passive side, pinned like a perftest
 * server to the first allowed CPU) and the "initiator" (pinned to the second).
 * It measures
 *
 *   pvm_bw       process_vm_writev() from the initiator into a buffer of the target
 *                (one iovec per call; the target sleeps meanwhile)
 *   pvm_read_bw  process_vm_readv() of the same buffer (the READ analogue)
 *   memcpy_bw    plain memcpy() between two private buffers of the initiator (hot caches)
 *   store_lat    one-way latency of an 8-byte store into shared memory as seen by the
 *                other process: ping-pong, half the round trip.
 *                lines=2: each side stores into its own cache line and spins on the
 *                         other's (the ib_write_lat pattern: write the peer's buffer,
 *                         poll your own);
 *                lines=1: both sides take turns on one shared word.
 *                Timed in batches of BATCH round trips; the reported p50 / min / p90
 *                are over the batch means.
 *
 * Sizes 64 KiB, 256 KiB, 1 MiB, 4 MiB. Each bandwidth figure is the median (and best)
 * over TRIALS timed trials. Units: mibps = 2^20 B/s, gbps = 10^9 B/s of payload.
 *
 * Output: one machine-readable line per measurement, "key=value" fields, e.g.
 *   pvm_bw size=65536 mibps=12345.6 gbps=12.94 best_mibps=... us_per_call=5.06 reps=...
 *   store_lat lines=2 half_rtt_ns_p50=61.2 half_rtt_ns_min=58.0 half_rtt_ns_p90=70.1 batches=...
 * Lines starting with '#' are comments.
 *
 * usage: pvm_probe [--quick] [--trials N] [--cpus TARGET,INITIATOR]
 *   --quick  ~4x less work per trial (smoke test)
 *
 * On a machine with a single usable CPU both processes share it: the spin loops then
 * yield, and store_lat measures scheduler hand-offs, not cache-line transfers (a
 * "# note single_cpu=1" line says so).
 *
 * Build: gcc -O2 -o pvm_probe pvm_probe.c
 */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_TRIALS 64
#define BATCH 64 /* round trips per timed batch in store_lat */

static const size_t k_sizes[] = {64u << 10, 256u << 10, 1u << 20, 4u << 20};
#define NSIZES (sizeof k_sizes / sizeof k_sizes[0])

/* Shared between the two processes (MAP_SHARED | MAP_ANONYMOUS before fork). */
struct shared {
	_Alignas(128) _Atomic uint64_t a_word; /* written by the initiator */
	_Alignas(128) _Atomic uint64_t b_word; /* written by the target */
	_Alignas(128) _Atomic uint64_t one_word; /* lines=1: both write */
	_Alignas(128) uint64_t target_buf; /* address of the target's private buffer */
	uint64_t rounds; /* round trips the target must answer */
	int lines;
	int spin_yield;
};

static uint64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void die(const char *what)
{
	fprintf(stderr, "pvm_probe: %s: %s\n", what, strerror(errno));
	exit(1);
}

static int pin_self(int cpu)
{
	cpu_set_t set;
	if (cpu < 0)
		return 0;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	return sched_setaffinity(0, sizeof set, &set);
}

static int cmp_double(const void *x, const void *y)
{
	double a = *(const double *)x, b = *(const double *)y;
	return a < b ? -1 : a > b;
}

/* Sorts v ascending; returns the value at quantile q (nearest rank). */
static double quantile(double *v, size_t n, double q)
{
	qsort(v, n, sizeof *v, cmp_double);
	size_t i = (size_t)(q * (double)(n - 1) + 0.5);
	return v[i < n ? i : n - 1];
}

static void *page_buf(size_t len, int fill)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		die("mmap");
	memset(p, fill, len); /* fault every page in */
	return p;
}

/* Keeps the compiler from dropping or merging the copies. */
static inline void clobber(void *p)
{
	__asm__ volatile("" : : "r"(p) : "memory");
}

static inline void relax(int yield)
{
	if (yield)
		sched_yield();
}

/* ---- target side ------------------------------------------------------------------ */

static void target_respond(struct shared *sh)
{
	uint64_t n = sh->rounds;
	int y = sh->spin_yield;
	if (sh->lines == 2) {
		for (uint64_t i = 1; i <= n; i++) {
			while (atomic_load_explicit(&sh->a_word, memory_order_acquire) != i)
				relax(y);
			atomic_store_explicit(&sh->b_word, i, memory_order_release);
		}
	} else {
		for (uint64_t i = 0; i < n; i++) {
			while (atomic_load_explicit(&sh->one_word, memory_order_acquire) != 2 * i + 1)
				relax(y);
			atomic_store_explicit(&sh->one_word, 2 * i + 2, memory_order_release);
		}
	}
}

static void target_main(struct shared *sh, int cpu, int cmd_fd, int ack_fd, size_t buf_len)
{
	if (pin_self(cpu) != 0)
		die("sched_setaffinity (target)");
	char *buf = page_buf(buf_len, 0x11);
	sh->target_buf = (uint64_t)(uintptr_t)buf;
	char c = 'R';
	if (write(ack_fd, &c, 1) != 1)
		_exit(1);
	for (;;) { /* sleep in read() until told what to do */
		if (read(cmd_fd, &c, 1) != 1 || c == 'Q')
			_exit(0);
		if (c == 'L')
			target_respond(sh);
		if (write(ack_fd, &c, 1) != 1)
			_exit(1);
	}
}

/* ---- initiator side --------------------------------------------------------------- */

struct bw_result {
	double mibps_med, mibps_best, us_per_op_med;
	long reps;
};

enum bw_kind { BW_PVM_WRITE, BW_PVM_READ, BW_MEMCPY };

static struct bw_result measure_bw(enum bw_kind kind, pid_t target, void *remote, char *lbuf,
				   char *lbuf2, size_t size, int trials, uint64_t bytes_per_trial)
{
	struct bw_result r = {0};
	double mibps[MAX_TRIALS], us[MAX_TRIALS];
	long reps = (long)(bytes_per_trial / size);
	if (reps < 8)
		reps = 8;
	struct iovec lv = {lbuf, size}, rv = {remote, size};

	for (int t = -1; t < trials; t++) { /* t == -1: warm-up, not recorded */
		long n = t < 0 ? reps / 4 + 1 : reps;
		uint64_t t0 = mono_ns();
		for (long k = 0; k < n; k++) {
			ssize_t got;
			switch (kind) {
			case BW_PVM_WRITE:
				got = process_vm_writev(target, &lv, 1, &rv, 1, 0);
				break;
			case BW_PVM_READ:
				got = process_vm_readv(target, &lv, 1, &rv, 1, 0);
				break;
			default:
				memcpy(lbuf2, lbuf, size);
				clobber(lbuf2);
				clobber(lbuf);
				got = (ssize_t)size;
			}
			if (got != (ssize_t)size)
				die(kind == BW_PVM_READ ? "process_vm_readv" : "process_vm_writev");
		}
		uint64_t dt = mono_ns() - t0;
		if (t < 0)
			continue;
		mibps[t] = (double)size * (double)n / ((double)dt / 1e9) / 1048576.0;
		us[t] = (double)dt / 1e3 / (double)n;
	}
	r.reps = reps;
	r.mibps_med = quantile(mibps, trials, 0.5);
	r.mibps_best = mibps[trials - 1];
	r.us_per_op_med = quantile(us, trials, 0.5);
	return r;
}

static void print_bw(const char *key, size_t size, struct bw_result r, int trials)
{
	printf("%s size=%zu mibps=%.1f gbps=%.3f best_mibps=%.1f us_per_op=%.3f reps=%ld trials=%d\n",
	       key, size, r.mibps_med, r.mibps_med * 1048576.0 / 1e9, r.mibps_best, r.us_per_op_med,
	       r.reps, trials);
	fflush(stdout);
}

static void cmd(int fd, char c)
{
	if (write(fd, &c, 1) != 1)
		die("write to target");
}

static void await_ack(int fd)
{
	char c;
	if (read(fd, &c, 1) != 1)
		die("read from target");
}

static void measure_store_lat(struct shared *sh, int lines, long batches, int yield, int cmd_fd,
			      int ack_fd)
{
	const long warm = batches / 10 + 1;
	const uint64_t rounds = (uint64_t)(warm + batches) * BATCH;
	double *half = malloc(sizeof(double) * (size_t)batches);
	if (!half)
		die("malloc");
	atomic_store(&sh->a_word, 0);
	atomic_store(&sh->b_word, 0);
	atomic_store(&sh->one_word, 0);
	sh->rounds = rounds;
	sh->lines = lines;
	sh->spin_yield = yield;
	cmd(cmd_fd, 'L');

	uint64_t i = 0; /* round trips done */
	for (long b = -warm; b < batches; b++) {
		uint64_t t0 = mono_ns();
		if (lines == 2) {
			for (int k = 0; k < BATCH; k++) {
				i++;
				atomic_store_explicit(&sh->a_word, i, memory_order_release);
				while (atomic_load_explicit(&sh->b_word, memory_order_acquire) != i)
					relax(yield);
			}
		} else {
			for (int k = 0; k < BATCH; k++) {
				atomic_store_explicit(&sh->one_word, 2 * i + 1, memory_order_release);
				while (atomic_load_explicit(&sh->one_word, memory_order_acquire) != 2 * i + 2)
					relax(yield);
				i++;
			}
		}
		uint64_t dt = mono_ns() - t0;
		if (b >= 0)
			half[b] = (double)dt / (2.0 * BATCH);
	}
	await_ack(ack_fd);
	double p50 = quantile(half, (size_t)batches, 0.5);
	double p90 = half[(size_t)(0.9 * (double)(batches - 1) + 0.5)];
	printf("store_lat lines=%d half_rtt_ns_p50=%.1f half_rtt_ns_min=%.1f half_rtt_ns_p90=%.1f "
	       "batch=%d batches=%ld\n",
	       lines, p50, half[0], p90, BATCH, batches);
	fflush(stdout);
	free(half);
}

/* First two CPUs we may run on; -1 when absent. */
static void pick_cpus(int *target_cpu, int *init_cpu)
{
	cpu_set_t set;
	*target_cpu = *init_cpu = -1;
	if (sched_getaffinity(0, sizeof set, &set) != 0)
		return;
	for (int c = 0; c < CPU_SETSIZE; c++) {
		if (!CPU_ISSET(c, &set))
			continue;
		if (*target_cpu < 0)
			*target_cpu = c;
		else {
			*init_cpu = c;
			break;
		}
	}
}

int main(int argc, char **argv)
{
	int trials = 7, quick = 0, tcpu = -1, icpu = -1, cpus_given = 0;
	for (int a = 1; a < argc; a++) {
		if (!strcmp(argv[a], "--quick"))
			quick = 1;
		else if (!strcmp(argv[a], "--trials") && a + 1 < argc)
			trials = atoi(argv[++a]);
		else if (!strcmp(argv[a], "--cpus") && a + 1 < argc) {
			if (sscanf(argv[++a], "%d,%d", &tcpu, &icpu) != 2) {
				fprintf(stderr, "pvm_probe: --cpus wants TARGET,INITIATOR\n");
				return 2;
			}
			cpus_given = 1;
		} else {
			fprintf(stderr, "usage: %s [--quick] [--trials N] [--cpus TARGET,INITIATOR]\n",
				argv[0]);
			return 2;
		}
	}
	if (trials < 1 || trials > MAX_TRIALS)
		trials = 7;

	int single_cpu = 0;
	if (!cpus_given)
		pick_cpus(&tcpu, &icpu);
	if (icpu < 0 || icpu == tcpu) { /* one usable CPU: share it, yield while spinning */
		single_cpu = 1;
		icpu = tcpu;
	}

	uint64_t pvm_bytes = quick ? (128ull << 20) : (512ull << 20);
	uint64_t cpy_bytes = quick ? (256ull << 20) : (1ull << 30);
	long lat_batches = quick ? 2000 : 8000;
	if (single_cpu)
		lat_batches /= 20;

	size_t maxsz = 0;
	for (size_t i = 0; i < NSIZES; i++)
		if (k_sizes[i] > maxsz)
			maxsz = k_sizes[i];

	struct shared *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
				 -1, 0);
	if (sh == MAP_FAILED)
		die("mmap shared");
	memset(sh, 0, sizeof *sh);

	int to_target[2], from_target[2];
	if (pipe(to_target) || pipe(from_target))
		die("pipe");
	fflush(stdout);
	pid_t pid = fork();
	if (pid < 0)
		die("fork");
	if (pid == 0) {
		close(to_target[1]);
		close(from_target[0]);
		target_main(sh, tcpu, to_target[0], from_target[1], maxsz);
	}
	close(to_target[0]);
	close(from_target[1]);
	int cmd_fd = to_target[1], ack_fd = from_target[0];

	if (pin_self(icpu) != 0) {
		kill(pid, SIGKILL);
		die("sched_setaffinity (initiator)");
	}
	printf("# pvm_probe target_cpu=%d initiator_cpu=%d trials=%d quick=%d\n", tcpu, icpu, trials,
	       quick);
	if (single_cpu)
		printf("# note single_cpu=1: both processes share CPU %d; store_lat measures "
		       "scheduler hand-offs\n",
		       tcpu);
	await_ack(ack_fd); /* target's buffer is allocated and faulted in */
	void *remote = (void *)(uintptr_t)sh->target_buf;

	char *lbuf = page_buf(maxsz, 0x5a);
	char *lbuf2 = page_buf(maxsz, 0xa5);

	for (size_t i = 0; i < NSIZES; i++)
		print_bw("pvm_bw", k_sizes[i],
			 measure_bw(BW_PVM_WRITE, pid, remote, lbuf, NULL, k_sizes[i], trials, pvm_bytes),
			 trials);
	for (size_t i = 0; i < NSIZES; i++)
		print_bw("pvm_read_bw", k_sizes[i],
			 measure_bw(BW_PVM_READ, pid, remote, lbuf, NULL, k_sizes[i], trials, pvm_bytes),
			 trials);
	for (size_t i = 0; i < NSIZES; i++)
		print_bw("memcpy_bw", k_sizes[i],
			 measure_bw(BW_MEMCPY, pid, NULL, lbuf, lbuf2, k_sizes[i], trials, cpy_bytes),
			 trials);

	measure_store_lat(sh, 2, lat_batches, single_cpu, cmd_fd, ack_fd);
	measure_store_lat(sh, 1, lat_batches, single_cpu, cmd_fd, ack_fd);

	cmd(cmd_fd, 'Q');
	int st = 0;
	if (waitpid(pid, &st, 0) < 0)
		die("waitpid");
	return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1;
}
