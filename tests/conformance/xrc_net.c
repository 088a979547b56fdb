/* XRC between two hosts, every byte checked (tests/conformance/xrc_netns.sh runs it in two
 * network namespaces on rverbs' drop-in; docs/rocev2-wire.md §1.8).
 *
 *   xrc_net [-d dev] [-g gid index] [-p tcp port] [-e]            server: XRC targets
 *   xrc_net [-d dev] [-g gid index] [-p tcp port] [-e] SERVER      client: XRC initiator
 *
 * The server opens two private XRC domains (ibv_open_xrcd(3), fd -1): in the first an
 * XRC SRQ, whose CQ is the one it polls, and the XRC_RECV QP; in the second a "foreign"
 * SRQ with its own CQ. The client's XRC_SEND QP connects to the XRC_RECV QP
 * (ibv_create_qp_ex(3), ibv_modify_qp(3)); the numbers, keys and GIDs cross a TCP socket.
 * Then, each phase confirmed over TCP:
 *  1. SENDs of 1, 4096 and 65536 bytes and a SEND with immediate naming the SRQ
 *     (wr.qp_type.xrc.remote_srqn, ibv_post_send(3)): the server's receives complete on the
 *     SRQ's CQ in order, with the target QP's number, the length, the immediate, and the
 *     bytes sent;
 *  2. an RDMA WRITE of 64 KiB (checked by the server), an RDMA READ of 64 KiB (the server's
 *     pattern), FETCH_ADD and CMP_SWAP (their original values) and a READ of the word after;
 *  3. a SEND naming the foreign SRQ: the target NAKs invalid request, so the client's
 *     completion is IBV_WC_REM_INV_REQ_ERR; the server's target QP is then in ERR and the
 *     foreign SRQ's receive was not taken (its CQ stays empty).
 * -e waits on completion channels (ibv_get_cq_event(3)) instead of polling. Prints
 * "xrc_net: all checks passed" and exits 0, or names the first failed check and exits 1.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <infiniband/verbs.h>
#include <netdb.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "lib/peer_io.h"

#define KIB 1024u
#define BIG (64 * KIB)
#define MR_LEN (512 * KIB)
/* Server layout: four receive slots, the WRITE target, the READ source, the atomic word. */
#define RECV_AT(i) ((uint64_t)(i) * BIG)
#define WRITE_AT (4 * BIG)
#define READ_AT (5 * BIG)
#define WORD_AT (6 * BIG)
#define WORD_INIT 0x1000ull
/* Client layout: the SEND/WRITE source, the READ destination, the atomic results. */
#define SRC_AT 0
#define DST_AT BIG
#define RES_AT (2 * BIG)

static const char *failed_check;

#define CHECK(cond, what)                                                        \
	do {                                                                     \
		if (!(cond)) {                                                   \
			fprintf(stderr, "xrc_net: FAILED: %s (%s:%d, errno %d)\n", \
				what, __FILE__, __LINE__, errno);                \
			failed_check = what;                                     \
			return -1;                                               \
		}                                                                \
	} while (0)

struct wire {
	uint32_t qpn, psn, srqn, foreign_srqn, rkey;
	uint64_t addr;
	uint8_t gid[16];
};

struct side {
	struct ibv_context *ctx;
	struct ibv_comp_channel *ch;
	struct ibv_pd *pd;
	struct ibv_cq *cq, *foreign_cq;
	struct ibv_mr *mr;
	uint8_t *buf;
	struct ibv_xrcd *xrcd, *foreign_xrcd;
	struct ibv_srq *srq, *foreign_srq;
	struct ibv_qp *qp;
	union ibv_gid gid;
	int gidx, events, sock;
};

/* The client's end of a phase: its work is done and checked (1); then the server's
 * verdict on what it received. */
static int sync_phase(struct side *s, uint8_t mine)
{
	uint8_t theirs = 0;

	CHECK(io_all(s->sock, &mine, 1, 1) == 0, "TCP write");
	CHECK(io_all(s->sock, &theirs, 1, 0) == 0, "TCP read");
	CHECK(theirs == 1, "the server's checks of this phase");
	return 0;
}

/* The server's end of a phase: waits until the client has finished it. */
static int await_client(struct side *s)
{
	uint8_t theirs = 0;

	CHECK(io_all(s->sock, &theirs, 1, 0) == 0, "TCP read");
	CHECK(theirs == 1, "the client's checks of this phase");
	return 0;
}

/* The server's verdict on a phase, sent to the client. */
static int reply(struct side *s, int ok)
{
	uint8_t b = ok ? 1 : 0;

	CHECK(io_all(s->sock, &b, 1, 1) == 0, "TCP write");
	return 0;
}

/* Takes exactly n completions from cq within 20 s, polling or (-e) on its channel. */
static int wait_cq(struct side *s, struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
	double end = now_s() + 20;
	int got = 0;

	while (got < n) {
		int r = ibv_poll_cq(cq, n - got, wc + got);

		CHECK(r >= 0, "ibv_poll_cq");
		got += r;
		if (got == n)
			break;
		CHECK(now_s() < end, "completions within 20 s");
		if (s->events && r == 0) {
			struct ibv_cq *ev_cq;
			void *ev_ctx;

			CHECK(ibv_req_notify_cq(cq, 0) == 0, "ibv_req_notify_cq");
			r = ibv_poll_cq(cq, n - got, wc + got);
			CHECK(r >= 0, "ibv_poll_cq");
			got += r;
			if (r > 0)
				continue;
			CHECK(ibv_get_cq_event(s->ch, &ev_cq, &ev_ctx) == 0, "ibv_get_cq_event");
			CHECK(ev_cq == cq, "the event names the CQ");
			ibv_ack_cq_events(ev_cq, 1);
		}
	}
	return 0;
}

static int open_common(struct side *s, const char *dev)
{
	s->ctx = open_named_device(dev);
	CHECK(s->ctx != NULL, "opening the device");
	CHECK(ibv_query_gid(s->ctx, 1, s->gidx, &s->gid) == 0, "ibv_query_gid");
	if (s->events) {
		s->ch = ibv_create_comp_channel(s->ctx);
		CHECK(s->ch != NULL, "ibv_create_comp_channel");
	}
	s->pd = ibv_alloc_pd(s->ctx);
	CHECK(s->pd != NULL, "ibv_alloc_pd");
	s->cq = ibv_create_cq(s->ctx, 64, NULL, s->ch, 0);
	CHECK(s->cq != NULL, "ibv_create_cq");
	s->buf = aligned_alloc(4096, MR_LEN);
	CHECK(s->buf != NULL, "aligned_alloc");
	memset(s->buf, 0, MR_LEN);
	s->mr = ibv_reg_mr(s->pd, s->buf, MR_LEN,
			   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
				   IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
	CHECK(s->mr != NULL, "ibv_reg_mr");
	return 0;
}

static struct ibv_xrcd *private_xrcd(struct side *s)
{
	struct ibv_xrcd_init_attr a = {.comp_mask = IBV_XRCD_INIT_ATTR_FD |
						    IBV_XRCD_INIT_ATTR_OFLAGS,
				       .fd = -1, .oflags = 0};

	return ibv_open_xrcd(s->ctx, &a);
}

static struct ibv_srq *xrc_srq(struct side *s, struct ibv_xrcd *x, struct ibv_cq *cq)
{
	struct ibv_srq_init_attr_ex a = {
		.attr = {.max_wr = 16, .max_sge = 1},
		.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_XRCD |
			     IBV_SRQ_INIT_ATTR_CQ | IBV_SRQ_INIT_ATTR_PD,
		.srq_type = IBV_SRQT_XRC,
		.pd = s->pd,
		.xrcd = x,
		.cq = cq,
	};

	return ibv_create_srq_ex(s->ctx, &a);
}

static int post_recv(struct ibv_srq *srq, struct side *s, uint64_t at, uint32_t len, uint64_t id)
{
	struct ibv_sge sge = {.addr = (uintptr_t)s->buf + at, .length = len, .lkey = s->mr->lkey};
	struct ibv_recv_wr wr = {.wr_id = id, .sg_list = &sge, .num_sge = 1}, *bad;

	CHECK(ibv_post_srq_recv(srq, &wr, &bad) == 0, "ibv_post_srq_recv");
	return 0;
}

static int connect_qp(struct side *s, const struct wire *peer, int target)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1, .pkey_index = 0,
				.qp_access_flags = IBV_ACCESS_REMOTE_WRITE |
						   IBV_ACCESS_REMOTE_READ |
						   IBV_ACCESS_REMOTE_ATOMIC};

	CHECK(ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
				      IBV_QP_ACCESS_FLAGS) == 0,
	      "modify_qp to INIT");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = peer->qpn;
	a.rq_psn = peer->psn;
	a.max_dest_rd_atomic = 16;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.port_num = 1;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.grh.sgid_index = (uint8_t)s->gidx;
	memcpy(a.ah_attr.grh.dgid.raw, peer->gid, 16);
	int mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;

	if (target)
		mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
	CHECK(ibv_modify_qp(s->qp, &a, mask) == 0, "modify_qp to RTR");
	if (target)
		return 0;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = 0x1234;
	a.max_rd_atomic = 16;
	CHECK(ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
				      IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
				      IBV_QP_MAX_QP_RD_ATOMIC) == 0,
	      "modify_qp to RTS");
	return 0;
}

static const uint32_t SIZES[] = {1, 4096, BIG};
#define IMM_LEN 100u
#define IMM 0x12345678u

static int server(struct side *s, int port)
{
	struct ibv_qp_init_attr_ex qa = {.qp_type = IBV_QPT_XRC_RECV,
					 .comp_mask = IBV_QP_INIT_ATTR_XRCD};
	struct wire me = {0}, peer;
	struct ibv_wc wc[8];
	struct ibv_qp_attr qattr;
	struct ibv_qp_init_attr qinit;
	uint64_t word;

	s->xrcd = private_xrcd(s);
	s->foreign_xrcd = private_xrcd(s);
	CHECK(s->xrcd && s->foreign_xrcd, "ibv_open_xrcd (fd -1)");
	s->foreign_cq = ibv_create_cq(s->ctx, 4, NULL, NULL, 0);
	CHECK(s->foreign_cq != NULL, "ibv_create_cq (foreign)");
	s->srq = xrc_srq(s, s->xrcd, s->cq);
	s->foreign_srq = xrc_srq(s, s->foreign_xrcd, s->foreign_cq);
	CHECK(s->srq && s->foreign_srq, "ibv_create_srq_ex (XRC)");
	qa.xrcd = s->xrcd;
	s->qp = ibv_create_qp_ex(s->ctx, &qa);
	CHECK(s->qp != NULL, "ibv_create_qp_ex (XRC_RECV)");
	CHECK(ibv_get_srq_num(s->srq, &me.srqn) == 0, "ibv_get_srq_num");
	CHECK(ibv_get_srq_num(s->foreign_srq, &me.foreign_srqn) == 0, "ibv_get_srq_num");
	for (int i = 0; i < 4; i++)
		if (post_recv(s->srq, s, RECV_AT(i), BIG, 100 + (uint64_t)i))
			return -1;
	if (post_recv(s->foreign_srq, s, RECV_AT(3), 64, 200))
		return -1;
	fill(s->buf + READ_AT, BIG, 5);
	memcpy(s->buf + WORD_AT, &(uint64_t){WORD_INIT}, 8);
	me.qpn = s->qp->qp_num;
	me.psn = 0x4321;
	me.rkey = s->mr->rkey;
	me.addr = (uintptr_t)s->buf;
	memcpy(me.gid, s->gid.raw, 16);

	printf("xrc_net: srqn %06x foreign %06x\n", me.srqn, me.foreign_srqn);
	fflush(stdout);
	s->sock = tcp_accept(port);
	CHECK(s->sock >= 0, "TCP accept");
	CHECK(io_all(s->sock, &peer, sizeof(peer), 0) == 0, "TCP read");
	if (connect_qp(s, &peer, 1))
		return -1;
	CHECK(io_all(s->sock, &me, sizeof(me), 1) == 0, "TCP write");

	/* 1. Three SENDs and a SEND with immediate, in order, on the SRQ's CQ. */
	if (await_client(s) || wait_cq(s, s->cq, 4, wc))
		return -1;
	for (int i = 0; i < 4; i++) {
		uint32_t len = i < 3 ? SIZES[i] : IMM_LEN;

		CHECK(wc[i].status == IBV_WC_SUCCESS, "receive completes with success");
		CHECK(wc[i].wr_id == 100 + (uint64_t)i, "receives complete in order");
		CHECK(wc[i].opcode == IBV_WC_RECV, "IBV_WC_RECV");
		CHECK(wc[i].qp_num == s->qp->qp_num, "wc.qp_num is the XRC target QP");
		CHECK(wc[i].byte_len == len, "wc.byte_len is the message length");
		CHECK(same(s->buf + RECV_AT(i), len, (uint32_t)i + 1), "the bytes received");
		CHECK(!!(wc[i].wc_flags & IBV_WC_WITH_IMM) == (i == 3), "IBV_WC_WITH_IMM");
		CHECK(i < 3 || ntohl(wc[i].imm_data) == IMM, "the immediate data");
	}
	CHECK(ibv_poll_cq(s->cq, 1, wc) == 0, "no fifth receive completion");
	if (reply(s, 1))
		return -1;

	/* 2. The WRITE's bytes and the atomics' result (the client checked READ and originals). */
	if (await_client(s))
		return -1;
	memcpy(&word, s->buf + WORD_AT, 8);
	CHECK(same(s->buf + WRITE_AT, BIG, 9), "the RDMA WRITE's bytes");
	CHECK(word == 0xabc, "the word after FETCH_ADD and CMP_SWAP");
	if (reply(s, 1))
		return -1;

	/* 3. The SEND to the foreign SRQ was refused: the target QP is in ERR, nothing taken. */
	if (await_client(s))
		return -1;
	CHECK(ibv_query_qp(s->qp, &qattr, IBV_QP_STATE, &qinit) == 0, "ibv_query_qp");
	CHECK(qattr.qp_state == IBV_QPS_ERR, "the target QP is in ERR after the invalid request");
	CHECK(ibv_poll_cq(s->foreign_cq, 1, wc) == 0, "the foreign SRQ's receive was not taken");
	return reply(s, 1);
}

static int post_send(struct side *s, const struct wire *peer, enum ibv_wr_opcode op,
		     uint64_t local_at, uint32_t len, uint64_t remote_at, uint32_t srqn,
		     uint64_t compare_add, uint64_t swap)
{
	struct ibv_sge sge = {.addr = (uintptr_t)s->buf + local_at, .length = len,
			      .lkey = s->mr->lkey};
	struct ibv_send_wr wr = {.wr_id = op, .sg_list = &sge, .num_sge = 1, .opcode = op,
				 .send_flags = IBV_SEND_SIGNALED},
			   *bad;

	wr.qp_type.xrc.remote_srqn = srqn;
	if (op == IBV_WR_SEND_WITH_IMM)
		wr.imm_data = htonl(IMM);
	if (op == IBV_WR_ATOMIC_FETCH_AND_ADD || op == IBV_WR_ATOMIC_CMP_AND_SWP) {
		wr.wr.atomic.remote_addr = peer->addr + remote_at;
		wr.wr.atomic.rkey = peer->rkey;
		wr.wr.atomic.compare_add = compare_add;
		wr.wr.atomic.swap = swap;
	} else {
		wr.wr.rdma.remote_addr = peer->addr + remote_at;
		wr.wr.rdma.rkey = peer->rkey;
	}
	CHECK(ibv_post_send(s->qp, &wr, &bad) == 0, "ibv_post_send");
	return 0;
}

/* Posts one work request and waits for its completion, which must have `status`. */
static int run_one(struct side *s, const struct wire *peer, enum ibv_wr_opcode op,
		   uint64_t local_at, uint32_t len, uint64_t remote_at, uint32_t srqn,
		   uint64_t compare_add, uint64_t swap, enum ibv_wc_status status)
{
	struct ibv_wc wc;

	if (post_send(s, peer, op, local_at, len, remote_at, srqn, compare_add, swap) ||
	    wait_cq(s, s->cq, 1, &wc))
		return -1;
	if (wc.status != status)
		fprintf(stderr, "xrc_net: opcode %d completed %s\n", op, ibv_wc_status_str(wc.status));
	CHECK(wc.status == status, "the send completion's status");
	CHECK(wc.wr_id == op, "the send completion's wr_id");
	return 0;
}

static int client(struct side *s, const char *host, int port)
{
	struct ibv_qp_init_attr_ex qa = {.qp_type = IBV_QPT_XRC_SEND,
					 .comp_mask = IBV_QP_INIT_ATTR_PD,
					 .pd = s->pd, .send_cq = s->cq, .recv_cq = s->cq,
					 .cap = {.max_send_wr = 16, .max_send_sge = 1}};
	struct wire me = {0}, peer;
	uint64_t v;

	s->qp = ibv_create_qp_ex(s->ctx, &qa);
	CHECK(s->qp != NULL, "ibv_create_qp_ex (XRC_SEND)");
	me.qpn = s->qp->qp_num;
	me.psn = 0x1234;
	memcpy(me.gid, s->gid.raw, 16);
	for (int i = 0; i < 50 && (s->sock = tcp_connect(host, port)) < 0; i++)
		usleep(100 * 1000);
	CHECK(s->sock >= 0, "TCP connect");
	CHECK(io_all(s->sock, &me, sizeof(me), 1) == 0, "TCP write");
	CHECK(io_all(s->sock, &peer, sizeof(peer), 0) == 0, "TCP read");
	if (connect_qp(s, &peer, 0))
		return -1;

	/* 1. SENDs of 1, 4096, 65536 bytes, then a SEND with immediate. */
	for (int i = 0; i < 3; i++) {
		fill(s->buf + SRC_AT, SIZES[i], (uint32_t)i + 1);
		if (run_one(s, &peer, IBV_WR_SEND, SRC_AT, SIZES[i], 0, peer.srqn, 0, 0,
			    IBV_WC_SUCCESS))
			return -1;
	}
	fill(s->buf + SRC_AT, IMM_LEN, 4);
	if (run_one(s, &peer, IBV_WR_SEND_WITH_IMM, SRC_AT, IMM_LEN, 0, peer.srqn, 0, 0,
		    IBV_WC_SUCCESS) ||
	    sync_phase(s, 1))
		return -1;

	/* 2. WRITE 64 KiB, READ 64 KiB, FETCH_ADD, CMP_SWAP, READ the word. */
	fill(s->buf + SRC_AT, BIG, 9);
	if (run_one(s, &peer, IBV_WR_RDMA_WRITE, SRC_AT, BIG, WRITE_AT, peer.srqn, 0, 0,
		    IBV_WC_SUCCESS) ||
	    run_one(s, &peer, IBV_WR_RDMA_READ, DST_AT, BIG, READ_AT, peer.srqn, 0, 0,
		    IBV_WC_SUCCESS))
		return -1;
	CHECK(same(s->buf + DST_AT, BIG, 5), "the RDMA READ's bytes");
	if (run_one(s, &peer, IBV_WR_ATOMIC_FETCH_AND_ADD, RES_AT, 8, WORD_AT, peer.srqn, 5, 0,
		    IBV_WC_SUCCESS))
		return -1;
	memcpy(&v, s->buf + RES_AT, 8);
	CHECK(v == WORD_INIT, "FETCH_ADD returns the original value");
	if (run_one(s, &peer, IBV_WR_ATOMIC_CMP_AND_SWP, RES_AT, 8, WORD_AT, peer.srqn,
		    WORD_INIT + 5, 0xabc, IBV_WC_SUCCESS))
		return -1;
	memcpy(&v, s->buf + RES_AT, 8);
	CHECK(v == WORD_INIT + 5, "CMP_SWAP returns the original value");
	if (run_one(s, &peer, IBV_WR_RDMA_READ, RES_AT + 8, 8, WORD_AT, peer.srqn, 0, 0,
		    IBV_WC_SUCCESS))
		return -1;
	memcpy(&v, s->buf + RES_AT + 8, 8);
	CHECK(v == 0xabc, "the word after CMP_SWAP");
	if (sync_phase(s, 1))
		return -1;

	/* 3. A SEND naming an SRQ of another XRC domain: NAK invalid request. */
	if (run_one(s, &peer, IBV_WR_SEND, SRC_AT, 8, 0, peer.foreign_srqn, 0, 0,
		    IBV_WC_REM_INV_REQ_ERR))
		return -1;
	return sync_phase(s, 1);
}

int main(int argc, char **argv)
{
	struct side s = {.gidx = 1, .sock = -1};
	const char *dev = NULL;
	int port = 18600, c, rc;

	while ((c = getopt(argc, argv, "d:g:p:e")) != -1) {
		switch (c) {
		case 'd': dev = optarg; break;
		case 'g': s.gidx = atoi(optarg); break;
		case 'p': port = atoi(optarg); break;
		case 'e': s.events = 1; break;
		default:
			fprintf(stderr, "usage: %s [-d dev] [-g gid] [-p port] [-e] [server]\n", argv[0]);
			return 2;
		}
	}
	if (open_common(&s, dev))
		return 1;
	rc = optind < argc ? client(&s, argv[optind], port) : server(&s, port);
	if (rc) {
		/* Tell the peer this side failed, so it does not wait for the next phase. */
		if (s.sock >= 0) {
			uint8_t no = 0;

			(void)!write(s.sock, &no, 1);
		}
		printf("xrc_net: FAILED (%s)\n", failed_check ? failed_check : "?");
		return 1;
	}
	printf("xrc_net: all checks passed\n");
	return 0;
}
