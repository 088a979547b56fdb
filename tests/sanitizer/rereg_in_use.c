/* rereg-mr-in-use: ibv_rereg_mr moves the region a posted RDMA WRITE reads to another PD
 * before the WRITE's completion was polled. ibv_rereg_mr(3): re-registration is
 * conceptually a deregistration followed by a registration, so the rule of
 * ibv_post_send(3) NOTES holds as for ibv_dereg_mr: the buffers of a work request are
 * the device's until its completion was retrieved. --fixed polls first. */
#include "sanitizer.h"

int main(int argc, char **argv)
{
	struct side a, b;
	struct ibv_pd *other;
	struct ibv_wc wc;
	int fixed = fixed_run(argc, argv);

	make_pair(&a, &b, IBV_QPT_RC, 16, 16);
	other = ibv_alloc_pd(a.ctx);
	REQUIRE(other != NULL, "ibv_alloc_pd");
	printf("lkey 0x%x qpn 0x%x wr_id 0x%x\n", a.mr->lkey, a.qp->qp_num, 0x5d);
	fflush(stdout);
	write_to(&a, 0x5d, 64, (uintptr_t)b.buf, b.mr->rkey);
	if (fixed) {
		wc = poll_one(a.send_cq);
		REQUIRE(ibv_rereg_mr(a.mr, IBV_REREG_MR_CHANGE_PD, other, NULL, 0, 0) == 0, "ibv_rereg_mr");
	} else {
		REQUIRE(ibv_rereg_mr(a.mr, IBV_REREG_MR_CHANGE_PD, other, NULL, 0, 0) == 0, "ibv_rereg_mr"); /* BUG */
		wc = poll_one(a.send_cq);
	}
	REQUIRE(wc.wr_id == 0x5d && wc.status == IBV_WC_SUCCESS, "the WRITE completes");
	REQUIRE(a.mr->pd == other, "the region is in the other PD");
	/* Back to its PD, nothing outstanding now: no finding. */
	REQUIRE(ibv_rereg_mr(a.mr, IBV_REREG_MR_CHANGE_PD, a.pd, NULL, 0, 0) == 0, "ibv_rereg_mr back");
	REQUIRE(ibv_dealloc_pd(other) == 0, "ibv_dealloc_pd");
	free_side(&a);
	free_side(&b);
	printf("done\n");
	return 0;
}
