/* unsignaled-fill: eight unsignaled RDMA WRITEs fill a send queue of depth 8, and the
 * program posts again (ibv_post_send(3): the slot of an unsignaled request is freed only
 * when a later completion of its send queue is polled; ibv_create_qp(3): sq_sig_all is 0
 * here). No completion will ever free a slot: on a NIC the ninth post fails with ENOMEM,
 * and every one after it. rverbs executes each WRITE inside ibv_post_send and takes the
 * post; the sanitizer reports it, with where the run of unsignaled requests began.
 * --fixed signals the eighth request and polls its completion before posting again. */
#include "sanitizer.h"

#define DEPTH 8

int main(int argc, char **argv)
{
	struct side a, b;
	struct ibv_wc wc;
	int fixed = fixed_run(argc, argv);

	make_pair(&a, &b, IBV_QPT_RC, 16, DEPTH);
	printf("qpn 0x%x depth %d\n", a.qp->qp_num, DEPTH);
	fflush(stdout);
	for (int i = 0; i < DEPTH; i++)
		post_write(&a, 0x100 + i, 8, (uintptr_t)b.buf, b.mr->rkey, fixed && i == DEPTH - 1 ? IBV_SEND_SIGNALED : 0);
	if (fixed) {
		wc = poll_one(a.send_cq);
		REQUIRE(wc.wr_id == 0x100 + DEPTH - 1 && wc.status == IBV_WC_SUCCESS, "the signaled WRITE completes");
		post_write(&a, 0x200, 8, (uintptr_t)b.buf, b.mr->rkey, IBV_SEND_SIGNALED);
	} else {
		post_write(&a, 0x200, 8, (uintptr_t)b.buf, b.mr->rkey, IBV_SEND_SIGNALED); /* BUG */
	}
	wc = poll_one(a.send_cq);
	REQUIRE(wc.wr_id == 0x200 && wc.status == IBV_WC_SUCCESS, "the last WRITE completes");
	free_side(&a);
	free_side(&b);
	printf("done\n");
	return 0;
}
