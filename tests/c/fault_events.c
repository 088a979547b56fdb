/* The fault plan's asynchronous events through the C API (docs/fault-injection.md), run
 * with RVERBS_FAULTS="event=CQ_ERR:on=post_recv:nth=3,event=QP_FATAL:nth=2":
 *  - the third ibv_post_recv of the process succeeds, then its QP's receive CQ is in
 *    error: IBV_EVENT_CQ_ERR names that CQ (ibv_get_async_event(3)) and ibv_poll_cq on
 *    it fails;
 *  - the second ibv_post_send succeeds (its SEND is delivered), then the QP is in ERR:
 *    IBV_EVENT_QP_FATAL names it, ibv_query_qp says ERR, a later send flushes with
 *    IBV_WC_WR_FLUSH_ERR.
 * Without the plan the events never come and the program fails.
 */
#include <stdlib.h>

#include "common.h"

static void send_one(struct side *s, uint64_t wr_id)
{
	struct ibv_sge sge = {.addr = (uintptr_t)s->buf, .length = 8, .lkey = s->mr->lkey};
	struct ibv_send_wr wr = {.wr_id = wr_id, .sg_list = &sge, .num_sge = 1,
				 .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED};
	struct ibv_send_wr *bad = NULL;

	CHECK(ibv_post_send(s->qp, &wr, &bad) == 0 && bad == NULL,
	      "ibv_post_send(SEND wr_id %llu) succeeds", (unsigned long long)wr_id);
}

int main(void)
{
	struct side a, b;
	struct ibv_qp_attr attr;
	struct ibv_qp_init_attr init;
	struct ibv_wc wc;

	setvbuf(stdout, NULL, _IOLBF, 0);
	REQUIRE(getenv("RVERBS_FAULTS") != NULL, "run with the fault plan in RVERBS_FAULTS");
	make_pair(&a, &b, IBV_QPT_RC, 64, 16);

	printf("# CQ_ERR after the third ibv_post_recv\n");
	post_recv(&b, 100, 0, 64);
	post_recv(&b, 101, 0, 64);
	CHECK(drain_async(b.ctx, IBV_EVENT_CQ_ERR, b.recv_cq) == 0, "no CQ_ERR before the third receive");
	post_recv(&a, 200, 0, 64);
	CHECK(drain_async(a.ctx, IBV_EVENT_CQ_ERR, a.recv_cq) == 1,
	      "IBV_EVENT_CQ_ERR names the receive CQ of the QP the receive was posted to");
	CHECK(ibv_poll_cq(a.recv_cq, 1, &wc) < 0, "ibv_poll_cq on a CQ in error fails");

	printf("# QP_FATAL after the second ibv_post_send\n");
	send_one(&a, 1);
	wc = poll_one(a.send_cq);
	CHECK(wc.wr_id == 1 && wc.status == IBV_WC_SUCCESS, "the first SEND completes");
	CHECK(drain_async(a.ctx, IBV_EVENT_QP_FATAL, a.qp) == 0, "no QP_FATAL after the first send");
	send_one(&a, 2);
	wc = poll_one(a.send_cq);
	CHECK(wc.wr_id == 2 && wc.status == IBV_WC_SUCCESS, "the second SEND ran: the verb succeeded");
	CHECK(drain_async(a.ctx, IBV_EVENT_QP_FATAL, a.qp) == 1, "IBV_EVENT_QP_FATAL names the QP");
	CHECK(ibv_query_qp(a.qp, &attr, IBV_QP_STATE, &init) == 0 && attr.qp_state == IBV_QPS_ERR,
	      "the QP is in ERR");
	wc = poll_one(b.recv_cq);
	CHECK(wc.wr_id == 100 && wc.status == IBV_WC_SUCCESS, "the peer received the first SEND");
	wc = poll_one(b.recv_cq);
	CHECK(wc.wr_id == 101 && wc.status == IBV_WC_SUCCESS, "and the second");
	send_one(&a, 3);
	wc = poll_one(a.send_cq);
	CHECK(wc.wr_id == 3 && wc.status == IBV_WC_WR_FLUSH_ERR, "a later send flushes");

	destroy_side(&a);
	destroy_side(&b);
	printf("# fault_events: all checks passed\n");
	return 0;
}
