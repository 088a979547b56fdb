/* unacked-cq-events: ibv_destroy_cq of a CQ one of whose completion events was obtained
 * with ibv_get_cq_event and never acknowledged. ibv_get_cq_event(3): destroying a CQ
 * waits for all its completion events to be acknowledged, so the destroy never returns
 * (rdma-core behaves the same); the sanitizer reports before the wait. --fixed acks. */
#include "sanitizer.h"

int main(int argc, char **argv)
{
	struct side a, b;
	struct ibv_comp_channel *ch;
	struct ibv_cq *cq, *ev_cq;
	void *ev_ctx;
	int fixed = fixed_run(argc, argv);

	make_pair(&a, &b, IBV_QPT_RC, 16, 16);
	ch = ibv_create_comp_channel(a.ctx);
	REQUIRE(ch != NULL, "ibv_create_comp_channel");
	cq = ibv_create_cq(a.ctx, 16, NULL, ch, 0);
	REQUIRE(cq != NULL, "ibv_create_cq with a channel");
	REQUIRE(ibv_req_notify_cq(cq, 0) == 0, "ibv_req_notify_cq");
	/* Side a's QP is replaced by one that completes to the CQ with the channel (the
	 * old one goes first: both on a's receive CQ of 16 would not fit, cq-too-small). */
	{
		struct ibv_cq *keep = a.send_cq;

		REQUIRE(ibv_destroy_qp(a.qp) == 0, "ibv_destroy_qp");
		a.send_cq = cq;
		a.qp = make_qp(&a, IBV_QPT_RC, 16);
		a.send_cq = keep;
		REQUIRE(ibv_destroy_qp(b.qp) == 0, "ibv_destroy_qp");
		b.qp = make_qp(&b, IBV_QPT_RC, 16);
		to_rts(a.qp, b.qp->qp_num, loopback_gid_index(a.ctx), ALL_ACCESS);
		to_rts(b.qp, a.qp->qp_num, loopback_gid_index(a.ctx), ALL_ACCESS);
	}
	write_to(&a, 1, 8, (uintptr_t)b.buf, b.mr->rkey);
	REQUIRE(ibv_get_cq_event(ch, &ev_cq, &ev_ctx) == 0 && ev_cq == cq, "ibv_get_cq_event");
	(void)poll_one(cq);
	if (fixed)
		ibv_ack_cq_events(cq, 1);
	REQUIRE(ibv_destroy_qp(a.qp) == 0, "ibv_destroy_qp");
	printf("destroying the cq\n");
	fflush(stdout);
	REQUIRE(ibv_destroy_cq(cq) == 0, "ibv_destroy_cq"); /* BUG */
	REQUIRE(ibv_destroy_comp_channel(ch) == 0, "ibv_destroy_comp_channel");
	a.qp = make_qp(&a, IBV_QPT_RC, 16);
	free_side(&a);
	free_side(&b);
	printf("done\n");
	return 0;
}
