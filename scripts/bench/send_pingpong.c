/* Same-host SEND latency between two processes, taken apart: a parent and a child it forks
 * and execs anew (pinned to CPUs 0 and 1), each with its own context and RC QP, play ib_send_lat's
 * ping-pong (8-byte SENDs from a scatter list, signaled every 100th, 512 receives kept
 * posted, each consumed one posted again after its completion is polled). The client
 * prints the medians (rdtsc, converted to ns) of the time inside ibv_post_recv,
 * ibv_post_send and the ibv_poll_cq that returned the receive completion, of the wait
 * before that poll, and of one round trip, whose half is perftest's t_typical.
 *
 *   scripts/build-dropin.sh >/dev/null
 *   gcc -O2 -I tests/c -o /tmp/send_pingpong scripts/bench/send_pingpong.c -libverbs
 *   RVERBS_RUNTIME_DIR=/dev/shm/sp LD_LIBRARY_PATH=target/dropin /tmp/send_pingpong [N]
 *
 * SAME_BUF=1: receives and sends use one 8-byte buffer, as perftest's do (the message the
 * peer places is then read back by the send that answers it: one more line between the
 * processes per message). FULL_RQ=1: the receive queue holds exactly the 512 receives
 * kept posted (max_recv_wr 512, as perftest's rx_depth), so every post fills it; by
 * default it has room for 600. x86-64 only (rdtsc). */
#define _GNU_SOURCE
#include "common.h"
#include <sched.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <x86intrin.h>

static double ghz;

static int cmp(const void *a, const void *b)
{
	unsigned long x = *(const unsigned long *)a, y = *(const unsigned long *)b;

	return x < y ? -1 : x > y;
}

static double med(unsigned long *v, int n)
{
	qsort(v, n, sizeof(*v), cmp);
	return v[n / 2] / ghz;
}

static void pin(int cpu)
{
	cpu_set_t s;

	CPU_ZERO(&s);
	CPU_SET(cpu, &s);
	REQUIRE(sched_setaffinity(0, sizeof(s), &s) == 0, "sched_setaffinity(%d)", cpu);
}

static double ns_since(struct timespec *t0)
{
	struct timespec t1;

	clock_gettime(CLOCK_MONOTONIC, &t1);
	return (t1.tv_sec - t0->tv_sec) * 1e9 + t1.tv_nsec - t0->tv_nsec;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 20000, sv[2], same = getenv("SAME_BUF") != NULL;
	int full = getenv("FULL_RQ") != NULL;
	struct timespec t0;
	unsigned long c0, *tr, *ts, *tp, *tw, *tt;
	struct side s;
	struct ibv_wc wc;
	uint32_t peer;
	char c = 0;

	REQUIRE(n >= 2, "N >= 2");
	clock_gettime(CLOCK_MONOTONIC, &t0);
	c0 = __rdtsc();
	while (ns_since(&t0) < 2e7)
		;
	ghz = (__rdtsc() - c0) / ns_since(&t0);
	pid_t child = 0;
	int client, fd;

	if (argc > 3 && !strcmp(argv[2], "client")) {
		/* The forked child, exec'd anew: a process that never saw the parent's device. */
		client = 1;
		fd = atoi(argv[3]);
	} else {
		char fds[16];

		REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0, "socketpair");
		child = fork();
		REQUIRE(child >= 0, "fork");
		if (child == 0) {
			snprintf(fds, sizeof(fds), "%d", sv[1]);
			execl("/proc/self/exe", argv[0], argc > 1 ? argv[1] : "20000", "client", fds, (char *)NULL);
			REQUIRE(0, "exec");
		}
		client = 0;
		fd = sv[0];
	}

	pin(client);
	make_side(&s, IBV_QPT_RC, 1024, full ? 512 : 600);
	REQUIRE(write(fd, &s.qp->qp_num, 4) == 4 && read(fd, &peer, 4) == 4, "exchange QPNs");
	to_rts(s.qp, peer, loopback_gid_index(s.ctx), ALL_ACCESS);
	for (int k = 0; k < 512; k++)
		post_recv(&s, k, same ? BUF_LEN - 8 : 8 * k, 8);
	REQUIRE(write(fd, &c, 1) == 1 && read(fd, &c, 1) == 1, "both sides ready");
	tr = calloc(n, 8), ts = calloc(n, 8), tp = calloc(n, 8), tw = calloc(n, 8), tt = calloc(n, 8);
	REQUIRE(tr && ts && tp && tw && tt, "calloc");
	struct ibv_sge sge = {.addr = (uintptr_t)s.buf + BUF_LEN - 8, .length = 8, .lkey = s.mr->lkey};

	for (int i = 0; i < n; i++) {
		unsigned long a = __rdtsc(), e = a;

		if (client || i > 0) { /* the server's first step is to wait */
			unsigned long w0 = __rdtsc(), w1, d;
			int r;

			do {
				w1 = __rdtsc();
				r = ibv_poll_cq(s.recv_cq, 1, &wc);
			} while (r == 0);
			d = __rdtsc();
			tp[i] = d - w1;
			tw[i] = w1 - w0;
			REQUIRE(r == 1 && wc.status == IBV_WC_SUCCESS, "receive completion (%d)", wc.status);
			struct ibv_sge rs = {.addr = (uintptr_t)s.buf + (same ? BUF_LEN - 8 : 8 * wc.wr_id),
					     .length = 8, .lkey = s.mr->lkey};
			struct ibv_recv_wr rw = {.wr_id = wc.wr_id, .sg_list = &rs, .num_sge = 1}, *rb;

			REQUIRE(ibv_post_recv(s.qp, &rw, &rb) == 0, "ibv_post_recv");
			e = __rdtsc();
			tr[i] = e - d;
		}
		struct ibv_send_wr wr = {.wr_id = i, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
					 .send_flags = i % 100 == 99 ? IBV_SEND_SIGNALED : 0}, *bad;

		REQUIRE(ibv_post_send(s.qp, &wr, &bad) == 0, "ibv_post_send");
		ts[i] = __rdtsc() - e;
		if (wr.send_flags) {
			struct ibv_wc swc = poll_one(s.send_cq);

			REQUIRE(swc.status == IBV_WC_SUCCESS, "send completion (%d)", swc.status);
		}
		tt[i] = __rdtsc() - a;
	}
	if (client) {
		printf("medians, ns: post_recv %.0f  post_send %.0f  poll (hit) %.0f  wait %.0f  round trip %.0f  one-way %.0f\n",
		       med(tr, n), med(ts, n), med(tp, n), med(tw, n), med(tt, n), med(tt, n) / 2);
		return 0;
	}
	(void)poll_one(s.recv_cq); /* the client's last SEND */
	REQUIRE(waitpid(child, NULL, 0) == child, "waitpid");
	return 0;
}
