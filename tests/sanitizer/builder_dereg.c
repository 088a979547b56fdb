/* dereg-mr-in-use, with the work request built by ibv_wr_* (ibv_wr_post(3)): the
 * sanitizer tracks the builder's requests from ibv_wr_complete as it tracks
 * ibv_post_send's, so ibv_dereg_mr of the region an RDMA WRITE built that way reads,
 * before its completion was polled, is found as for dereg_in_use.c. --fixed polls
 * first. */
#include "sanitizer.h"

int main(int argc, char **argv)
{
	struct side a, b;
	struct ibv_wc wc;
	struct ibv_qp_ex *qpx;
	int gid, fixed = fixed_run(argc, argv);
	struct ibv_qp_init_attr_ex init = {
		.qp_type = IBV_QPT_RC,
		.cap = {.max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 2, .max_recv_sge = 2},
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
		.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE,
	};

	make_pair(&a, &b, IBV_QPT_RC, 16, 16);
	/* a's QP replaced by one that builds work requests. */
	REQUIRE(ibv_destroy_qp(a.qp) == 0 && ibv_destroy_qp(b.qp) == 0, "ibv_destroy_qp x2");
	init.send_cq = a.send_cq;
	init.recv_cq = a.recv_cq;
	init.pd = a.pd;
	a.qp = ibv_create_qp_ex(a.ctx, &init);
	REQUIRE(a.qp != NULL, "ibv_create_qp_ex (send_ops_flags)");
	b.qp = make_qp(&b, IBV_QPT_RC, 16);
	gid = loopback_gid_index(a.ctx);
	to_rts(a.qp, b.qp->qp_num, gid, ALL_ACCESS);
	to_rts(b.qp, a.qp->qp_num, gid, ALL_ACCESS);
	qpx = ibv_qp_to_qp_ex(a.qp);
	printf("lkey 0x%x qpn 0x%x wr_id 0x%x\n", a.mr->lkey, a.qp->qp_num, 0x5f);
	fflush(stdout);
	ibv_wr_start(qpx);
	qpx->wr_id = 0x5f;
	qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(qpx, b.mr->rkey, (uintptr_t)b.buf);
	ibv_wr_set_sge(qpx, a.mr->lkey, (uintptr_t)a.buf, 64);
	REQUIRE(ibv_wr_complete(qpx) == 0, "ibv_wr_complete");
	if (fixed) {
		wc = poll_one(a.send_cq);
		REQUIRE(ibv_dereg_mr(a.mr) == 0, "ibv_dereg_mr");
	} else {
		REQUIRE(ibv_dereg_mr(a.mr) == 0, "ibv_dereg_mr"); /* BUG */
		wc = poll_one(a.send_cq);
	}
	a.mr = NULL;
	REQUIRE(wc.wr_id == 0x5f && wc.status == IBV_WC_SUCCESS, "the WRITE completes");
	free_side(&a);
	free_side(&b);
	printf("done\n");
	return 0;
}
