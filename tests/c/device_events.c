/* The fault plan's port and device events through the C API (docs/fault-injection.md,
 * "Port and device events"), run with RVERBS_FAULTS=
 * "event=PORT_ERR:on=open_device:nth=3,event=PORT_ACTIVE:on=post_recv:nth=1,event=DEVICE_FATAL:nth=1":
 *  - the third ibv_open_device of the process succeeds, then port 1 is DOWN: every open
 *    context reads IBV_EVENT_PORT_ERR with element.port_num 1 (ibv_get_async_event(3)),
 *    ibv_query_port reports IBV_PORT_DOWN with phys_state 2 (POLLING);
 *  - the first ibv_post_recv brings it back: IBV_EVENT_PORT_ACTIVE on every context,
 *    ibv_query_port reports IBV_PORT_ACTIVE;
 *  - the first ibv_post_send succeeds (its SEND is delivered), then the device is dead:
 *    IBV_EVENT_DEVICE_FATAL on every context, the QPs in ERR with their receives
 *    flushed, ibv_post_send / ibv_post_recv / ibv_alloc_pd / ibv_create_cq / ibv_reg_mr
 *    fail with EIO, and every object can still be destroyed and every context closed.
 * Without the plan the events never come and the program fails.
 */
#include <stdlib.h>

#include "common.h"

/* Reads every pending async event of `ctx` and acks each; returns how many were
 * `type` with element.port_num `port`. */
static int drain_port_events(struct ibv_context *ctx, enum ibv_event_type type, int port)
{
	struct ibv_async_event ev;
	int flags = fcntl(ctx->async_fd, F_GETFL);
	int seen = 0;

	REQUIRE(fcntl(ctx->async_fd, F_SETFL, flags | O_NONBLOCK) == 0, "async_fd is a real fd");
	for (int i = 0; i < 1000; i++) {
		if (ibv_get_async_event(ctx, &ev)) {
			CHECK(errno == EAGAIN, "ibv_get_async_event: -1/EAGAIN when drained");
			break;
		}
		printf("# async event %s, port_num %d\n", ibv_event_type_str(ev.event_type),
		       ev.element.port_num);
		if (ev.event_type == type && ev.element.port_num == port)
			seen++;
		ibv_ack_async_event(&ev);
	}
	fcntl(ctx->async_fd, F_SETFL, flags);
	return seen;
}

static enum ibv_port_state port_state(struct ibv_context *ctx, uint8_t *phys)
{
	struct ibv_port_attr pa;

	REQUIRE(ibv_query_port(ctx, 1, &pa) == 0, "ibv_query_port(1)");
	*phys = pa.phys_state;
	return pa.state;
}

int main(void)
{
	struct side a, b;
	struct ibv_context *c, *ctxs[3];
	struct ibv_qp_attr attr;
	struct ibv_qp_init_attr init;
	struct ibv_wc wc;
	uint8_t phys;
	char buf[64];

	setvbuf(stdout, NULL, _IOLBF, 0);
	REQUIRE(getenv("RVERBS_FAULTS") != NULL, "run with the fault plan in RVERBS_FAULTS");
	make_pair(&a, &b, IBV_QPT_RC, 64, 16);
	CHECK(port_state(a.ctx, &phys) == IBV_PORT_ACTIVE && phys == 5, "port 1 ACTIVE, LinkUp");

	printf("# PORT_ERR after the third ibv_open_device\n");
	c = open_ctx();
	ctxs[0] = a.ctx, ctxs[1] = b.ctx, ctxs[2] = c;
	for (int i = 0; i < 3; i++) {
		CHECK(drain_port_events(ctxs[i], IBV_EVENT_PORT_ERR, 1) == 1,
		      "context %d reads IBV_EVENT_PORT_ERR for port 1", i);
		CHECK(port_state(ctxs[i], &phys) == IBV_PORT_DOWN && phys == 2,
		      "context %d: ibv_query_port says DOWN, phys_state POLLING (got %u)", i, phys);
	}

	printf("# PORT_ACTIVE after the first ibv_post_recv\n");
	post_recv(&b, 100, 0, 64);
	post_recv(&b, 101, 0, 64);
	for (int i = 0; i < 3; i++) {
		CHECK(drain_port_events(ctxs[i], IBV_EVENT_PORT_ACTIVE, 1) == 1,
		      "context %d reads IBV_EVENT_PORT_ACTIVE for port 1", i);
		CHECK(port_state(ctxs[i], &phys) == IBV_PORT_ACTIVE && phys == 5,
		      "context %d: ibv_query_port says ACTIVE again", i);
	}

	printf("# DEVICE_FATAL after the first ibv_post_send\n");
	{
		struct ibv_sge sge = {.addr = (uintptr_t)a.buf, .length = 8, .lkey = a.mr->lkey};
		struct ibv_send_wr wr = {.wr_id = 1, .sg_list = &sge, .num_sge = 1,
					 .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED};
		struct ibv_send_wr *bad = NULL;

		CHECK(ibv_post_send(a.qp, &wr, &bad) == 0 && bad == NULL, "ibv_post_send(SEND 1) succeeds");
		for (int i = 0; i < 3; i++)
			CHECK(drain_port_events(ctxs[i], IBV_EVENT_DEVICE_FATAL, 0) == 1,
			      "context %d reads IBV_EVENT_DEVICE_FATAL", i);
		wc = poll_one(a.send_cq);
		CHECK(wc.wr_id == 1 && wc.status == IBV_WC_SUCCESS, "the SEND that raised it ran");
		wc = poll_one(b.recv_cq);
		CHECK(wc.wr_id == 100 && wc.status == IBV_WC_SUCCESS, "and was received");
		wc = poll_one(b.recv_cq);
		CHECK(wc.wr_id == 101 && wc.status == IBV_WC_WR_FLUSH_ERR, "the other receive flushed");
		CHECK(ibv_query_qp(a.qp, &attr, IBV_QP_STATE, &init) == 0 && attr.qp_state == IBV_QPS_ERR &&
			      ibv_query_qp(b.qp, &attr, IBV_QP_STATE, &init) == 0 && attr.qp_state == IBV_QPS_ERR,
		      "both QPs are in ERR");

		wr.wr_id = 2;
		bad = NULL;
		CHECK(ibv_post_send(a.qp, &wr, &bad) == EIO && bad == &wr, "ibv_post_send fails with EIO, bad_wr the first");
	}
	{
		struct ibv_sge sge = {.addr = (uintptr_t)b.buf, .length = 64, .lkey = b.mr->lkey};
		struct ibv_recv_wr wr = {.wr_id = 102, .sg_list = &sge, .num_sge = 1};
		struct ibv_recv_wr *bad = NULL;

		CHECK(ibv_post_recv(b.qp, &wr, &bad) == EIO && bad == &wr, "ibv_post_recv fails with EIO");
	}
	errno = 0;
	CHECK(ibv_alloc_pd(c) == NULL && errno == EIO, "ibv_alloc_pd: NULL, errno EIO");
	errno = 0;
	CHECK(ibv_create_cq(c, 4, NULL, NULL, 0) == NULL && errno == EIO, "ibv_create_cq: NULL, errno EIO");
	errno = 0;
	CHECK(ibv_reg_mr(a.pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE) == NULL && errno == EIO,
	      "ibv_reg_mr: NULL, errno EIO");
	CHECK(ibv_poll_cq(a.send_cq, 1, &wc) == 0, "polling still works (nothing left)");

	destroy_side(&a);
	destroy_side(&b);
	CHECK(ibv_close_device(c) == 0, "ibv_close_device of the third context");
	printf("# device_events: all checks passed\n");
	return 0;
}
