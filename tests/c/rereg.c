/* ibv_rereg_mr(3) through the ABI (libibverbs/verbs.c): two RC QPs of two contexts in one process.
 *  - libibverbs' input checks: unknown flags, CHANGE_TRANSLATION with a NULL address or
 *    0 length, access without CHANGE_ACCESS → IBV_REREG_MR_ERR_INPUT, errno EINVAL;
 *  - CHANGE_ACCESS: granting REMOTE_WRITE makes an RDMA WRITE land with the *same* rkey,
 *    revoking it makes the next one fail (IBV_WC_REM_ACCESS_ERR); REMOTE_WRITE without
 *    LOCAL_WRITE is refused: IBV_REREG_MR_ERR_CMD, errno EINVAL;
 *  - CHANGE_PD: mr->pd follows; a receive through the region in the old PD's QP fails
 *    (the sender sees IBV_WC_REM_OP_ERR, as pyverbs' test_mr_rereg_pd expects); the new PD
 *    cannot be deallocated while it holds the region; moving back restores traffic; a
 *    NULL PD or one of another context is IBV_REREG_MR_ERR_CMD/EINVAL;
 *  - CHANGE_TRANSLATION: mr->addr/length follow, keys stay, writes land in the new buffer
 *    and the old range is outside the region;
 *  - a region with a bound memory window cannot be re-registered (ERR_CMD, EBUSY).
 */
#include "common.h"

static enum ibv_wc_status write_to(struct side *a, uint64_t wr_id, const char *what,
				   uint64_t raddr, uint32_t rkey)
{
	struct ibv_wc wc;

	strcpy(a->buf, what);
	post_write(a, wr_id, strlen(what), raddr, rkey, IBV_SEND_SIGNALED);
	wc = poll_one(a->send_cq);
	REQUIRE(wc.wr_id == wr_id, "the write's completion");
	return wc.status;
}

static void reconnect(struct side *a, struct side *b, int gid)
{
	struct ibv_qp_attr r = {.qp_state = IBV_QPS_RESET};

	REQUIRE(ibv_modify_qp(a->qp, &r, IBV_QP_STATE) == 0 &&
			ibv_modify_qp(b->qp, &r, IBV_QP_STATE) == 0,
		"both QPs to RESET");
	to_rts(a->qp, b->qp->qp_num, gid, ALL_ACCESS);
	to_rts(b->qp, a->qp->qp_num, gid, ALL_ACCESS);
}

int main(void)
{
	struct side a, b;
	struct ibv_mr *mr;
	struct ibv_pd *pd2;
	uint32_t lkey, rkey;
	char *newbuf;
	int gid;

	setvbuf(stdout, NULL, _IOLBF, 0);
	make_pair(&a, &b, IBV_QPT_RC, 64, 16);
	gid = loopback_gid_index(a.ctx);
	mr = ibv_reg_mr(b.pd, b.buf + 2048, 1024, IBV_ACCESS_LOCAL_WRITE);
	REQUIRE(mr != NULL, "ibv_reg_mr(LOCAL_WRITE)");
	lkey = mr->lkey;
	rkey = mr->rkey;

	printf("# input checks (IBV_REREG_MR_ERR_INPUT)\n");
	errno = 0;
	CHECK(ibv_rereg_mr(mr, 1 << 3, NULL, NULL, 0, 0) == IBV_REREG_MR_ERR_INPUT &&
		      errno == EINVAL,
	      "unknown flag: IBV_REREG_MR_ERR_INPUT/EINVAL");
	errno = 0;
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, NULL, 64, 0) ==
			      IBV_REREG_MR_ERR_INPUT &&
		      errno == EINVAL,
	      "CHANGE_TRANSLATION with a NULL address: IBV_REREG_MR_ERR_INPUT/EINVAL");
	errno = 0;
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, b.buf, 0, 0) ==
			      IBV_REREG_MR_ERR_INPUT &&
		      errno == EINVAL,
	      "CHANGE_TRANSLATION with length 0: IBV_REREG_MR_ERR_INPUT/EINVAL");
	errno = 0;
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, b.pd, NULL, 0, IBV_ACCESS_LOCAL_WRITE) ==
			      IBV_REREG_MR_ERR_INPUT &&
		      errno == EINVAL,
	      "access without CHANGE_ACCESS: IBV_REREG_MR_ERR_INPUT/EINVAL");

	printf("# CHANGE_ACCESS\n");
	CHECK(write_to(&a, 1, "denied", (uintptr_t)mr->addr, rkey) == IBV_WC_REM_ACCESS_ERR,
	      "before: the region grants no remote write (IBV_WC_REM_ACCESS_ERR)");
	reconnect(&a, &b, gid);
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
			   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE) == 0,
	      "rereg ACCESS → LOCAL_WRITE | REMOTE_WRITE");
	CHECK(mr->lkey == lkey && mr->rkey == rkey && mr->pd == b.pd &&
		      mr->addr == b.buf + 2048 && mr->length == 1024,
	      "keys, pd, addr, length unchanged");
	CHECK(write_to(&a, 2, "granted", (uintptr_t)mr->addr + 4, rkey) == IBV_WC_SUCCESS &&
		      !memcmp(b.buf + 2048 + 4, "granted", 7),
	      "an RDMA WRITE with the old rkey now lands");
	errno = 0;
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
			   IBV_ACCESS_REMOTE_WRITE) == IBV_REREG_MR_ERR_CMD &&
		      errno == EINVAL,
	      "REMOTE_WRITE without LOCAL_WRITE: IBV_REREG_MR_ERR_CMD/EINVAL");
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
			   IBV_ACCESS_LOCAL_WRITE) == 0,
	      "rereg ACCESS → LOCAL_WRITE only");
	CHECK(write_to(&a, 3, "revoked", (uintptr_t)mr->addr, rkey) == IBV_WC_REM_ACCESS_ERR,
	      "the next RDMA WRITE fails: IBV_WC_REM_ACCESS_ERR");
	reconnect(&a, &b, gid);

	printf("# CHANGE_PD\n");
	pd2 = ibv_alloc_pd(b.ctx);
	REQUIRE(pd2 != NULL, "a second PD");
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD | IBV_REREG_MR_CHANGE_ACCESS, pd2, NULL, 0,
			   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE) == 0 &&
		      mr->pd == pd2 && mr->lkey == lkey && mr->rkey == rkey,
	      "rereg PD|ACCESS: mr->pd is the new PD, keys unchanged");
	CHECK(ibv_dealloc_pd(pd2) == EBUSY, "the new PD holds the region: ibv_dealloc_pd EBUSY");
	{
		struct ibv_sge s = {.addr = (uintptr_t)mr->addr, .length = 64, .lkey = mr->lkey};
		struct ibv_recv_wr r = {.wr_id = 10, .sg_list = &s, .num_sge = 1}, *rbad = NULL;
		struct ibv_sge ss = {.addr = (uintptr_t)a.buf, .length = 8, .lkey = a.mr->lkey};
		struct ibv_send_wr w = {.wr_id = 11, .sg_list = &ss, .num_sge = 1,
					.opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED};
		struct ibv_send_wr *bad = NULL;
		struct ibv_wc wc;

		REQUIRE(ibv_post_recv(b.qp, &r, &rbad) == 0, "a receive through the moved region");
		REQUIRE(ibv_post_send(a.qp, &w, &bad) == 0, "SEND");
		wc = poll_one(a.send_cq);
		CHECK(wc.wr_id == 11 && wc.status == IBV_WC_REM_OP_ERR,
		      "the receive's lkey is in another PD: the sender sees IBV_WC_REM_OP_ERR (%s)",
		      ibv_wc_status_str(wc.status));
		wc = poll_one(b.recv_cq);
		CHECK(wc.wr_id == 10 && wc.status != IBV_WC_SUCCESS,
		      "the receive completes in error (%s)", ibv_wc_status_str(wc.status));
	}
	CHECK(write_to(&a, 12, "otherpd", (uintptr_t)mr->addr, rkey) != IBV_WC_SUCCESS,
	      "an RDMA WRITE to the region of another PD fails");
	reconnect(&a, &b, gid);
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, b.pd, NULL, 0, 0) == 0 && mr->pd == b.pd,
	      "rereg PD back to the QP's PD");
	CHECK(write_to(&a, 13, "back", (uintptr_t)mr->addr, rkey) == IBV_WC_SUCCESS &&
		      !memcmp(b.buf + 2048, "back", 4),
	      "traffic works again after moving back");
	CHECK(ibv_dealloc_pd(pd2) == 0, "the second PD is free again");
	errno = 0;
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, NULL, NULL, 0, 0) ==
			      IBV_REREG_MR_ERR_CMD &&
		      errno == EINVAL && mr->pd == b.pd,
	      "CHANGE_PD to a NULL PD: IBV_REREG_MR_ERR_CMD/EINVAL, mr->pd unchanged");
	errno = 0;
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, a.pd, NULL, 0, 0) ==
			      IBV_REREG_MR_ERR_CMD &&
		      errno == EINVAL && mr->pd == b.pd,
	      "CHANGE_PD to a PD of another context: IBV_REREG_MR_ERR_CMD/EINVAL");

	printf("# CHANGE_TRANSLATION\n");
	newbuf = aligned_alloc(4096, 4096);
	memset(newbuf, 0, 4096);
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, newbuf, 512, 0) == 0 &&
		      mr->addr == newbuf && mr->length == 512 && mr->lkey == lkey &&
		      mr->rkey == rkey,
	      "rereg TRANSLATION: mr->addr/length are the new range, keys unchanged");
	CHECK(write_to(&a, 20, "moved", (uintptr_t)newbuf + 16, rkey) == IBV_WC_SUCCESS &&
		      !memcmp(newbuf + 16, "moved", 5),
	      "an RDMA WRITE lands in the new buffer");
	CHECK(write_to(&a, 21, "oldrange", (uintptr_t)b.buf + 2048, rkey) ==
		      IBV_WC_REM_ACCESS_ERR,
	      "the old range is outside the region: IBV_WC_REM_ACCESS_ERR");
	reconnect(&a, &b, gid);

	printf("# a bound window pins the region\n");
	{
		struct ibv_mr *wmr = ibv_reg_mr(b.pd, b.buf, 256,
						IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
		struct ibv_mw *mw = ibv_alloc_mw(b.pd, IBV_MW_TYPE_1);
		struct ibv_mw_bind bind = {.wr_id = 30, .send_flags = IBV_SEND_SIGNALED,
					   .bind_info = {.mr = wmr, .addr = (uintptr_t)b.buf,
							 .length = 256,
							 .mw_access_flags = IBV_ACCESS_REMOTE_READ}};

		REQUIRE(wmr && mw && ibv_bind_mw(b.qp, mw, &bind) == 0, "bind a type 1 window");
		REQUIRE(poll_one(b.send_cq).status == IBV_WC_SUCCESS, "bind completes");
		errno = 0;
		CHECK(ibv_rereg_mr(wmr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
				   IBV_ACCESS_LOCAL_WRITE) == IBV_REREG_MR_ERR_CMD &&
			      errno == EBUSY,
		      "rereg of a region with a bound window: IBV_REREG_MR_ERR_CMD/EBUSY");
		REQUIRE(ibv_dealloc_mw(mw) == 0 && ibv_dereg_mr(wmr) == 0, "cleanup");
	}

	CHECK(ibv_dereg_mr(mr) == 0, "ibv_dereg_mr of a re-registered region");
	free(newbuf);
	destroy_side(&a);
	destroy_side(&b);
	printf("# rereg: all checks passed\n");
	return 0;
}
