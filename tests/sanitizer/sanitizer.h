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

#endif
