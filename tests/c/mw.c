/* Memory windows through the ABI (ibv_alloc_mw(3), ibv_bind_mw(3), ibv_post_send(3);
 * rxe_mw.c), two RC QPs of two contexts in one process:
 *  - the ibv_context.ops slots alloc_mw/bind_mw/dealloc_mw are set, the device reports
 *    MEM_WINDOW and MEM_WINDOW_TYPE_2B; ibv_alloc_mw fills struct ibv_mw; type 3 is EINVAL;
 *  - type 1: ibv_bind_mw posts the bind (a signaled IBV_WC_BIND_MW completion), writes
 *    ibv_inc_rkey(old) into mw->rkey; an RDMA WRITE through the window lands although the
 *    MR itself grants no remote access; the old key is refused; ibv_dereg_mr of the bound
 *    MR is EINVAL; a zero-length rebind invalidates the window (IBV_WC_REM_ACCESS_ERR);
 *    the inline checks (type 2 → EINVAL, PD mismatch → EPERM) and the op itself agree;
 *  - type 2: an IBV_WR_BIND_MW work request with a chosen key (mw->rkey untouched), RDMA
 *    WRITE through it, IBV_WR_LOCAL_INV (IBV_WC_LOCAL_INV), then access fails; a second
 *    window invalidated remotely by IBV_WR_SEND_WITH_INV: the receiver's completion has
 *    IBV_WC_WITH_INV and the key in ibv_wc.invalidated_rkey and through
 *    ibv_wc_read_invalidated_rkey of an extended CQ;
 *  - ibv_dealloc_mw ends remote access; the MR can be deregistered afterwards.
 */
#include "common.h"

#define MW_ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)

static struct ibv_mr *mw_mr(struct side *s)
{
	/* The region grants no remote access itself: only windows do. */
	struct ibv_mr *mr = ibv_reg_mr(s->pd, s->buf + 2048, 1024,
				       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);

	REQUIRE(mr != NULL, "ibv_reg_mr(LOCAL_WRITE | MW_BIND)");
	return mr;
}

/* RDMA WRITE of "window" from a's buffer to (raddr, rkey); returns the status. */
static enum ibv_wc_status write_through(struct side *a, uint64_t wr_id, uint64_t raddr,
					uint32_t rkey)
{
	memcpy(a->buf, "window", 6);
	post_write(a, wr_id, 6, raddr, rkey, IBV_SEND_SIGNALED);
	struct ibv_wc wc = poll_one(a->send_cq);
	REQUIRE(wc.wr_id == wr_id, "the write's completion (wr_id %llu)",
		(unsigned long long)wc.wr_id);
	return wc.status;
}

/* Re-creates a's QP pair after an error moved them to ERR. */
static void reconnect(struct side *a, struct side *b, int gid)
{
	struct ibv_qp_attr r = {.qp_state = IBV_QPS_RESET};

	REQUIRE(ibv_modify_qp(a->qp, &r, IBV_QP_STATE) == 0 &&
			ibv_modify_qp(b->qp, &r, IBV_QP_STATE) == 0,
		"both QPs to RESET");
	to_rts(a->qp, b->qp->qp_num, gid, ALL_ACCESS);
	to_rts(b->qp, a->qp->qp_num, gid, ALL_ACCESS);
}

static void type1(struct side *a, struct side *b, int gid)
{
	struct ibv_mr *mr = mw_mr(b);
	struct ibv_mw *mw;
	struct ibv_mw_bind bind = {.wr_id = 7, .send_flags = IBV_SEND_SIGNALED,
				   .bind_info = {.mr = mr, .addr = (uintptr_t)mr->addr,
						 .length = 1024, .mw_access_flags = MW_ACCESS}};
	uint32_t old;
	struct ibv_wc wc;

	printf("# type 1\n");
	errno = 0;
	CHECK(!ibv_alloc_mw(b->pd, 3) && errno == EINVAL, "ibv_alloc_mw(type 3): NULL/EINVAL");
	mw = ibv_alloc_mw(b->pd, IBV_MW_TYPE_1);
	CHECK(mw && mw->context == b->ctx && mw->pd == b->pd && mw->type == IBV_MW_TYPE_1 &&
		      mw->rkey != 0,
	      "ibv_alloc_mw(type 1) fills context, pd, type, rkey 0x%x", mw ? mw->rkey : 0);
	CHECK(write_through(a, 1, (uintptr_t)mr->addr, mr->rkey) == IBV_WC_REM_ACCESS_ERR,
	      "the MR's own rkey grants no remote write: IBV_WC_REM_ACCESS_ERR");
	reconnect(a, b, gid);

	old = mw->rkey;
	CHECK(ibv_bind_mw(b->qp, mw, &bind) == 0, "ibv_bind_mw posts the bind");
	CHECK(mw->rkey == ibv_inc_rkey(old) && mw->rkey != old,
	      "mw->rkey is ibv_inc_rkey(old) right after the post (0x%x -> 0x%x)", old, mw->rkey);
	wc = poll_one(b->send_cq);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_BIND_MW && wc.wr_id == 7,
	      "signaled bind completes: IBV_WC_BIND_MW, wr_id 7");
	CHECK(write_through(a, 2, (uintptr_t)mr->addr + 100, mw->rkey) == IBV_WC_SUCCESS &&
		      !memcmp(b->buf + 2048 + 100, "window", 6),
	      "RDMA WRITE through the window lands at offset 100");
	CHECK(ibv_dereg_mr(mr) == EINVAL, "ibv_dereg_mr of a region with a bound window: EINVAL");
	CHECK(write_through(a, 3, (uintptr_t)mr->addr, old) == IBV_WC_REM_ACCESS_ERR,
	      "the window's previous key is stale: IBV_WC_REM_ACCESS_ERR");
	reconnect(a, b, gid);

	/* The inline's checks, then the op reached directly (it repeats them). */
	bind.bind_info.length = 0;
	bind.bind_info.mr = NULL;
	bind.bind_info.addr = 8;
	CHECK(ibv_bind_mw(b->qp, mw, &bind) == EINVAL,
	      "ibv_bind_mw with a range but no MR: EINVAL");
	CHECK(b->ctx->ops.bind_mw(b->qp, mw, &bind) == EINVAL,
	      "the bind_mw op itself: EINVAL for a range without an MR");
	{
		struct ibv_pd *pd2 = ibv_alloc_pd(b->ctx);
		struct ibv_mr *mr2 = ibv_reg_mr(pd2, b->buf, 64,
						IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
		struct ibv_mw_bind other = {.bind_info = {.mr = mr2, .addr = (uintptr_t)b->buf,
							  .length = 64,
							  .mw_access_flags = MW_ACCESS}};

		REQUIRE(pd2 && mr2, "a second PD and MR");
		CHECK(ibv_bind_mw(b->qp, mw, &other) == EPERM,
		      "ibv_bind_mw with an MR of another PD: EPERM");
		CHECK(b->ctx->ops.bind_mw(b->qp, mw, &other) == EPERM,
		      "the bind_mw op itself: EPERM");
		REQUIRE(ibv_dereg_mr(mr2) == 0 && ibv_dealloc_pd(pd2) == 0, "cleanup");
	}

	printf("# zero-length rebind invalidates a type 1 window\n");
	old = mw->rkey;
	bind = (struct ibv_mw_bind){.wr_id = 8, .send_flags = IBV_SEND_SIGNALED};
	CHECK(ibv_bind_mw(b->qp, mw, &bind) == 0 && mw->rkey == ibv_inc_rkey(old),
	      "zero-length ibv_bind_mw (no MR) posted, key advanced");
	wc = poll_one(b->send_cq);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_BIND_MW, "unbind completes");
	CHECK(write_through(a, 4, (uintptr_t)mr->addr, mw->rkey) == IBV_WC_REM_ACCESS_ERR,
	      "access through the unbound window: IBV_WC_REM_ACCESS_ERR");
	reconnect(a, b, gid);
	CHECK(ibv_dereg_mr(mr) == 0, "the region is no longer held: ibv_dereg_mr succeeds");
	CHECK(ibv_dealloc_mw(mw) == 0, "ibv_dealloc_mw(type 1)");
}

static uint32_t bind_type2(struct side *b, struct ibv_mw *mw, struct ibv_mr *mr, uint64_t wr_id)
{
	struct ibv_send_wr wr = {.wr_id = wr_id, .opcode = IBV_WR_BIND_MW,
				 .send_flags = IBV_SEND_SIGNALED};
	struct ibv_send_wr *bad = NULL;
	uint32_t before = mw->rkey;
	uint32_t key = ibv_inc_rkey(mw->rkey);
	struct ibv_wc wc;

	wr.bind_mw.mw = mw;
	wr.bind_mw.rkey = key;
	wr.bind_mw.bind_info = (struct ibv_mw_bind_info){
		.mr = mr, .addr = (uintptr_t)mr->addr, .length = 1024, .mw_access_flags = MW_ACCESS};
	CHECK(ibv_post_send(b->qp, &wr, &bad) == 0 && bad == NULL,
	      "IBV_WR_BIND_MW posted (wr.bind_mw.{mw, rkey, bind_info})");
	CHECK(mw->rkey == before, "a type 2 bind leaves mw->rkey as it was (the caller's key)");
	wc = poll_one(b->send_cq);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_BIND_MW && wc.wr_id == wr_id,
	      "type 2 bind completes: IBV_WC_BIND_MW");
	return key;
}

static void type2(struct side *a, struct side *b, int gid)
{
	struct ibv_mr *mr = mw_mr(b);
	struct ibv_mw *mw = ibv_alloc_mw(b->pd, IBV_MW_TYPE_2);
	struct ibv_mw_bind bind = {.bind_info = {.mr = mr, .addr = (uintptr_t)mr->addr,
						 .length = 8, .mw_access_flags = MW_ACCESS}};
	struct ibv_send_wr wr, *bad;
	struct ibv_wc wc;
	uint32_t key;

	printf("# type 2: bind by work request, LOCAL_INV\n");
	CHECK(mw && mw->type == IBV_MW_TYPE_2 && mw->pd == b->pd, "ibv_alloc_mw(type 2)");
	CHECK(ibv_bind_mw(b->qp, mw, &bind) == EINVAL,
	      "ibv_bind_mw of a type 2 window: EINVAL (type 2 binds by work request)");
	key = bind_type2(b, mw, mr, 20);
	CHECK(write_through(a, 21, (uintptr_t)mr->addr + 8, key) == IBV_WC_SUCCESS &&
		      !memcmp(b->buf + 2048 + 8, "window", 6),
	      "RDMA WRITE through the type 2 window lands");
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = 22;
	wr.opcode = IBV_WR_LOCAL_INV;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.invalidate_rkey = key;
	bad = NULL;
	CHECK(ibv_post_send(b->qp, &wr, &bad) == 0, "IBV_WR_LOCAL_INV (invalidate_rkey) posted");
	wc = poll_one(b->send_cq);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_LOCAL_INV && wc.wr_id == 22,
	      "LOCAL_INV completes: IBV_WC_LOCAL_INV");
	CHECK(write_through(a, 23, (uintptr_t)mr->addr, key) == IBV_WC_REM_ACCESS_ERR,
	      "access after LOCAL_INV: IBV_WC_REM_ACCESS_ERR");
	reconnect(a, b, gid);

	printf("# type 2: SEND_WITH_INV invalidates at the receiver\n");
	key = bind_type2(b, mw, mr, 30);
	post_recv(b, 31, 0, 64);
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = 32;
	wr.opcode = IBV_WR_SEND_WITH_INV;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.invalidate_rkey = key;
	bad = NULL;
	CHECK(ibv_post_send(a->qp, &wr, &bad) == 0, "IBV_WR_SEND_WITH_INV (no data) posted");
	wc = poll_one(a->send_cq);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_SEND, "the sender's completion");
	wc = poll_one(b->recv_cq);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 31 && wc.opcode == IBV_WC_RECV &&
		      (wc.wc_flags & IBV_WC_WITH_INV) && !(wc.wc_flags & IBV_WC_WITH_IMM) &&
		      wc.invalidated_rkey == key,
	      "the receiver sees IBV_WC_WITH_INV and invalidated_rkey 0x%x", wc.invalidated_rkey);
	CHECK(write_through(a, 33, (uintptr_t)mr->addr, key) == IBV_WC_REM_ACCESS_ERR,
	      "access after SEND_WITH_INV: IBV_WC_REM_ACCESS_ERR");
	reconnect(a, b, gid);

	printf("# dealloc ends access; the region is then free\n");
	key = bind_type2(b, mw, mr, 40);
	CHECK(ibv_dereg_mr(mr) == EINVAL, "ibv_dereg_mr with a bound type 2 window: EINVAL");
	CHECK(ibv_dealloc_mw(mw) == 0, "ibv_dealloc_mw(type 2, bound)");
	CHECK(write_through(a, 41, (uintptr_t)mr->addr, key) == IBV_WC_REM_ACCESS_ERR,
	      "access through a deallocated window: IBV_WC_REM_ACCESS_ERR");
	reconnect(a, b, gid);
	CHECK(ibv_dereg_mr(mr) == 0, "ibv_dereg_mr once the window is gone");
}

/* SEND_WITH_INV seen through an extended CQ: ibv_wc_read_invalidated_rkey. */
static void invalidated_rkey_on_cq_ex(int gid)
{
	struct side a, b;
	struct ibv_cq_init_attr_ex cattr = {.cqe = 16, .wc_flags = IBV_WC_STANDARD_FLAGS};
	struct ibv_cq_ex *cqx;
	struct ibv_qp_init_attr init;
	struct ibv_mr *mr;
	struct ibv_mw *mw;
	struct ibv_send_wr wr, *bad = NULL;
	struct ibv_poll_cq_attr pattr = {};
	uint32_t key;

	printf("# ibv_wc_read_invalidated_rkey\n");
	make_side(&a, IBV_QPT_RC, 16, 8);
	make_side(&b, IBV_QPT_RC, 16, 8);
	cqx = ibv_create_cq_ex(b.ctx, &cattr);
	REQUIRE(cqx != NULL, "ibv_create_cq_ex");
	REQUIRE(ibv_destroy_qp(b.qp) == 0, "replace b's QP");
	memset(&init, 0, sizeof(init));
	init.send_cq = b.send_cq;
	init.recv_cq = ibv_cq_ex_to_cq(cqx);
	init.cap = (struct ibv_qp_cap){.max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1,
				       .max_recv_sge = 1};
	init.qp_type = IBV_QPT_RC;
	b.qp = ibv_create_qp(b.pd, &init);
	REQUIRE(b.qp != NULL, "QP receiving into the extended CQ");
	to_rts(a.qp, b.qp->qp_num, gid, ALL_ACCESS);
	to_rts(b.qp, a.qp->qp_num, gid, ALL_ACCESS);
	mr = mw_mr(&b);
	mw = ibv_alloc_mw(b.pd, IBV_MW_TYPE_2);
	REQUIRE(mw != NULL, "ibv_alloc_mw(type 2)");
	key = bind_type2(&b, mw, mr, 50);
	post_recv(&b, 51, 0, 64);
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = 52;
	wr.opcode = IBV_WR_SEND_WITH_INV;
	wr.invalidate_rkey = key;
	REQUIRE(ibv_post_send(a.qp, &wr, &bad) == 0, "SEND_WITH_INV posted");
	{
		int r = ENOENT;

		for (long i = 0; i < POLL_BOUND && r == ENOENT; i++)
			r = ibv_start_poll(cqx, &pattr);
		CHECK(r == 0 && cqx->status == IBV_WC_SUCCESS && cqx->wr_id == 51,
		      "ibv_start_poll: the receive");
		CHECK((ibv_wc_read_wc_flags(cqx) & IBV_WC_WITH_INV) &&
			      ibv_wc_read_invalidated_rkey(cqx) == key,
		      "ibv_wc_read_wc_flags has WITH_INV, ibv_wc_read_invalidated_rkey = 0x%x",
		      key);
		ibv_end_poll(cqx);
	}
	REQUIRE(ibv_dealloc_mw(mw) == 0 && ibv_dereg_mr(mr) == 0, "cleanup");
	REQUIRE(ibv_destroy_qp(b.qp) == 0, "destroy b's QP");
	b.qp = make_qp(&b, IBV_QPT_RC, 4);
	REQUIRE(ibv_destroy_cq(ibv_cq_ex_to_cq(cqx)) == 0, "destroy the extended CQ");
	destroy_side(&a);
	destroy_side(&b);
}

int main(void)
{
	struct side a, b;
	struct ibv_device_attr attr;
	int gid;

	setvbuf(stdout, NULL, _IOLBF, 0);
	make_pair(&a, &b, IBV_QPT_RC, 64, 16);
	gid = loopback_gid_index(a.ctx);
	REQUIRE(ibv_query_device(a.ctx, &attr) == 0, "ibv_query_device");
	CHECK((attr.device_cap_flags & IBV_DEVICE_MEM_WINDOW) &&
		      (attr.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2B) && attr.max_mw > 0,
	      "the device reports MEM_WINDOW, MEM_WINDOW_TYPE_2B, max_mw %d", attr.max_mw);
	CHECK(a.ctx->ops.alloc_mw && a.ctx->ops.bind_mw && a.ctx->ops.dealloc_mw,
	      "ibv_context.ops.alloc_mw/bind_mw/dealloc_mw are set");
	type1(&a, &b, gid);
	type2(&a, &b, gid);
	destroy_side(&a);
	destroy_side(&b);
	invalidated_rkey_on_cq_ex(gid);
	printf("# mw: all checks passed\n");
	return 0;
}
