/* The extended CQ of ibv_create_cq_ex(3) (ibv_start_poll) through the ABI:
 *  - ibv_start_poll returns ENOENT on an empty CQ and the CQ stays valid;
 *  - start/next/end_poll walk the completions oldest first and publish status/wr_id;
 *  - ibv_wc_read_* per wc_flags: byte_len, imm_data, qp_num, src_qp, wc_flags,
 *    completion_ts (device clock, compared with ibv_query_rt_values_ex) and wallclock;
 *  - unsupported wc_flags/flags are EOPNOTSUPP, unknown comp_mask bits EINVAL;
 *  - mixed use: ibv_poll_cq and ibv_req_notify_cq work on an extended CQ.
 * It also exercises UD: the 40-byte GRH area, ibv_create_ah and ibv_create_ah_from_wc.
 */
#include <arpa/inet.h>
#include <time.h>

#include "common.h"

#define QKEY 0x11111111

static uint64_t rt_raw_ns(struct ibv_context *ctx)
{
	struct ibv_values_ex v = {.comp_mask = IBV_VALUES_MASK_RAW_CLOCK};

	REQUIRE(ibv_query_rt_values_ex(ctx, &v) == 0 && v.comp_mask == IBV_VALUES_MASK_RAW_CLOCK,
		"ibv_query_rt_values_ex(RAW_CLOCK)");
	return (uint64_t)v.raw_clock.tv_sec * 1000000000ull + (uint64_t)v.raw_clock.tv_nsec;
}

static uint64_t realtime_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_REALTIME, &t);
	return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static struct ibv_ah *ah_to_self(struct side *s, int gid)
{
	struct ibv_ah_attr attr = {.is_global = 1, .port_num = 1};
	struct ibv_ah *ah;

	REQUIRE(ibv_query_gid(s->ctx, 1, gid, &attr.grh.dgid) == 0, "ibv_query_gid");
	attr.grh.sgid_index = gid;
	attr.grh.hop_limit = 64;
	ah = ibv_create_ah(s->pd, &attr);
	CHECK(ah && ah->pd == s->pd && ah->context == s->ctx,
	      "ibv_create_ah (GRH, loopback GID) fills pd/context");
	return ah;
}

static void ud_send(struct side *s, struct ibv_ah *ah, uint32_t qpn, uint64_t wr_id,
		    uint32_t len, uint32_t imm)
{
	struct ibv_sge sge = {.addr = (uintptr_t)s->buf + 2048, .length = len,
			      .lkey = s->mr->lkey};
	struct ibv_send_wr wr = {.wr_id = wr_id, .sg_list = &sge, .num_sge = 1,
				 .opcode = IBV_WR_SEND_WITH_IMM,
				 .send_flags = IBV_SEND_SIGNALED, .imm_data = htonl(imm)};
	struct ibv_send_wr *bad = NULL;

	wr.wr.ud.ah = ah;
	wr.wr.ud.remote_qpn = qpn;
	wr.wr.ud.remote_qkey = QKEY;
	CHECK(ibv_post_send(s->qp, &wr, &bad) == 0, "UD SEND_WITH_IMM of %u bytes posted", len);
}

static void bad_creation(struct ibv_context *ctx)
{
	struct ibv_cq_init_attr_ex attr = {.cqe = 8, .wc_flags = IBV_WC_STANDARD_FLAGS};
	uint64_t refused[] = {IBV_WC_EX_WITH_CVLAN, IBV_WC_EX_WITH_FLOW_TAG, 1ull << 20};
	struct ibv_cq_ex *tm;

	for (unsigned i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
		attr.wc_flags = IBV_WC_STANDARD_FLAGS | refused[i];
		errno = 0;
		CHECK(!ibv_create_cq_ex(ctx, &attr) && errno == EOPNOTSUPP,
		      "wc_flags 0x%llx the device cannot fill: NULL/EOPNOTSUPP",
		      (unsigned long long)refused[i]);
	}
	/* Tag-matching information is filled (tests/c/tag_matching.c reads it). */
	attr.wc_flags = IBV_WC_STANDARD_FLAGS | IBV_WC_EX_WITH_TM_INFO;
	tm = ibv_create_cq_ex(ctx, &attr);
	CHECK(tm && ibv_destroy_cq(ibv_cq_ex_to_cq(tm)) == 0, "wc_flags with IBV_WC_EX_WITH_TM_INFO: created");
	attr.wc_flags = IBV_WC_STANDARD_FLAGS;
	attr.comp_mask = IBV_CQ_INIT_ATTR_MASK_FLAGS;
	attr.flags = 1u << 5;
	errno = 0;
	CHECK(!ibv_create_cq_ex(ctx, &attr) && errno == EOPNOTSUPP,
	      "an unknown creation flag: NULL/EOPNOTSUPP");
	attr.comp_mask = 1u << 7;
	attr.flags = 0;
	errno = 0;
	CHECK(!ibv_create_cq_ex(ctx, &attr) && errno == EINVAL,
	      "an unknown comp_mask bit: NULL/EINVAL");
	attr.comp_mask = 0;
	attr.comp_vector = 1;
	errno = 0;
	CHECK(!ibv_create_cq_ex(ctx, &attr) && errno == EINVAL,
	      "comp_vector >= num_comp_vectors (%d): NULL/EINVAL", ctx->num_comp_vectors);
	attr.comp_vector = 0;
	attr.cqe = 0;
	errno = 0;
	CHECK(!ibv_create_cq_ex(ctx, &attr) && errno == EINVAL, "cqe 0: NULL/EINVAL");
	attr.cqe = 8;
	attr.comp_mask = IBV_CQ_INIT_ATTR_MASK_PD;
	attr.parent_domain = NULL;
	errno = 0;
	CHECK(!ibv_create_cq_ex(ctx, &attr) && errno == EINVAL,
	      "MASK_PD with a NULL parent_domain: NULL/EINVAL (tests/c/parent_domain.c has the rest)");
	attr.comp_mask = IBV_CQ_INIT_ATTR_MASK_FLAGS;
	attr.flags = IBV_CREATE_CQ_ATTR_SINGLE_THREADED;
	{
		struct ibv_cq_ex *st = ibv_create_cq_ex(ctx, &attr);
		struct ibv_poll_cq_attr pa = {};

		CHECK(st != NULL, "IBV_CREATE_CQ_ATTR_SINGLE_THREADED is accepted");
		CHECK(ibv_start_poll(st, &pa) == ENOENT && ibv_start_poll(st, &pa) == ENOENT,
		      "single-threaded CQ: start_poll ENOENT, twice");
		CHECK(ibv_destroy_cq(ibv_cq_ex_to_cq(st)) == 0, "ibv_destroy_cq(extended CQ)");
	}
}

int main(void)
{
	struct side a, b;
	struct ibv_cq_init_attr_ex attr = {
		.cqe = 32,
		.cq_context = (void *)0x1234,
		.wc_flags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM | IBV_WC_EX_WITH_QP_NUM |
			    IBV_WC_EX_WITH_SRC_QP | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP |
			    IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK,
	};
	struct ibv_device_attr_ex dev;
	struct ibv_poll_cq_attr pattr = {};
	struct ibv_cq_ex *cqx;
	struct ibv_ah *ah, *reply_ah;
	struct ibv_wc wc;
	uint64_t t0, t1, ts, wall, real0, real1;
	int gid, ret;

	setvbuf(stdout, NULL, _IOLBF, 0);
	make_side(&a, IBV_QPT_UD, 32, 32);
	make_side(&b, IBV_QPT_UD, 32, 32);
	gid = loopback_gid_index(a.ctx);
	bad_creation(b.ctx);

	CHECK(ibv_query_device_ex(b.ctx, NULL, &dev) == 0 && dev.hca_core_clock > 0,
	      "ibv_query_device_ex: hca_core_clock %llu kHz",
	      (unsigned long long)dev.hca_core_clock);
	cqx = ibv_create_cq_ex(b.ctx, &attr);
	CHECK(cqx != NULL, "ibv_create_cq_ex(byte_len, imm, qp_num, src_qp, timestamps)");
	CHECK(cqx->context == b.ctx && cqx->cq_context == (void *)0x1234 && cqx->cqe >= 32 &&
		      ibv_cq_ex_to_cq(cqx) == (struct ibv_cq *)cqx,
	      "the ex CQ's ibv_cq fields are filled and ibv_cq_ex_to_cq is a cast");

	/* b receives into the extended CQ. */
	REQUIRE(ibv_destroy_qp(b.qp) == 0 && ibv_destroy_cq(b.recv_cq) == 0, "replace b's QP");
	b.recv_cq = ibv_cq_ex_to_cq(cqx);
	b.qp = make_qp(&b, IBV_QPT_UD, 32);
	to_rts(a.qp, 0, gid, 0);
	to_rts(b.qp, 0, gid, 0);

	printf("# start_poll on an empty CQ\n");
	ret = ibv_start_poll(cqx, &pattr);
	CHECK(ret == ENOENT, "ibv_start_poll on an empty CQ returns ENOENT (%d)", ret);
	ret = ibv_start_poll(cqx, &pattr);
	CHECK(ret == ENOENT, "... again, without end_poll in between: the CQ stays valid");

	printf("# read_* per wc_flags\n");
	ah = ah_to_self(&a, gid);
	post_recv(&b, 501, 0, 40 + 64);
	post_recv(&b, 502, 200, 40 + 64);
	memcpy(a.buf + 2048, "hello, extended cq", 18);
	t0 = rt_raw_ns(b.ctx);
	real0 = realtime_ns();
	ud_send(&a, ah, b.qp->qp_num, 1, 18, 0xabcdef01);
	ud_send(&a, ah, b.qp->qp_num, 2, 7, 0x02);
	t1 = rt_raw_ns(b.ctx);
	real1 = realtime_ns();
	CHECK(poll_one(a.send_cq).status == IBV_WC_SUCCESS, "first UD send completes");
	CHECK(poll_one(a.send_cq).status == IBV_WC_SUCCESS, "second UD send completes");

	ret = ibv_start_poll(cqx, &pattr);
	CHECK(ret == 0, "ibv_start_poll finds the first receive");
	CHECK(cqx->status == IBV_WC_SUCCESS && cqx->wr_id == 501,
	      "start_poll publishes status and wr_id (%llu) in the struct",
	      (unsigned long long)cqx->wr_id);
	CHECK(ibv_wc_read_opcode(cqx) == IBV_WC_RECV, "read_opcode: IBV_WC_RECV");
	CHECK(ibv_wc_read_byte_len(cqx) == 40 + 18,
	      "read_byte_len: 58 = 40-byte GRH + 18 (got %u)", ibv_wc_read_byte_len(cqx));
	CHECK((ibv_wc_read_wc_flags(cqx) & (IBV_WC_GRH | IBV_WC_WITH_IMM)) ==
		      (IBV_WC_GRH | IBV_WC_WITH_IMM),
	      "read_wc_flags: GRH | WITH_IMM");
	CHECK(ntohl(ibv_wc_read_imm_data(cqx)) == 0xabcdef01, "read_imm_data: 0xabcdef01");
	CHECK(ibv_wc_read_qp_num(cqx) == b.qp->qp_num, "read_qp_num: the receiving QP");
	CHECK(ibv_wc_read_src_qp(cqx) == a.qp->qp_num, "read_src_qp: the sending QP %u",
	      a.qp->qp_num);
	ts = ibv_wc_read_completion_ts(cqx);
	CHECK(t0 <= ts && ts <= t1,
	      "read_completion_ts %llu lies between two ibv_query_rt_values_ex readings "
	      "[%llu, %llu]",
	      (unsigned long long)ts, (unsigned long long)t0, (unsigned long long)t1);
	wall = ibv_wc_read_completion_wallclock_ns(cqx);
	CHECK(wall + 1000000000ull > real0 && wall < real1 + 1000000000ull,
	      "read_completion_wallclock_ns is wall-clock time");
	CHECK(!memcmp(b.buf + 40, "hello, extended cq", 18), "payload after the 40-byte GRH");
	CHECK(b.buf[20] == 0x45, "the GRH area holds an IPv4 header (RoCE v2)");

	ret = ibv_next_poll(cqx);
	CHECK(ret == 0 && cqx->wr_id == 502 && ibv_wc_read_byte_len(cqx) == 40 + 7 &&
		      ntohl(ibv_wc_read_imm_data(cqx)) == 2,
	      "ibv_next_poll moves to the second receive and republishes wr_id");
	{
		uint64_t ts2 = ibv_wc_read_completion_ts(cqx);

		CHECK(ts <= ts2 && ts2 <= t1, "timestamps follow completion order");
	}
	ret = ibv_next_poll(cqx);
	CHECK(ret == ENOENT, "ibv_next_poll at the end returns ENOENT");
	ibv_end_poll(cqx);
	CHECK(ibv_start_poll(cqx, &pattr) == ENOENT, "the batch removed both completions");

	printf("# ibv_create_ah_from_wc answers the sender\n");
	post_recv(&b, 503, 0, 40 + 64);
	post_recv(&a, 601, 0, 40 + 64);
	ud_send(&a, ah, b.qp->qp_num, 3, 5, 3);
	REQUIRE(poll_one(a.send_cq).status == IBV_WC_SUCCESS, "UD send completes");
	wc = poll_one(b.recv_cq);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 503 && (wc.wc_flags & IBV_WC_GRH) &&
		      wc.src_qp == a.qp->qp_num,
	      "ibv_poll_cq works on an extended CQ (mixed use)");
	reply_ah = ibv_create_ah_from_wc(b.pd, &wc, (struct ibv_grh *)b.buf, 1);
	CHECK(reply_ah != NULL, "ibv_create_ah_from_wc from the GRH in the receive buffer");
	{
		struct ibv_ah_attr got;

		CHECK(ibv_init_ah_from_wc(b.ctx, 1, &wc, (struct ibv_grh *)b.buf, &got) == 0 &&
			      got.is_global == 1 && got.grh.sgid_index == gid &&
			      got.port_num == 1 && got.grh.hop_limit == 64,
		      "ibv_init_ah_from_wc: global, sgid_index %d (the local address)", gid);
	}
	memcpy(b.buf + 2048, "pong", 4);
	ud_send(&b, reply_ah, a.qp->qp_num, 4, 4, 4);
	REQUIRE(poll_one(b.send_cq).status == IBV_WC_SUCCESS, "reply send completes");
	wc = poll_one(a.recv_cq);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 601 && wc.src_qp == b.qp->qp_num &&
		      !memcmp(a.buf + 40, "pong", 4),
	      "the reply reaches the original sender through that AH");

	printf("# req_notify_cq on an extended CQ\n");
	CHECK(ibv_req_notify_cq(ibv_cq_ex_to_cq(cqx), 0) == 0,
	      "ibv_req_notify_cq(ibv_cq_ex_to_cq(cq)) succeeds");

	CHECK(ibv_destroy_ah(reply_ah) == 0 && ibv_destroy_ah(ah) == 0, "ibv_destroy_ah x2");
	destroy_side(&a);
	destroy_side(&b);
	printf("# cq_ex: all checks passed\n");
	return 0;
}
