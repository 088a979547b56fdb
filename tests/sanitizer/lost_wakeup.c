/* lost-wakeup: after an event, the program acknowledges it and re-arms the CQ, which
 * still holds the completion that raised the event, then waits for the next event
 * without polling. ibv_get_cq_event(3): completions already in the CQ raise no event
 * once it is armed, so the CQ must be polled after arming (the man page's example). The
 * sanitizer reports before the wait; a second WRITE then raises an event so that the
 * run ends (a program with no more traffic would wait for ever). --fixed polls after
 * re-arming. */
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
	reconnect_sending_to(&a, &b, cq);
	REQUIRE(ibv_req_notify_cq(cq, 0) == 0, "ibv_req_notify_cq (empty)");
	write_to(&a, 1, 8, (uintptr_t)b.buf, b.mr->rkey);
	REQUIRE(ibv_get_cq_event(ch, &ev_cq, &ev_ctx) == 0 && ev_cq == cq, "ibv_get_cq_event");
	ibv_ack_cq_events(cq, 1);
	REQUIRE(ibv_req_notify_cq(cq, 0) == 0, "ibv_req_notify_cq (holding wr_id 1)");
	if (fixed)
		REQUIRE(poll_one(cq).wr_id == 1, "the completion held at the arming");
	write_to(&a, 2, 8, (uintptr_t)b.buf, b.mr->rkey);
	REQUIRE(ibv_get_cq_event(ch, &ev_cq, &ev_ctx) == 0 && ev_cq == cq, "ibv_get_cq_event"); /* BUG */
	ibv_ack_cq_events(cq, 1);
	if (!fixed)
		REQUIRE(poll_one(cq).wr_id == 1, "the completion held at the arming");
	REQUIRE(poll_one(cq).wr_id == 2, "the completion that raised the event");
	unhook(&a, cq);
	REQUIRE(ibv_destroy_comp_channel(ch) == 0, "ibv_destroy_comp_channel");
	free_side(&a);
	free_side(&b);
	printf("done\n");
	return 0;
}
