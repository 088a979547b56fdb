/* Shared helpers of the sanitizer's C programs (docs/sanitizer.md): the set-up
 * of tests/c/common.h, and a teardown that destroys everything, so that the --fixed run
 * of each program has no finding at all (leak-at-exit included).
 *
 * Each program contains one bug, on a line marked with a BUG comment, and takes
 * --fixed to do the right thing there instead. */
#ifndef RVERBS_SANITIZER_TEST_H
#define RVERBS_SANITIZER_TEST_H

#include "../c/common.h"

static inline int fixed_run(int argc, char **argv)
{
	return argc > 1 && !strcmp(argv[1], "--fixed");
}

/* Destroys a side made by make_side (an MR already deregistered is NULL). */
static inline void free_side(struct side *s)
{
	REQUIRE(ibv_destroy_qp(s->qp) == 0, "ibv_destroy_qp");
	if (s->mr)
		REQUIRE(ibv_dereg_mr(s->mr) == 0, "ibv_dereg_mr");
	REQUIRE(ibv_destroy_cq(s->send_cq) == 0, "ibv_destroy_cq (send)");
	REQUIRE(ibv_destroy_cq(s->recv_cq) == 0, "ibv_destroy_cq (recv)");
	REQUIRE(ibv_dealloc_pd(s->pd) == 0, "ibv_dealloc_pd");
	REQUIRE(ibv_close_device(s->ctx) == 0, "ibv_close_device");
	free(s->buf);
}

/* Posts a signaled RDMA WRITE of `len` bytes of s's buffer to `raddr`/`rkey`. */
static inline void write_to(struct side *s, uint64_t wr_id, uint32_t len, uint64_t raddr, uint32_t rkey)
{
	struct ibv_sge sge = {.addr = (uintptr_t)s->buf, .length = len, .lkey = s->mr->lkey};
	struct ibv_send_wr wr = {.wr_id = wr_id, .sg_list = &sge, .num_sge = 1,
				 .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED};
	struct ibv_send_wr *bad = NULL;

	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	REQUIRE(ibv_post_send(s->qp, &wr, &bad) == 0, "ibv_post_send (RDMA WRITE)");
}

/* Replaces a's and b's QPs by new connected RC QPs of 16 work requests, a's sending to
 * `cq` (the old ones go first: both on a's receive CQ would not fit, cq-too-small). */
static inline void reconnect_sending_to(struct side *a, struct side *b, struct ibv_cq *cq)
{
	struct ibv_cq *keep = a->send_cq;
	int gid = loopback_gid_index(a->ctx);

	REQUIRE(ibv_destroy_qp(a->qp) == 0, "ibv_destroy_qp");
	REQUIRE(ibv_destroy_qp(b->qp) == 0, "ibv_destroy_qp");
	a->send_cq = cq;
	a->qp = make_qp(a, IBV_QPT_RC, 16);
	a->send_cq = keep;
	b->qp = make_qp(b, IBV_QPT_RC, 16);
	to_rts(a->qp, b->qp->qp_num, gid, ALL_ACCESS);
	to_rts(b->qp, a->qp->qp_num, gid, ALL_ACCESS);
}

/* Undoes reconnect_sending_to before free_side: a's QP is replaced by one on its own
 * CQs, then `cq` is destroyed. */
static inline void unhook(struct side *a, struct ibv_cq *cq)
{
	REQUIRE(ibv_destroy_qp(a->qp) == 0, "ibv_destroy_qp");
	a->qp = make_qp(a, IBV_QPT_RC, 16);
	if (cq)
		REQUIRE(ibv_destroy_cq(cq) == 0, "ibv_destroy_cq");
}

/* Starts a batch of extended polling on `cq`, bounded; returns what ibv_start_poll
 * returned last. */
static inline int start_poll_bounded(struct ibv_cq_ex *cq)
{
	struct ibv_poll_cq_attr attr = {0};
	int ret = ENOENT;

	for (long i = 0; i < POLL_BOUND && ret == ENOENT; i++)
		ret = ibv_start_poll(cq, &attr);
	return ret;
}

#endif
