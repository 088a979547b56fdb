/* The software cost of one RDMA WRITE through the C ABI: a signaled 8-byte WRITE between
 * two QPs of this process, then the poll of its completion, in a loop. Prints ns per
 * post+poll for 3 rounds of 2 000 000.
 *
 * Two paths, chosen by the first argument:
 *   (none)  ibv_post_send + ibv_poll_cq;
 *   ex      the extended verbs: ibv_wr_start / ibv_wr_rdma_write / ibv_wr_set_sge /
 *           ibv_wr_complete on a QP created with send_ops_flags, then ibv_start_poll /
 *           ibv_end_poll on a CQ made by ibv_create_cq_ex.
 *   wr      the builder of `ex`, then ibv_poll_cq: perftest's shape (perftest 4.5 posts
 *           through ibv_wr_* unless given --use_old_post_send, and polls with ibv_poll_cq).
 *   empty   ibv_poll_cq on an empty CQ (the cost of finding nothing; in the thread's CPU
 *           time, as bw below: on an idle machine the same as the wall clock).
 *   send    what one side of perftest's ib_send_lat does per message, both sides in this
 *           process: an 8-byte SEND from a's scatter list to b (signaled every 100th, that
 *           one's completion polled, as perftest's cq_mod), ibv_poll_cq of b's receive CQ,
 *           and ibv_post_recv of the receive it consumed (32 kept posted).
 *   drain B ibv_poll_cq of B completions at a time from a CQ holding 4096 (signaled 8-byte
 *           WRITEs posted before, outside the timed part): ns per CQE in the thread's CPU
 *           time, over 256 drains per round (the cq_poll/drain bench of rverbs-bench,
 *           through the C ABI).
 *   read    as (none), an 8-byte RDMA READ from b's buffer into a's.
 *   bw SIZE WRITE bandwidth in one process: SIZE-byte WRITEs from one registered buffer to
 *           another, 32 outstanding, every 16th signaled (ib_write_bw's shape), and its
 *           peer, memcpy between the same two buffers, alternated over 5 rounds; GB/s of
 *           the thread's CPU time (the lane copies in the posting thread; time the
 *           scheduler gave to other tenants of a shared machine is left out of both).
 *   rbw SIZE as bw SIZE, with RDMA READs (ib_read_bw's shape) from the second buffer into
 *           the first.
 *
 *   scripts/build-dropin.sh >/dev/null
 *   gcc -O2 -I tests/c -o /tmp/post_poll scripts/bench/post_poll.c -L target/dropin -libverbs
 *   LD_LIBRARY_PATH=target/dropin taskset -c 1 /tmp/post_poll [ex]
 */
#include "common.h"
#include <time.h>

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

/* As make_pair (RC), but a's QP is made with send_ops_flags (RDMA WRITE) and completes to
 * an extended CQ. */
static void make_ex_pair(struct side *a, struct side *b, struct ibv_cq_ex **cqx,
			 struct ibv_qp_ex **qpx)
{
	struct ibv_cq_init_attr_ex ca = {.cqe = 256, .wc_flags = IBV_WC_STANDARD_FLAGS};
	struct ibv_qp_init_attr_ex qa;
	int gid;

	make_side(a, IBV_QPT_RC, 256, 64);
	make_side(b, IBV_QPT_RC, 256, 64);
	*cqx = ibv_create_cq_ex(a->ctx, &ca);
	REQUIRE(*cqx != NULL, "ibv_create_cq_ex");
	REQUIRE(ibv_destroy_qp(a->qp) == 0, "ibv_destroy_qp");
	memset(&qa, 0, sizeof(qa));
	qa.send_cq = ibv_cq_ex_to_cq(*cqx);
	qa.recv_cq = a->recv_cq;
	qa.cap.max_send_wr = 64;
	qa.cap.max_recv_wr = 64;
	qa.cap.max_send_sge = 2;
	qa.cap.max_recv_sge = 2;
	qa.cap.max_inline_data = 64;
	qa.qp_type = IBV_QPT_RC;
	qa.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
	qa.pd = a->pd;
	qa.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE;
	a->qp = ibv_create_qp_ex(a->ctx, &qa);
	REQUIRE(a->qp != NULL, "ibv_create_qp_ex(send_ops_flags)");
	*qpx = ibv_qp_to_qp_ex(a->qp);
	gid = loopback_gid_index(a->ctx);
	to_rts(a->qp, b->qp->qp_num, gid, ALL_ACCESS);
	to_rts(b->qp, a->qp->qp_num, gid, ALL_ACCESS);
}

/* Posts a signaled 8-byte RDMA WRITE from a's buffer to b's through the builder. */
static inline int wr_write8(struct ibv_qp_ex *qpx, struct side *a, struct side *b, uint64_t id)
{
	ibv_wr_start(qpx);
	qpx->wr_id = id;
	qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(qpx, b->mr->rkey, (uintptr_t)b->buf);
	ibv_wr_set_sge(qpx, a->mr->lkey, (uintptr_t)a->buf, 8);
	if (ibv_wr_complete(qpx)) {
		fprintf(stderr, "wr_complete failed\n");
		return 1;
	}
	return 0;
}

static int run_ex(void)
{
	struct side a, b;
	struct ibv_cq_ex *cqx;
	struct ibv_qp_ex *qpx;
	const int n = 2000000;

	make_ex_pair(&a, &b, &cqx, &qpx);
	for (int round = 0; round < 3; round++) {
		double t0 = now();

		for (int i = 0; i < n; i++) {
			struct ibv_poll_cq_attr pa = {.comp_mask = 0};
			int rc;

			if (wr_write8(qpx, &a, &b, i))
				return 1;
			while ((rc = ibv_start_poll(cqx, &pa)) == ENOENT)
				;
			if (rc || cqx->status != IBV_WC_SUCCESS || cqx->wr_id != (uint64_t)i) {
				fprintf(stderr, "start_poll %d, status %d\n", rc, cqx->status);
				return 1;
			}
			ibv_end_poll(cqx);
		}
		printf("wr_* + start_poll: %.1f ns\n", (now() - t0) / n * 1e9);
	}
	return 0;
}

static int run_wr(void)
{
	struct side a, b;
	struct ibv_cq_ex *cqx;
	struct ibv_qp_ex *qpx;
	struct ibv_wc wc;
	const int n = 2000000;

	make_ex_pair(&a, &b, &cqx, &qpx);
	for (int round = 0; round < 3; round++) {
		double t0 = now();

		for (int i = 0; i < n; i++) {
			if (wr_write8(qpx, &a, &b, i))
				return 1;
			while (ibv_poll_cq(ibv_cq_ex_to_cq(cqx), 1, &wc) == 0)
				;
			if (wc.status != IBV_WC_SUCCESS || wc.wr_id != (uint64_t)i) {
				fprintf(stderr, "poll_cq status %d\n", wc.status);
				return 1;
			}
		}
		printf("wr_* + poll_cq: %.1f ns\n", (now() - t0) / n * 1e9);
	}
	return 0;
}

static int run_send(void)
{
	struct side a, b;
	struct ibv_wc wc;
	const int n = 2000000, depth = 32;

	make_pair(&a, &b, IBV_QPT_RC, 256, 64);
	for (int k = 0; k < depth; k++)
		post_recv(&b, k, 64 * k, 64);
	for (int round = 0; round < 3; round++) {
		double t0 = now();

		for (int i = 0; i < n; i++) {
			struct ibv_sge sge = {.addr = (uintptr_t)a.buf, .length = 8, .lkey = a.mr->lkey};
			struct ibv_send_wr wr = {
				.wr_id = i, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
				.send_flags = i % 100 == 99 ? IBV_SEND_SIGNALED : 0,
			}, *sbad;
			struct ibv_recv_wr *rbad;

			if (ibv_post_send(a.qp, &wr, &sbad)) {
				fprintf(stderr, "post_send failed\n");
				return 1;
			}
			if (wr.send_flags) {
				while (ibv_poll_cq(a.send_cq, 1, &wc) == 0)
					;
				if (wc.status != IBV_WC_SUCCESS) {
					fprintf(stderr, "send completion status %d\n", wc.status);
					return 1;
				}
			}
			while (ibv_poll_cq(b.recv_cq, 1, &wc) == 0)
				;
			if (wc.status != IBV_WC_SUCCESS || wc.byte_len != 8) {
				fprintf(stderr, "receive completion status %d\n", wc.status);
				return 1;
			}
			{
				uint64_t k = wc.wr_id;
				struct ibv_sge rs = {.addr = (uintptr_t)b.buf + 64 * k, .length = 64,
						     .lkey = b.mr->lkey};
				struct ibv_recv_wr rw = {.wr_id = k, .sg_list = &rs, .num_sge = 1};

				if (ibv_post_recv(b.qp, &rw, &rbad)) {
					fprintf(stderr, "post_recv failed\n");
					return 1;
				}
			}
		}
		printf("post_send(SEND) + poll_cq(recv) + post_recv: %.1f ns\n", (now() - t0) / n * 1e9);
	}
	return 0;
}

static double cpu_now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

/* Posts a signaled 8-byte RDMA WRITE from a's buffer to b's, or READ from b's into a's
 * (`opcode`; inlined into the loops). */
static inline int post_rdma8(struct side *a, struct side *b, uint64_t id, enum ibv_wr_opcode opcode)
{
	struct ibv_sge sge = {.addr = (uintptr_t)a->buf, .length = 8, .lkey = a->mr->lkey};
	struct ibv_send_wr wr = {
		.wr_id = id, .sg_list = &sge, .num_sge = 1,
		.opcode = opcode, .send_flags = IBV_SEND_SIGNALED,
	}, *bad;

	wr.wr.rdma.remote_addr = (uintptr_t)b->buf;
	wr.wr.rdma.rkey = b->mr->rkey;
	return ibv_post_send(a->qp, &wr, &bad);
}

static inline int post_write8(struct side *a, struct side *b, uint64_t id)
{
	return post_rdma8(a, b, id, IBV_WR_RDMA_WRITE);
}

/* drain B: see the header. */
static int run_drain(int batch)
{
	struct side a, b;
	struct ibv_wc wc[64];
	const int depth = 4096, drains = 256;

	REQUIRE(batch >= 1 && batch <= 64, "batch %d not in 1..64", batch);
	make_pair(&a, &b, IBV_QPT_RC, depth, depth);
	for (int round = 0; round < 3; round++) {
		double t = 0;

		for (int d = 0; d < drains; d++) {
			int left = depth;
			double t0;

			for (int i = 0; i < depth; i++)
				REQUIRE(post_write8(&a, &b, i) == 0, "post_send %d", i);
			t0 = cpu_now();
			while (left > 0) {
				int got = ibv_poll_cq(a.send_cq, batch < left ? batch : left, wc);

				REQUIRE(got > 0, "poll_cq returned %d with %d left", got, left);
				for (int k = 0; k < got; k++)
					REQUIRE(wc[k].status == IBV_WC_SUCCESS, "status %d", wc[k].status);
				left -= got;
			}
			t += cpu_now() - t0;
		}
		printf("poll_cq, %d per call: %.2f ns per CQE\n", batch, t / ((double)depth * drains) * 1e9);
	}
	return 0;
}

/* bw SIZE and rbw SIZE (`read`): see the header. */
static int run_bw(size_t size, int read)
{
	struct side a, b;
	struct ibv_wc wc[16];
	const int depth = 32, mod = 16;
	const long n = size >= 65536 ? (long)((16LL << 30) / (long long)size) : 2000000;
	char *src, *dst;
	struct ibv_mr *smr, *dmr;

	make_pair(&a, &b, IBV_QPT_RC, 256, 64);
	src = aligned_alloc(4096, size);
	dst = aligned_alloc(4096, size);
	REQUIRE(src && dst, "aligned_alloc(%zu)", size);
	memset(src, 1, size);
	memset(dst, 0, size);
	smr = ibv_reg_mr(a.pd, read ? dst : src, size, IBV_ACCESS_LOCAL_WRITE);
	dmr = ibv_reg_mr(b.pd, read ? src : dst, size,
			 IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
	REQUIRE(smr && dmr, "ibv_reg_mr(%zu)", size);
	for (int round = 0; round < 5; round++) {
		long posted = 0, done = 0;
		double t0 = cpu_now(), tw, tm;

		while (done < n) {
			while (posted < n && posted - done < depth) {
				struct ibv_sge sge = {.addr = (uintptr_t)smr->addr, .length = size, .lkey = smr->lkey};
				struct ibv_send_wr wr = {
					.wr_id = posted, .sg_list = &sge, .num_sge = 1,
					.opcode = read ? IBV_WR_RDMA_READ : IBV_WR_RDMA_WRITE,
					.send_flags = posted % mod == mod - 1 || posted == n - 1 ? IBV_SEND_SIGNALED : 0,
				}, *bad;

				wr.wr.rdma.remote_addr = (uintptr_t)dmr->addr;
				wr.wr.rdma.rkey = dmr->rkey;
				if (ibv_post_send(a.qp, &wr, &bad)) {
					fprintf(stderr, "post_send failed\n");
					return 1;
				}
				posted++;
			}
			int got = ibv_poll_cq(a.send_cq, 16, wc);

			for (int k = 0; k < got; k++) {
				if (wc[k].status != IBV_WC_SUCCESS) {
					fprintf(stderr, "completion status %d\n", wc[k].status);
					return 1;
				}
				done = (long)wc[k].wr_id + 1;
			}
		}
		tw = cpu_now() - t0;
		t0 = cpu_now();
		for (long i = 0; i < n; i++) {
			memcpy(dst, src, size);
			__asm__ volatile("" : : "r"(dst) : "memory");
		}
		tm = cpu_now() - t0;
		printf("%zu B: %s %.2f GB/s, memcpy %.2f GB/s, %s/memcpy %.2f\n", size,
		       read ? "READ" : "WRITE", n * (double)size / tw / 1e9,
		       n * (double)size / tm / 1e9, read ? "READ" : "WRITE", tm / tw);
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct side a, b;
	struct ibv_wc wc;
	const int n = 2000000;
	const int read = argc > 1 && !strcmp(argv[1], "read");

	if (argc > 1 && !strcmp(argv[1], "ex"))
		return run_ex();
	if (argc > 1 && !strcmp(argv[1], "wr"))
		return run_wr();
	if (argc > 1 && !strcmp(argv[1], "send"))
		return run_send();
	if (argc > 2 && !strcmp(argv[1], "drain"))
		return run_drain(atoi(argv[2]));
	if (argc > 2 && !strcmp(argv[1], "bw"))
		return run_bw((size_t)atol(argv[2]), 0);
	if (argc > 2 && !strcmp(argv[1], "rbw"))
		return run_bw((size_t)atol(argv[2]), 1);
	make_pair(&a, &b, IBV_QPT_RC, 256, 64);
	if (argc > 1 && !strcmp(argv[1], "empty")) {
		for (int round = 0; round < 3; round++) {
			double t0 = cpu_now();

			for (int i = 0; i < n; i++) {
				if (ibv_poll_cq(a.send_cq, 1, &wc) != 0) {
					fprintf(stderr, "a completion in an empty CQ\n");
					return 1;
				}
			}
			printf("poll_cq on an empty CQ: %.1f ns\n", (cpu_now() - t0) / n * 1e9);
		}
		return 0;
	}
	for (int round = 0; round < 3; round++) {
		double t0 = now();

		for (int i = 0; i < n; i++) {
			if (post_rdma8(&a, &b, i, read ? IBV_WR_RDMA_READ : IBV_WR_RDMA_WRITE)) {
				fprintf(stderr, "post_send failed\n");
				return 1;
			}
			while (ibv_poll_cq(a.send_cq, 1, &wc) == 0)
				;
			if (wc.status != IBV_WC_SUCCESS) {
				fprintf(stderr, "completion status %d\n", wc.status);
				return 1;
			}
		}
		printf("post_send%s + poll_cq: %.1f ns\n", read ? "(READ)" : "", (now() - t0) / n * 1e9);
	}
	return 0;
}
