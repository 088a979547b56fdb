/* XRC through the ABI (ibv_open_xrcd(3), ibv_create_srq_ex(3), ibv_create_qp_ex(3),
 * ibv_post_send(3) wr.qp_type.xrc.remote_srqn; IBTA Annex A14), the way ibv_xsrq_pingpong and
 * pyverbs' XRC tests use it, with two XRC "sides" (contexts) in one process:
 *  - the device reports IBV_DEVICE_XRC; the verbs_context ops open_xrcd, close_xrcd,
 *    create_srq_ex, get_srq_num, create_qp_ex are set;
 *  - ibv_open_xrcd: comp_mask FD|OFLAGS, fd -1 = a private domain; a file shared by two
 *    opens is one domain (an SRQ of one handle receives through a target QP of the
 *    other); no O_CREAT for a new file → EAGAIN; O_EXCL on an existing one → EINVAL;
 *  - XRC SRQs need IBV_SRQ_INIT_ATTR_XRCD|CQ; ibv_get_srq_num gives distinct numbers;
 *  - XRC_RECV QPs from ibv_create_qp_ex (comp_mask XRCD), XRC_SEND QPs from
 *    ibv_create_qp_ex with comp_mask == PD (the inline forwards to the exported
 *    ibv_create_qp, gotcha 9) and through the create_qp_ex op (PD|CREATE_FLAGS);
 *  - a SEND (with immediate) names the peer's SRQ number: the receive completes on the
 *    SRQ's CQ with wc.qp_num = the target QP's number; an RDMA WRITE lands through the
 *    SRQ's PD; a target QP still in RTR raises IBV_EVENT_COMM_EST whose element is the
 *    XRC_RECV ibv_qp (acked through ibv_ack_async_event, so destroy does not wait);
 *    ibv_query_qp reports XRC QPs; ibv_close_xrcd is EBUSY while used.
 */
#include <arpa/inet.h>
#include <unistd.h>

#include "common.h"

struct xside {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_mr *mr;
	char *buf;
	struct ibv_xrcd *xrcd;
	struct ibv_srq *srq;
	uint32_t srqn;
	struct ibv_qp *recv_qp;
	struct ibv_qp *send_qp;
};

static struct ibv_xrcd *open_xrcd(struct ibv_context *ctx, int fd, int oflags)
{
	struct ibv_xrcd_init_attr a = {.comp_mask = IBV_XRCD_INIT_ATTR_FD |
						    IBV_XRCD_INIT_ATTR_OFLAGS,
				       .fd = fd, .oflags = oflags};

	return ibv_open_xrcd(ctx, &a);
}

static struct ibv_srq *xrc_srq(struct xside *s, struct ibv_xrcd *xrcd)
{
	struct ibv_srq_init_attr_ex a = {
		.attr = {.max_wr = 16, .max_sge = 1},
		.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_XRCD |
			     IBV_SRQ_INIT_ATTR_CQ | IBV_SRQ_INIT_ATTR_PD,
		.srq_type = IBV_SRQT_XRC,
		.pd = s->pd,
		.xrcd = xrcd,
		.cq = s->cq,
	};

	return ibv_create_srq_ex(s->ctx, &a);
}

static struct ibv_qp *recv_qp(struct xside *s, struct ibv_xrcd *xrcd)
{
	struct ibv_qp_init_attr_ex a = {.qp_type = IBV_QPT_XRC_RECV,
					.comp_mask = IBV_QP_INIT_ATTR_XRCD, .xrcd = xrcd};
	struct ibv_qp *qp = ibv_create_qp_ex(s->ctx, &a);

	REQUIRE(qp != NULL, "ibv_create_qp_ex(XRC_RECV)");
	return qp;
}

static void make_xside(struct xside *s)
{
	struct ibv_qp_init_attr_ex a;

	memset(s, 0, sizeof(*s));
	s->ctx = open_ctx();
	s->pd = ibv_alloc_pd(s->ctx);
	s->cq = ibv_create_cq(s->ctx, 64, NULL, NULL, 0);
	s->buf = aligned_alloc(4096, BUF_LEN);
	memset(s->buf, 0, BUF_LEN);
	s->mr = ibv_reg_mr(s->pd, s->buf, BUF_LEN, ALL_ACCESS);
	REQUIRE(s->pd && s->cq && s->mr, "PD, CQ, MR");
	s->xrcd = open_xrcd(s->ctx, -1, O_CREAT);
	CHECK(s->xrcd && s->xrcd->context == s->ctx,
	      "ibv_open_xrcd(fd -1): a private domain, context filled");
	s->srq = xrc_srq(s, s->xrcd);
	CHECK(s->srq && s->srq->context == s->ctx && s->srq->pd == s->pd,
	      "ibv_create_srq_ex(IBV_SRQT_XRC)");
	CHECK(ibv_get_srq_num(s->srq, &s->srqn) == 0 && s->srqn != 0 && s->srqn < (1u << 24),
	      "ibv_get_srq_num: 0x%x (24 bits)", s->srqn);
	s->recv_qp = recv_qp(s, s->xrcd);
	CHECK(s->recv_qp->qp_type == IBV_QPT_XRC_RECV && s->recv_qp->state == IBV_QPS_RESET &&
		      s->recv_qp->context == s->ctx && s->recv_qp->qp_num != 0,
	      "XRC_RECV QP: type, state, context, qp_num 0x%x", s->recv_qp->qp_num);
	memset(&a, 0, sizeof(a));
	a.qp_type = IBV_QPT_XRC_SEND;
	a.send_cq = s->cq;
	a.cap.max_send_wr = 16;
	a.cap.max_send_sge = 1;
	a.comp_mask = IBV_QP_INIT_ATTR_PD; /* the inline calls the exported ibv_create_qp */
	a.pd = s->pd;
	a.sq_sig_all = 1;
	s->send_qp = ibv_create_qp_ex(s->ctx, &a);
	CHECK(s->send_qp && s->send_qp->qp_type == IBV_QPT_XRC_SEND && s->send_qp->pd == s->pd &&
		      a.cap.max_recv_wr == 0,
	      "XRC_SEND QP through ibv_create_qp_ex(comp_mask PD) → ibv_create_qp");
}

static void modify(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask, const char *what)
{
	REQUIRE(ibv_modify_qp(qp, a, mask) == 0 && qp->state == a->qp_state, "%s", what);
}

/* x's target QP ← y's initiator, x's initiator → y's target (ibv_xsrq_pingpong's order);
 * the target stops in RTR unless `target_rts`. */
static void connect_xrc(struct xside *x, struct xside *y, int gid, int target_rts)
{
	struct ibv_qp_attr a;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	modify(x->recv_qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS,
	       "XRC_RECV → INIT");
	a.qp_access_flags = 0;
	modify(x->send_qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS,
	       "XRC_SEND → INIT");

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.sgid_index = gid;
	a.ah_attr.grh.hop_limit = 5;
	a.ah_attr.port_num = 1;
	REQUIRE(ibv_query_gid(x->ctx, 1, gid, &a.ah_attr.grh.dgid) == 0, "ibv_query_gid");
	a.dest_qp_num = y->send_qp->qp_num;
	/* xsrq_pingpong passes the RTR bits of both sides to both; uverbs drops extras. */
	modify(x->recv_qp, &a,
	       IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
		       IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER,
	       "XRC_RECV → RTR");
	a.dest_qp_num = y->recv_qp->qp_num;
	modify(x->send_qp, &a,
	       IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
		       IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER,
	       "XRC_SEND → RTR");

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	if (target_rts)
		modify(x->recv_qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_SQ_PSN,
		       "XRC_RECV → RTS");
	modify(x->send_qp, &a,
	       IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
		       IBV_QP_MAX_QP_RD_ATOMIC,
	       "XRC_SEND → RTS");
}

static void srq_recv(struct xside *s, uint64_t wr_id, uint32_t off)
{
	struct ibv_sge sge = {.addr = (uintptr_t)s->buf + off, .length = 64, .lkey = s->mr->lkey};
	struct ibv_recv_wr wr = {.wr_id = wr_id, .sg_list = &sge, .num_sge = 1}, *bad = NULL;

	REQUIRE(ibv_post_srq_recv(s->srq, &wr, &bad) == 0, "ibv_post_srq_recv");
}

static void xrc_send(struct xside *s, uint64_t wr_id, const char *msg, uint32_t srqn, uint32_t imm)
{
	struct ibv_sge sge = {.addr = (uintptr_t)s->buf, .length = strlen(msg), .lkey = s->mr->lkey};
	struct ibv_send_wr wr = {.wr_id = wr_id, .sg_list = &sge, .num_sge = 1,
				 .opcode = IBV_WR_SEND_WITH_IMM, .imm_data = htonl(imm)};
	struct ibv_send_wr *bad = NULL;

	strcpy(s->buf, msg);
	wr.qp_type.xrc.remote_srqn = srqn;
	CHECK(ibv_post_send(s->send_qp, &wr, &bad) == 0,
	      "XRC SEND_WITH_IMM posted with wr.qp_type.xrc.remote_srqn 0x%x", srqn);
}

static void traffic(struct xside *a, struct xside *b)
{
	struct ibv_wc wc;

	printf("# SEND from each side into the other's SRQ\n");
	for (int dir = 0; dir < 2; dir++) {
		struct xside *from = dir ? b : a, *to = dir ? a : b;

		srq_recv(to, 100 + dir, 1024);
		xrc_send(from, 200 + dir, dir ? "xrc from b" : "xrc from a", to->srqn, 0x1234 + dir);
		wc = poll_one(from->cq);
		CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == (uint64_t)(200 + dir) &&
			      wc.qp_num == from->send_qp->qp_num && wc.opcode == IBV_WC_SEND,
		      "the initiator's send completes on its send CQ (qp_num = XRC_SEND QP)");
		wc = poll_one(to->cq);
		CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == (uint64_t)(100 + dir) &&
			      wc.opcode == IBV_WC_RECV && wc.byte_len == 10 &&
			      (wc.wc_flags & IBV_WC_WITH_IMM) && ntohl(wc.imm_data) == 0x1234u + dir,
		      "the receive completes on the SRQ's CQ (byte_len, immediate)");
		CHECK(wc.qp_num == to->recv_qp->qp_num,
		      "wc.qp_num is the target (XRC_RECV) QP 0x%x", wc.qp_num);
		CHECK(!memcmp(to->buf + 1024, dir ? "xrc from b" : "xrc from a", 10),
		      "the data landed in the SRQ receive's buffer");
	}

	printf("# RDMA WRITE through the target, checked with the SRQ's PD\n");
	{
		struct ibv_sge sge = {.addr = (uintptr_t)a->buf, .length = 5, .lkey = a->mr->lkey};
		struct ibv_send_wr wr = {.wr_id = 300, .sg_list = &sge, .num_sge = 1,
					 .opcode = IBV_WR_RDMA_WRITE};
		struct ibv_send_wr *bad = NULL;

		memcpy(a->buf, "xrcwr", 5);
		wr.wr.rdma.remote_addr = (uintptr_t)b->buf + 3000;
		wr.wr.rdma.rkey = b->mr->rkey;
		wr.qp_type.xrc.remote_srqn = b->srqn;
		CHECK(ibv_post_send(a->send_qp, &wr, &bad) == 0, "XRC RDMA WRITE posted");
		wc = poll_one(a->cq);
		CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 300 &&
			      !memcmp(b->buf + 3000, "xrcwr", 5),
		      "XRC RDMA WRITE lands (%s)", ibv_wc_status_str(wc.status));
	}
}

static void queries(struct xside *s)
{
	struct ibv_qp_attr attr;
	struct ibv_qp_init_attr init;

	CHECK(ibv_query_qp(s->recv_qp, &attr, IBV_QP_STATE, &init) == 0 &&
		      attr.qp_state == IBV_QPS_RTS && init.qp_type == IBV_QPT_XRC_RECV &&
		      attr.qp_access_flags == (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ),
	      "ibv_query_qp(XRC_RECV): RTS, type, access flags");
	CHECK(ibv_query_qp(s->send_qp, &attr, IBV_QP_STATE | IBV_QP_CAP, &init) == 0 &&
		      attr.qp_state == IBV_QPS_RTS && init.qp_type == IBV_QPT_XRC_SEND &&
		      init.send_cq == s->cq && init.cap.max_recv_wr == 0 &&
		      init.cap.max_send_wr >= 16 && init.sq_sig_all == 1,
	      "ibv_query_qp(XRC_SEND): RTS, type, send CQ, caps, sq_sig_all");
}

static void destroy_xside(struct xside *s)
{
	CHECK(ibv_close_xrcd(s->xrcd) == EBUSY, "ibv_close_xrcd while its SRQ/QP exist: EBUSY");
	REQUIRE(ibv_destroy_qp(s->send_qp) == 0 && ibv_destroy_qp(s->recv_qp) == 0,
		"destroy the XRC QPs");
	REQUIRE(ibv_destroy_srq(s->srq) == 0, "destroy the XRC SRQ");
	CHECK(ibv_close_xrcd(s->xrcd) == 0, "ibv_close_xrcd once unused");
	REQUIRE(ibv_dereg_mr(s->mr) == 0 && ibv_destroy_cq(s->cq) == 0 &&
			ibv_dealloc_pd(s->pd) == 0 && ibv_close_device(s->ctx) == 0,
		"cleanup");
	free(s->buf);
}

/* Two handles of one file are one domain; the open flags behave as open(2)'s. */
static void shared_domain(int gid)
{
	char path[] = "/tmp/rverbs-xrc-XXXXXX";
	int fd = mkstemp(path);
	struct xside a, b;
	struct ibv_xrcd *first, *second, *other;
	struct ibv_srq *srq;
	struct ibv_qp *target;
	uint32_t srqn;
	struct ibv_wc wc;

	printf("# a domain shared through a file\n");
	REQUIRE(fd >= 0, "mkstemp");
	make_xside(&a);
	make_xside(&b);
	errno = 0;
	CHECK(!open_xrcd(b.ctx, fd, 0) && errno == EAGAIN,
	      "no domain for the file and no O_CREAT: NULL/EAGAIN");
	first = open_xrcd(b.ctx, fd, O_CREAT);
	CHECK(first != NULL, "O_CREAT creates the file's domain");
	errno = 0;
	CHECK(!open_xrcd(b.ctx, fd, O_CREAT | O_EXCL) && errno == EINVAL,
	      "O_EXCL when the file has a domain: NULL/EINVAL");
	second = open_xrcd(b.ctx, fd, 0);
	CHECK(second != NULL && second != first, "a second open of the file finds the domain");
	other = open_xrcd(b.ctx, -1, O_CREAT);
	REQUIRE(other != NULL, "a private domain");

	/* SRQ through the first handle, target QP through the second. */
	srq = xrc_srq(&b, first);
	REQUIRE(srq && ibv_get_srq_num(srq, &srqn) == 0, "an SRQ in the shared domain");
	target = recv_qp(&b, second);
	REQUIRE(ibv_destroy_qp(b.recv_qp) == 0, "replace b's target QP");
	b.recv_qp = target;
	connect_xrc(&a, &b, gid, 1);
	connect_xrc(&b, &a, gid, 1);
	{
		struct ibv_sge sge = {.addr = (uintptr_t)b.buf + 512, .length = 64,
				      .lkey = b.mr->lkey};
		struct ibv_recv_wr wr = {.wr_id = 7, .sg_list = &sge, .num_sge = 1}, *bad = NULL;

		REQUIRE(ibv_post_srq_recv(srq, &wr, &bad) == 0, "ibv_post_srq_recv");
	}
	xrc_send(&a, 8, "shared xrcd", srqn, 1);
	CHECK(poll_one(a.cq).status == IBV_WC_SUCCESS, "the send completes");
	wc = poll_one(b.cq);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 7 && wc.qp_num == target->qp_num &&
		      !memcmp(b.buf + 512, "shared xrcd", 11),
	      "the target QP of the second handle delivered into the first handle's SRQ");
	CHECK(ibv_close_xrcd(other) == 0, "close the unused private domain");

	REQUIRE(ibv_destroy_srq(srq) == 0, "destroy the shared-domain SRQ");
	/* b.recv_qp (the target) is destroyed by destroy_xside before b.xrcd is closed. */
	REQUIRE(ibv_destroy_qp(b.recv_qp) == 0, "destroy the shared-domain target");
	b.recv_qp = recv_qp(&b, b.xrcd);
	CHECK(ibv_close_xrcd(second) == 0 && ibv_close_xrcd(first) == 0,
	      "both handles of the file close");
	destroy_xside(&a);
	destroy_xside(&b);
	close(fd);
	unlink(path);
}

int main(void)
{
	struct xside a, b;
	struct ibv_device_attr attr;
	struct verbs_context *v;
	int gid;

	setvbuf(stdout, NULL, _IOLBF, 0);
	make_xside(&a);
	make_xside(&b);
	REQUIRE(ibv_query_device(a.ctx, &attr) == 0, "ibv_query_device");
	CHECK(attr.device_cap_flags & IBV_DEVICE_XRC, "the device reports IBV_DEVICE_XRC");
	v = verbs_get_ctx(a.ctx);
	CHECK(v && v->open_xrcd && v->close_xrcd && v->create_srq_ex && v->get_srq_num &&
		      v->create_qp_ex,
	      "verbs_context: open_xrcd, close_xrcd, create_srq_ex, get_srq_num, create_qp_ex");
	CHECK(a.srqn != b.srqn, "the two SRQs have distinct numbers");
	{
		struct ibv_srq_init_attr_ex x = {
			.attr = {.max_wr = 4, .max_sge = 1},
			.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_XRCD |
				     IBV_SRQ_INIT_ATTR_PD,
			.srq_type = IBV_SRQT_XRC, .pd = a.pd, .xrcd = a.xrcd};
		struct ibv_qp_init_attr_ex q = {.qp_type = IBV_QPT_XRC_RECV,
						.comp_mask = IBV_QP_INIT_ATTR_PD, .pd = a.pd};

		errno = 0;
		CHECK(!ibv_create_srq_ex(a.ctx, &x) && errno == EINVAL,
		      "XRC SRQ without IBV_SRQ_INIT_ATTR_CQ: NULL/EINVAL");
		errno = 0;
		q.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS;
		CHECK(!ibv_create_qp_ex(a.ctx, &q) && errno == EINVAL,
		      "XRC_RECV without IBV_QP_INIT_ATTR_XRCD: NULL/EINVAL");
		q.qp_type = IBV_QPT_XRC_SEND;
		q.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS;
		errno = 0;
		CHECK(!ibv_create_qp_ex(a.ctx, &q) && errno == EINVAL,
		      "XRC_SEND without a send CQ: NULL/EINVAL");
		q.send_cq = a.cq;
		q.cap.max_send_wr = 2;
		{
			struct ibv_qp *qp = ibv_create_qp_ex(a.ctx, &q);

			CHECK(qp && qp->qp_type == IBV_QPT_XRC_SEND && ibv_qp_to_qp_ex(qp),
			      "XRC_SEND through the create_qp_ex op (PD|CREATE_FLAGS): extended");
			REQUIRE(ibv_destroy_qp(qp) == 0, "destroy it");
		}
	}
	gid = loopback_gid_index(a.ctx);
	connect_xrc(&a, &b, gid, 1);
	connect_xrc(&b, &a, gid, 0); /* b's target stays in RTR: COMM_EST on first receive */
	traffic(&a, &b);
	CHECK(drain_async(b.ctx, IBV_EVENT_COMM_EST, b.recv_qp) == 1,
	      "IBV_EVENT_COMM_EST about b's XRC_RECV QP (element = that ibv_qp), acked");
	CHECK(drain_async(a.ctx, IBV_EVENT_COMM_EST, a.recv_qp) == 0,
	      "none for a's target, which was in RTS");
	queries(&a);
	destroy_xside(&a);
	destroy_xside(&b);
	shared_domain(gid);
	printf("# xrc: all checks passed\n");
	return 0;
}
