/* Completion channels and notification (ibv_create_comp_channel(3),
 * ibv_req_notify_cq(3), ibv_get_cq_event(3), ibv_ack_cq_events(3)) through the ABI:
 *  - the channel fd is a real fd: poll(2) says readable exactly while an event is queued;
 *  - O_NONBLOCK on it makes ibv_get_cq_event return -1/EAGAIN;
 *  - an armed CQ queues one event for the next completion, with cq and cq_context;
 *  - a completion on an unarmed CQ queues nothing; solicited-only arming ignores
 *    unsolicited completions;
 *  - ibv_ack_cq_events updates comp_events_completed; ibv_destroy_cq waits until every
 *    event delivered for the CQ is acked; ibv_destroy_comp_channel is EBUSY while a CQ
 *    uses the channel.
 */
#define _GNU_SOURCE
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>

#include "common.h"

static atomic_int acked;

struct destroyer {
	struct ibv_cq *cq;
	int ret;
	int acked_when_returned;
};

static void *destroy_cq_thread(void *arg)
{
	struct destroyer *d = arg;

	d->ret = ibv_destroy_cq(d->cq);
	d->acked_when_returned = atomic_load(&acked);
	return NULL;
}

static int readable(int fd)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};

	return poll(&p, 1, 0) == 1 && (p.revents & POLLIN);
}

int main(void)
{
	struct side a, b;
	struct ibv_comp_channel *ch;
	struct ibv_cq *cq, *ev_cq = NULL;
	void *ev_ctx = NULL;
	struct ibv_wc wc;
	int flags, gid;

	setvbuf(stdout, NULL, _IOLBF, 0);
	make_side(&a, IBV_QPT_RC, 16, 16);
	make_side(&b, IBV_QPT_RC, 16, 16);
	gid = loopback_gid_index(a.ctx);

	ch = ibv_create_comp_channel(b.ctx);
	CHECK(ch && ch->context == b.ctx && ch->fd >= 0 && ch->refcnt == 0,
	      "ibv_create_comp_channel: context, fd %d, refcnt 0", ch ? ch->fd : -1);
	flags = fcntl(ch->fd, F_GETFL);
	CHECK(flags >= 0, "the channel fd is an open fd");
	cq = ibv_create_cq(b.ctx, 16, (void *)0xc0ffee, ch, 0);
	CHECK(cq && cq->channel == ch && cq->cq_context == (void *)0xc0ffee && ch->refcnt == 1,
	      "ibv_create_cq on the channel: channel, cq_context set, refcnt 1");
	CHECK(ibv_destroy_comp_channel(ch) == EBUSY, "ibv_destroy_comp_channel: EBUSY while used");

	/* b receives into the notifying CQ. */
	REQUIRE(ibv_destroy_qp(b.qp) == 0 && ibv_destroy_cq(b.recv_cq) == 0, "replace b's QP");
	b.recv_cq = cq;
	b.qp = make_qp(&b, IBV_QPT_RC, 16);
	to_rts(a.qp, b.qp->qp_num, gid, ALL_ACCESS);
	to_rts(b.qp, a.qp->qp_num, gid, ALL_ACCESS);

	CHECK(fcntl(ch->fd, F_SETFL, flags | O_NONBLOCK) == 0, "O_NONBLOCK on the channel fd");
	errno = 0;
	CHECK(ibv_get_cq_event(ch, &ev_cq, &ev_ctx) == -1 && errno == EAGAIN,
	      "ibv_get_cq_event with nothing queued: -1/EAGAIN");
	CHECK(!readable(ch->fd), "the fd is not readable with nothing queued");

	printf("# an unarmed CQ queues no event\n");
	post_recv(&b, 1, 0, 64);
	{
		struct ibv_sge sge = {.addr = (uintptr_t)a.buf, .length = 8, .lkey = a.mr->lkey};
		struct ibv_send_wr wr = {.wr_id = 9, .sg_list = &sge, .num_sge = 1,
					 .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED};
		struct ibv_send_wr *bad;

		CHECK(ibv_post_send(a.qp, &wr, &bad) == 0, "SEND posted");
		REQUIRE(poll_one(a.send_cq).status == IBV_WC_SUCCESS, "send completes");
		CHECK(poll_one(cq).wr_id == 1, "the receive completes");
		CHECK(!readable(ch->fd), "no event without ibv_req_notify_cq");

		printf("# an armed CQ queues one event\n");
		CHECK(ibv_req_notify_cq(cq, 0) == 0, "ibv_req_notify_cq(cq, 0)");
		post_recv(&b, 2, 0, 64);
		post_recv(&b, 3, 0, 64);
		CHECK(ibv_post_send(a.qp, &wr, &bad) == 0, "SEND posted");
		CHECK(ibv_post_send(a.qp, &wr, &bad) == 0, "another SEND posted");
		CHECK(readable(ch->fd), "the channel fd polls readable");
		CHECK(ibv_get_cq_event(ch, &ev_cq, &ev_ctx) == 0 && ev_cq == cq &&
			      ev_ctx == (void *)0xc0ffee,
		      "ibv_get_cq_event returns the CQ and its cq_context");
		CHECK(!readable(ch->fd) && ibv_get_cq_event(ch, &ev_cq, &ev_ctx) == -1 &&
			      errno == EAGAIN,
		      "one arming, one event (two completions)");
		CHECK(poll_one(cq).wr_id == 2 && poll_one(cq).wr_id == 3,
		      "both completions are in the CQ");
		ibv_ack_cq_events(cq, 1);
		CHECK(cq->comp_events_completed == 1, "ibv_ack_cq_events: comp_events_completed 1");

		printf("# solicited-only arming\n");
		CHECK(ibv_req_notify_cq(cq, 1) == 0, "ibv_req_notify_cq(cq, solicited_only)");
		post_recv(&b, 4, 0, 64);
		post_recv(&b, 5, 0, 64);
		CHECK(ibv_post_send(a.qp, &wr, &bad) == 0, "unsolicited SEND posted");
		CHECK(poll_one(cq).wr_id == 4, "its receive completes");
		CHECK(!readable(ch->fd), "an unsolicited completion fires no solicited-only event");
		wr.send_flags |= IBV_SEND_SOLICITED;
		CHECK(ibv_post_send(a.qp, &wr, &bad) == 0, "SOLICITED SEND posted");
		CHECK(readable(ch->fd) && ibv_get_cq_event(ch, &ev_cq, &ev_ctx) == 0 && ev_cq == cq,
		      "the solicited completion fires the event");
		CHECK(poll_one(cq).wr_id == 5, "its receive completes");
		ibv_ack_cq_events(cq, 1);
		CHECK(cq->comp_events_completed == 2, "comp_events_completed 2");
		while (ibv_poll_cq(a.send_cq, 1, &wc) > 0)
			;
	}

	/* Blocking mode again: an event already queued is returned without blocking. */
	CHECK(fcntl(ch->fd, F_SETFL, flags) == 0, "the fd back to blocking");
	CHECK(ibv_req_notify_cq(cq, 0) == 0, "re-armed");
	post_write(&a, 20, 8, (uintptr_t)b.buf, b.mr->rkey, IBV_SEND_SIGNALED);
	REQUIRE(poll_one(a.send_cq).status == IBV_WC_SUCCESS, "write completes");
	CHECK(!readable(ch->fd), "an RDMA WRITE completes nothing at the responder");
	{
		struct ibv_sge sge = {.addr = (uintptr_t)a.buf, .length = 4, .lkey = a.mr->lkey};
		struct ibv_send_wr wr = {.wr_id = 21, .sg_list = &sge, .num_sge = 1,
					 .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
					 .send_flags = IBV_SEND_SIGNALED, .imm_data = 7};
		struct ibv_send_wr *bad;

		wr.wr.rdma.remote_addr = (uintptr_t)b.buf;
		wr.wr.rdma.rkey = b.mr->rkey;
		post_recv(&b, 6, 0, 0);
		CHECK(ibv_post_send(a.qp, &wr, &bad) == 0, "RDMA_WRITE_WITH_IMM posted");
	}
	CHECK(ibv_get_cq_event(ch, &ev_cq, &ev_ctx) == 0 && ev_cq == cq,
	      "blocking ibv_get_cq_event returns the queued event");
	wc = poll_one(cq);
	CHECK(wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM && wc.byte_len == 4 && wc.imm_data == 7,
	      "RECV_RDMA_WITH_IMM: byte_len 4, imm carried verbatim");

	printf("# ibv_destroy_cq waits for the acknowledgement of delivered events\n");
	destroy_side(&a);
	CHECK(ibv_destroy_qp(b.qp) == 0, "ibv_destroy_qp");
	{
		struct destroyer d = {.cq = cq, .ret = -1, .acked_when_returned = -1};
		pthread_t t;
		int busy = 1;

		CHECK(pthread_create(&t, NULL, destroy_cq_thread, &d) == 0,
		      "ibv_destroy_cq called in a thread with one event unacked");
		for (int i = 0; i < 1000 && busy; i++)
			busy = pthread_tryjoin_np(t, NULL) == EBUSY;
		CHECK(busy, "ibv_destroy_cq has not returned before the ack");
		atomic_store(&acked, 1);
		ibv_ack_cq_events(cq, 1);
		CHECK(pthread_join(t, NULL) == 0 && d.ret == 0 && d.acked_when_returned == 1,
		      "ibv_destroy_cq returned 0, after ibv_ack_cq_events");
	}
	CHECK(ch->refcnt == 0, "the channel's refcnt is back to 0");
	CHECK(ibv_destroy_comp_channel(ch) == 0, "ibv_destroy_comp_channel once unused");
	REQUIRE(ibv_destroy_cq(b.send_cq) == 0 && ibv_dereg_mr(b.mr) == 0 &&
			ibv_dealloc_pd(b.pd) == 0 && ibv_close_device(b.ctx) == 0,
		"teardown");
	printf("# comp_channel: all checks passed\n");
	return 0;
}
