/* cq-too-small: one CQ of 4 entries for both queues of a QP that can have 16 sends, all
 * signaled (sq_sig_all), and 16 receives outstanding (ibv_create_cq(3): the CQ must hold
 * every completion the application may have to poll; an overrun is an error that ends
 * the QP). Nothing has
 * gone wrong yet: the sanitizer warns at the first post (a QP never posted to, as those
 * libfabric's fi_getinfo makes to probe the device, overruns nothing), naming the CQ
 * (created on the BUG line), its size and the QP's depths. --fixed makes the CQ 32
 * entries. */
#include "sanitizer.h"

int main(int argc, char **argv)
{
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	struct ibv_recv_wr *bad;
	static char buf[64];
	struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = sizeof(buf)};
	struct ibv_recv_wr wr = {.wr_id = 1, .sg_list = &sge, .num_sge = 1};
	struct ibv_qp_attr attr = {.qp_state = IBV_QPS_INIT, .port_num = 1};
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
	fflush(stdout);
	mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	REQUIRE(mr != NULL, "ibv_reg_mr");
	sge.lkey = mr->lkey;
	REQUIRE(ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) == 0,
		"ibv_modify_qp INIT");
	REQUIRE(ibv_post_recv(qp, &wr, &bad) == 0, "ibv_post_recv");
	REQUIRE(ibv_destroy_qp(qp) == 0, "ibv_destroy_qp");
	REQUIRE(ibv_dereg_mr(mr) == 0, "ibv_dereg_mr");
	REQUIRE(ibv_destroy_cq(cq) == 0, "ibv_destroy_cq");
	REQUIRE(ibv_dealloc_pd(pd) == 0, "ibv_dealloc_pd");
	REQUIRE(ibv_close_device(ctx) == 0, "ibv_close_device");
	printf("done\n");
	return 0;
}
