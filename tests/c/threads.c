/* Threads through the C ABI at once (ibv_poll_cq(3), ibv_resize_cq(3), ibv_modify_srq(3),
 * ibv_get_cq_event(3)): verbs are thread-safe unless a domain says otherwise, so a
 * program may post on several QPs from several threads, poll one CQ from several
 * threads, resize a CQ or an SRQ while others use it, and create and destroy objects
 * while traffic runs. Four requester threads, each with its own RC QP (one context),
 * share one send CQ that two poller threads drain; their peers (a second context) share
 * one SRQ and one receive CQ, which the main thread waits on through a completion
 * channel and drains, reposting the receives; a resizer thread resizes both CQs and the
 * SRQ back to back; a churn thread registers and deregisters memory, allocates
 * PDs, creates CQs, QPs on the shared send CQ and address handles, and destroys them.
 * Whatever the interleaving:
 *  - every work request completes exactly once, successfully, with its opcode, and the
 *    completions of one QP reach each poller in the order posted (each poll takes the
 *    oldest; ibv_poll_cq(3));
 *  - the messages of one QP take SRQ receives in the order sent: a SEND's receive holds
 *    its bytes, a WRITE_WITH_IMM's its immediate data;
 *  - a READ after a WRITE on the same QP returns the WRITE's bytes;
 *  - every FETCH_ADD on the counter the four share returns a distinct original, 0..n-1;
 *  - the completion channel loses no wake-up (each wait is bounded: a lost one fails),
 *    also when ibv_req_notify_cq(3) meets a resize of the CQ in another thread (it
 *    once armed the generation the resize was replacing, and the wait never ended);
 *  - nothing hangs: every wait is bounded by a deadline, whose expiry is a failure.
 */
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "common.h"

#define THREADS 4
/* Work requests per requester: SEND, WRITE, WRITE_WITH_IMM, READ, FETCH_ADD in turn. */
#define PER_THREAD 600
/* Signaled work requests a requester keeps in flight. */
#define WINDOW 8
/* Local buffer slots of a requester: a slot is reused WINDOW*2 requests later, once the
 * request that used it has completed. */
#define LSLOTS (WINDOW * 2)
/* Bytes of one receive / local slot / remote area piece. */
#define SLOT 512
/* Receives kept posted to the SRQ: fewer than the messages in flight, so that some find
 * none and are sent again after an RNR NAK (rnr_retry 7: for ever). */
#define RSLOTS 8
/* Remote area of one requester for its WRITEs (pieces of SLOT bytes). */
#define AREA (SLOT * 8)
/* Seconds any part of the test may take. */
#define DEADLINE_S 60

enum op { OP_SEND, OP_WRITE, OP_WRITE_IMM, OP_READ, OP_FADD, OPS };

static enum op op_of(uint32_t seq)
{
	return (enum op)(seq % OPS);
}

/* Length of request `seq` of requester `who`: at least a 9-byte header, at most a slot. */
static uint32_t len_of(int who, uint32_t seq)
{
	return 9 + (seq * 37 + who * 11) % (SLOT - 9 + 1);
}

/* The bytes of request `seq` of `who`: its origin and length, then a pattern of both. */
static void fill(uint8_t *p, int who, uint32_t seq, uint32_t len)
{
	for (uint32_t i = 0; i < len; i++)
		p[i] = (uint8_t)(i * 131 + seq * 7 + who);
	p[0] = (uint8_t)who;
	memcpy(p + 1, &seq, 4);
	memcpy(p + 5, &len, 4);
}

static int matches(const uint8_t *p, int who, uint32_t seq, uint32_t len)
{
	uint8_t want[SLOT];

	fill(want, who, seq, len);
	return !memcmp(p, want, len);
}

/* Where the WRITE or WRITE_WITH_IMM `seq` of a requester lands in its area (and where
 * the READ two requests after a WRITE reads back): WRITEs take the lower half, in turn,
 * WRITE_WITH_IMMs the upper half. */
static uint32_t piece_of(uint32_t seq)
{
	uint32_t half = AREA / SLOT / 2;

	return ((seq / OPS) % half + (op_of(seq) == OP_WRITE_IMM ? half : 0)) * SLOT;
}

static uint64_t wr_id_of(int who, uint32_t seq)
{
	return (uint64_t)who << 32 | seq;
}

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

static double deadline;

static void before_deadline(const char *what)
{
	if (now() > deadline)
		CHECK(0, "%s before the deadline (%d s)", what, DEADLINE_S);
}

struct requester {
	int who;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	uint8_t *buf;           /* LSLOTS slots */
	atomic_uint completed;  /* send completions counted by the pollers */
	/* Per local slot, 1 + the last request whose completion a poller finished checking
	 * (0: none yet): a slot is reused only after that. */
	atomic_uint slot_done[LSLOTS];
	uint64_t originals[PER_THREAD / OPS + 1];
	atomic_uint fetched;
};

static struct ibv_context *rctx, *tctx;
static struct ibv_pd *rpd, *tpd;
static struct ibv_cq *scq, *rcq, *tscq;
static struct ibv_comp_channel *chan;
static struct ibv_srq *srq;
static struct ibv_mr *tmr;
static uint8_t *tmem; /* THREADS areas, the counter, RSLOTS receive slots */
static struct requester req[THREADS];
static struct ibv_qp *tqp[THREADS];
static int gid;
static atomic_uint send_done, recv_done, resizes, churns;
static atomic_flag seen[THREADS][PER_THREAD];
static atomic_int finished;

#define COUNTER_OFF (THREADS * AREA)
#define RECV_OFF (COUNTER_OFF + 64)
#define TMEM_LEN (RECV_OFF + RSLOTS * SLOT)

static void post_one(struct requester *r, uint32_t seq)
{
	uint8_t *slot = r->buf + (seq % LSLOTS) * SLOT;
	uint32_t len = len_of(r->who, seq);
	struct ibv_sge sge = {.addr = (uintptr_t)slot, .length = len, .lkey = r->mr->lkey};
	struct ibv_send_wr wr = {.wr_id = wr_id_of(r->who, seq), .sg_list = &sge, .num_sge = 1,
				 .send_flags = IBV_SEND_SIGNALED};
	struct ibv_send_wr *bad = NULL;
	uint64_t area = (uintptr_t)tmem + r->who * AREA;

	switch (op_of(seq)) {
	case OP_SEND:
		fill(slot, r->who, seq, len);
		wr.opcode = IBV_WR_SEND;
		if (len <= 64)
			wr.send_flags |= IBV_SEND_INLINE;
		break;
	case OP_WRITE:
		fill(slot, r->who, seq, len);
		wr.opcode = IBV_WR_RDMA_WRITE;
		wr.wr.rdma.remote_addr = area + piece_of(seq);
		wr.wr.rdma.rkey = tmr->rkey;
		break;
	case OP_WRITE_IMM:
		fill(slot, r->who, seq, len);
		wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
		wr.imm_data = htobe32((uint32_t)r->who << 24 | seq);
		wr.wr.rdma.remote_addr = area + piece_of(seq);
		wr.wr.rdma.rkey = tmr->rkey;
		break;
	case OP_READ:
		/* Reads back what the WRITE two requests earlier placed. */
		sge.length = len_of(r->who, seq - 2);
		memset(slot, 0xee, SLOT);
		wr.opcode = IBV_WR_RDMA_READ;
		wr.wr.rdma.remote_addr = area + piece_of(seq - 2);
		wr.wr.rdma.rkey = tmr->rkey;
		break;
	case OP_FADD:
		sge.length = 8;
		memset(slot, 0xee, 8);
		wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
		wr.wr.atomic.remote_addr = (uintptr_t)tmem + COUNTER_OFF;
		wr.wr.atomic.compare_add = 1;
		wr.wr.atomic.rkey = tmr->rkey;
		break;
	default:
		abort();
	}
	REQUIRE(ibv_post_send(r->qp, &wr, &bad) == 0 && bad == NULL,
		"requester %d: ibv_post_send(seq %u)", r->who, seq);
}

static void *requester_main(void *arg)
{
	struct requester *r = arg;

	for (uint32_t seq = 0; seq < PER_THREAD; seq++) {
		/* At most WINDOW in flight; a slot is reused once the poller that took the
		 * completion of its previous request (LSLOTS before) has checked it. */
		while (seq - atomic_load(&r->completed) >= WINDOW ||
		       (seq >= LSLOTS && atomic_load(&r->slot_done[seq % LSLOTS]) != seq - LSLOTS + 1))
			before_deadline("a requester's window opens");
		post_one(r, seq);
	}
	return NULL;
}

static enum ibv_wc_opcode send_opcode(enum op op)
{
	static const enum ibv_wc_opcode of[OPS] = {IBV_WC_SEND, IBV_WC_RDMA_WRITE,
						   IBV_WC_RDMA_WRITE, IBV_WC_RDMA_READ,
						   IBV_WC_FETCH_ADD};
	return of[op];
}

/* Checks one send completion taken by a poller whose last sequence per requester is
 * `last`; hands the slot back to its requester. */
static void send_completion(const struct ibv_wc *wc, int64_t last[THREADS])
{
	int who = (int)(wc->wr_id >> 32);
	uint32_t seq = (uint32_t)wc->wr_id;
	struct requester *r;
	uint8_t *slot;

	REQUIRE(who >= 0 && who < THREADS && seq < PER_THREAD, "send wr_id %#llx is one posted",
		(unsigned long long)wc->wr_id);
	r = &req[who];
	slot = r->buf + (seq % LSLOTS) * SLOT;
	REQUIRE(wc->status == IBV_WC_SUCCESS, "requester %d seq %u: status %s", who, seq,
		ibv_wc_status_str(wc->status));
	REQUIRE(!atomic_flag_test_and_set(&seen[who][seq]),
		"requester %d seq %u completes once (taken by two polls)", who, seq);
	REQUIRE((int64_t)seq > last[who], "requester %d: seq %u after %lld, in the order posted",
		who, seq, (long long)last[who]);
	last[who] = seq;
	REQUIRE(wc->opcode == send_opcode(op_of(seq)) && wc->qp_num == r->qp->qp_num,
		"requester %d seq %u: opcode %d, qp_num %u", who, seq, wc->opcode, wc->qp_num);
	if (op_of(seq) == OP_READ)
		REQUIRE(matches(slot, who, seq - 2, len_of(who, seq - 2)),
			"requester %d: READ %u returns the bytes WRITE %u placed", who, seq,
			seq - 2);
	if (op_of(seq) == OP_FADD) {
		uint64_t v;

		memcpy(&v, slot, 8);
		r->originals[atomic_fetch_add(&r->fetched, 1)] = v;
	}
	atomic_store(&r->slot_done[seq % LSLOTS], seq + 1);
	atomic_fetch_add(&r->completed, 1);
	atomic_fetch_add(&send_done, 1);
}

static void *poller_main(void *arg)
{
	int64_t last[THREADS];
	struct ibv_wc wc[4];
	long taken = 0;

	(void)arg;
	for (int i = 0; i < THREADS; i++)
		last[i] = -1;
	while (atomic_load(&send_done) < THREADS * PER_THREAD) {
		int n = ibv_poll_cq(scq, 4, wc);

		REQUIRE(n >= 0, "ibv_poll_cq(send CQ) = %d", n);
		for (int i = 0; i < n; i++)
			send_completion(&wc[i], last);
		taken += n;
		before_deadline("every send completion");
	}
	printf("# a poller took %ld send completions\n", taken);
	return NULL;
}

/* Resizes the two CQs and the SRQ back to back while the traffic runs, between sizes
 * that still hold all they may have to: at most THREADS*WINDOW send completions, RSLOTS
 * receive completions, RSLOTS receives (ibv_modify_srq(3) may shrink an SRQ down to the
 * receives it holds). Each resize meets postings, polls and armings of the others. */
static void *resizer_main(void *arg)
{
	(void)arg;
	while (!atomic_load(&finished)) {
		int k = atomic_load(&resizes), e;

		e = ibv_resize_cq(scq, k % 2 ? THREADS * WINDOW + 8 : 4 * THREADS * WINDOW);
		REQUIRE(e == 0 && scq->cqe >= THREADS * WINDOW,
			"ibv_resize_cq(send CQ) while others post and poll (%s, cqe %d)", strerror(e),
			scq->cqe);
		e = ibv_resize_cq(rcq, k % 2 ? RSLOTS + 4 : 8 * RSLOTS);
		REQUIRE(e == 0 && rcq->cqe >= RSLOTS,
			"ibv_resize_cq(receive CQ) while others complete to it (%s, cqe %d)", strerror(e),
			rcq->cqe);
		{
			struct ibv_srq_attr a = {.max_wr = k % 2 ? RSLOTS : 4 * RSLOTS};

			REQUIRE(ibv_modify_srq(srq, &a, IBV_SRQ_MAX_WR) == 0,
				"ibv_modify_srq(IBV_SRQ_MAX_WR %u) while others take from it",
				a.max_wr);
		}
		atomic_fetch_add(&resizes, 1);
		before_deadline("a resize");
	}
	return NULL;
}

/* Creates and destroys objects while the traffic runs: each must work as alone. */
static void *churn_main(void *arg)
{
	uint8_t *mem = aligned_alloc(4096, 3 * 4096);

	(void)arg;
	REQUIRE(mem != NULL, "aligned_alloc");
	while (!atomic_load(&finished)) {
		struct ibv_pd *pd = ibv_alloc_pd(rctx);
		struct ibv_mr *mr;
		struct ibv_cq *cq;
		struct ibv_qp *qp;
		struct ibv_ah *ah;
		struct ibv_qp_init_attr init = {.send_cq = scq, .recv_cq = NULL,
						.cap = {.max_send_wr = 4, .max_recv_wr = 4,
							.max_send_sge = 1, .max_recv_sge = 1},
						.qp_type = IBV_QPT_RC};
		struct ibv_ah_attr aa = {.is_global = 1, .port_num = 1,
					 .grh = {.sgid_index = gid, .hop_limit = 64}};
		struct ibv_device_attr da;

		REQUIRE(pd != NULL, "churn: ibv_alloc_pd");
		mr = ibv_reg_mr(pd, mem + 4096, 4096, IBV_ACCESS_LOCAL_WRITE);
		REQUIRE(mr != NULL && mr->addr == mem + 4096, "churn: ibv_reg_mr");
		cq = ibv_create_cq(rctx, 8, NULL, NULL, 0);
		REQUIRE(cq != NULL, "churn: ibv_create_cq");
		init.recv_cq = cq;
		qp = ibv_create_qp(pd, &init);
		REQUIRE(qp != NULL && qp->send_cq == scq, "churn: ibv_create_qp on the shared CQ");
		REQUIRE(ibv_query_gid(rctx, 1, gid, &aa.grh.dgid) == 0, "churn: ibv_query_gid");
		ah = ibv_create_ah(pd, &aa);
		REQUIRE(ah != NULL, "churn: ibv_create_ah");
		REQUIRE(ibv_query_device(rctx, &da) == 0 && da.max_qp > 0, "churn: ibv_query_device");
		REQUIRE(ibv_destroy_ah(ah) == 0, "churn: ibv_destroy_ah");
		REQUIRE(ibv_destroy_qp(qp) == 0, "churn: ibv_destroy_qp");
		REQUIRE(ibv_destroy_cq(cq) == 0, "churn: ibv_destroy_cq");
		REQUIRE(ibv_dereg_mr(mr) == 0, "churn: ibv_dereg_mr");
		REQUIRE(ibv_dealloc_pd(pd) == 0, "churn: ibv_dealloc_pd");
		atomic_fetch_add(&churns, 1);
		before_deadline("a churn round");
	}
	free(mem);
	return NULL;
}

static void post_srq(uint32_t slot)
{
	struct ibv_sge sge = {.addr = (uintptr_t)tmem + RECV_OFF + slot * SLOT, .length = SLOT,
			      .lkey = tmr->lkey};
	struct ibv_recv_wr wr = {.wr_id = slot, .sg_list = &sge, .num_sge = 1};
	struct ibv_recv_wr *bad = NULL;

	memset(tmem + RECV_OFF + slot * SLOT, 0xdd, SLOT);
	REQUIRE(ibv_post_srq_recv(srq, &wr, &bad) == 0 && bad == NULL, "ibv_post_srq_recv(%u)",
		slot);
}

/* Checks one receive completion: from which requester, in its order, with its bytes or
 * immediate data; reposts the receive. `next` is each requester's next message. */
static void recv_completion(const struct ibv_wc *wc, uint32_t next[THREADS])
{
	int who = -1;
	uint32_t seq;
	uint8_t *slot = tmem + RECV_OFF + wc->wr_id * SLOT;

	REQUIRE(wc->status == IBV_WC_SUCCESS && wc->wr_id < RSLOTS,
		"receive %llu: status %s", (unsigned long long)wc->wr_id,
		ibv_wc_status_str(wc->status));
	/* src_qp is defined for UD only (ibv_poll_cq(3)): the QP that took it tells. */
	for (int i = 0; i < THREADS; i++)
		if (tqp[i]->qp_num == wc->qp_num)
			who = i;
	REQUIRE(who >= 0, "receive on qp %u: one of the responders", wc->qp_num);
	seq = next[who];
	REQUIRE(seq < PER_THREAD, "requester %d: no message beyond its last", who);
	if (op_of(seq) == OP_SEND) {
		REQUIRE(wc->opcode == IBV_WC_RECV && wc->byte_len == len_of(who, seq) &&
				matches(slot, who, seq, wc->byte_len),
			"requester %d: SEND %u takes its receive in order with its %u bytes (opcode %d, "
			"byte_len %u, slot from %d seq %u)",
			who, seq, len_of(who, seq), wc->opcode, wc->byte_len, slot[0],
			slot[1] | slot[2] << 8 | slot[3] << 16);
	} else {
		REQUIRE(wc->opcode == IBV_WC_RECV_RDMA_WITH_IMM && (wc->wc_flags & IBV_WC_WITH_IMM) &&
				be32toh(wc->imm_data) == ((uint32_t)who << 24 | seq),
			"requester %d: WRITE_WITH_IMM %u takes its receive in order (opcode %d, imm "
			"%#x)",
			who, seq, wc->opcode, be32toh(wc->imm_data));
	}
	/* The next message of this requester that takes a receive. */
	seq++;
	while (seq < PER_THREAD && op_of(seq) != OP_SEND && op_of(seq) != OP_WRITE_IMM)
		seq++;
	next[who] = seq;
	post_srq((uint32_t)wc->wr_id);
	atomic_fetch_add(&recv_done, 1);
}

/* Messages of one requester that take a receive. */
static unsigned receive_takers(void)
{
	unsigned n = 0;

	for (uint32_t s = 0; s < PER_THREAD; s++)
		n += op_of(s) == OP_SEND || op_of(s) == OP_WRITE_IMM;
	return n;
}

/* A channel wait that timed out fails; what it says tells a lost wake-up (the receive
 * CQ holds completions nobody was woken for) from traffic that stopped (the CQ is empty
 * and the requesters made no progress for another second). */
static void stalled_wait(int r, unsigned want)
{
	struct ibv_wc wc;
	unsigned sends = atomic_load(&send_done), res = atomic_load(&resizes);
	int queued = ibv_poll_cq(rcq, 1, &wc);
	struct timespec second = {.tv_sec = 1};

	nanosleep(&second, NULL);
	REQUIRE(0, "the completion channel wakes its waiter (poll = %d, %u of %u receives "
		   "completed, %u sends; then the receive CQ held %s; a second later %u sends "
		   "and %u resizes more)",
		r, atomic_load(&recv_done), want, sends,
		queued > 0 ? "a completion (a lost wake-up)" :
		queued == 0 ? "none (the traffic stopped)" : "an error",
		atomic_load(&send_done) - sends, atomic_load(&resizes) - res);
}

/* The main thread's part: waits on the channel, drains the receive CQ, reposts. */
static void receive_all(void)
{
	uint32_t next[THREADS] = {0};
	unsigned want = THREADS * receive_takers();
	unsigned events = 0, waits = 0;
	struct ibv_wc wc[8];

	REQUIRE(ibv_req_notify_cq(rcq, 0) == 0, "ibv_req_notify_cq");
	while (atomic_load(&recv_done) < want) {
		int n = ibv_poll_cq(rcq, 8, wc);

		REQUIRE(n >= 0, "ibv_poll_cq(receive CQ) = %d", n);
		for (int i = 0; i < n; i++)
			recv_completion(&wc[i], next);
		if (n > 0 || atomic_load(&recv_done) == want)
			continue;
		/* Empty: wait for the event the armed CQ owes, re-arm, poll again. */
		{
			struct pollfd p = {.fd = chan->fd, .events = POLLIN};
			struct ibv_cq *ev_cq;
			void *ev_ctx;
			int r = poll(&p, 1, 10000);

			waits++;
			if (r != 1)
				stalled_wait(r, want);
			REQUIRE(ibv_get_cq_event(chan, &ev_cq, &ev_ctx) == 0 && ev_cq == rcq,
				"ibv_get_cq_event names the receive CQ");
			ibv_ack_cq_events(rcq, 1);
			events++;
			REQUIRE(ibv_req_notify_cq(rcq, 0) == 0, "ibv_req_notify_cq");
		}
		before_deadline("every receive completion");
	}
	printf("# %u receive completions, %u channel waits, %u events\n", want, waits, events);
}

static void make_requesters(void)
{
	for (int i = 0; i < THREADS; i++) {
		struct ibv_qp_init_attr ri = {.send_cq = scq, .recv_cq = scq,
					      .cap = {.max_send_wr = 2 * WINDOW, .max_recv_wr = 1,
						      .max_send_sge = 1, .max_recv_sge = 1,
						      .max_inline_data = 64},
					      .qp_type = IBV_QPT_RC};
		struct ibv_qp_init_attr ti = {.send_cq = tscq, .recv_cq = rcq, .srq = srq,
					      .cap = {.max_send_wr = 1, .max_send_sge = 1},
					      .qp_type = IBV_QPT_RC};

		req[i].who = i;
		req[i].buf = aligned_alloc(4096, LSLOTS * SLOT);
		REQUIRE(req[i].buf != NULL, "aligned_alloc");
		req[i].mr = ibv_reg_mr(rpd, req[i].buf, LSLOTS * SLOT, ALL_ACCESS);
		REQUIRE(req[i].mr != NULL, "ibv_reg_mr(requester %d)", i);
		req[i].qp = ibv_create_qp(rpd, &ri);
		tqp[i] = ibv_create_qp(tpd, &ti);
		REQUIRE(req[i].qp != NULL && tqp[i] != NULL, "ibv_create_qp x2 (pair %d)", i);
		to_rts(req[i].qp, tqp[i]->qp_num, gid, ALL_ACCESS);
		to_rts(tqp[i], req[i].qp->qp_num, gid, ALL_ACCESS);
	}
}

int main(void)
{
	struct ibv_srq_init_attr si = {.attr = {.max_wr = RSLOTS, .max_sge = 1}};
	pthread_t rq[THREADS], pl[2], rs, ch;
	uint64_t counter;
	unsigned fadds = 0, in_place = 0;
	uint8_t *got;

	deadline = now() + DEADLINE_S;
	rctx = open_ctx();
	tctx = open_ctx();
	gid = loopback_gid_index(rctx);
	rpd = ibv_alloc_pd(rctx);
	tpd = ibv_alloc_pd(tctx);
	REQUIRE(rpd && tpd, "ibv_alloc_pd x2");
	scq = ibv_create_cq(rctx, THREADS * WINDOW + 8, NULL, NULL, 0);
	chan = ibv_create_comp_channel(tctx);
	REQUIRE(scq && chan, "send CQ, completion channel");
	rcq = ibv_create_cq(tctx, RSLOTS + 4, NULL, chan, 0);
	tscq = ibv_create_cq(tctx, 4, NULL, NULL, 0);
	srq = ibv_create_srq(tpd, &si);
	REQUIRE(rcq && tscq && srq, "receive CQ on the channel, SRQ");
	tmem = aligned_alloc(4096, (TMEM_LEN + 4095) / 4096 * 4096);
	REQUIRE(tmem != NULL, "aligned_alloc");
	memset(tmem, 0, TMEM_LEN);
	tmr = ibv_reg_mr(tpd, tmem, TMEM_LEN, ALL_ACCESS);
	REQUIRE(tmr != NULL, "ibv_reg_mr(target)");
	for (uint32_t s = 0; s < RSLOTS; s++)
		post_srq(s);
	make_requesters();

	REQUIRE(pthread_create(&rs, NULL, resizer_main, NULL) == 0 &&
			pthread_create(&ch, NULL, churn_main, NULL) == 0,
		"pthread_create (resizer, churn)");
	for (int i = 0; i < 2; i++)
		REQUIRE(pthread_create(&pl[i], NULL, poller_main, NULL) == 0, "pthread_create (poller)");
	for (int i = 0; i < THREADS; i++)
		REQUIRE(pthread_create(&rq[i], NULL, requester_main, &req[i]) == 0,
			"pthread_create (requester)");
	receive_all();
	for (int i = 0; i < THREADS; i++)
		pthread_join(rq[i], NULL);
	for (int i = 0; i < 2; i++)
		pthread_join(pl[i], NULL);
	atomic_store(&finished, 1);
	pthread_join(rs, NULL);
	pthread_join(ch, NULL);

	CHECK(atomic_load(&send_done) == THREADS * PER_THREAD,
	      "%d requester threads x %d work requests on one send CQ, polled by two threads: each "
	      "completed once, successfully, in its QP's order",
	      THREADS, PER_THREAD);
	CHECK(atomic_load(&recv_done) == THREADS * receive_takers(),
	      "%u SENDs and WRITE_WITH_IMMs took SRQ receives in each QP's order, with their bytes "
	      "and immediate data",
	      atomic_load(&recv_done));
	{
		struct ibv_wc wc;

		CHECK(ibv_poll_cq(scq, 1, &wc) == 0 && ibv_poll_cq(rcq, 1, &wc) == 0,
		      "no completion beyond those");
	}
	for (int i = 0; i < THREADS; i++)
		fadds += atomic_load(&req[i].fetched);
	memcpy(&counter, tmem + COUNTER_OFF, 8);
	got = calloc(fadds, 1);
	REQUIRE(got != NULL, "calloc");
	for (int i = 0; i < THREADS; i++)
		for (unsigned k = 0; k < atomic_load(&req[i].fetched); k++) {
			uint64_t v = req[i].originals[k];

			REQUIRE(v < fadds && !got[v], "FETCH_ADD original %llu is new and below %u",
				(unsigned long long)v, fadds);
			got[v] = 1;
		}
	CHECK(counter == fadds,
	      "%u FETCH_ADDs from %d threads on one counter: each added once (counter %llu) and "
	      "returned a distinct original",
	      fadds, THREADS, (unsigned long long)counter);
	for (int i = 0; i < THREADS; i++)
		for (enum op op = OP_WRITE; op <= OP_WRITE_IMM; op++) {
			uint32_t last = PER_THREAD - 1;

			while (op_of(last) != op)
				last--;
			in_place += matches(tmem + i * AREA + piece_of(last), i, last, len_of(i, last));
		}
	CHECK(in_place == 2 * THREADS,
	      "the last WRITE and WRITE_WITH_IMM of each requester left their bytes (%u of %d)",
	      in_place, 2 * THREADS);
	CHECK(atomic_load(&resizes) >= 10,
	      "both CQs and the SRQ resized %u times while threads posted, polled and completed",
	      atomic_load(&resizes));
	CHECK(atomic_load(&churns) >= 1,
	      "%u rounds of PD/MR/CQ/QP/AH create and destroy beside the traffic, each working",
	      atomic_load(&churns));

	for (int i = 0; i < THREADS; i++) {
		REQUIRE(ibv_destroy_qp(req[i].qp) == 0 && ibv_destroy_qp(tqp[i]) == 0, "ibv_destroy_qp");
		REQUIRE(ibv_dereg_mr(req[i].mr) == 0, "ibv_dereg_mr");
		free(req[i].buf);
	}
	REQUIRE(ibv_destroy_srq(srq) == 0 && ibv_dereg_mr(tmr) == 0, "ibv_destroy_srq, dereg");
	REQUIRE(ibv_destroy_cq(scq) == 0 && ibv_destroy_cq(rcq) == 0 && ibv_destroy_cq(tscq) == 0,
		"ibv_destroy_cq x3");
	REQUIRE(ibv_destroy_comp_channel(chan) == 0, "ibv_destroy_comp_channel");
	REQUIRE(ibv_dealloc_pd(rpd) == 0 && ibv_dealloc_pd(tpd) == 0, "ibv_dealloc_pd x2");
	REQUIRE(ibv_close_device(rctx) == 0 && ibv_close_device(tctx) == 0, "ibv_close_device x2");
	free(tmem);
	free(got);
	printf("# threads: all checks passed\n");
	return 0;
}
