/* Tag matching across two hosts (RoCEv2 over UDP; docs/tag-matching.md): the server owns
 * a tag-matching SRQ (IBV_SRQT_TM) with an RC QP on it and two tagged buffers; the client
 * sends, over the link with a 1024-byte path MTU:
 *   1. an EAGER message of 16 + 3000 bytes (three packets): it lands in its tagged buffer
 *      without the header, across packet boundaries (TM_RECV, MATCH | DATA_VALID, 3000
 *      bytes, ibv_wc_read_tm_info: tag and context), every byte checked;
 *   2. an EAGER message with a tag no entry holds: unexpected, the whole 40 bytes in the
 *      plain SRQ receive (TM_RECV without flags);
 *   3. a RNDV request: across hosts the device leaves the read to software, so it
 *      completes with IBV_WC_TM_RNDV_INCOMPLETE and the request's 32 header bytes in the
 *      tagged buffer.
 *
 *   tm_net [-d dev] [-g gid index] [-p tcp port]            server
 *   tm_net [-d dev] [-g gid index] [-p tcp port] SERVER     client
 * Prints "tm_net: all checks passed" and exits 0 on success. */
#include <arpa/inet.h>
#include <endian.h>
#include <getopt.h>
#include <infiniband/tm_types.h>
#include <infiniband/verbs.h>
#include <netdb.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define BUF 65536
#define EAGER_LEN 3000
#define RNDV_LEN 5000
#define BOUND 100000000L

static const char *failed;

#define CHECK(c, what)                                                  \
	do {                                                            \
		if (!(c)) {                                             \
			failed = what;                                  \
			fprintf(stderr, "FAIL - %s (line %d)\n", what, __LINE__); \
			return -1;                                      \
		}                                                       \
		printf("ok - %s\n", what);                              \
	} while (0)

struct info {
	uint32_t qpn;
	uint8_t gid[16];
	uint64_t va;
	uint32_t rkey;
};

static int tcp(const char *host, int port)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
	int s = socket(AF_INET, SOCK_STREAM, 0), one = 1;

	if (s < 0)
		return -1;
	if (!host) {
		int c;

		setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		a.sin_addr.s_addr = htonl(INADDR_ANY);
		if (bind(s, (void *)&a, sizeof(a)) || listen(s, 1))
			return -1;
		c = accept(s, NULL, NULL);
		close(s);
		return c;
	}
	if (inet_pton(AF_INET, host, &a.sin_addr) != 1)
		return -1;
	for (int i = 0; i < 100; i++) {
		if (connect(s, (void *)&a, sizeof(a)) == 0)
			return s;
		usleep(50000);
	}
	return -1;
}

static int xfer(int sock, const void *out, void *in, size_t n)
{
	return write(sock, out, n) == (ssize_t)n && read(sock, in, n) == (ssize_t)n ? 0 : -1;
}

static int connect_qp(struct ibv_qp *qp, int gidx, const struct info *peer)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1,
				.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE};

	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		return -1;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = peer->qpn;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.port_num = 1;
	a.ah_attr.grh.sgid_index = gidx;
	a.ah_attr.grh.hop_limit = 64;
	memcpy(a.ah_attr.grh.dgid.raw, peer->gid, 16);
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
				      IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		return -1;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 1;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
					    IBV_QP_MAX_QP_RD_ATOMIC);
}

struct tm_wc {
	uint64_t wr_id;
	int status, opcode;
	unsigned flags;
	uint32_t len;
	struct ibv_wc_tm_info tm;
};

static int poll_ex(struct ibv_cq_ex *cq, struct tm_wc *w)
{
	struct ibv_poll_cq_attr attr = {0};
	int ret = ENOENT;

	for (long i = 0; i < BOUND && ret == ENOENT; i++)
		ret = ibv_start_poll(cq, &attr);
	if (ret)
		return -1;
	w->wr_id = cq->wr_id;
	w->status = cq->status;
	w->opcode = ibv_wc_read_opcode(cq);
	w->flags = ibv_wc_read_wc_flags(cq);
	w->len = ibv_wc_read_byte_len(cq);
	ibv_wc_read_tm_info(cq, &w->tm);
	ibv_end_poll(cq);
	return 0;
}

static void tmh(char *at, uint8_t op, uint64_t tag, uint32_t ctx)
{
	struct ibv_tmh h = {.opcode = op, .app_ctx = htobe32(ctx), .tag = htobe64(tag)};

	memcpy(at, &h, sizeof(h));
}

static int server(struct ibv_context *ctx, int gidx, int port)
{
	struct ibv_cq_init_attr_ex ca = {.cqe = 64, .wc_flags = IBV_WC_STANDARD_FLAGS | IBV_WC_EX_WITH_TM_INFO};
	struct ibv_srq_init_attr_ex sa = {0};
	struct ibv_qp_init_attr qa = {0};
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq_ex *cq = ibv_create_cq_ex(ctx, &ca);
	char *buf = calloc(1, BUF);
	struct ibv_mr *mr = pd ? ibv_reg_mr(pd, buf, BUF, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE) : NULL;
	struct ibv_srq *srq;
	struct ibv_qp *qp;
	struct info me = {0}, peer;
	struct tm_wc w;
	int sock, same = 1;
	char done;

	CHECK(pd && cq && mr, "server: PD, CQ with TM_INFO, MR");
	sa.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_CQ | IBV_SRQ_INIT_ATTR_TM;
	sa.srq_type = IBV_SRQT_TM;
	sa.pd = pd;
	sa.cq = ibv_cq_ex_to_cq(cq);
	sa.attr.max_wr = 4;
	sa.attr.max_sge = 1;
	sa.tm_cap.max_num_tags = 4;
	sa.tm_cap.max_ops = 4;
	srq = ibv_create_srq_ex(ctx, &sa);
	CHECK(srq, "server: tag-matching SRQ");
	{
		struct ibv_sge s[2] = {{(uintptr_t)buf, 8192, mr->lkey}, {(uintptr_t)buf + 16384, 64, mr->lkey}};
		struct ibv_ops_wr op[2] = {0};
		struct ibv_ops_wr *bad;
		struct ibv_sge p = {(uintptr_t)buf + 32768, 1024, mr->lkey};
		struct ibv_recv_wr r = {.wr_id = 100, .sg_list = &p, .num_sge = 1}, *rbad;

		for (int i = 0; i < 2; i++) {
			op[i].wr_id = i + 1;
			op[i].next = i ? NULL : &op[1];
			op[i].opcode = IBV_WR_TAG_ADD;
			op[i].tm.add.recv_wr_id = i + 1;
			op[i].tm.add.sg_list = &s[i];
			op[i].tm.add.num_sge = 1;
			op[i].tm.add.tag = i + 1;
			op[i].tm.add.mask = ~0ull;
		}
		CHECK(ibv_post_srq_ops(srq, op, &bad) == 0, "server: two tagged buffers (unsignaled ADDs)");
		CHECK(ibv_post_srq_recv(srq, &r, &rbad) == 0, "server: one plain receive");
	}
	qa.send_cq = ibv_cq_ex_to_cq(cq);
	qa.recv_cq = ibv_cq_ex_to_cq(cq);
	qa.srq = srq;
	qa.cap.max_send_wr = 1;
	qa.cap.max_send_sge = 1;
	qa.qp_type = IBV_QPT_RC;
	qp = ibv_create_qp(pd, &qa);
	CHECK(qp, "server: RC QP on the SRQ");
	me.qpn = qp->qp_num;
	CHECK(ibv_query_gid(ctx, 1, gidx, (union ibv_gid *)me.gid) == 0, "server: GID");
	sock = tcp(NULL, port);
	CHECK(sock >= 0 && xfer(sock, &me, &peer, sizeof(me)) == 0, "server: exchange over TCP");
	CHECK(connect_qp(qp, gidx, &peer) == 0, "server: QP to RTS");
	CHECK(write(sock, "r", 1) == 1 && read(sock, &done, 1) == 1 && done == 'd', "server: the client sent everything");

	CHECK(poll_ex(cq, &w) == 0 && w.status == IBV_WC_SUCCESS && w.opcode == IBV_WC_TM_RECV && w.wr_id == 1 &&
		      w.flags == (IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID) && w.len == EAGER_LEN && w.tm.tag == 1 &&
		      w.tm.priv == 0xabc,
	      "server: EAGER of three packets matched: TM_RECV, MATCH|DATA_VALID, 3000 bytes, tag and context");
	for (int i = 0; i < EAGER_LEN; i++)
		same &= buf[i] == (char)(i * 7 + 1);
	CHECK(same, "server: the payload without its header, across packet boundaries");
	CHECK(poll_ex(cq, &w) == 0 && w.status == IBV_WC_SUCCESS && w.opcode == IBV_WC_TM_RECV && w.wr_id == 100 &&
		      w.flags == 0 && w.len == 40 && (uint8_t)buf[32768] == IBV_TMH_EAGER,
	      "server: the unmatched tag is unexpected: the whole message in the plain receive");
	CHECK(poll_ex(cq, &w) == 0 && w.status == IBV_WC_TM_RNDV_INCOMPLETE && w.wr_id == 2,
	      "server: RNDV across hosts completes IBV_WC_TM_RNDV_INCOMPLETE");
	CHECK((uint8_t)buf[16384] == IBV_TMH_RNDV && be32toh(*(uint32_t *)(buf + 16384 + 28)) == RNDV_LEN,
	      "server: the request's headers are in the tagged buffer");
	CHECK(write(sock, "k", 1) == 1, "server: tell the client");
	close(sock);
	ibv_destroy_qp(qp);
	ibv_destroy_srq(srq);
	ibv_dereg_mr(mr);
	ibv_destroy_cq(ibv_cq_ex_to_cq(cq));
	ibv_dealloc_pd(pd);
	free(buf);
	return 0;
}

static int send_msg(struct ibv_qp *qp, struct ibv_cq *cq, struct ibv_mr *mr, char *at, uint32_t len)
{
	struct ibv_sge s = {(uintptr_t)at, len, mr->lkey};
	struct ibv_send_wr wr = {.wr_id = len, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_SIGNALED}, *bad;
	struct ibv_wc wc;
	int n = 0;

	if (ibv_post_send(qp, &wr, &bad))
		return -1;
	for (long i = 0; i < BOUND && n == 0; i++)
		n = ibv_poll_cq(cq, 1, &wc);
	return n == 1 && wc.status == IBV_WC_SUCCESS ? 0 : -1;
}

static int client(struct ibv_context *ctx, int gidx, const char *host, int port)
{
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	char *buf = calloc(1, BUF);
	struct ibv_mr *mr = pd ? ibv_reg_mr(pd, buf, BUF, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ) : NULL;
	struct ibv_qp_init_attr qa = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
				      .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *qp = pd ? ibv_create_qp(pd, &qa) : NULL;
	struct info me = {0}, peer;
	struct ibv_rvh rvh;
	int sock;
	char r;

	CHECK(pd && cq && mr && qp, "client: PD, CQ, MR, RC QP");
	me.qpn = qp->qp_num;
	CHECK(ibv_query_gid(ctx, 1, gidx, (union ibv_gid *)me.gid) == 0, "client: GID");
	sock = tcp(host, port);
	CHECK(sock >= 0 && xfer(sock, &me, &peer, sizeof(me)) == 0, "client: exchange over TCP");
	CHECK(connect_qp(qp, gidx, &peer) == 0, "client: QP to RTS");
	CHECK(read(sock, &r, 1) == 1 && r == 'r', "client: the server is ready");

	tmh(buf, IBV_TMH_EAGER, 1, 0xabc);
	for (int i = 0; i < EAGER_LEN; i++)
		buf[16 + i] = (char)(i * 7 + 1);
	CHECK(send_msg(qp, cq, mr, buf, 16 + EAGER_LEN) == 0, "client: EAGER of 3016 bytes sent");
	tmh(buf, IBV_TMH_EAGER, 9, 0);
	CHECK(send_msg(qp, cq, mr, buf, 40) == 0, "client: EAGER for a tag nobody posted sent");
	tmh(buf, IBV_TMH_RNDV, 2, 5);
	rvh.va = htobe64((uintptr_t)buf + 8192);
	rvh.rkey = htobe32(mr->rkey);
	rvh.len = htobe32(RNDV_LEN);
	memcpy(buf + 16, &rvh, sizeof(rvh));
	CHECK(send_msg(qp, cq, mr, buf, 32) == 0, "client: RNDV request sent");
	CHECK(write(sock, "d", 1) == 1 && read(sock, &r, 1) == 1 && r == 'k', "client: the server checked everything");
	close(sock);
	ibv_destroy_qp(qp);
	ibv_dereg_mr(mr);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	free(buf);
	return 0;
}

int main(int argc, char **argv)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_context *ctx = NULL;
	const char *dev = NULL;
	int gidx = 1, port = 18700, c, rc;

	while ((c = getopt(argc, argv, "d:g:p:")) != -1) {
		switch (c) {
		case 'd': dev = optarg; break;
		case 'g': gidx = atoi(optarg); break;
		case 'p': port = atoi(optarg); break;
		default:
			fprintf(stderr, "usage: %s [-d dev] [-g gid] [-p port] [server]\n", argv[0]);
			return 2;
		}
	}
	for (int i = 0; list && list[i]; i++)
		if (!dev || !strcmp(ibv_get_device_name(list[i]), dev))
			ctx = ibv_open_device(list[i]);
	if (!ctx) {
		fprintf(stderr, "tm_net: no device\n");
		return 1;
	}
	rc = optind < argc ? client(ctx, gidx, argv[optind], port) : server(ctx, gidx, port);
	if (rc) {
		printf("tm_net: FAILED (%s)\n", failed ? failed : "?");
		return 1;
	}
	printf("tm_net: all checks passed\n");
	return 0;
}
