/* The ibv_qp_ex work-request builder through the ABI (ibv_wr_post(3); rdma-core
 * providers/rxe/rxe.c), RC and UD QPs of two contexts in one process:
 *  - ibv_create_qp_ex with IBV_QP_INIT_ATTR_SEND_OPS_FLAGS; ibv_qp_to_qp_ex returns the
 *    embedded ibv_qp_ex; only the requested opcode builders are set, wr_start/complete/
 *    abort and every setter always;
 *  - a batch of SEND + RDMA WRITE + RDMA READ posted by one ibv_wr_complete, completing
 *    in order with the wr_id/wr_flags each builder latched when it was called (changes
 *    to qpx->wr_id after the builder do not count);
 *  - an error (too many SGEs, inline data beyond max_inline_data) makes ibv_wr_complete
 *    return it and posts nothing of the batch; ibv_wr_abort posts nothing; in RESET
 *    ibv_wr_complete is EINVAL;
 *  - ibv_wr_atomic_write copies its 8 bytes at the call; IBV_WC_ATOMIC_WRITE;
 *  - ibv_wr_bind_mw (type 2) + RDMA WRITE through the window + ibv_wr_local_inv;
 *  - UD: ibv_wr_set_ud_addr + ibv_wr_set_inline_data_list + ibv_wr_send_imm.
 */
#include <arpa/inet.h>

#include "common.h"

#define RC_OPS                                                                          \
	(IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_READ |       \
	 IBV_QP_EX_WITH_ATOMIC_WRITE | IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_LOCAL_INV)

static struct ibv_qp_ex *make_qpx(struct side *s, enum ibv_qp_type type, uint64_t ops)
{
	struct ibv_qp_init_attr_ex a = {
		.send_cq = s->send_cq,
		.recv_cq = s->recv_cq,
		.cap = {.max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 2,
			.max_recv_sge = 2, .max_inline_data = 64},
		.qp_type = type,
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
		.pd = s->pd,
		.send_ops_flags = ops,
	};
	struct ibv_qp_ex *qpx;

	REQUIRE(ibv_destroy_qp(s->qp) == 0, "replace the side's QP");
	s->qp = ibv_create_qp_ex(s->ctx, &a);
	REQUIRE(s->qp != NULL, "ibv_create_qp_ex(SEND_OPS_FLAGS 0x%llx)", (unsigned long long)ops);
	qpx = ibv_qp_to_qp_ex(s->qp);
	REQUIRE(qpx == (struct ibv_qp_ex *)s->qp, "ibv_qp_to_qp_ex: the embedded ibv_qp_ex");
	return qpx;
}

static int count_completions(struct ibv_cq *cq)
{
	struct ibv_wc wc[8];
	int n, total = 0;

	while ((n = ibv_poll_cq(cq, 8, wc)) > 0)
		total += n;
	return total;
}

static void batch_send_write_read(struct side *a, struct side *b, struct ibv_qp_ex *qpx)
{
	struct ibv_wc wc;

	printf("# SEND + RDMA WRITE + RDMA READ in one batch\n");
	post_recv(b, 500, 0, 64);
	memcpy(a->buf, "hello", 5);
	memcpy(a->buf + 100, "writes", 6);
	memcpy(b->buf + 2000, "remote!", 7);
	ibv_wr_start(qpx);
	qpx->wr_id = 1;
	qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(qpx);
	qpx->wr_id = 1111; /* after the builder: must not change WR 1 */
	ibv_wr_set_sge(qpx, a->mr->lkey, (uintptr_t)a->buf, 5);
	qpx->wr_id = 2;
	qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(qpx, b->mr->rkey, (uintptr_t)b->buf + 1000);
	{
		struct ibv_sge l[2] = {{(uintptr_t)a->buf + 100, 3, a->mr->lkey},
				       {(uintptr_t)a->buf + 103, 3, a->mr->lkey}};

		ibv_wr_set_sge_list(qpx, 2, l);
		memset(l, 0, sizeof(l)); /* the list was copied at the call */
	}
	qpx->wr_id = 3;
	qpx->wr_flags = 0; /* unsignaled: only the READ's own flags count */
	ibv_wr_rdma_read(qpx, b->mr->rkey, (uintptr_t)b->buf + 2000);
	ibv_wr_set_sge(qpx, a->mr->lkey, (uintptr_t)a->buf + 200, 7);
	qpx->wr_id = 4;
	qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_read(qpx, b->mr->rkey, (uintptr_t)b->buf + 2000);
	ibv_wr_set_sge(qpx, a->mr->lkey, (uintptr_t)a->buf + 300, 7);
	qpx->wr_id = 9999;
	CHECK(ibv_wr_complete(qpx) == 0, "ibv_wr_complete posts the batch");
	wc = poll_one(a->send_cq);
	CHECK(wc.wr_id == 1 && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_SEND,
	      "1st: SEND with the wr_id latched by ibv_wr_send (got %llu)",
	      (unsigned long long)wc.wr_id);
	wc = poll_one(a->send_cq);
	CHECK(wc.wr_id == 2 && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RDMA_WRITE,
	      "2nd: RDMA WRITE");
	wc = poll_one(a->send_cq);
	CHECK(wc.wr_id == 4 && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RDMA_READ &&
		      wc.byte_len == 7,
	      "then the signaled RDMA READ (the unsignaled one, wr_flags 0, gave no completion)");
	CHECK(count_completions(a->send_cq) == 0, "nothing else on the send CQ");
	wc = poll_one(b->recv_cq);
	CHECK(wc.wr_id == 500 && wc.byte_len == 5 && !memcmp(b->buf, "hello", 5),
	      "the SEND arrived");
	CHECK(!memcmp(b->buf + 1000, "writes", 6), "the 2-SGE RDMA WRITE landed");
	CHECK(!memcmp(a->buf + 200, "remote!", 7) && !memcmp(a->buf + 300, "remote!", 7),
	      "both RDMA READs landed");
}

static void errors_post_nothing(struct side *a, struct side *b, struct ibv_qp_ex *qpx)
{
	struct ibv_sge l[3] = {{(uintptr_t)a->buf, 1, a->mr->lkey},
			       {(uintptr_t)a->buf + 1, 1, a->mr->lkey},
			       {(uintptr_t)a->buf + 2, 1, a->mr->lkey}};
	static char big[4096];

	printf("# an error posts nothing; abort posts nothing\n");
	post_recv(b, 600, 0, 64);
	ibv_wr_start(qpx);
	qpx->wr_id = 10;
	qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(qpx);
	ibv_wr_set_sge(qpx, a->mr->lkey, (uintptr_t)a->buf, 4);
	qpx->wr_id = 11;
	ibv_wr_rdma_write(qpx, b->mr->rkey, (uintptr_t)b->buf + 100);
	ibv_wr_set_sge_list(qpx, 3, l); /* max_send_sge is 2 */
	{
		/* rxe answers ENOSPC here, the core EINVAL (reported); either is an error. */
		int r = ibv_wr_complete(qpx);

		CHECK(r == EINVAL || r == ENOSPC,
		      "3 SGEs on a QP with max_send_sge 2: ibv_wr_complete returns %d (%s)", r,
		      strerror(r));
	}
	CHECK(count_completions(a->send_cq) == 0 && count_completions(b->recv_cq) == 0,
	      "nothing of the batch was posted (the valid SEND before it neither)");

	ibv_wr_start(qpx);
	qpx->wr_id = 12;
	qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(qpx); /* valid: must not be posted either */
	ibv_wr_set_sge(qpx, a->mr->lkey, (uintptr_t)a->buf, 4);
	qpx->wr_id = 13;
	ibv_wr_send(qpx);
	ibv_wr_set_inline_data(qpx, big, sizeof(big));
	{
		int r = ibv_wr_complete(qpx);

		CHECK(r == EINVAL || r == ENOSPC,
		      "inline data beyond max_inline_data: ibv_wr_complete returns %d (%s)", r,
		      strerror(r));
	}
	CHECK(count_completions(a->send_cq) == 0 && count_completions(b->recv_cq) == 0,
	      "nothing posted, not even the valid SEND before the bad one");

	ibv_wr_start(qpx);
	qpx->wr_id = 15;
	qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(qpx);
	ibv_wr_set_sge(qpx, a->mr->lkey, (uintptr_t)a->buf, 4);
	ibv_wr_abort(qpx);
	CHECK(count_completions(a->send_cq) == 0 && count_completions(b->recv_cq) == 0,
	      "ibv_wr_abort: nothing posted");
	CHECK(ibv_wr_complete(qpx) == EINVAL, "ibv_wr_complete without ibv_wr_start: EINVAL");

	ibv_wr_start(qpx);
	qpx->wr_id = 14;
	qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(qpx);
	ibv_wr_set_inline_data(qpx, "inline!", 7);
	CHECK(ibv_wr_complete(qpx) == 0, "a valid batch after the failed ones");
	CHECK(poll_one(a->send_cq).wr_id == 14, "its completion");
	CHECK(poll_one(b->recv_cq).wr_id == 600 && !memcmp(b->buf, "inline!", 7),
	      "the receive posted before the failed batches took the inline SEND");
}

static void atomic_write(struct side *a, struct side *b, struct ibv_qp_ex *qpx)
{
	uint8_t v[8] = {'c', 'c', 'c', 'c', 'c', 'c', 'c', 'c'};
	struct ibv_wc wc;

	printf("# ibv_wr_atomic_write copies its 8 bytes at the call\n");
	memset(b->buf + 64, 0, 8);
	ibv_wr_start(qpx);
	qpx->wr_id = 20;
	qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_atomic_write(qpx, b->mr->rkey, (uintptr_t)b->buf + 64, v);
	memset(v, 'x', 8);
	CHECK(ibv_wr_complete(qpx) == 0, "ATOMIC_WRITE batch posted");
	wc = poll_one(a->send_cq);
	CHECK(wc.wr_id == 20 && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_ATOMIC_WRITE,
	      "completion: IBV_WC_ATOMIC_WRITE (%s)", ibv_wc_status_str(wc.status));
	CHECK(!memcmp(b->buf + 64, "cccccccc", 8), "the remote 8 bytes are the ones given at the call");
}

static void bind_mw(struct side *a, struct side *b, struct ibv_qp_ex *bqpx, int gid)
{
	struct ibv_mr *mr = ibv_reg_mr(b->pd, b->buf + 3072, 1024,
				       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
	struct ibv_mw *mw = ibv_alloc_mw(b->pd, IBV_MW_TYPE_2);
	struct ibv_mw_bind_info info = {.mr = mr, .addr = (uintptr_t)mr->addr, .length = 1024,
					.mw_access_flags = IBV_ACCESS_LOCAL_WRITE |
							   IBV_ACCESS_REMOTE_WRITE};
	uint32_t key = ibv_inc_rkey(mw->rkey);
	struct ibv_wc wc;

	(void)gid;
	printf("# ibv_wr_bind_mw / ibv_wr_local_inv\n");
	REQUIRE(mr && mw, "an MR with MW_BIND and a type 2 window");
	ibv_wr_start(bqpx);
	bqpx->wr_id = 30;
	bqpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_bind_mw(bqpx, mw, key, &info);
	CHECK(ibv_wr_complete(bqpx) == 0, "bind batch posted");
	wc = poll_one(b->send_cq);
	CHECK(wc.wr_id == 30 && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_BIND_MW,
	      "IBV_WC_BIND_MW");
	memcpy(a->buf, "via mw", 6);
	post_write(a, 31, 6, (uintptr_t)mr->addr + 10, key, IBV_SEND_SIGNALED);
	CHECK(poll_one(a->send_cq).status == IBV_WC_SUCCESS && !memcmp(b->buf + 3082, "via mw", 6),
	      "RDMA WRITE through the window lands");
	ibv_wr_start(bqpx);
	bqpx->wr_id = 32;
	bqpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_local_inv(bqpx, key);
	CHECK(ibv_wr_complete(bqpx) == 0, "local_inv batch posted");
	wc = poll_one(b->send_cq);
	CHECK(wc.wr_id == 32 && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_LOCAL_INV,
	      "IBV_WC_LOCAL_INV");
	post_write(a, 33, 6, (uintptr_t)mr->addr, key, IBV_SEND_SIGNALED);
	CHECK(poll_one(a->send_cq).status == IBV_WC_REM_ACCESS_ERR,
	      "access after the invalidation: IBV_WC_REM_ACCESS_ERR");
	REQUIRE(ibv_dealloc_mw(mw) == 0 && ibv_dereg_mr(mr) == 0, "cleanup");
}

static void ud(void)
{
	struct side a, b;
	struct ibv_qp_ex *qpx;
	struct ibv_ah_attr aa = {.is_global = 1, .port_num = 1};
	struct ibv_ah *ah;
	struct ibv_data_buf pieces[2] = {{(void *)"ud ", 3}, {(void *)"builder", 7}};
	struct ibv_wc wc;
	int gid;

	printf("# UD: set_ud_addr, inline data list, send_imm\n");
	make_side(&a, IBV_QPT_UD, 16, 8);
	make_side(&b, IBV_QPT_UD, 16, 8);
	qpx = make_qpx(&a, IBV_QPT_UD, IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM);
	CHECK(qpx->wr_send && qpx->wr_send_imm && !qpx->wr_rdma_write && qpx->wr_set_ud_addr,
	      "UD builder table: send, send_imm, set_ud_addr");
	gid = loopback_gid_index(a.ctx);
	to_rts(a.qp, 0, gid, 0);
	to_rts(b.qp, 0, gid, 0);
	REQUIRE(ibv_query_gid(a.ctx, 1, gid, &aa.grh.dgid) == 0, "gid");
	aa.grh.sgid_index = gid;
	aa.grh.hop_limit = 64;
	ah = ibv_create_ah(a.pd, &aa);
	REQUIRE(ah != NULL, "ibv_create_ah");
	post_recv(&b, 700, 0, 40 + 64);
	ibv_wr_start(qpx);
	qpx->wr_id = 40;
	qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send_imm(qpx, htonl(0xabcd));
	ibv_wr_set_ud_addr(qpx, ah, b.qp->qp_num, 0x11111111);
	ibv_wr_set_inline_data_list(qpx, 2, pieces);
	CHECK(ibv_wr_complete(qpx) == 0, "UD batch posted");
	wc = poll_one(a.send_cq);
	CHECK(wc.wr_id == 40 && wc.status == IBV_WC_SUCCESS, "UD send completes");
	wc = poll_one(b.recv_cq);
	CHECK(wc.wr_id == 700 && wc.status == IBV_WC_SUCCESS && wc.byte_len == 40 + 10 &&
		      (wc.wc_flags & IBV_WC_WITH_IMM) && ntohl(wc.imm_data) == 0xabcd &&
		      wc.src_qp == a.qp->qp_num && !memcmp(b.buf + 40, "ud builder", 10),
	      "UD receive: GRH + the concatenated inline pieces, immediate, src_qp");
	REQUIRE(ibv_destroy_ah(ah) == 0, "destroy AH");
	destroy_side(&a);
	destroy_side(&b);
}

int main(void)
{
	struct side a, b;
	struct ibv_qp_ex *qpx, *bqpx;
	int gid;

	setvbuf(stdout, NULL, _IOLBF, 0);
	make_side(&a, IBV_QPT_RC, 64, 16);
	make_side(&b, IBV_QPT_RC, 64, 16);
	qpx = make_qpx(&a, IBV_QPT_RC, RC_OPS);
	bqpx = make_qpx(&b, IBV_QPT_RC, RC_OPS);
	CHECK(qpx->wr_send && qpx->wr_rdma_write && qpx->wr_rdma_read && qpx->wr_atomic_write &&
		      qpx->wr_bind_mw && qpx->wr_local_inv,
	      "the requested builders are set");
	CHECK(!qpx->wr_send_imm && !qpx->wr_send_inv && !qpx->wr_rdma_write_imm &&
		      !qpx->wr_atomic_cmp_swp && !qpx->wr_atomic_fetch_add && !qpx->wr_send_tso,
	      "builders not in send_ops_flags stay NULL (as rxe's)");
	CHECK(qpx->wr_start && qpx->wr_complete && qpx->wr_abort && qpx->wr_set_sge &&
		      qpx->wr_set_sge_list && qpx->wr_set_inline_data &&
		      qpx->wr_set_inline_data_list && qpx->wr_set_ud_addr && qpx->wr_set_xrc_srqn,
	      "start/complete/abort and every setter are set");

	ibv_wr_start(qpx);
	qpx->wr_id = 1;
	ibv_wr_send(qpx);
	ibv_wr_set_sge(qpx, a.mr->lkey, (uintptr_t)a.buf, 4);
	CHECK(ibv_wr_complete(qpx) == EINVAL, "ibv_wr_complete in RESET: EINVAL");
	CHECK(count_completions(a.send_cq) == 0, "nothing posted in RESET");

	gid = loopback_gid_index(a.ctx);
	to_rts(a.qp, b.qp->qp_num, gid, ALL_ACCESS);
	to_rts(b.qp, a.qp->qp_num, gid, ALL_ACCESS);
	batch_send_write_read(&a, &b, qpx);
	errors_post_nothing(&a, &b, qpx);
	atomic_write(&a, &b, qpx);
	bind_mw(&a, &b, bqpx, gid);
	destroy_side(&a);
	destroy_side(&b);
	ud();
	printf("# wr_builder: all checks passed\n");
	return 0;
}
