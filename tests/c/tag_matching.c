/* Tag matching across two processes (issue 25; docs/tag-matching.md): the parent owns a
 * tag-matching SRQ (ibv_create_srq_ex with IBV_SRQT_TM) whose CQ has
 * IBV_WC_EX_WITH_TM_INFO, adds three tagged buffers with ibv_post_srq_ops and removes one
 * again before any message arrives; a forked child (its own process and context on the
 * device) connects an RC QP to the parent's and sends, through the device, straight into
 * the parent's queues:
 *   - an EAGER message whose tag matches: the payload lands in the tagged buffer without
 *     its 16-byte header, TM_RECV with TM_MATCH | TM_DATA_VALID, ibv_wc_read_tm_info gives
 *     the tag and the header's application context;
 *   - an EAGER message for the removed tag: unexpected, the whole message in a plain SRQ
 *     receive, TM_RECV without flags, tm_info zeros;
 *   - a RNDV request: the device reads the child's data into the tagged buffer (TM_RECV
 *     TM_MATCH, then TM_RECV TM_DATA_VALID with the length) and the child receives the FIN
 *     (its request's headers with operation FIN) after its own send completion;
 *   - a NO_TAG message: a plain receive, TM_NO_TAG.
 * Then the parent reports the one unexpected message (IBV_WR_TAG_SYNC with IBV_OPS_TM_SYNC):
 * the SYNC completes without IBV_WC_TM_SYNC_REQ, and a second DEL of the removed tag fails
 * with IBV_WC_TM_ERR. */
#include "common.h"

#include <endian.h>
#include <infiniband/tm_types.h>
#include <sys/wait.h>
#include <unistd.h>

#define TAG_EAGER 0x1111000000000011ull
#define TAG_RNDV 0x22
#define TAG_GONE 0x33
#define RNDV_LEN 2000

static void tmh(void *at, uint8_t op, uint64_t tag, uint32_t app_ctx)
{
	struct ibv_tmh h = {.opcode = op, .app_ctx = htobe32(app_ctx), .tag = htobe64(tag)};

	memcpy(at, &h, sizeof(h));
}

static void send_from(struct side *c, uint64_t wr_id, uint32_t off, uint32_t len)
{
	struct ibv_sge sge = {.addr = (uintptr_t)c->buf + off, .length = len, .lkey = c->mr->lkey};
	struct ibv_send_wr wr = {.wr_id = wr_id, .sg_list = &sge, .num_sge = 1,
				 .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED};
	struct ibv_send_wr *bad = NULL;
	struct ibv_wc wc;

	REQUIRE(ibv_post_send(c->qp, &wr, &bad) == 0, "child: post SEND %llu", (unsigned long long)wr_id);
	wc = poll_one(c->send_cq);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == wr_id && wc.opcode == IBV_WC_SEND,
	      "child: SEND %llu completes (status %d)", (unsigned long long)wr_id, wc.status);
}

static int child(int rd, int wr)
{
	struct side c;
	struct ibv_wc wc;
	uint32_t pqpn;
	struct ibv_rvh rvh;
	int gid;
	char b;

	make_side(&c, IBV_QPT_RC, 16, 8);
	gid = loopback_gid_index(c.ctx);
	get(rd, &pqpn, sizeof(pqpn));
	put(wr, &c.qp->qp_num, sizeof(c.qp->qp_num));
	to_rts(c.qp, pqpn, gid, ALL_ACCESS);
	get(rd, &b, 1); /* the parent's QP is in RTS */

	tmh(c.buf, IBV_TMH_EAGER, TAG_EAGER, 0xc0ffee);
	strcpy(c.buf + sizeof(struct ibv_tmh), "eager payload");
	send_from(&c, 1, 0, sizeof(struct ibv_tmh) + 14);

	tmh(c.buf, IBV_TMH_EAGER, TAG_GONE, 7);
	send_from(&c, 2, 0, sizeof(struct ibv_tmh) + 14);

	/* The rendezvous data at 2048, the request (TMH + RVH) at 0; a receive for the FIN. */
	for (int i = 0; i < RNDV_LEN; i++)
		c.buf[2048 + i] = (char)(i * 13 + 5);
	tmh(c.buf, IBV_TMH_RNDV, TAG_RNDV, 0x5eed);
	rvh.va = htobe64((uintptr_t)c.buf + 2048);
	rvh.rkey = htobe32(c.mr->rkey);
	rvh.len = htobe32(RNDV_LEN);
	memcpy(c.buf + sizeof(struct ibv_tmh), &rvh, sizeof(rvh));
	post_recv(&c, 50, 1024, 64);
	send_from(&c, 3, 0, sizeof(struct ibv_tmh) + sizeof(rvh));
	wc = poll_one(c.recv_cq);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 50 && wc.opcode == IBV_WC_RECV && wc.byte_len == 32,
	      "child: the FIN arrives after the send completion (wr_id %llu, byte_len %u)",
	      (unsigned long long)wc.wr_id, wc.byte_len);
	CHECK((uint8_t)c.buf[1024] == IBV_TMH_FIN && !memcmp(c.buf + 1025, c.buf + 1, 31),
	      "child: the FIN carries the request's TMH and RVH with the FIN operation");

	tmh(c.buf, IBV_TMH_NO_TAG, 0, 0);
	send_from(&c, 4, 0, 20);

	put(wr, "d", 1);
	get(rd, &b, 1);
	destroy_side(&c);
	return 0;
}

/* One completion of the extended CQ; fields read inside the batch. */
struct tm_wc {
	uint64_t wr_id;
	enum ibv_wc_status status;
	enum ibv_wc_opcode opcode;
	unsigned int flags;
	uint32_t byte_len;
	struct ibv_wc_tm_info tm;
};

static struct tm_wc poll_ex(struct ibv_cq_ex *cq)
{
	struct ibv_poll_cq_attr attr = {0};
	struct tm_wc w = {0};
	int ret = ENOENT;

	for (long i = 0; i < POLL_BOUND && ret == ENOENT; i++)
		ret = ibv_start_poll(cq, &attr);
	REQUIRE(ret == 0, "ibv_start_poll found a completion");
	w.wr_id = cq->wr_id;
	w.status = cq->status;
	w.opcode = ibv_wc_read_opcode(cq);
	w.flags = ibv_wc_read_wc_flags(cq);
	w.byte_len = ibv_wc_read_byte_len(cq);
	ibv_wc_read_tm_info(cq, &w.tm);
	ibv_end_poll(cq);
	return w;
}

static int ops(struct ibv_srq *srq, struct ibv_ops_wr *op)
{
	struct ibv_ops_wr *bad = NULL;

	return ibv_post_srq_ops(srq, op, &bad);
}

int main(void)
{
	struct ibv_device_attr_ex dev;
	struct ibv_cq_init_attr_ex ca = {.cqe = 32, .wc_flags = IBV_WC_STANDARD_FLAGS | IBV_WC_EX_WITH_TM_INFO};
	struct ibv_srq_init_attr_ex sa = {0};
	struct ibv_qp_init_attr qa = {0};
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq_ex *cq;
	struct ibv_srq *srq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	struct tm_wc w;
	char *buf;
	int to_child[2], to_parent[2], status, gid;
	uint32_t cqpn, gone;
	pid_t pid;
	char b;

	setvbuf(stdout, NULL, _IOLBF, 0);
	REQUIRE(pipe(to_child) == 0 && pipe(to_parent) == 0, "pipes");
	pid = fork();
	REQUIRE(pid >= 0, "fork");
	if (pid == 0) {
		close(to_child[1]);
		close(to_parent[0]);
		exit(child(to_child[0], to_parent[1]));
	}
	close(to_child[0]);
	close(to_parent[1]);

	ctx = open_ctx();
	gid = loopback_gid_index(ctx);
	CHECK(ibv_query_device_ex(ctx, NULL, &dev) == 0 && (dev.tm_caps.flags & IBV_TM_CAP_RC) &&
		      dev.tm_caps.max_num_tags >= 8 && dev.tm_caps.max_sge >= 1 && dev.tm_caps.max_rndv_hdr_size >= 32,
	      "tm_caps: RC tag matching, %u tags, %u SGEs, rendezvous header up to %u bytes",
	      dev.tm_caps.max_num_tags, dev.tm_caps.max_sge, dev.tm_caps.max_rndv_hdr_size);
	pd = ibv_alloc_pd(ctx);
	cq = ibv_create_cq_ex(ctx, &ca);
	REQUIRE(pd && cq, "PD and a CQ with IBV_WC_EX_WITH_TM_INFO");
	buf = aligned_alloc(4096, 16384);
	memset(buf, 0, 16384);
	mr = ibv_reg_mr(pd, buf, 16384, ALL_ACCESS);
	REQUIRE(mr != NULL, "ibv_reg_mr");

	sa.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_CQ;
	sa.srq_type = IBV_SRQT_TM;
	sa.pd = pd;
	sa.cq = ibv_cq_ex_to_cq(cq);
	sa.attr.max_wr = 8;
	sa.attr.max_sge = 1;
	sa.tm_cap.max_num_tags = 8;
	sa.tm_cap.max_ops = 8;
	errno = 0;
	CHECK(!ibv_create_srq_ex(ctx, &sa) && errno == EINVAL, "a TM-SRQ without IBV_SRQ_INIT_ATTR_TM: EINVAL");
	sa.comp_mask |= IBV_SRQ_INIT_ATTR_TM;
	srq = ibv_create_srq_ex(ctx, &sa);
	CHECK(srq != NULL, "ibv_create_srq_ex(IBV_SRQT_TM, 8 tags)");

	{
		struct ibv_sge s[3] = {{(uintptr_t)buf, 256, mr->lkey},
				       {(uintptr_t)buf + 8192, 4096, mr->lkey},
				       {(uintptr_t)buf + 512, 64, mr->lkey}};
		uint64_t tags[3] = {TAG_EAGER, TAG_RNDV, TAG_GONE};
		struct ibv_ops_wr op[3];

		memset(op, 0, sizeof(op));
		for (int i = 0; i < 3; i++) {
			op[i].wr_id = i + 1;
			op[i].next = i < 2 ? &op[i + 1] : NULL;
			op[i].opcode = IBV_WR_TAG_ADD;
			op[i].flags = IBV_OPS_SIGNALED;
			op[i].tm.add.recv_wr_id = 10 + i;
			op[i].tm.add.sg_list = &s[i];
			op[i].tm.add.num_sge = 1;
			op[i].tm.add.tag = tags[i];
			op[i].tm.add.mask = ~0ull;
		}
		CHECK(ops(srq, op) == 0, "ibv_post_srq_ops: three ADDs in one list");
		for (int i = 0; i < 3; i++) {
			w = poll_ex(cq);
			CHECK(w.status == IBV_WC_SUCCESS && w.opcode == IBV_WC_TM_ADD && w.wr_id == (uint64_t)i + 1 && w.flags == 0,
			      "ADD %d completes as IBV_WC_TM_ADD without SYNC_REQ", i + 1);
		}
		CHECK(op[0].tm.handle != op[1].tm.handle && op[1].tm.handle != op[2].tm.handle,
		      "each ADD returned its own handle");
		gone = op[2].tm.handle;
	}
	{
		struct ibv_ops_wr del = {.wr_id = 4, .opcode = IBV_WR_TAG_DEL, .flags = IBV_OPS_SIGNALED};

		del.tm.handle = gone;
		CHECK(ops(srq, &del) == 0, "DEL of the third tag before any message");
		w = poll_ex(cq);
		CHECK(w.status == IBV_WC_SUCCESS && w.opcode == IBV_WC_TM_DEL && w.wr_id == 4, "DEL completes as IBV_WC_TM_DEL");
	}
	{
		struct ibv_sge s[2] = {{(uintptr_t)buf + 1024, 256, mr->lkey}, {(uintptr_t)buf + 1536, 256, mr->lkey}};
		struct ibv_recv_wr r[2] = {{.wr_id = 100, .next = &r[1], .sg_list = &s[0], .num_sge = 1},
					   {.wr_id = 101, .sg_list = &s[1], .num_sge = 1}};
		struct ibv_recv_wr *bad = NULL;

		REQUIRE(ibv_post_srq_recv(srq, r, &bad) == 0, "two plain SRQ receives");
	}
	qa.send_cq = ibv_cq_ex_to_cq(cq);
	qa.recv_cq = ibv_cq_ex_to_cq(cq);
	qa.srq = srq;
	qa.cap.max_send_wr = 4;
	qa.cap.max_send_sge = 1;
	qa.qp_type = IBV_QPT_RC;
	qp = ibv_create_qp(pd, &qa);
	REQUIRE(qp != NULL, "RC QP on the TM-SRQ");

	put(to_child[1], &qp->qp_num, sizeof(qp->qp_num));
	get(to_parent[0], &cqpn, sizeof(cqpn));
	to_rts(qp, cqpn, gid, ALL_ACCESS);
	put(to_child[1], "r", 1);
	get(to_parent[0], &b, 1); /* the child sent everything */

	w = poll_ex(cq);
	CHECK(w.status == IBV_WC_SUCCESS && w.opcode == IBV_WC_TM_RECV && w.wr_id == 10 &&
		      w.flags == (IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID) && w.byte_len == 14,
	      "EAGER: TM_RECV, MATCH | DATA_VALID, the tagged buffer's recv_wr_id, 14 bytes (flags %#x, len %u)",
	      w.flags, w.byte_len);
	CHECK(w.tm.tag == TAG_EAGER && w.tm.priv == 0xc0ffee, "EAGER: ibv_wc_read_tm_info gives the tag and context");
	CHECK(!strcmp(buf, "eager payload"), "EAGER: the payload without its header is in the tagged buffer");

	w = poll_ex(cq);
	CHECK(w.status == IBV_WC_SUCCESS && w.opcode == IBV_WC_TM_RECV && w.wr_id == 100 && w.flags == 0 &&
		      w.byte_len == 30 && w.tm.tag == 0 && w.tm.priv == 0,
	      "the removed tag's message is unexpected: a plain receive, no flags, tm_info zeros (wr_id %llu)",
	      (unsigned long long)w.wr_id);
	CHECK((uint8_t)buf[1024] == IBV_TMH_EAGER && !strcmp(buf + 1024 + 16, "eager payload"),
	      "unexpected: the whole message, header included, in the plain receive");

	w = poll_ex(cq);
	CHECK(w.status == IBV_WC_SUCCESS && w.opcode == IBV_WC_TM_RECV && w.wr_id == 11 && w.flags == IBV_WC_TM_MATCH &&
		      w.tm.tag == TAG_RNDV && w.tm.priv == 0x5eed,
	      "RNDV: the match completes first (TM_MATCH, tag and context)");
	w = poll_ex(cq);
	CHECK(w.status == IBV_WC_SUCCESS && w.opcode == IBV_WC_TM_RECV && w.wr_id == 11 &&
		      w.flags == IBV_WC_TM_DATA_VALID && w.byte_len == RNDV_LEN,
	      "RNDV: then the data (TM_DATA_VALID, %u bytes)", w.byte_len);
	{
		int same = 1;

		for (int i = 0; i < RNDV_LEN; i++)
			same &= buf[8192 + i] == (char)(i * 13 + 5);
		CHECK(same, "RNDV: the device read the child's data into the tagged buffer");
	}

	w = poll_ex(cq);
	CHECK(w.status == IBV_WC_SUCCESS && w.opcode == IBV_WC_TM_NO_TAG && w.wr_id == 101,
	      "NO_TAG: a plain receive, IBV_WC_TM_NO_TAG");

	{
		struct ibv_ops_wr sync = {.wr_id = 27, .opcode = IBV_WR_TAG_SYNC,
					  .flags = IBV_OPS_SIGNALED | IBV_OPS_TM_SYNC};
		struct ibv_ops_wr del = {.wr_id = 28, .opcode = IBV_WR_TAG_DEL};

		sync.tm.unexpected_cnt = 1;
		CHECK(ops(srq, &sync) == 0, "SYNC reporting the one unexpected message");
		w = poll_ex(cq);
		CHECK(w.opcode == IBV_WC_TM_SYNC && w.wr_id == 27 && w.flags == 0, "SYNC completes in sync (no SYNC_REQ)");
		del.tm.handle = gone;
		del.tm.unexpected_cnt = 1;
		CHECK(ops(srq, &del) == 0, "a second DEL of the removed tag is posted");
		w = poll_ex(cq);
		CHECK(w.status == IBV_WC_TM_ERR && w.wr_id == 28, "and completes with IBV_WC_TM_ERR, though unsignaled");
	}
	{
		struct ibv_srq_init_attr plain = {.attr = {.max_wr = 2, .max_sge = 1}};
		struct ibv_srq *basic = ibv_create_srq(pd, &plain);
		struct ibv_ops_wr sync = {.opcode = IBV_WR_TAG_SYNC};
		struct ibv_ops_wr *bad = NULL;

		REQUIRE(basic != NULL, "a basic SRQ");
		CHECK(ibv_post_srq_ops(basic, &sync, &bad) == EINVAL && bad == &sync,
		      "ibv_post_srq_ops on a basic SRQ: EINVAL, bad_op names it");
		REQUIRE(ibv_destroy_srq(basic) == 0, "destroy the basic SRQ");
	}

	put(to_child[1], "q", 1);
	REQUIRE(waitpid(pid, &status, 0) == pid, "waitpid");
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child passed its checks");
	REQUIRE(ibv_destroy_qp(qp) == 0 && ibv_destroy_srq(srq) == 0 && ibv_dereg_mr(mr) == 0 &&
			ibv_destroy_cq(ibv_cq_ex_to_cq(cq)) == 0 && ibv_dealloc_pd(pd) == 0 &&
			ibv_close_device(ctx) == 0,
		"cleanup");
	free(buf);
	printf("# tag_matching: all checks passed\n");
	return 0;
}
