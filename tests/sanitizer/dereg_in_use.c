/* dereg-mr-in-use: ibv_dereg_mr of the region a posted RDMA WRITE reads, before the
 * WRITE's completion was polled (ibv_post_send(3) NOTES: the buffers of a work request
 * may be reused only once its completion was retrieved). rverbs executes the WRITE
 * inside ibv_post_send; a NIC may still be reading the buffer. --fixed polls first. */
#include "sanitizer.h"

int main(int argc, char **argv)
{
	struct side a, b;
	struct ibv_wc wc;
	int fixed = fixed_run(argc, argv);

	make_pair(&a, &b, IBV_QPT_RC, 16, 16);
	printf("lkey 0x%x qpn 0x%x wr_id 0x%x\n", a.mr->lkey, a.qp->qp_num, 0x5a);
	fflush(stdout);
	write_to(&a, 0x5a, 64, (uintptr_t)b.buf, b.mr->rkey);
	if (fixed) {
		wc = poll_one(a.send_cq);
		REQUIRE(ibv_dereg_mr(a.mr) == 0, "ibv_dereg_mr");
	} else {
		REQUIRE(ibv_dereg_mr(a.mr) == 0, "ibv_dereg_mr"); /* BUG */
		wc = poll_one(a.send_cq);
	}
	a.mr = NULL;
	REQUIRE(wc.wr_id == 0x5a, "the WRITE completes");
	free_side(&a);
	free_side(&b);
	printf("done\n");
	return 0;
}
