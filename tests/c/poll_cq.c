/* ibv_poll_cq(3) through the ABI, and the overrun rules of ibv_create_cq_ex(3):
 *  - returns min(num_entries, available), oldest first, each removed for good;
 *  - 0 on an empty CQ;
 *  - overrun: a negative return afterwards and IBV_EVENT_CQ_ERR on the async fd;
 *  - IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN: the oldest CQEs are lost, nothing errors.
 */
#include "common.h"

static void batch_poll(void)
{
	struct side a, b;
	struct ibv_wc wc[8];
	const int total = 10;
	int n, next = 0;

	printf("# batch polling\n");
	make_pair(&a, &b, IBV_QPT_RC, 64, 64);
	CHECK(ibv_poll_cq(a.send_cq, 8, wc) == 0, "an empty CQ polls 0");
	for (int i = 0; i < total; i++)
		post_write(&a, 100 + i, 8, (uintptr_t)b.buf, b.mr->rkey, IBV_SEND_SIGNALED);

	n = ibv_poll_cq(a.send_cq, 3, wc);
	CHECK(n == 3, "poll(3) with %d available returns 3 (got %d)", total, n);
	for (int i = 0; i < n; i++, next++)
		CHECK(wc[i].wr_id == (uint64_t)(100 + next) && wc[i].status == IBV_WC_SUCCESS &&
			      wc[i].opcode == IBV_WC_RDMA_WRITE && wc[i].qp_num == a.qp->qp_num,
		      "entry %d: wr_id %llu, oldest first, RDMA_WRITE, qp_num", i,
		      (unsigned long long)wc[i].wr_id);
	n = ibv_poll_cq(a.send_cq, 8, wc);
	CHECK(n == total - 3, "poll(8) with 7 left returns 7 (got %d)", n);
	for (int i = 0; i < n; i++, next++)
		CHECK(wc[i].wr_id == (uint64_t)(100 + next), "entry %d: wr_id %llu in order", i,
		      (unsigned long long)wc[i].wr_id);
	CHECK(ibv_poll_cq(a.send_cq, 8, wc) == 0, "polled completions are removed for good");
	CHECK(ibv_poll_cq(a.send_cq, 0, wc) == 0, "poll(0) returns 0");

	/* An unsignaled write completes silently; a signaled one after it is reported. */
	post_write(&a, 1, 8, (uintptr_t)b.buf, b.mr->rkey, 0);
	post_write(&a, 2, 8, (uintptr_t)b.buf, b.mr->rkey, IBV_SEND_SIGNALED);
	n = ibv_poll_cq(a.send_cq, 8, wc);
	CHECK(n == 1 && wc[0].wr_id == 2, "unsignaled requests produce no completion");
	destroy_side(&a);
	destroy_side(&b);
}

static void overrun(void)
{
	struct side a, b;
	struct ibv_wc wc[4];
	int cqe, n, events;

	printf("# overrun puts the CQ in error\n");
	make_pair(&a, &b, IBV_QPT_RC, 4, 64);
	cqe = a.send_cq->cqe;
	for (int i = 0; i <= cqe; i++)
		post_write(&a, i, 8, (uintptr_t)b.buf, b.mr->rkey, IBV_SEND_SIGNALED);
	n = ibv_poll_cq(a.send_cq, 4, wc);
	CHECK(n < 0, "after %d completions into a CQ of %d, ibv_poll_cq fails (%d)", cqe + 1,
	      cqe, n);
	events = drain_async(a.ctx, IBV_EVENT_CQ_ERR, a.send_cq);
	CHECK(events == 1, "exactly one IBV_EVENT_CQ_ERR about this CQ (%d)", events);
	CHECK(ibv_poll_cq(a.send_cq, 4, wc) < 0, "the CQ cannot be used any more");
	destroy_side(&a);
	destroy_side(&b);
}

static void ignore_overrun(void)
{
	struct side a, b;
	struct ibv_wc wc[16];
	struct ibv_cq_init_attr_ex attr = {
		.cqe = 4,
		.wc_flags = IBV_WC_STANDARD_FLAGS,
		.comp_mask = IBV_CQ_INIT_ATTR_MASK_FLAGS,
		.flags = IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN,
	};
	struct ibv_cq_ex *cqx;
	struct ibv_cq *cq;
	int cqe, n, extra = 3;

	printf("# IGNORE_OVERRUN loses the oldest, never errors\n");
	make_side(&a, IBV_QPT_RC, 16, 64);
	make_side(&b, IBV_QPT_RC, 16, 64);
	cqx = ibv_create_cq_ex(a.ctx, &attr);
	CHECK(cqx != NULL, "ibv_create_cq_ex(IGNORE_OVERRUN)");
	cq = ibv_cq_ex_to_cq(cqx);
	cqe = cq->cqe;
	CHECK(cqe >= 4, "cq->cqe %d >= 4", cqe);
	/* A QP completing to the ignore-overrun CQ. */
	CHECK(ibv_destroy_qp(a.qp) == 0 && ibv_destroy_cq(a.send_cq) == 0,
	      "ibv_destroy_qp, ibv_destroy_cq (replaced)");
	a.send_cq = cq;
	a.qp = make_qp(&a, IBV_QPT_RC, 64);
	to_rts(a.qp, b.qp->qp_num, loopback_gid_index(a.ctx), ALL_ACCESS);
	to_rts(b.qp, a.qp->qp_num, loopback_gid_index(a.ctx), ALL_ACCESS);
	for (int i = 0; i < cqe + extra; i++)
		post_write(&a, i, 8, (uintptr_t)b.buf, b.mr->rkey, IBV_SEND_SIGNALED);
	n = ibv_poll_cq(cq, 16, wc);
	CHECK(n == cqe, "a full CQ holds %d completions (got %d)", cqe, n);
	for (int i = 0; i < n; i++)
		CHECK(wc[i].wr_id == (uint64_t)(extra + i) && wc[i].status == IBV_WC_SUCCESS,
		      "entry %d is wr_id %d: the %d oldest were overwritten", i, extra + i, extra);
	CHECK(drain_async(a.ctx, IBV_EVENT_CQ_ERR, cq) == 0, "no IBV_EVENT_CQ_ERR");
	CHECK(a.qp->state == IBV_QPS_RTS, "the QP stays in RTS");
	post_write(&a, 77, 8, (uintptr_t)b.buf, b.mr->rkey, IBV_SEND_SIGNALED);
	CHECK(poll_one(cq).wr_id == 77, "the CQ keeps working");
	destroy_side(&a);
	destroy_side(&b);
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	batch_poll();
	overrun();
	ignore_overrun();
	printf("# poll_cq: all checks passed\n");
	return 0;
}
