/* dealloc-mw-in-use: ibv_dealloc_mw of a type 1 window whose bind (ibv_bind_mw(3), a
 * work request on the send queue) has not completed: its completion was not polled. The
 * bind may still be changing the window the device is told to free, and the rkey it
 * returned may never have been valid. --fixed polls the bind's completion first. */
#include "sanitizer.h"

int main(int argc, char **argv)
{
	struct side a, b;
	struct ibv_mr *mr;
	struct ibv_mw *mw;
	struct ibv_wc wc;
	void *buf = aligned_alloc(4096, BUF_LEN);
	int fixed = fixed_run(argc, argv);

	make_pair(&a, &b, IBV_QPT_RC, 16, 16);
	REQUIRE(buf != NULL, "aligned_alloc");
	mr = ibv_reg_mr(b.pd, buf, BUF_LEN, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
	REQUIRE(mr != NULL, "ibv_reg_mr (MW_BIND)");
	mw = ibv_alloc_mw(b.pd, IBV_MW_TYPE_1);
	REQUIRE(mw != NULL, "ibv_alloc_mw");
	struct ibv_mw_bind bind = {.wr_id = 0x71, .send_flags = IBV_SEND_SIGNALED,
				   .bind_info = {.mr = mr, .addr = (uintptr_t)buf, .length = BUF_LEN,
						 .mw_access_flags = IBV_ACCESS_REMOTE_WRITE}};
	REQUIRE(ibv_bind_mw(b.qp, mw, &bind) == 0, "ibv_bind_mw");
	printf("rkey 0x%x qpn 0x%x wr_id 0x%x\n", mw->rkey, b.qp->qp_num, 0x71);
	fflush(stdout);
	if (fixed) {
		wc = poll_one(b.send_cq);
		REQUIRE(ibv_dealloc_mw(mw) == 0, "ibv_dealloc_mw");
	} else {
		REQUIRE(ibv_dealloc_mw(mw) == 0, "ibv_dealloc_mw"); /* BUG */
		wc = poll_one(b.send_cq);
	}
	REQUIRE(wc.wr_id == 0x71 && wc.opcode == IBV_WC_BIND_MW, "the bind completes");
	REQUIRE(ibv_dereg_mr(mr) == 0, "ibv_dereg_mr");
	free(buf);
	free_side(&a);
	free_side(&b);
	printf("done\n");
	return 0;
}
