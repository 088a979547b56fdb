/* One RC scenario set, run unchanged over both links of the one requester (issue 21):
 * tests/conformance/rc_rules.sh runs it as two processes of one host (the same-host link,
 * transport::host) and across two network namespaces (RoCEv2 over UDP, transport::net), and
 * diffs the transcripts; docs/queue-pairs.md, "One requester, two links".
 *
 *   rc_rules [-d dev] [-g gid index] [-p tcp port]            server: the responder side
 *   rc_rules [-d dev] [-g gid index] [-p tcp port] SERVER     client: the requester side
 *
 * Every scenario runs on a fresh RC QP pair with fresh CQs on both sides (an error state
 * does not leak into the next scenario); the memory region of each side is shared by all.
 * The client sends its QP number and PSN over TCP, the server connects, posts the receives
 * the scenario needs and answers with its QP number, PSN, rkey, address and GID; each step
 * after that is confirmed over TCP, so nothing depends on timing:
 *
 *  ordering        one ibv_post_send chain of 8 signaled WRs: SEND 3000 B, SEND_WITH_IMM
 *                  1500 B, RDMA_WRITE 6000 B, RDMA_WRITE_WITH_IMM 2000 B, RDMA_READ 5000 B,
 *                  FETCH_ADD, CMP_SWAP, SEND 1 B (larger than the 1024-byte path MTU, so the
 *                  network link segments them). The client's completions come in posting
 *                  order with their opcodes; the server's four receives in order (RECV,
 *                  RECV with immediate, RECV_RDMA_WITH_IMM, RECV); the bytes received and
 *                  written, the bytes read and the atomics' original values are checked.
 *  rnr0            a SEND to a server with no receive posted, client rnr_retry 0:
 *                  RNR_RETRY_EXC_ERR, and the SEND behind it WR_FLUSH_ERR.
 *  rnr-wait        rnr_retry 7 (retry forever, ibv_modify_qp(3)): the client posts a SEND,
 *                  says "sent" over TCP, and only then does the server post its receive;
 *                  the SEND succeeds. (On the same host the first attempt is RNR NAKed inside
 *                  ibv_post_send; across hosts the request may still be in flight: either
 *                  way the completions must be these.)
 *  write-rkey      RDMA WRITE with an rkey the server never registered: REM_ACCESS_ERR, the
 *                  next WR WR_FLUSH_ERR; the server's QP enters ERR and flushes its receive.
 *  read-bounds     RDMA READ of 64 B starting 8 B before the end of the server's region:
 *                  REM_ACCESS_ERR, then as write-rkey.
 *  send-too-large  SEND of 256 B into a 64-byte receive: REM_INV_REQ_ERR at the client,
 *                  LOC_LEN_ERR at the server (then its next receive is flushed).
 *  retry           the server moves its QP to ERR before it answers with its numbers; the
 *                  client (retry_cnt 2, timeout 10: 4.096 us * 2^10, about 4 ms) sends:
 *                  RETRY_EXC_ERR, then WR_FLUSH_ERR.
 *
 * Each side prints a transcript on stdout, one line per completion:
 *   <scenario> <side> wr_id=<n> status=<ibv_wc_status_str> [opcode=<n> byte_len=<n> [imm=0x..]]
 * (opcode, byte_len and imm only on success: ibv_poll_cq(3) says only wr_id, status, qp_num
 * and vendor_err are valid otherwise), and one line with the state of its QP at the end of
 * the scenario. Nothing timing- or link-dependent is printed: no QP numbers, no vendor_err
 * (on the same host it names the responder's rule, across hosts only the NAK code).
 * Checks that fail are named on stderr and the run goes on to the next scenario (so the
 * transcript is whole); at the end "rc_rules: all checks passed" on stderr and exit 0, or
 * "rc_rules: <side>: N failed checks" and exit 1. Every wait is bounded (completions 10 s).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <infiniband/verbs.h>
#include <netdb.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "lib/peer_io.h"

#define KIB 1024u
#define MR_LEN (64 * KIB)
/* Server layout: four receive slots, two WRITE targets, the READ source, the atomic word. */
#define SLOT(i) ((uint64_t)(i) * 4 * KIB)
#define WRITE_AT (16 * KIB)
#define WRITE_IMM_AT (24 * KIB)
#define READ_AT (32 * KIB)
#define WORD_AT (48 * KIB)
#define WORD_INIT 0x1000ull
/* Client layout: sources of the SENDs and WRITEs, the READ destination, atomic results. */
#define SRC(i) ((uint64_t)(i) * 4 * KIB)
#define DST_AT (32 * KIB)
#define RES_AT (48 * KIB)

#define IMM1 0x11111111u
#define IMM2 0x22222222u
#define MAX_WC 16
#define DEADLINE_S 10

static int failures;

/* A failed setup or exchange: the run cannot go on. */
#define CHECK(cond, what)                                                           \
	do {                                                                        \
		if (!(cond)) {                                                      \
			fprintf(stderr, "rc_rules: FAILED: %s (%s:%d, errno %d)\n", \
				what, __FILE__, __LINE__, errno);                   \
			return -1;                                                  \
		}                                                                   \
	} while (0)

/* A failed expectation: counted and named, the scenario goes on. */
#define EXPECT(cond, sc, what)                                                   \
	do {                                                                     \
		if (!(cond)) {                                                   \
			fprintf(stderr, "rc_rules: FAILED: %s: %s (%s:%d)\n", sc, \
				what, __FILE__, __LINE__);                       \
			failures++;                                              \
		}                                                                \
	} while (0)

struct wire {
	uint32_t qpn, psn, rkey;
	uint64_t addr;
	uint8_t gid[16];
};

struct side {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_mr *mr;
	uint8_t *buf;
	union ibv_gid gid;
	int gidx, sock;
	const char *name;
	/* The scenario's fresh QP and CQ. */
	struct ibv_cq *cq;
	struct ibv_qp *qp;
};

/* What one side expects of one completion: status, and on success opcode and byte_len. */
struct want {
	uint64_t wr_id;
	enum ibv_wc_status status;
	enum ibv_wc_opcode opcode;
	uint32_t byte_len;
	int with_imm;
	uint32_t imm;
};

static int send_byte(struct side *s, uint8_t b)
{
	CHECK(io_all(s->sock, &b, 1, 1) == 0, "TCP write");
	return 0;
}

static int recv_byte(struct side *s, uint8_t *b)
{
	CHECK(io_all(s->sock, b, 1, 0) == 0, "TCP read");
	return 0;
}

static const char *state_name(enum ibv_qp_state st)
{
	static const char *names[] = {"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"};

	return st <= IBV_QPS_ERR ? names[st] : "UNKNOWN";
}

/* Takes the n completions the scenario expects (within DEADLINE_S; fewer is a failure),
 * then polls once more for any extra one; prints every completion taken as a transcript
 * line and compares it with `want`; then prints the QP's state and compares it. */
static int collect(struct side *s, const char *sc, const struct want *want, int n,
		   enum ibv_qp_state want_state)
{
	struct ibv_wc wc[MAX_WC];
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qi;
	double end = now_s() + DEADLINE_S;
	int got = 0, r;

	while (got < n) {
		r = ibv_poll_cq(s->cq, n - got, wc + got);
		CHECK(r >= 0, "ibv_poll_cq");
		got += r;
		if (got == n || now_s() > end)
			break;
		if (r == 0)
			sched_yield();
	}
	r = ibv_poll_cq(s->cq, MAX_WC - got, wc + got);
	CHECK(r >= 0, "ibv_poll_cq");
	got += r;
	for (int i = 0; i < got; i++) {
		printf("%s %s wr_id=%llu status=%s", sc, s->name, (unsigned long long)wc[i].wr_id,
		       ibv_wc_status_str(wc[i].status));
		if (wc[i].status == IBV_WC_SUCCESS) {
			printf(" opcode=%d byte_len=%u", wc[i].opcode, wc[i].byte_len);
			if (wc[i].wc_flags & IBV_WC_WITH_IMM)
				printf(" imm=0x%08x", ntohl(wc[i].imm_data));
		}
		printf("\n");
		if (i >= n)
			continue;
		EXPECT(wc[i].wr_id == want[i].wr_id, sc, "wr_id (completions in posting order)");
		EXPECT(wc[i].qp_num == s->qp->qp_num, sc, "qp_num");
		EXPECT(wc[i].status == want[i].status, sc, "status");
		if (wc[i].status != IBV_WC_SUCCESS || want[i].status != IBV_WC_SUCCESS)
			continue;
		EXPECT(wc[i].opcode == want[i].opcode, sc, "opcode");
		EXPECT(wc[i].byte_len == want[i].byte_len, sc, "byte_len");
		EXPECT(!!(wc[i].wc_flags & IBV_WC_WITH_IMM) == want[i].with_imm, sc, "IBV_WC_WITH_IMM");
		EXPECT(!want[i].with_imm || ntohl(wc[i].imm_data) == want[i].imm, sc, "imm_data");
	}
	EXPECT(got >= n, sc, "every expected completion within 10 s");
	EXPECT(got <= n, sc, "no completion beyond the expected ones");
	CHECK(ibv_query_qp(s->qp, &qa, IBV_QP_STATE, &qi) == 0, "ibv_query_qp");
	printf("%s %s qp_state=%s\n", sc, s->name, state_name(qa.qp_state));
	fflush(stdout);
	EXPECT(qa.qp_state == want_state, sc, "the QP's state");
	return 0;
}

static int open_common(struct side *s, const char *dev)
{
	s->ctx = open_named_device(dev);
	CHECK(s->ctx != NULL, "opening the device");
	CHECK(ibv_query_gid(s->ctx, 1, s->gidx, &s->gid) == 0, "ibv_query_gid");
	s->pd = ibv_alloc_pd(s->ctx);
	CHECK(s->pd != NULL, "ibv_alloc_pd");
	s->buf = aligned_alloc(4096, MR_LEN);
	CHECK(s->buf != NULL, "aligned_alloc");
	memset(s->buf, 0, MR_LEN);
	s->mr = ibv_reg_mr(s->pd, s->buf, MR_LEN,
			   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
				   IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
	CHECK(s->mr != NULL, "ibv_reg_mr");
	return 0;
}

/* A fresh CQ and RC QP in INIT. */
static int fresh_qp(struct side *s)
{
	struct ibv_qp_init_attr qa = {.qp_type = IBV_QPT_RC,
				      .cap = {.max_send_wr = 16, .max_recv_wr = 16,
					      .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1, .pkey_index = 0,
				.qp_access_flags = IBV_ACCESS_REMOTE_WRITE |
						   IBV_ACCESS_REMOTE_READ |
						   IBV_ACCESS_REMOTE_ATOMIC};

	s->cq = ibv_create_cq(s->ctx, 32, NULL, NULL, 0);
	CHECK(s->cq != NULL, "ibv_create_cq");
	qa.send_cq = qa.recv_cq = s->cq;
	s->qp = ibv_create_qp(s->pd, &qa);
	CHECK(s->qp != NULL, "ibv_create_qp");
	CHECK(ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
				      IBV_QP_ACCESS_FLAGS) == 0,
	      "modify_qp to INIT");
	return 0;
}

static int drop_qp(struct side *s)
{
	CHECK(ibv_destroy_qp(s->qp) == 0, "ibv_destroy_qp");
	CHECK(ibv_destroy_cq(s->cq) == 0, "ibv_destroy_cq");
	s->qp = NULL;
	s->cq = NULL;
	return 0;
}

/* The client's retry budgets of a scenario (ibv_modify_qp(3)). */
struct budgets {
	uint8_t timeout, retry_cnt, rnr_retry;
};

/* RTR then RTS towards the peer; the server's responder has min_rnr_timer 1 (10 us). */
static int connect_qp(struct side *s, const struct wire *me, const struct wire *peer,
		      const struct budgets *b)
{
	struct ibv_qp_attr a = {0};

	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = peer->qpn;
	a.rq_psn = peer->psn;
	a.max_dest_rd_atomic = 16;
	a.min_rnr_timer = 1;
	a.ah_attr.is_global = 1;
	a.ah_attr.port_num = 1;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.grh.sgid_index = (uint8_t)s->gidx;
	memcpy(a.ah_attr.grh.dgid.raw, peer->gid, 16);
	CHECK(ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
				      IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
				      IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) == 0,
	      "modify_qp to RTR");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = b->timeout;
	a.retry_cnt = b->retry_cnt;
	a.rnr_retry = b->rnr_retry;
	a.sq_psn = me->psn;
	a.max_rd_atomic = 16;
	CHECK(ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
				      IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
				      IBV_QP_MAX_QP_RD_ATOMIC) == 0,
	      "modify_qp to RTS");
	return 0;
}

static int post_recv(struct side *s, uint64_t id, uint64_t at, uint32_t len)
{
	struct ibv_sge sge = {.addr = (uintptr_t)s->buf + at, .length = len, .lkey = s->mr->lkey};
	struct ibv_recv_wr wr = {.wr_id = id, .sg_list = &sge, .num_sge = 1}, *bad;

	CHECK(ibv_post_recv(s->qp, &wr, &bad) == 0, "ibv_post_recv");
	return 0;
}

/* One WR of a client chain. */
struct op {
	enum ibv_wr_opcode opcode;
	uint64_t local_at;
	uint32_t len;
	uint64_t remote_at;
	uint32_t rkey_xor; /* nonzero: an rkey the server never registered */
	uint32_t imm;
	uint64_t compare_add, swap;
};

/* Posts ops[0..n) as one chain (wr_id i + 1), every WR signaled. */
static int post_chain(struct side *s, const struct wire *peer, const struct op *ops, int n)
{
	struct ibv_sge sge[MAX_WC];
	struct ibv_send_wr wr[MAX_WC], *bad = NULL;

	memset(wr, 0, sizeof(wr));
	for (int i = 0; i < n; i++) {
		sge[i] = (struct ibv_sge){.addr = (uintptr_t)s->buf + ops[i].local_at,
					  .length = ops[i].len, .lkey = s->mr->lkey};
		wr[i].wr_id = (uint64_t)i + 1;
		wr[i].next = i + 1 < n ? &wr[i + 1] : NULL;
		wr[i].sg_list = &sge[i];
		wr[i].num_sge = 1;
		wr[i].opcode = ops[i].opcode;
		wr[i].send_flags = IBV_SEND_SIGNALED;
		wr[i].imm_data = htonl(ops[i].imm);
		if (ops[i].opcode == IBV_WR_ATOMIC_FETCH_AND_ADD ||
		    ops[i].opcode == IBV_WR_ATOMIC_CMP_AND_SWP) {
			wr[i].wr.atomic.remote_addr = peer->addr + ops[i].remote_at;
			wr[i].wr.atomic.rkey = peer->rkey ^ ops[i].rkey_xor;
			wr[i].wr.atomic.compare_add = ops[i].compare_add;
			wr[i].wr.atomic.swap = ops[i].swap;
		} else {
			wr[i].wr.rdma.remote_addr = peer->addr + ops[i].remote_at;
			wr[i].wr.rdma.rkey = peer->rkey ^ ops[i].rkey_xor;
		}
	}
	CHECK(ibv_post_send(s->qp, wr, &bad) == 0, "ibv_post_send");
	return 0;
}

enum scenario { ORDERING, RNR0, RNR_WAIT, WRITE_RKEY, READ_BOUNDS, SEND_TOO_LARGE, RETRY, N_SC };
static const char *const SC_NAME[N_SC] = {"ordering", "rnr0", "rnr-wait", "write-rkey",
					  "read-bounds", "send-too-large", "retry"};

/* The server's side of one scenario. */
static int server_scenario(struct side *s, enum scenario sc)
{
	const char *name = SC_NAME[sc];
	struct wire me = {0}, peer;
	struct budgets none = {14, 7, 7};
	struct want w[4];
	int n = 0;
	enum ibv_qp_state st = IBV_QPS_ERR;
	uint8_t b;
	int before = failures;

	memset(s->buf, 0, MR_LEN);
	fill(s->buf + READ_AT, 8 * KIB, 5);
	memcpy(s->buf + WORD_AT, &(uint64_t){WORD_INIT}, 8);
	if (fresh_qp(s))
		return -1;
	CHECK(io_all(s->sock, &peer, sizeof(peer), 0) == 0, "TCP read");
	me.qpn = s->qp->qp_num;
	me.psn = 0x4321 + (uint32_t)sc;
	me.rkey = s->mr->rkey;
	me.addr = (uintptr_t)s->buf;
	memcpy(me.gid, s->gid.raw, 16);
	if (connect_qp(s, &me, &peer, &none))
		return -1;
	switch (sc) {
	case ORDERING:
		for (int i = 0; i < 4; i++)
			if (post_recv(s, 100 + (uint64_t)i, SLOT(i), 4 * KIB))
				return -1;
		w[0] = (struct want){100, IBV_WC_SUCCESS, IBV_WC_RECV, 3000, 0, 0};
		w[1] = (struct want){101, IBV_WC_SUCCESS, IBV_WC_RECV, 1500, 1, IMM1};
		w[2] = (struct want){102, IBV_WC_SUCCESS, IBV_WC_RECV_RDMA_WITH_IMM, 2000, 1, IMM2};
		w[3] = (struct want){103, IBV_WC_SUCCESS, IBV_WC_RECV, 1, 0, 0};
		n = 4;
		st = IBV_QPS_RTS;
		break;
	case RNR0:
		st = IBV_QPS_RTS;
		break;
	case RNR_WAIT:
		w[0] = (struct want){100, IBV_WC_SUCCESS, IBV_WC_RECV, 512, 0, 0};
		n = 1;
		st = IBV_QPS_RTS;
		break;
	case WRITE_RKEY:
	case READ_BOUNDS:
		if (post_recv(s, 100, SLOT(0), 4 * KIB))
			return -1;
		w[0] = (struct want){100, IBV_WC_WR_FLUSH_ERR, 0, 0, 0, 0};
		n = 1;
		break;
	case SEND_TOO_LARGE:
		if (post_recv(s, 100, SLOT(0), 64) || post_recv(s, 101, SLOT(1), 64))
			return -1;
		w[0] = (struct want){100, IBV_WC_LOC_LEN_ERR, 0, 0, 0, 0};
		w[1] = (struct want){101, IBV_WC_WR_FLUSH_ERR, 0, 0, 0, 0};
		n = 2;
		break;
	case RETRY: {
		/* The QP goes to ERR before the server answers: its answer says so. */
		struct ibv_qp_attr a = {.qp_state = IBV_QPS_ERR};

		if (post_recv(s, 100, SLOT(0), 4 * KIB))
			return -1;
		CHECK(ibv_modify_qp(s->qp, &a, IBV_QP_STATE) == 0, "modify_qp to ERR");
		w[0] = (struct want){100, IBV_WC_WR_FLUSH_ERR, 0, 0, 0, 0};
		n = 1;
		break;
	}
	default:
		break;
	}
	CHECK(io_all(s->sock, &me, sizeof(me), 1) == 0, "TCP write");
	if (sc == RNR_WAIT) {
		/* The receive only after the client has posted its SEND. */
		if (recv_byte(s, &b))
			return -1;
		CHECK(b == 's', "the client's \"sent\"");
		if (post_recv(s, 100, SLOT(0), 4 * KIB))
			return -1;
	}
	/* The client's completions are in: take ours. */
	if (recv_byte(s, &b))
		return -1;
	CHECK(b == 'd', "the client's \"done\"");
	if (collect(s, name, w, n, st))
		return -1;
	switch (sc) {
	case ORDERING: {
		uint64_t word;

		memcpy(&word, s->buf + WORD_AT, 8);
		EXPECT(same(s->buf + SLOT(0), 3000, 1), name, "the SEND's bytes");
		EXPECT(same(s->buf + SLOT(1), 1500, 2), name, "the SEND_WITH_IMM's bytes");
		EXPECT(same(s->buf + WRITE_AT, 6000, 3), name, "the RDMA WRITE's bytes");
		EXPECT(same(s->buf + WRITE_IMM_AT, 2000, 4), name, "the RDMA_WRITE_WITH_IMM's bytes");
		EXPECT(same(s->buf + SLOT(3), 1, 6), name, "the last SEND's byte");
		EXPECT(word == 0xabc, name, "the word after FETCH_ADD and CMP_SWAP");
		break;
	}
	case RNR_WAIT:
		EXPECT(same(s->buf + SLOT(0), 512, 7), name, "the SEND's bytes");
		break;
	case WRITE_RKEY:
		for (uint32_t i = 0; i < MR_LEN; i++)
			if (i < WORD_AT && (i < READ_AT || i >= READ_AT + 8 * KIB) && s->buf[i]) {
				EXPECT(0, name, "nothing written by the refused WRITE or the flushed SEND");
				break;
			}
		break;
	default:
		break;
	}
	if (drop_qp(s))
		return -1;
	return send_byte(s, failures == before ? 1 : 0);
}

/* The client's side of one scenario. */
static int client_scenario(struct side *s, enum scenario sc)
{
	const char *name = SC_NAME[sc];
	struct wire me = {0}, peer;
	struct budgets bud = {14, 7, 7};
	struct op ops[8];
	struct want w[8];
	int n = 2;
	uint8_t b;

	memset(s->buf, 0, MR_LEN);
	if (fresh_qp(s))
		return -1;
	me.qpn = s->qp->qp_num;
	me.psn = 0x1234 + (uint32_t)sc;
	memcpy(me.gid, s->gid.raw, 16);
	CHECK(io_all(s->sock, &me, sizeof(me), 1) == 0, "TCP write");
	CHECK(io_all(s->sock, &peer, sizeof(peer), 0) == 0, "TCP read");
	memset(ops, 0, sizeof(ops));
	/* Most scenarios: one WR that fails, then a SEND of 64 B that is flushed. */
	ops[1] = (struct op){.opcode = IBV_WR_SEND, .local_at = SRC(1), .len = 64};
	w[1] = (struct want){2, IBV_WC_WR_FLUSH_ERR, 0, 0, 0, 0};
	switch (sc) {
	case ORDERING:
		fill(s->buf + SRC(0), 3000, 1);
		fill(s->buf + SRC(1), 1500, 2);
		fill(s->buf + SRC(2), 6000, 3);
		fill(s->buf + SRC(4), 2000, 4);
		fill(s->buf + SRC(5), 1, 6);
		ops[0] = (struct op){IBV_WR_SEND, SRC(0), 3000, 0, 0, 0, 0, 0};
		ops[1] = (struct op){IBV_WR_SEND_WITH_IMM, SRC(1), 1500, 0, 0, IMM1, 0, 0};
		ops[2] = (struct op){IBV_WR_RDMA_WRITE, SRC(2), 6000, WRITE_AT, 0, 0, 0, 0};
		ops[3] = (struct op){IBV_WR_RDMA_WRITE_WITH_IMM, SRC(4), 2000, WRITE_IMM_AT, 0, IMM2, 0, 0};
		ops[4] = (struct op){IBV_WR_RDMA_READ, DST_AT, 5000, READ_AT, 0, 0, 0, 0};
		ops[5] = (struct op){IBV_WR_ATOMIC_FETCH_AND_ADD, RES_AT, 8, WORD_AT, 0, 0, 5, 0};
		ops[6] = (struct op){IBV_WR_ATOMIC_CMP_AND_SWP, RES_AT + 8, 8, WORD_AT, 0, 0,
				     WORD_INIT + 5, 0xabc};
		ops[7] = (struct op){IBV_WR_SEND, SRC(5), 1, 0, 0, 0, 0, 0};
		w[0] = (struct want){1, IBV_WC_SUCCESS, IBV_WC_SEND, 3000, 0, 0};
		w[1] = (struct want){2, IBV_WC_SUCCESS, IBV_WC_SEND, 1500, 0, 0};
		w[2] = (struct want){3, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, 6000, 0, 0};
		w[3] = (struct want){4, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, 2000, 0, 0};
		w[4] = (struct want){5, IBV_WC_SUCCESS, IBV_WC_RDMA_READ, 5000, 0, 0};
		w[5] = (struct want){6, IBV_WC_SUCCESS, IBV_WC_FETCH_ADD, 8, 0, 0};
		w[6] = (struct want){7, IBV_WC_SUCCESS, IBV_WC_COMP_SWAP, 8, 0, 0};
		w[7] = (struct want){8, IBV_WC_SUCCESS, IBV_WC_SEND, 1, 0, 0};
		n = 8;
		break;
	case RNR0:
		bud.rnr_retry = 0;
		ops[0] = (struct op){.opcode = IBV_WR_SEND, .local_at = SRC(0), .len = 64};
		w[0] = (struct want){1, IBV_WC_RNR_RETRY_EXC_ERR, 0, 0, 0, 0};
		break;
	case RNR_WAIT:
		fill(s->buf + SRC(0), 512, 7);
		ops[0] = (struct op){.opcode = IBV_WR_SEND, .local_at = SRC(0), .len = 512};
		w[0] = (struct want){1, IBV_WC_SUCCESS, IBV_WC_SEND, 512, 0, 0};
		n = 1;
		break;
	case WRITE_RKEY:
		fill(s->buf + SRC(0), 256, 8);
		ops[0] = (struct op){IBV_WR_RDMA_WRITE, SRC(0), 256, WRITE_AT, 0x00ffff00, 0, 0, 0};
		w[0] = (struct want){1, IBV_WC_REM_ACCESS_ERR, 0, 0, 0, 0};
		break;
	case READ_BOUNDS:
		ops[0] = (struct op){IBV_WR_RDMA_READ, DST_AT, 64, MR_LEN - 8, 0, 0, 0, 0};
		w[0] = (struct want){1, IBV_WC_REM_ACCESS_ERR, 0, 0, 0, 0};
		break;
	case SEND_TOO_LARGE:
		ops[0] = (struct op){.opcode = IBV_WR_SEND, .local_at = SRC(0), .len = 256};
		w[0] = (struct want){1, IBV_WC_REM_INV_REQ_ERR, 0, 0, 0, 0};
		break;
	case RETRY:
		bud.timeout = 10;
		bud.retry_cnt = 2;
		ops[0] = (struct op){.opcode = IBV_WR_SEND, .local_at = SRC(0), .len = 64};
		w[0] = (struct want){1, IBV_WC_RETRY_EXC_ERR, 0, 0, 0, 0};
		break;
	default:
		break;
	}
	if (connect_qp(s, &me, &peer, &bud) || post_chain(s, &peer, ops, n))
		return -1;
	if (sc == RNR_WAIT && send_byte(s, 's'))
		return -1;
	if (collect(s, name, w, n, sc == ORDERING || sc == RNR_WAIT ? IBV_QPS_RTS : IBV_QPS_ERR))
		return -1;
	if (sc == ORDERING) {
		uint64_t v[2];

		memcpy(v, s->buf + RES_AT, 16);
		EXPECT(same(s->buf + DST_AT, 5000, 5), name, "the RDMA READ's bytes");
		EXPECT(v[0] == WORD_INIT, name, "FETCH_ADD returns the original value");
		EXPECT(v[1] == WORD_INIT + 5, name, "CMP_SWAP returns the original value");
	}
	if (sc == READ_BOUNDS)
		for (uint32_t i = 0; i < 64; i++)
			if (s->buf[DST_AT + i]) {
				EXPECT(0, name, "nothing placed by the refused READ");
				break;
			}
	if (drop_qp(s) || send_byte(s, 'd') || recv_byte(s, &b))
		return -1;
	EXPECT(b == 1, name, "the server's checks (its stderr names them)");
	return 0;
}

int main(int argc, char **argv)
{
	struct side s = {.gidx = 1, .sock = -1};
	const char *dev = NULL;
	int port = 18700, c, is_client;

	while ((c = getopt(argc, argv, "d:g:p:")) != -1) {
		switch (c) {
		case 'd': dev = optarg; break;
		case 'g': s.gidx = atoi(optarg); break;
		case 'p': port = atoi(optarg); break;
		default:
			fprintf(stderr, "usage: %s [-d dev] [-g gid] [-p port] [server]\n", argv[0]);
			return 2;
		}
	}
	is_client = optind < argc;
	s.name = is_client ? "client" : "server";
	if (open_common(&s, dev))
		return 1;
	if (is_client) {
		for (int i = 0; i < 50 && (s.sock = tcp_connect(argv[optind], port)) < 0; i++)
			usleep(100 * 1000);
	} else {
		s.sock = tcp_accept(port);
	}
	if (s.sock < 0) {
		fprintf(stderr, "rc_rules: FAILED: TCP %s\n", is_client ? "connect" : "accept");
		return 1;
	}
	{
		struct timeval tv = {.tv_sec = 60};

		/* A peer that stopped answering ends the run instead of hanging it. */
		setsockopt(s.sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	}
	for (int sc = 0; sc < N_SC; sc++)
		if (is_client ? client_scenario(&s, sc) : server_scenario(&s, sc)) {
			fprintf(stderr, "rc_rules: %s: stopped in scenario %s\n", s.name, SC_NAME[sc]);
			return 1;
		}
	if (failures) {
		fprintf(stderr, "rc_rules: %s: %d failed check%s\n", s.name, failures,
			failures == 1 ? "" : "s");
		return 1;
	}
	fprintf(stderr, "rc_rules: all checks passed\n");
	return 0;
}
