/* Shared helpers of the C conformance programs: compiled against the installed
 * <infiniband/verbs.h> (rdma-core 44), run against the rverbs drop-in libibverbs.so.1.
 *
 * Every CHECK prints "ok - <what>" or "FAIL - <what> (<file>:<line>)" and exits 1 on the
 * first failure. Polling loops are bounded by a number of iterations, never by sleeps:
 * the device completes in-process traffic inside ibv_post_send (docs/progress-and-events.md).
 */
#ifndef RVERBS_TEST_COMMON_H
#define RVERBS_TEST_COMMON_H

#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CHECK(cond, ...)                                                     \
	do {                                                                 \
		if (cond) {                                                  \
			printf("ok - ");                                     \
			printf(__VA_ARGS__);                                 \
			printf("\n");                                        \
		} else {                                                     \
			printf("FAIL - ");                                   \
			printf(__VA_ARGS__);                                 \
			printf(" (%s:%d, errno %d %s)\n", __FILE__, __LINE__, \
			       errno, strerror(errno));                      \
			fflush(stdout);                                      \
			exit(1);                                             \
		}                                                            \
	} while (0)

/* Like CHECK, but silent on success: for setup steps that are not what a test checks. */
#define REQUIRE(cond, ...)                                                   \
	do {                                                                 \
		if (!(cond))                                                 \
			CHECK(cond, __VA_ARGS__);                            \
	} while (0)

/* Bound of every polling loop (iterations, not time). */
#define POLL_BOUND 1000000

#define BUF_LEN 4096

struct side {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *send_cq;
	struct ibv_cq *recv_cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	char *buf;
};

static inline struct ibv_device *find_rverbs0(void)
{
	int n = -1;
	struct ibv_device **list = ibv_get_device_list(&n);
	struct ibv_device *found = NULL;

	REQUIRE(list != NULL && n >= 1, "ibv_get_device_list lists %d device(s)", n);
	for (int i = 0; i < n; i++)
		if (!strcmp(ibv_get_device_name(list[i]), "rverbs0"))
			found = list[i];
	ibv_free_device_list(list);
	/* Devices outlive the list (ibv_get_device_list(3)). */
	REQUIRE(found != NULL, "rverbs0 is listed and outlives ibv_free_device_list");
	return found;
}

static inline struct ibv_context *open_ctx(void)
{
	static struct ibv_device *dev;
	struct ibv_context *ctx;

	if (!dev)
		dev = find_rverbs0();
	ctx = ibv_open_device(dev);
	REQUIRE(ctx != NULL, "ibv_open_device(rverbs0)");
	return ctx;
}

/* The index of the IPv4-mapped loopback GID ::ffff:127.0.0.1 (always present). */
static inline int loopback_gid_index(struct ibv_context *ctx)
{
	struct ibv_port_attr pa;
	union ibv_gid gid;
	static const uint8_t want[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff,
					 127, 0, 0, 1};

	REQUIRE(ibv_query_port(ctx, 1, &pa) == 0, "ibv_query_port(1)");
	for (int i = 0; i < pa.gid_tbl_len; i++) {
		if (ibv_query_gid(ctx, 1, i, &gid))
			continue;
		if (!memcmp(gid.raw, want, 16))
			return i;
	}
	REQUIRE(0, "the GID table holds ::ffff:127.0.0.1");
	return -1;
}

static inline struct ibv_qp *make_qp(struct side *s, enum ibv_qp_type type, int max_wr)
{
	struct ibv_qp_init_attr init = {
		.send_cq = s->send_cq,
		.recv_cq = s->recv_cq,
		.cap = {.max_send_wr = max_wr, .max_recv_wr = max_wr,
			.max_send_sge = 2, .max_recv_sge = 2, .max_inline_data = 64},
		.qp_type = type,
	};
	struct ibv_qp *qp = ibv_create_qp(s->pd, &init);

	REQUIRE(qp != NULL, "ibv_create_qp(type %d)", type);
	REQUIRE(qp->state == IBV_QPS_RESET && qp->qp_type == type && qp->pd == s->pd &&
		      qp->send_cq == s->send_cq && qp->context == s->ctx,
	      "new QP: state RESET, type, pd, send_cq, context filled");
	REQUIRE(init.cap.max_send_wr >= (uint32_t)max_wr &&
		      init.cap.max_inline_data >= 64,
	      "ibv_create_qp wrote the granted caps back (send_wr %u, inline %u)",
	      init.cap.max_send_wr, init.cap.max_inline_data);
	return qp;
}

/* One side: own context, PD, CQs of `cqe` entries, a registered buffer, a QP in RESET. */
static inline void make_side(struct side *s, enum ibv_qp_type type, int cqe, int max_wr)
{
	memset(s, 0, sizeof(*s));
	s->ctx = open_ctx();
	s->pd = ibv_alloc_pd(s->ctx);
	REQUIRE(s->pd != NULL && s->pd->context == s->ctx, "ibv_alloc_pd");
	s->send_cq = ibv_create_cq(s->ctx, cqe, NULL, NULL, 0);
	s->recv_cq = ibv_create_cq(s->ctx, cqe, NULL, NULL, 0);
	REQUIRE(s->send_cq && s->recv_cq && s->send_cq->cqe >= cqe,
	      "ibv_create_cq x2 (cqe %d >= %d)", s->send_cq ? s->send_cq->cqe : -1, cqe);
	s->buf = aligned_alloc(4096, BUF_LEN);
	memset(s->buf, 0, BUF_LEN);
	s->mr = ibv_reg_mr(s->pd, s->buf, BUF_LEN,
			   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
				   IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
	REQUIRE(s->mr && s->mr->addr == s->buf && s->mr->length == BUF_LEN &&
		      s->mr->pd == s->pd && s->mr->context == s->ctx,
	      "ibv_reg_mr fills addr/length/pd/context");
	s->qp = make_qp(s, type, max_wr);
}

static inline void to_init(struct ibv_qp *qp, int access)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1,
				.qp_access_flags = access, .qkey = 0x11111111};
	int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;

	mask |= qp->qp_type == IBV_QPT_UD ? IBV_QP_QKEY : IBV_QP_ACCESS_FLAGS;
	REQUIRE(ibv_modify_qp(qp, &a, mask) == 0 && qp->state == IBV_QPS_INIT,
	      "RESET -> INIT updates qp->state");
}

/* Brings `qp` to RTS towards `dest_qpn` on the loopback GID (RC/UC/UD). */
static inline void to_rts(struct ibv_qp *qp, uint32_t dest_qpn, int gid_index, int access)
{
	struct ibv_qp_attr a;
	int mask;

	to_init(qp, access);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	mask = IBV_QP_STATE;
	if (qp->qp_type != IBV_QPT_UD) {
		REQUIRE(ibv_query_gid(qp->context, 1, gid_index, &a.ah_attr.grh.dgid) == 0,
		      "ibv_query_gid(%d)", gid_index);
		a.path_mtu = IBV_MTU_1024;
		a.dest_qp_num = dest_qpn;
		a.rq_psn = 0;
		a.ah_attr.is_global = 1;
		a.ah_attr.grh.sgid_index = gid_index;
		a.ah_attr.grh.hop_limit = 64;
		a.ah_attr.port_num = 1;
		mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
		if (qp->qp_type == IBV_QPT_RC) {
			a.max_dest_rd_atomic = 1;
			a.min_rnr_timer = 12;
			mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
		}
	}
	REQUIRE(ibv_modify_qp(qp, &a, mask) == 0 && qp->state == IBV_QPS_RTR, "INIT -> RTR");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 0;
	mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
	if (qp->qp_type == IBV_QPT_RC) {
		a.timeout = 14;
		a.retry_cnt = 7;
		a.rnr_retry = 7;
		a.max_rd_atomic = 1;
		mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
			IBV_QP_MAX_QP_RD_ATOMIC;
	}
	REQUIRE(ibv_modify_qp(qp, &a, mask) == 0 && qp->state == IBV_QPS_RTS, "RTR -> RTS");
}

#define ALL_ACCESS                                                         \
	(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | \
	 IBV_ACCESS_REMOTE_ATOMIC)

/* Two sides in one process (two contexts, like pyverbs), connected if RC/UC. */
static inline void make_pair(struct side *a, struct side *b, enum ibv_qp_type type, int cqe,
		      int max_wr)
{
	int gid;

	make_side(a, type, cqe, max_wr);
	make_side(b, type, cqe, max_wr);
	gid = loopback_gid_index(a->ctx);
	to_rts(a->qp, b->qp->qp_num, gid, ALL_ACCESS);
	to_rts(b->qp, a->qp->qp_num, gid, ALL_ACCESS);
}

/* Polls until one completion arrives (bounded). */
static inline struct ibv_wc poll_one(struct ibv_cq *cq)
{
	struct ibv_wc wc;
	int n = 0;

	for (long i = 0; i < POLL_BOUND && n == 0; i++)
		n = ibv_poll_cq(cq, 1, &wc);
	REQUIRE(n == 1, "a completion arrives (ibv_poll_cq returned %d)", n);
	return wc;
}

static inline void post_write(struct side *s, uint64_t wr_id, uint32_t len, uint64_t raddr,
		       uint32_t rkey, int flags)
{
	struct ibv_sge sge = {.addr = (uintptr_t)s->buf, .length = len, .lkey = s->mr->lkey};
	struct ibv_send_wr wr = {.wr_id = wr_id, .sg_list = &sge, .num_sge = 1,
				 .opcode = IBV_WR_RDMA_WRITE, .send_flags = flags};
	struct ibv_send_wr *bad = NULL;

	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	REQUIRE(ibv_post_send(s->qp, &wr, &bad) == 0 && bad == NULL,
	      "ibv_post_send(RDMA_WRITE wr_id %llu)", (unsigned long long)wr_id);
}

static inline void post_recv(struct side *s, uint64_t wr_id, uint32_t off, uint32_t len)
{
	struct ibv_sge sge = {.addr = (uintptr_t)s->buf + off, .length = len,
			      .lkey = s->mr->lkey};
	struct ibv_recv_wr wr = {.wr_id = wr_id, .sg_list = &sge, .num_sge = 1};
	struct ibv_recv_wr *bad = NULL;

	REQUIRE(ibv_post_recv(s->qp, &wr, &bad) == 0 && bad == NULL,
	      "ibv_post_recv(wr_id %llu)", (unsigned long long)wr_id);
}

static inline void destroy_side(struct side *s)
{
	REQUIRE(ibv_destroy_qp(s->qp) == 0, "ibv_destroy_qp");
	REQUIRE(ibv_dereg_mr(s->mr) == 0, "ibv_dereg_mr");
	REQUIRE(ibv_destroy_cq(s->send_cq) == 0 && ibv_destroy_cq(s->recv_cq) == 0,
	      "ibv_destroy_cq x2");
	REQUIRE(ibv_dealloc_pd(s->pd) == 0, "ibv_dealloc_pd");
	REQUIRE(ibv_close_device(s->ctx) == 0, "ibv_close_device");
	free(s->buf);
}

/* Writes all `n` bytes to the pipe `fd` of a forked peer, or fails the test. */
static inline void put(int fd, const void *p, size_t n)
{
	REQUIRE(write(fd, p, n) == (ssize_t)n, "pipe write");
}

/* Reads exactly `n` bytes from the pipe `fd` of a forked peer, or fails the test. */
static inline void get(int fd, void *p, size_t n)
{
	REQUIRE(read(fd, p, n) == (ssize_t)n, "pipe read");
}

/* Reads every pending async event (the async fd made non-blocking), acks each, and
 * returns how many had `type` about `element` (a cq/qp pointer). */
static inline int drain_async(struct ibv_context *ctx, enum ibv_event_type type, void *element)
{
	struct ibv_async_event ev;
	int flags = fcntl(ctx->async_fd, F_GETFL);
	int seen = 0;

	REQUIRE(fcntl(ctx->async_fd, F_SETFL, flags | O_NONBLOCK) == 0,
	      "async_fd %d is a real fd (O_NONBLOCK set)", ctx->async_fd);
	for (int i = 0; i < 1000; i++) {
		if (ibv_get_async_event(ctx, &ev)) {
			CHECK(errno == EAGAIN, "ibv_get_async_event: -1/EAGAIN when drained");
			break;
		}
		printf("# async event %s\n", ibv_event_type_str(ev.event_type));
		if (ev.event_type == type && ev.element.cq == element)
			seen++;
		ibv_ack_async_event(&ev);
	}
	fcntl(ctx->async_fd, F_SETFL, flags);
	return seen;
}

#endif
