/* cq-too-small: one CQ of 4 entries for both queues of a QP that can have 16 sends, all
 * signaled (sq_sig_all), and 16 receives outstanding (ibv_create_cq(3): the CQ must hold
 * every completion the application may have to poll; an overrun is an error that ends
 * the QP). Nothing has
 * gone wrong yet: the sanitizer warns at ibv_create_qp, naming the CQ (created on the
 * BUG line), its size and the QP's depths. --fixed makes the CQ 32 entries. */
#include "sanitizer.h"

int main(int argc, char **argv)
{
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_qp_init_attr init = {
		.cap = {.max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1},
		.qp_type = IBV_QPT_RC,
		.sq_sig_all = 1,
	};
	int fixed = fixed_run(argc, argv);

	ctx = open_ctx();
	pd = ibv_alloc_pd(ctx);
	REQUIRE(pd != NULL, "ibv_alloc_pd");
	if (fixed)
		cq = ibv_create_cq(ctx, 32, NULL, NULL, 0);
	else
		cq = ibv_create_cq(ctx, 4, NULL, NULL, 0); /* BUG */
	REQUIRE(cq != NULL, "ibv_create_cq");
	printf("cqe %d\n", cq->cqe);
	fflush(stdout);
	init.send_cq = init.recv_cq = cq;
	qp = ibv_create_qp(pd, &init);
	REQUIRE(qp != NULL, "ibv_create_qp");
	printf("qpn 0x%x\n", qp->qp_num);
	REQUIRE(ibv_destroy_qp(qp) == 0, "ibv_destroy_qp");
	REQUIRE(ibv_destroy_cq(cq) == 0, "ibv_destroy_cq");
	REQUIRE(ibv_dealloc_pd(pd) == 0, "ibv_dealloc_pd");
	REQUIRE(ibv_close_device(ctx) == 0, "ibv_close_device");
	printf("done\n");
	return 0;
}
