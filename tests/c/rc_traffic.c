/* RC traffic between two QPs of two contexts in one process (as pyverbs does), through
 * the inline ibv_post_send/ibv_post_recv/ibv_poll_cq dispatch:
 *  - SEND (multi-SGE, inline, zero-length), RDMA WRITE (+imm), RDMA READ, CMP_SWP,
 *    FETCH_ADD, with data and completion checks;
 *  - ibv_post_send/recv: *bad_wr names the first refused request, earlier ones stay
 *    posted; posting in RESET is EINVAL;
 *  - a bad rkey completes IBV_WC_REM_ACCESS_ERR, the QP goes to ERR and flushes;
 *  - ibv_query_qp returns the attributes and init_attr; ibv_modify_qp refuses illegal
 *    transitions (EINVAL) and IBV_QP_RATE_LIMIT (EOPNOTSUPP).
 */
#include <arpa/inet.h>

#include "common.h"

static void check_query(struct side *a, struct side *b, int gid)
{
	struct ibv_qp_attr attr;
	struct ibv_qp_init_attr init;
	union ibv_gid want;

	memset(&attr, 0xa5, sizeof(attr));
	memset(&init, 0xa5, sizeof(init));
	CHECK(ibv_query_qp(a->qp, &attr, IBV_QP_STATE | IBV_QP_AV | IBV_QP_CAP, &init) == 0,
	      "ibv_query_qp");
	REQUIRE(ibv_query_gid(a->ctx, 1, gid, &want) == 0, "ibv_query_gid");
	CHECK(attr.qp_state == IBV_QPS_RTS && attr.dest_qp_num == b->qp->qp_num &&
		      attr.path_mtu == IBV_MTU_1024 && attr.timeout == 14 && attr.retry_cnt == 7 &&
		      attr.rnr_retry == 7 && attr.max_dest_rd_atomic == 1 &&
		      attr.min_rnr_timer == 12 && attr.port_num == 1,
	      "query_qp: state, dest_qp_num, path_mtu, timeout/retries, rd_atomic, rnr timer");
	CHECK(attr.ah_attr.is_global == 1 && attr.ah_attr.grh.sgid_index == gid &&
		      attr.ah_attr.grh.hop_limit == 64 && attr.ah_attr.port_num == 1 &&
		      !memcmp(&attr.ah_attr.grh.dgid, &want, 16),
	      "query_qp: the full ah_attr (GRH dgid, sgid_index, hop_limit, port)");
	CHECK(attr.qp_access_flags == ALL_ACCESS, "query_qp: qp_access_flags");
	CHECK(init.send_cq == a->send_cq && init.recv_cq == a->recv_cq && init.srq == NULL &&
		      init.qp_type == IBV_QPT_RC && init.sq_sig_all == 0 &&
		      init.cap.max_send_wr >= 16 && init.cap.max_inline_data >= 64 &&
		      attr.cap.max_send_wr == init.cap.max_send_wr,
	      "query_qp: init_attr (CQs, type, caps)");
}

static struct ibv_wc post_and_poll(struct side *s, struct ibv_send_wr *wr)
{
	struct ibv_send_wr *bad = NULL;

	wr->send_flags |= IBV_SEND_SIGNALED;
	REQUIRE(ibv_post_send(s->qp, wr, &bad) == 0 && bad == NULL, "ibv_post_send(op %d)",
		wr->opcode);
	return poll_one(s->send_cq);
}

int main(void)
{
	struct side a, b;
	struct ibv_send_wr wr, wrs[3], *bad;
	struct ibv_recv_wr rwr, *rbad;
	struct ibv_sge sge[3] = {};
	struct ibv_wc wc;
	uint64_t *atom;
	int gid;

	setvbuf(stdout, NULL, _IOLBF, 0);
	make_side(&a, IBV_QPT_RC, 256, 64);
	make_side(&b, IBV_QPT_RC, 256, 64);
	gid = loopback_gid_index(a.ctx);

	printf("# posting in RESET\n");
	memset(&wr, 0, sizeof(wr));
	wr.opcode = IBV_WR_SEND;
	bad = NULL;
	CHECK(ibv_post_send(a.qp, &wr, &bad) == EINVAL && bad == &wr,
	      "ibv_post_send in RESET: EINVAL, *bad_wr = the request");
	memset(&rwr, 0, sizeof(rwr));
	rbad = NULL;
	CHECK(ibv_post_recv(a.qp, &rwr, &rbad) == EINVAL && rbad == &rwr,
	      "ibv_post_recv in RESET: EINVAL, *bad_wr = the request");
	{
		struct ibv_qp_attr at = {.qp_state = IBV_QPS_RTS};

		CHECK(ibv_modify_qp(a.qp, &at, IBV_QP_STATE) == EINVAL && a.qp->state == IBV_QPS_RESET,
		      "RESET -> RTS is illegal: EINVAL, qp->state unchanged");
		at.rate_limit = 1000;
		CHECK(ibv_modify_qp(a.qp, &at, IBV_QP_RATE_LIMIT) == EOPNOTSUPP,
		      "IBV_QP_RATE_LIMIT: EOPNOTSUPP");
	}
	to_rts(a.qp, b.qp->qp_num, gid, ALL_ACCESS);
	to_rts(b.qp, a.qp->qp_num, gid, ALL_ACCESS);
	check_query(&a, &b, gid);

	printf("# SEND with two SGEs into two SGEs\n");
	memcpy(a.buf, "0123456789", 10);
	memcpy(a.buf + 100, "abcdef", 6);
	sge[0] = (struct ibv_sge){.addr = (uintptr_t)a.buf, .length = 10, .lkey = a.mr->lkey};
	sge[1] = (struct ibv_sge){.addr = (uintptr_t)a.buf + 100, .length = 6, .lkey = a.mr->lkey};
	{
		struct ibv_sge rs[2] = {
			{.addr = (uintptr_t)b.buf + 500, .length = 4, .lkey = b.mr->lkey},
			{.addr = (uintptr_t)b.buf + 600, .length = 100, .lkey = b.mr->lkey},
		};

		rwr = (struct ibv_recv_wr){.wr_id = 77, .sg_list = rs, .num_sge = 2};
		CHECK(ibv_post_recv(b.qp, &rwr, &rbad) == 0, "two-SGE receive posted");
	}
	memset(&wr, 0, sizeof(wr));
	wr = (struct ibv_send_wr){.wr_id = 1, .sg_list = sge, .num_sge = 2,
				  .opcode = IBV_WR_SEND_WITH_IMM, .imm_data = htonl(0x1234)};
	wc = post_and_poll(&a, &wr);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_SEND && wc.wr_id == 1 &&
		      wc.byte_len == 16,
	      "sender: SEND completion, byte_len 16");
	wc = poll_one(b.recv_cq);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV && wc.wr_id == 77 &&
		      wc.byte_len == 16 && (wc.wc_flags & IBV_WC_WITH_IMM) &&
		      ntohl(wc.imm_data) == 0x1234 && wc.qp_num == b.qp->qp_num,
	      "receiver: RECV with imm, byte_len 16");
	CHECK(!memcmp(b.buf + 500, "0123", 4) && !memcmp(b.buf + 600, "456789abcdef", 12),
	      "the data is scattered across both receive SGEs");

	printf("# inline SEND ignores the lkey\n");
	post_recv(&b, 78, 0, 64);
	{
		struct ibv_sge in = {.addr = (uintptr_t)"inline!", .length = 7, .lkey = 0xdead};

		wr = (struct ibv_send_wr){.wr_id = 2, .sg_list = &in, .num_sge = 1,
					  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_INLINE};
		wc = post_and_poll(&a, &wr);
	}
	CHECK(wc.status == IBV_WC_SUCCESS, "inline send of unregistered memory succeeds");
	wc = poll_one(b.recv_cq);
	CHECK(wc.wr_id == 78 && wc.byte_len == 7 && !memcmp(b.buf, "inline!", 7),
	      "inline data delivered");

	printf("# zero-length SEND\n");
	post_recv(&b, 79, 0, 64);
	wr = (struct ibv_send_wr){.wr_id = 3, .opcode = IBV_WR_SEND};
	wc = post_and_poll(&a, &wr);
	CHECK(wc.status == IBV_WC_SUCCESS, "zero-length SEND completes");
	wc = poll_one(b.recv_cq);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.byte_len == 0, "zero-length RECV, byte_len 0");

	printf("# RDMA WRITE and READ\n");
	for (int i = 0; i < 256; i++)
		a.buf[i] = (char)i;
	sge[0] = (struct ibv_sge){.addr = (uintptr_t)a.buf, .length = 256, .lkey = a.mr->lkey};
	wr = (struct ibv_send_wr){.wr_id = 4, .sg_list = sge, .num_sge = 1,
				  .opcode = IBV_WR_RDMA_WRITE};
	wr.wr.rdma.remote_addr = (uintptr_t)b.buf + 1024;
	wr.wr.rdma.rkey = b.mr->rkey;
	wc = post_and_poll(&a, &wr);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RDMA_WRITE && wc.byte_len == 256,
	      "RDMA WRITE completes");
	CHECK(!memcmp(b.buf + 1024, a.buf, 256), "the written bytes are at the target");
	memcpy(b.buf + 2000, "remote bytes", 12);
	sge[0] = (struct ibv_sge){.addr = (uintptr_t)a.buf + 3000, .length = 12, .lkey = a.mr->lkey};
	wr = (struct ibv_send_wr){.wr_id = 5, .sg_list = sge, .num_sge = 1,
				  .opcode = IBV_WR_RDMA_READ};
	wr.wr.rdma.remote_addr = (uintptr_t)b.buf + 2000;
	wr.wr.rdma.rkey = b.mr->rkey;
	wc = post_and_poll(&a, &wr);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RDMA_READ && wc.byte_len == 12 &&
		      !memcmp(a.buf + 3000, "remote bytes", 12),
	      "RDMA READ brings the remote bytes");

	printf("# atomics\n");
	atom = (uint64_t *)(b.buf + 3072);
	*atom = 40;
	sge[0] = (struct ibv_sge){.addr = (uintptr_t)a.buf + 3584, .length = 8, .lkey = a.mr->lkey};
	wr = (struct ibv_send_wr){.wr_id = 6, .sg_list = sge, .num_sge = 1,
				  .opcode = IBV_WR_ATOMIC_FETCH_AND_ADD};
	wr.wr.atomic.remote_addr = (uintptr_t)atom;
	wr.wr.atomic.rkey = b.mr->rkey;
	wr.wr.atomic.compare_add = 2;
	wc = post_and_poll(&a, &wr);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_FETCH_ADD &&
		      *(uint64_t *)(a.buf + 3584) == 40 && *atom == 42,
	      "FETCH_ADD: old value 40 returned, target 42");
	wr = (struct ibv_send_wr){.wr_id = 7, .sg_list = sge, .num_sge = 1,
				  .opcode = IBV_WR_ATOMIC_CMP_AND_SWP};
	wr.wr.atomic.remote_addr = (uintptr_t)atom;
	wr.wr.atomic.rkey = b.mr->rkey;
	wr.wr.atomic.compare_add = 42;
	wr.wr.atomic.swap = 1000;
	wc = post_and_poll(&a, &wr);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_COMP_SWAP &&
		      *(uint64_t *)(a.buf + 3584) == 42 && *atom == 1000,
	      "CMP_AND_SWP: matched 42, swapped in 1000");
	wr.wr.atomic.compare_add = 1;
	wr.wr.atomic.swap = 5;
	wc = post_and_poll(&a, &wr);
	CHECK(wc.status == IBV_WC_SUCCESS && *atom == 1000 && *(uint64_t *)(a.buf + 3584) == 1000,
	      "CMP_AND_SWP with a wrong compare leaves the target");

	printf("# ibv_reg_mr_iova: the remote address space starts at iova\n");
	{
		volatile int runtime_access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
		/* Runtime access flags: the ibv_reg_mr macro calls ibv_reg_mr_iova2. */
		struct ibv_mr *plain = ibv_reg_mr(b.pd, b.buf, 512, runtime_access);
		struct ibv_mr *imr = ibv_reg_mr_iova(b.pd, b.buf + 1024, 1024, 0x100000,
						     IBV_ACCESS_LOCAL_WRITE |
							     IBV_ACCESS_REMOTE_WRITE);

		CHECK(plain && plain->addr == b.buf && plain->rkey != b.mr->rkey,
		      "ibv_reg_mr with runtime flags (ibv_reg_mr_iova2)");
		CHECK(imr && imr->addr == b.buf + 1024 && imr->length == 1024,
		      "ibv_reg_mr_iova(iova 0x100000)");
		memcpy(a.buf, "at iova+16", 10);
		sge[0] = (struct ibv_sge){.addr = (uintptr_t)a.buf, .length = 10,
					  .lkey = a.mr->lkey};
		wr = (struct ibv_send_wr){.wr_id = 8, .sg_list = sge, .num_sge = 1,
					  .opcode = IBV_WR_RDMA_WRITE};
		wr.wr.rdma.remote_addr = 0x100000 + 16;
		wr.wr.rdma.rkey = imr->rkey;
		wc = post_and_poll(&a, &wr);
		CHECK(wc.status == IBV_WC_SUCCESS && !memcmp(b.buf + 1024 + 16, "at iova+16", 10),
		      "a write to iova+16 lands at addr+16");
		CHECK(ibv_dereg_mr(imr) == 0 && ibv_dereg_mr(plain) == 0, "ibv_dereg_mr x2");
	}

	printf("# long lists (more requests and inline pieces than fit one internal batch)\n");
	{
		static struct ibv_recv_wr r[60];
		static struct ibv_send_wr w[45];
		static struct ibv_sge rs[60], ws[45][2];
		int ok = 1;

		for (int i = 0; i < 60; i++) {
			rs[i] = (struct ibv_sge){.addr = (uintptr_t)b.buf + 64 * (i % 16),
						 .length = 64, .lkey = b.mr->lkey};
			r[i] = (struct ibv_recv_wr){.wr_id = 1000 + i, .sg_list = &rs[i],
						    .num_sge = 1, .next = i < 59 ? &r[i + 1] : NULL};
		}
		r[45].num_sge = 3;
		rbad = NULL;
		CHECK(ibv_post_recv(b.qp, &r[0], &rbad) == EINVAL && rbad == &r[45],
		      "a 60-request receive list refused at #45: *bad_wr = &r[45]");
		for (int i = 0; i < 45; i++) {
			static char text[45][4];

			snprintf(text[i], sizeof(text[i]), "%03d", i);
			ws[i][0] = (struct ibv_sge){.addr = (uintptr_t)text[i], .length = 2};
			ws[i][1] = (struct ibv_sge){.addr = (uintptr_t)text[i] + 2, .length = 1};
			w[i] = (struct ibv_send_wr){.wr_id = 2000 + i, .sg_list = ws[i], .num_sge = 2,
						    .opcode = IBV_WR_SEND,
						    .send_flags = IBV_SEND_INLINE | IBV_SEND_SIGNALED,
						    .next = i < 44 ? &w[i + 1] : NULL};
		}
		bad = NULL;
		CHECK(ibv_post_send(a.qp, &w[0], &bad) == 0 && bad == NULL,
		      "a 45-request list of two-piece inline SENDs is posted");
		for (int i = 0; i < 45 && ok; i++) {
			wc = poll_one(a.send_cq);
			ok = wc.wr_id == (uint64_t)(2000 + i) && wc.status == IBV_WC_SUCCESS;
			wc = poll_one(b.recv_cq);
			ok = ok && wc.wr_id == (uint64_t)(1000 + i) && wc.byte_len == 3;
			if (!ok)
				printf("# at %d: wr_id %llu status %d byte_len %u\n", i,
				       (unsigned long long)wc.wr_id, wc.status, wc.byte_len);
		}
		CHECK(ok, "45 send and 45 receive completions, in list order, 3 bytes each");
		CHECK(!memcmp(b.buf + 64 * (44 % 16), "044", 3), "the last message carries \"044\"");
		CHECK(ibv_poll_cq(b.recv_cq, 1, &wc) == 0, "no receive beyond the 45 posted");
	}

	printf("# *bad_wr names the first refused request\n");
	sge[0] = (struct ibv_sge){.addr = (uintptr_t)a.buf, .length = 8, .lkey = a.mr->lkey};
	for (int i = 0; i < 3; i++) {
		wrs[i] = (struct ibv_send_wr){.wr_id = 10 + i, .sg_list = sge, .num_sge = 1,
					      .opcode = IBV_WR_RDMA_WRITE,
					      .send_flags = IBV_SEND_SIGNALED,
					      .next = i < 2 ? &wrs[i + 1] : NULL};
		wrs[i].wr.rdma.remote_addr = (uintptr_t)b.buf;
		wrs[i].wr.rdma.rkey = b.mr->rkey;
	}
	wrs[1].num_sge = 3; /* > max_send_sge (2) */
	bad = NULL;
	CHECK(ibv_post_send(a.qp, &wrs[0], &bad) == EINVAL && bad == &wrs[1],
	      "3 requests, the 2nd with too many SGEs: EINVAL, *bad_wr = the 2nd");
	wc = poll_one(a.send_cq);
	CHECK(wc.wr_id == 10 && ibv_poll_cq(a.send_cq, 1, &wc) == 0,
	      "the 1st stayed posted and completed, the 3rd was not posted");
	{
		struct ibv_sge rs = {.addr = (uintptr_t)b.buf, .length = 8, .lkey = b.mr->lkey};
		struct ibv_recv_wr r[2] = {
			{.wr_id = 90, .sg_list = &rs, .num_sge = 1, .next = &r[1]},
			{.wr_id = 91, .sg_list = &rs, .num_sge = 3},
		};

		rbad = NULL;
		CHECK(ibv_post_recv(b.qp, &r[0], &rbad) == EINVAL && rbad == &r[1],
		      "ibv_post_recv: too many SGEs in the 2nd: EINVAL, *bad_wr = the 2nd");
	}
	wr = (struct ibv_send_wr){.wr_id = 11, .sg_list = sge, .num_sge = 1 << 20,
				  .opcode = IBV_WR_SEND};
	bad = NULL;
	CHECK(ibv_post_send(a.qp, &wr, &bad) == EINVAL && bad == &wr,
	      "a wild num_sge (2^20) with a 3-entry list: EINVAL, nothing read past it");
	wr = (struct ibv_send_wr){.wr_id = 12, .opcode = IBV_WR_BIND_MW};
	bad = NULL;
	CHECK(ibv_post_send(a.qp, &wr, &bad) == EINVAL && bad == &wr,
	      "IBV_WR_BIND_MW without a window: EINVAL");
	wr = (struct ibv_send_wr){.wr_id = 12, .sg_list = sge, .num_sge = 1,
				  .opcode = IBV_WR_ATOMIC_WRITE};
	bad = NULL;
	CHECK(ibv_post_send(a.qp, &wr, &bad) == EOPNOTSUPP && bad == &wr,
	      "IBV_WR_ATOMIC_WRITE through ibv_post_send (no operand for the value; only "
	      "ibv_wr_atomic_write): EOPNOTSUPP");
	wr = (struct ibv_send_wr){.wr_id = 11, .opcode = 99};
	bad = NULL;
	CHECK(ibv_post_send(a.qp, &wr, &bad) == EINVAL && bad == &wr,
	      "an undefined opcode: EINVAL");

	printf("# the SEND consumed the receive posted before it\n");
	post_recv(&b, 92, 0, 64);
	sge[0] = (struct ibv_sge){.addr = (uintptr_t)a.buf, .length = 4, .lkey = a.mr->lkey};
	wr = (struct ibv_send_wr){.wr_id = 13, .sg_list = sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND};
	wc = post_and_poll(&a, &wr);
	CHECK(wc.status == IBV_WC_SUCCESS, "SEND completes");
	wc = poll_one(b.recv_cq);
	CHECK(wc.wr_id == 90, "receive 90 (posted before the refused 91) took it");

	printf("# a bad rkey completes with IBV_WC_REM_ACCESS_ERR\n");
	sge[0] = (struct ibv_sge){.addr = (uintptr_t)a.buf, .length = 8, .lkey = a.mr->lkey};
	wr = (struct ibv_send_wr){.wr_id = 14, .sg_list = sge, .num_sge = 1,
				  .opcode = IBV_WR_RDMA_WRITE};
	wr.wr.rdma.remote_addr = (uintptr_t)b.buf;
	wr.wr.rdma.rkey = b.mr->rkey + 1;
	wc = post_and_poll(&a, &wr);
	CHECK(wc.status == IBV_WC_REM_ACCESS_ERR && wc.wr_id == 14 && wc.qp_num == a.qp->qp_num,
	      "RDMA WRITE with a bad rkey: IBV_WC_REM_ACCESS_ERR (%s)",
	      ibv_wc_status_str(wc.status));
	{
		struct ibv_qp_attr at;
		struct ibv_qp_init_attr in;

		CHECK(ibv_query_qp(a.qp, &at, IBV_QP_STATE, &in) == 0 && at.qp_state == IBV_QPS_ERR &&
			      a.qp->state == IBV_QPS_ERR,
		      "the requester QP is in ERR (query_qp refreshes qp->state)");
	}
	wr.wr_id = 15;
	wr.wr.rdma.rkey = b.mr->rkey;
	wc = post_and_poll(&a, &wr);
	CHECK(wc.status == IBV_WC_WR_FLUSH_ERR && wc.wr_id == 15,
	      "a request posted in ERR is flushed (IBV_WC_WR_FLUSH_ERR)");
	wc = poll_one(b.recv_cq);
	CHECK(wc.wr_id == 92 && wc.status == IBV_WC_WR_FLUSH_ERR,
	      "the responder went to ERR too and flushed its receive (%s)",
	      ibv_wc_status_str(wc.status));
	CHECK(drain_async(a.ctx, IBV_EVENT_CQ_ERR, a.send_cq) == 0 &&
		      drain_async(b.ctx, IBV_EVENT_CQ_ERR, b.recv_cq) == 0,
	      "no CQ error on either side");

	destroy_side(&a);
	destroy_side(&b);
	printf("# rc_traffic: all checks passed\n");
	return 0;
}
