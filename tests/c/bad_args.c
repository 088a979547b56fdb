/* Bad arguments through the C ABI: a table-driven matrix over the verbs of libibverbs.
 *
 * One row per case: {verb, argument case, expected outcome, source of the expected value}.
 * Every row runs the verb with a bad argument on otherwise live objects and compares the
 * outcome, normalised to one number:
 *   - 0 for success, else the errno in the verb's convention (the returned errno, or
 *     errno after NULL / -1; -errno of ibv_poll_cq);
 *   - ANY_ERR for "fails, errno unspecified" (rdma-core's -1 from a sysfs read);
 *   - SIDE_EFFECT when the verb answered as expected but left a partial side effect
 *     (a row that checks one says so in its case text);
 *   - for rows about a completion, the completion's status (the row says so).
 * A row whose outcome differs prints "FAIL" and the program exits 1 after the table.
 *
 * Sources: rdma-core 44 (libibverbs/verbs.c, providers/rxe/rxe.c; for device memory,
 * on-demand paging and object import, which rxe 6.1 lacks, providers/mlx5/verbs.c,
 * libibverbs/cmd_dm.c, cmd_mr.c and device.c),
 * the kernel's uverbs, rxe and mlx5 (drivers/infiniband/core/uverbs_cmd.c, rdma_core.c,
 * umem.c, umem_odp.c, uverbs_std_types_{dm,mr}.c, verbs.c, include/rdma/ib_verbs.h,
 * drivers/infiniband/sw/rxe/, drivers/infiniband/hw/mlx5/{dm,mr,odp}.c), the man pages.
 * Where rverbs deliberately differs from rxe (or, for device memory and on-demand paging,
 * from mlx5), the row says "rverbs differs" and points at
 * docs/rxe-differences.md. Only behaviour rdma-core defines is exercised: no NULL object
 * pointers, no freed pointers (tests/c/foreign_ptr.c covers what the library detects
 * there), nothing that is undefined against the real library, except where a row says
 * "rverbs differs" and why (a device-memory copy whose offset + length wraps).
 */
#define _GNU_SOURCE
#include <sys/mman.h>
#include <unistd.h>

#include "common.h"

#define ANY_ERR (-1)
#define SIDE_EFFECT 10000

struct fixture {
	struct side a, b;          /* an RC pair in RTS (two contexts) */
	struct ibv_qp *reset_qp;   /* RC, RESET, on a's PD and CQs */
	struct ibv_qp *init_qp;    /* RC, INIT */
	struct ibv_qp *ud_qp;      /* UD, RTS */
	struct ibv_srq *srq;
	struct ibv_qp *srq_qp;     /* RC, RESET, receives from srq */
	int gid;
	struct ibv_device_attr dev;
	uint64_t max_dm_size;
	uint32_t tm_max_tags, tm_max_sge; /* tm_caps */
};

static struct fixture F;

/* ---- helpers ---------------------------------------------------------------------- */

static int err_of_ret(int ret) { return ret; }

static int err_of_ptr(void *p) { return p ? 0 : errno; }

static int err_of_minus_one(int ret) { return ret == -1 ? (errno ? errno : ANY_ERR) : 0; }

static struct ibv_qp *new_rc_qp(struct side *s, struct ibv_srq *srq)
{
	struct ibv_qp_init_attr init = {
		.send_cq = s->send_cq, .recv_cq = s->recv_cq, .srq = srq,
		.cap = {.max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 2,
			.max_recv_sge = 2, .max_inline_data = 64},
		.qp_type = IBV_QPT_RC,
	};
	struct ibv_qp *qp = ibv_create_qp(s->pd, &init);

	REQUIRE(qp != NULL, "ibv_create_qp(RC)");
	return qp;
}

static enum ibv_qp_state query_state(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr i;

	REQUIRE(ibv_query_qp(qp, &a, IBV_QP_STATE, &i) == 0, "ibv_query_qp");
	return a.qp_state;
}

/* A refused modify_qp must leave the state as it was, in ibv_query_qp and qp->state. */
static int modify_unchanged(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask)
{
	enum ibv_qp_state before = query_state(qp);
	int ret = ibv_modify_qp(qp, a, mask);

	if (ret && (query_state(qp) != before || qp->state != before))
		return SIDE_EFFECT;
	return ret;
}

static int poll_none(struct ibv_cq *cq)
{
	struct ibv_wc wc;

	return ibv_poll_cq(cq, 1, &wc) == 0;
}

static struct ibv_cq *cq_of(int cqe)
{
	struct ibv_cq *cq = ibv_create_cq(F.a.ctx, cqe, NULL, NULL, 0);

	REQUIRE(cq != NULL, "ibv_create_cq(%d)", cqe);
	return cq;
}

static struct ibv_send_wr write_wr(struct side *s, struct ibv_sge *sge, uint64_t wr_id,
				   uint32_t off, struct side *peer)
{
	struct ibv_send_wr wr = {.wr_id = wr_id, .sg_list = sge, .num_sge = 1,
				 .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED};

	*sge = (struct ibv_sge){.addr = (uintptr_t)s->buf, .length = 8, .lkey = s->mr->lkey};
	wr.wr.rdma.remote_addr = (uintptr_t)peer->buf + off;
	wr.wr.rdma.rkey = peer->mr->rkey;
	return wr;
}

/* ---- device, context, port -------------------------------------------------------- */

static int r_device_list_null_count(void)
{
	struct ibv_device **l = ibv_get_device_list(NULL);
	int ret = err_of_ptr(l);

	if (l)
		ibv_free_device_list(l);
	return ret;
}

static int r_query_port_0(void)
{
	struct ibv_port_attr pa;

	return err_of_ret(ibv_query_port(F.a.ctx, 0, &pa));
}

static int r_query_port_2(void)
{
	struct ibv_port_attr pa;

	return err_of_ret(ibv_query_port(F.a.ctx, 2, &pa));
}

static int r_query_gid_beyond(void)
{
	struct ibv_port_attr pa;
	union ibv_gid g;

	REQUIRE(ibv_query_port(F.a.ctx, 1, &pa) == 0, "ibv_query_port");
	errno = 0;
	return ibv_query_gid(F.a.ctx, 1, pa.gid_tbl_len, &g) == -1 ? ANY_ERR : 0;
}

static int r_query_gid_port_2(void)
{
	union ibv_gid g;

	errno = 0;
	return ibv_query_gid(F.a.ctx, 2, 0, &g) == -1 ? ANY_ERR : 0;
}

static int r_query_pkey_beyond(void)
{
	__be16 pk;

	errno = 0;
	return ibv_query_pkey(F.a.ctx, 1, F.dev.max_pkeys, &pk) == -1 ? ANY_ERR : 0;
}

static int r_async_event_none(void)
{
	struct ibv_async_event ev;
	int flags = fcntl(F.a.ctx->async_fd, F_GETFL);
	int ret;

	REQUIRE(fcntl(F.a.ctx->async_fd, F_SETFL, flags | O_NONBLOCK) == 0, "O_NONBLOCK");
	/* Drain what the setup raised (none expected), then ask once more. */
	while (ibv_get_async_event(F.a.ctx, &ev) == 0)
		ibv_ack_async_event(&ev);
	errno = 0;
	ret = err_of_minus_one(ibv_get_async_event(F.a.ctx, &ev));
	fcntl(F.a.ctx->async_fd, F_SETFL, flags);
	return ret;
}

/* ---- protection domains ----------------------------------------------------------- */

static int r_dealloc_pd_busy(void)
{
	struct ibv_mr *mr;
	int ret = ibv_dealloc_pd(F.a.pd);

	/* No side effect: the PD still registers memory. */
	mr = ibv_reg_mr(F.a.pd, F.a.buf, 64, IBV_ACCESS_LOCAL_WRITE);
	if (!mr)
		return SIDE_EFFECT;
	REQUIRE(ibv_dereg_mr(mr) == 0, "ibv_dereg_mr");
	return ret;
}

/* ---- memory regions --------------------------------------------------------------- */

static int reg(void *addr, size_t len, unsigned access)
{
	struct ibv_mr *mr;

	errno = 0;
	mr = ibv_reg_mr(F.a.pd, addr, len, (int)access);
	if (mr) {
		REQUIRE(ibv_dereg_mr(mr) == 0, "ibv_dereg_mr");
		return 0;
	}
	return errno;
}

static int r_reg_null_addr(void) { return reg(NULL, 64, IBV_ACCESS_LOCAL_WRITE); }
static int r_reg_zero_len(void) { return reg(F.a.buf, 0, IBV_ACCESS_LOCAL_WRITE); }
static int r_reg_huge_len(void) { return reg(F.a.buf, (size_t)1 << 46, IBV_ACCESS_LOCAL_WRITE); }
static int r_reg_wraps(void) { return reg((void *)(uintptr_t)-4096, 8192, IBV_ACCESS_LOCAL_WRITE); }
static int r_reg_unknown_bit(void) { return reg(F.a.buf, 64, IBV_ACCESS_LOCAL_WRITE | (1u << 15)); }
static int r_reg_bit_31(void) { return reg(F.a.buf, 64, IBV_ACCESS_LOCAL_WRITE | (1u << 31)); }
static int r_reg_odp(void) { return reg(F.a.buf, 64, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND); }
static int r_reg_rw_no_lw(void) { return reg(F.a.buf, 64, IBV_ACCESS_REMOTE_WRITE); }
static int r_reg_ra_no_lw(void) { return reg(F.a.buf, 64, IBV_ACCESS_REMOTE_ATOMIC); }
static int r_reg_rw_no_lw_odp(void)
{
	return reg(F.a.buf, 64, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_ON_DEMAND);
}
static int r_reg_unknown_and_odp(void)
{
	return reg(F.a.buf, 64, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND | (1u << 15));
}
static int r_reg_hugetlb(void) { return reg(F.a.buf, 64, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_HUGETLB); }
static int r_reg_relaxed(void)
{
	return reg(F.a.buf, 64, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_RELAXED_ORDERING);
}

static int rereg(int flags, void *addr, size_t len, int access)
{
	struct ibv_mr *mr = ibv_reg_mr(F.a.pd, F.a.buf, 256, IBV_ACCESS_LOCAL_WRITE);
	uint32_t lkey;
	int ret;

	REQUIRE(mr != NULL, "ibv_reg_mr");
	lkey = mr->lkey;
	errno = 0;
	ret = ibv_rereg_mr(mr, flags, NULL, addr, len, access);
	ret = ret == 0 ? 0 : errno;
	/* A refused rereg leaves the region as it was. */
	if (ret && (mr->lkey != lkey || mr->addr != F.a.buf || mr->length != 256))
		ret = SIDE_EFFECT;
	REQUIRE(ibv_dereg_mr(mr) == 0, "ibv_dereg_mr after rereg");
	return ret;
}

static int r_rereg_unknown_flag(void) { return rereg(1 << 5, NULL, 0, 0); }
static int r_rereg_translation_no_len(void)
{
	return rereg(IBV_REREG_MR_CHANGE_TRANSLATION, F.a.buf, 0, 0);
}
static int r_rereg_access_without_flag(void)
{
	return rereg(IBV_REREG_MR_CHANGE_TRANSLATION, F.a.buf, 64, IBV_ACCESS_REMOTE_READ);
}
static int r_rereg_access_rw_no_lw(void)
{
	return rereg(IBV_REREG_MR_CHANGE_ACCESS, NULL, 0, IBV_ACCESS_REMOTE_WRITE);
}
static int r_rereg_access_unknown(void)
{
	return rereg(IBV_REREG_MR_CHANGE_ACCESS, NULL, 0, IBV_ACCESS_LOCAL_WRITE | (1 << 15));
}

/* ---- memory windows --------------------------------------------------------------- */

static int r_alloc_mw_type_3(void)
{
	struct ibv_mw *mw;

	errno = 0;
	mw = ibv_alloc_mw(F.a.pd, (enum ibv_mw_type)3);
	if (mw) {
		ibv_dealloc_mw(mw);
		return 0;
	}
	return errno;
}

static int r_bind_mw_zero_based(void)
{
	struct ibv_mw *mw = ibv_alloc_mw(F.a.pd, IBV_MW_TYPE_1);
	struct ibv_mw_bind bind = {.wr_id = 1, .send_flags = IBV_SEND_SIGNALED};
	uint32_t rkey;
	int ret;

	REQUIRE(mw != NULL, "ibv_alloc_mw(type 1)");
	rkey = mw->rkey;
	bind.bind_info.mr = F.a.mr;
	bind.bind_info.addr = (uintptr_t)F.a.buf;
	bind.bind_info.length = 64;
	bind.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_READ | IBV_ACCESS_ZERO_BASED;
	ret = ibv_bind_mw(F.a.qp, mw, &bind);
	/* Refused: the key is unchanged and nothing was posted. */
	if (ret && (mw->rkey != rkey || !poll_none(F.a.send_cq)))
		ret = SIDE_EFFECT;
	REQUIRE(ibv_dealloc_mw(mw) == 0, "ibv_dealloc_mw");
	return ret;
}

static int r_dereg_mr_with_bound_mw(void)
{
	struct ibv_mr *mr = ibv_reg_mr(F.a.pd, F.a.buf, 256, ALL_ACCESS | IBV_ACCESS_MW_BIND);
	struct ibv_mw *mw = ibv_alloc_mw(F.a.pd, IBV_MW_TYPE_1);
	struct ibv_mw_bind bind = {.wr_id = 2, .send_flags = IBV_SEND_SIGNALED};
	struct ibv_wc wc;
	int ret;

	REQUIRE(mr && mw, "ibv_reg_mr(MW_BIND) + ibv_alloc_mw");
	bind.bind_info.mr = mr;
	bind.bind_info.addr = (uintptr_t)F.a.buf;
	bind.bind_info.length = 64;
	bind.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_READ;
	REQUIRE(ibv_bind_mw(F.a.qp, mw, &bind) == 0, "ibv_bind_mw");
	wc = poll_one(F.a.send_cq);
	REQUIRE(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_BIND_MW, "bind completes");
	ret = ibv_dereg_mr(mr);
	REQUIRE(ibv_dealloc_mw(mw) == 0, "ibv_dealloc_mw");
	if (ret) /* refused: the region is still there to deregister */
		REQUIRE(ibv_dereg_mr(mr) == 0, "ibv_dereg_mr once the window is gone");
	return ret;
}

/* ---- device memory (ibv_alloc_dm(3)) ---------------------------------------------- */

#define DM_LEN 4096

static int alloc_dm(size_t length, uint32_t log_align, uint32_t comp_mask)
{
	struct ibv_alloc_dm_attr attr = {.length = length, .log_align_req = log_align,
					 .comp_mask = comp_mask};
	struct ibv_dm *dm;

	errno = 0;
	dm = ibv_alloc_dm(F.a.ctx, &attr);
	if (dm) {
		REQUIRE(ibv_free_dm(dm) == 0, "ibv_free_dm");
		return 0;
	}
	return errno;
}

static struct ibv_dm *dm_of(size_t length)
{
	struct ibv_alloc_dm_attr attr = {.length = length};
	struct ibv_dm *dm = ibv_alloc_dm(F.a.ctx, &attr);

	REQUIRE(dm != NULL, "ibv_alloc_dm(%zu)", length);
	return dm;
}

static int r_alloc_dm_zero(void) { return alloc_dm(0, 0, 0); }
static int r_alloc_dm_above_max(void) { return alloc_dm(F.max_dm_size + 1, 0, 0); }
static int r_alloc_dm_align_13(void) { return alloc_dm(64, 13, 0); }
static int r_alloc_dm_align_max(void) { return alloc_dm(64, UINT32_MAX, 0); }
static int r_alloc_dm_align_page(void) { return alloc_dm(64, 12, 0); }
static int r_alloc_dm_mask_1(void) { return alloc_dm(64, 0, 1); }
static int r_alloc_dm_mask_31(void) { return alloc_dm(64, 0, 1u << 31); }

/* All of max_dm_size taken, then 64 bytes more; once it is freed the 64 bytes fit. */
static int r_alloc_dm_none_left(void)
{
	struct ibv_dm *all = dm_of(F.max_dm_size);
	int ret = alloc_dm(64, 0, 0);

	REQUIRE(ibv_free_dm(all) == 0, "ibv_free_dm(all)");
	if (ret && alloc_dm(64, 0, 0) != 0)
		return SIDE_EFFECT;
	return ret;
}

/* Refused: the memory still copies, the region still deregisters, then the free works. */
static int r_free_dm_with_mr(void)
{
	struct ibv_dm *dm = dm_of(DM_LEN);
	struct ibv_mr *mr = ibv_reg_dm_mr(F.a.pd, dm, 0, 64,
					  IBV_ACCESS_ZERO_BASED | IBV_ACCESS_LOCAL_WRITE);
	uint32_t w = 0x5a5a5a5a, r = 0;
	int ret;

	REQUIRE(mr != NULL, "ibv_reg_dm_mr");
	ret = ibv_free_dm(dm);
	if (ret) {
		if (ibv_memcpy_to_dm(dm, 8, &w, 4) || ibv_memcpy_from_dm(&r, dm, 8, 4) || r != w)
			ret = SIDE_EFFECT;
		REQUIRE(ibv_dereg_mr(mr) == 0 && ibv_free_dm(dm) == 0, "dereg, then free");
	}
	return ret;
}

/* A copy into device memory filled with 0xa5: a refused copy leaves every byte as it
 * was (no partial write at the end of the allocation). */
static int copy_to(uint64_t off, size_t len)
{
	static unsigned char fill[DM_LEN], src[16], back[DM_LEN];
	struct ibv_dm *dm = dm_of(DM_LEN);
	int ret;

	memset(fill, 0xa5, sizeof(fill));
	memset(src, 0x11, sizeof(src));
	REQUIRE(ibv_memcpy_to_dm(dm, 0, fill, DM_LEN) == 0, "fill the device memory");
	ret = ibv_memcpy_to_dm(dm, off, src, len);
	REQUIRE(ibv_memcpy_from_dm(back, dm, 0, DM_LEN) == 0, "read it back");
	if (ret && memcmp(back, fill, DM_LEN))
		ret = SIDE_EFFECT;
	REQUIRE(ibv_free_dm(dm) == 0, "ibv_free_dm");
	return ret;
}

/* A copy out of device memory into a buffer of 0x3c: a refused one writes nothing. */
static int copy_from(uint64_t off, size_t len)
{
	unsigned char dst[16], want[16];
	struct ibv_dm *dm = dm_of(DM_LEN);
	int ret;

	memset(dst, 0x3c, sizeof(dst));
	memset(want, 0x3c, sizeof(want));
	ret = ibv_memcpy_from_dm(dst, dm, off, len);
	if (ret && memcmp(dst, want, sizeof(dst)))
		ret = SIDE_EFFECT;
	REQUIRE(ibv_free_dm(dm) == 0, "ibv_free_dm");
	return ret;
}

static int r_copy_to_past_end(void) { return copy_to(DM_LEN, 4); }
static int r_copy_to_across_end(void) { return copy_to(DM_LEN - 4, 8); }
static int r_copy_from_wraps(void) { return copy_from(UINT64_MAX - 3, 8); }
static int r_copy_to_offset_2(void) { return copy_to(2, 4); }
static int r_copy_to_length_6(void) { return copy_to(0, 6); }
static int r_copy_from_unaligned_across_end(void) { return copy_from(DM_LEN - 2, 6); }
static int r_copy_to_empty_past_end(void) { return copy_to(DM_LEN + 4, 0); }
static int r_copy_from_empty_at_end(void) { return copy_from(DM_LEN, 0); }

/* A refused registration holds nothing: the memory frees at once afterwards. */
static int reg_dm(uint64_t off, size_t len, unsigned access)
{
	struct ibv_dm *dm = dm_of(DM_LEN);
	struct ibv_mr *mr;
	int ret;

	errno = 0;
	mr = ibv_reg_dm_mr(F.a.pd, dm, off, len, access);
	ret = mr ? 0 : errno;
	if (mr) {
		if (mr->addr != NULL || mr->length != len)
			ret = SIDE_EFFECT;
		REQUIRE(ibv_dereg_mr(mr) == 0, "ibv_dereg_mr");
	}
	if (ibv_free_dm(dm) != 0)
		return SIDE_EFFECT;
	return ret;
}

#define ZB_LW (IBV_ACCESS_ZERO_BASED | IBV_ACCESS_LOCAL_WRITE)

static int r_reg_dm_no_zero_based(void) { return reg_dm(0, 64, ALL_ACCESS); }
static int r_reg_dm_across_end(void) { return reg_dm(4000, 100, ZB_LW); }
static int r_reg_dm_offset_past_end(void) { return reg_dm(DM_LEN + 1, 0, ZB_LW); }
static int r_reg_dm_length_past_end(void) { return reg_dm(0, DM_LEN + 1, ZB_LW); }
static int r_reg_dm_wraps(void) { return reg_dm(UINT64_MAX, 2, ZB_LW); }
static int r_reg_dm_on_demand(void) { return reg_dm(0, 64, ZB_LW | IBV_ACCESS_ON_DEMAND); }
static int r_reg_dm_mw_bind(void) { return reg_dm(0, 64, ZB_LW | IBV_ACCESS_MW_BIND); }
static int r_reg_dm_hugetlb(void) { return reg_dm(0, 64, ZB_LW | IBV_ACCESS_HUGETLB); }
static int r_reg_dm_unknown(void) { return reg_dm(0, 64, ZB_LW | (1u << 15)); }
static int r_reg_dm_rw_no_lw(void)
{
	return reg_dm(0, 64, IBV_ACCESS_ZERO_BASED | IBV_ACCESS_REMOTE_WRITE);
}
static int r_reg_dm_relaxed(void) { return reg_dm(0, 64, ZB_LW | IBV_ACCESS_RELAXED_ORDERING); }
static int r_reg_dm_empty(void) { return reg_dm(8, 0, ZB_LW); }
static int r_reg_dm_all(void) { return reg_dm(0, DM_LEN, IBV_ACCESS_ZERO_BASED | ALL_ACCESS); }

/* ---- on-demand paging (ibv_reg_mr(3) IBV_ACCESS_ON_DEMAND, ibv_advise_mr(3)) ------ */

static int reg_iova(void *addr, size_t len, uint64_t iova, unsigned access)
{
	struct ibv_mr *mr;

	errno = 0;
	mr = ibv_reg_mr_iova2(F.a.pd, addr, len, iova, access);
	if (mr) {
		REQUIRE(ibv_dereg_mr(mr) == 0, "ibv_dereg_mr");
		return 0;
	}
	return errno;
}

#define ODP_LW (IBV_ACCESS_ON_DEMAND | IBV_ACCESS_LOCAL_WRITE)

static int r_odp_null_addr(void) { return reg(NULL, 64, ODP_LW); }
static int r_odp_size_max_not_null(void) { return reg(F.a.buf, SIZE_MAX, ODP_LW); }
static int r_odp_wraps(void) { return reg((void *)(uintptr_t)-4096, 8192, ODP_LW); }
static int r_odp_zero_len(void) { return reg(F.a.buf, 0, ODP_LW); }
static int r_odp_null_zero_len(void) { return reg(NULL, 0, ODP_LW); }
static int r_odp_implicit(void) { return reg(NULL, SIZE_MAX, ODP_LW | IBV_ACCESS_REMOTE_WRITE); }
static int r_odp_implicit_iova(void) { return reg_iova(NULL, SIZE_MAX, 4096, ODP_LW); }
static int r_odp_implicit_rw_no_lw(void)
{
	return reg(NULL, SIZE_MAX, IBV_ACCESS_ON_DEMAND | IBV_ACCESS_REMOTE_WRITE);
}

/* An on-demand region over F.a.buf's first two pages (read-only if asked). */
static struct ibv_mr *odp_mr(struct ibv_pd *pd, unsigned access)
{
	struct ibv_mr *mr = ibv_reg_mr(pd, F.a.buf, 8192, (int)(IBV_ACCESS_ON_DEMAND | access));

	REQUIRE(mr != NULL, "ibv_reg_mr(ON_DEMAND)");
	return mr;
}

static int advise(enum ibv_advise_mr_advice advice, uint32_t flags, struct ibv_sge *sge,
		  uint32_t n)
{
	return ibv_advise_mr(F.a.pd, advice, flags, sge, n);
}

#define PREFETCH IBV_ADVISE_MR_ADVICE_PREFETCH
#define FLUSH IBV_ADVISE_MR_FLAG_FLUSH

/* `sge` over [off, off + len) of a fresh on-demand region of F.a.pd, then the advice. */
static int advise_odp(enum ibv_advise_mr_advice advice, uint32_t flags, uint64_t off,
		      uint32_t len, unsigned access, uint32_t n)
{
	struct ibv_mr *mr = odp_mr(F.a.pd, access);
	struct ibv_sge sge = {.addr = (uintptr_t)F.a.buf + off, .length = len, .lkey = mr->lkey};
	int ret = advise(advice, flags, &sge, n);

	REQUIRE(ibv_dereg_mr(mr) == 0, "ibv_dereg_mr");
	return ret;
}

static int r_advise_ok(void)
{
	return advise_odp(IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, FLUSH, 100, 8000,
			  IBV_ACCESS_LOCAL_WRITE, 1);
}
static int r_advise_unknown_advice(void)
{
	return advise_odp((enum ibv_advise_mr_advice)3, FLUSH, 0, 64, IBV_ACCESS_LOCAL_WRITE, 1);
}
static int r_advise_unknown_flag(void)
{
	return advise_odp(PREFETCH, FLUSH | (1u << 1), 0, 64, IBV_ACCESS_LOCAL_WRITE, 1);
}
static int r_advise_no_sge(void) { return advise_odp(PREFETCH, FLUSH, 0, 64, IBV_ACCESS_LOCAL_WRITE, 0); }
static int r_advise_outside(void)
{
	return advise_odp(PREFETCH, FLUSH, 4096, 8192, IBV_ACCESS_LOCAL_WRITE, 1);
}
static int r_advise_outside_no_flush(void)
{
	return advise_odp(PREFETCH, 0, 8192, 8, IBV_ACCESS_LOCAL_WRITE, 1);
}
static int r_advise_write_read_only(void)
{
	return advise_odp(IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, FLUSH, 0, 64, 0, 1);
}

static int r_advise_not_odp(void)
{
	struct ibv_sge sge = {.addr = (uintptr_t)F.a.buf, .length = 64, .lkey = F.a.mr->lkey};

	return advise(PREFETCH, FLUSH, &sge, 1);
}

static int r_advise_no_such_lkey(void)
{
	struct ibv_mr *mr = odp_mr(F.a.pd, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_sge sge = {.addr = (uintptr_t)F.a.buf, .length = 64, .lkey = mr->lkey};

	REQUIRE(ibv_dereg_mr(mr) == 0, "ibv_dereg_mr");
	return advise(PREFETCH, FLUSH, &sge, 1);
}

static int r_advise_other_pd(void)
{
	struct ibv_pd *pd = ibv_alloc_pd(F.a.ctx);
	struct ibv_mr *mr;
	struct ibv_sge sge = {.addr = (uintptr_t)F.a.buf, .length = 64};
	int ret;

	REQUIRE(pd != NULL, "ibv_alloc_pd");
	mr = odp_mr(pd, IBV_ACCESS_LOCAL_WRITE);
	sge.lkey = mr->lkey;
	ret = advise(PREFETCH, FLUSH, &sge, 1);
	REQUIRE(ibv_dereg_mr(mr) == 0 && ibv_dealloc_pd(pd) == 0, "teardown");
	return ret;
}

static int r_advise_window_key(void)
{
	struct ibv_mw *mw = ibv_alloc_mw(F.a.pd, IBV_MW_TYPE_2);
	struct ibv_sge sge = {.addr = (uintptr_t)F.a.buf, .length = 64};
	int ret;

	REQUIRE(mw != NULL, "ibv_alloc_mw(type 2)");
	sge.lkey = mw->rkey;
	ret = advise(PREFETCH, FLUSH, &sge, 1);
	REQUIRE(ibv_dealloc_mw(mw) == 0, "ibv_dealloc_mw");
	return ret;
}

/* ---- completion queues and channels ----------------------------------------------- */

static int create_cq(int cqe, int vector)
{
	struct ibv_cq *cq;

	errno = 0;
	cq = ibv_create_cq(F.a.ctx, cqe, NULL, NULL, vector);
	if (cq) {
		REQUIRE(ibv_destroy_cq(cq) == 0, "ibv_destroy_cq");
		return 0;
	}
	return errno;
}

static int r_cq_zero(void) { return create_cq(0, 0); }
static int r_cq_negative(void) { return create_cq(-1, 0); }
static int r_cq_above_max(void) { return create_cq(F.dev.max_cqe + 1, 0); }
static int r_cq_vector_negative(void) { return create_cq(4, -1); }
static int r_cq_vector_count(void) { return create_cq(4, F.a.ctx->num_comp_vectors); }

static int resize(int cqe)
{
	struct ibv_cq *cq = cq_of(8);
	int before = cq->cqe;
	int ret = ibv_resize_cq(cq, cqe);

	if (ret && cq->cqe != before)
		ret = SIDE_EFFECT;
	REQUIRE(ibv_destroy_cq(cq) == 0, "ibv_destroy_cq");
	return ret;
}

static int r_resize_zero(void) { return resize(0); }
static int r_resize_negative(void) { return resize(-5); }
static int r_resize_above_max(void) { return resize(F.dev.max_cqe + 1); }

static int r_resize_below_queued(void)
{
	struct side *s = &F.a;
	struct ibv_sge sge[4];
	struct ibv_send_wr wr[4], *bad = NULL;
	struct ibv_wc wc[4];
	int ret, n = 0;

	for (int i = 0; i < 4; i++) {
		wr[i] = write_wr(s, &sge[i], 100 + i, 128, &F.b);
		wr[i].next = i < 3 ? &wr[i + 1] : NULL;
	}
	REQUIRE(ibv_post_send(s->qp, wr, &bad) == 0, "post 4 writes");
	/* In-process traffic completes inside ibv_post_send (docs/progress-and-events.md): the four
	 * completions are queued now. */
	ret = ibv_resize_cq(s->send_cq, 2);
	while (n < 4) {
		int got = ibv_poll_cq(s->send_cq, 4 - n, wc + n);

		REQUIRE(got >= 0, "ibv_poll_cq");
		n += got;
	}
	return ret;
}

static int r_destroy_cq_busy(void)
{
	struct ibv_wc wc;
	int ret = ibv_destroy_cq(F.a.send_cq);

	if (ret && ibv_poll_cq(F.a.send_cq, 1, &wc) < 0)
		return SIDE_EFFECT;
	return ret;
}

static int r_poll_cq_negative(void)
{
	struct ibv_wc wc;
	int ret = ibv_poll_cq(F.a.send_cq, -1, &wc);

	return ret < 0 ? -ret : ret;
}

static int r_get_cq_event_none(void)
{
	struct ibv_comp_channel *ch = ibv_create_comp_channel(F.a.ctx);
	struct ibv_cq *cq, *ev_cq;
	void *ev_ctx;
	int ret;

	REQUIRE(ch != NULL, "ibv_create_comp_channel");
	cq = ibv_create_cq(F.a.ctx, 4, NULL, ch, 0);
	REQUIRE(cq != NULL && ibv_req_notify_cq(cq, 0) == 0, "CQ on the channel, armed");
	REQUIRE(fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK) == 0, "O_NONBLOCK");
	errno = 0;
	ret = err_of_minus_one(ibv_get_cq_event(ch, &ev_cq, &ev_ctx));
	REQUIRE(ibv_destroy_cq(cq) == 0 && ibv_destroy_comp_channel(ch) == 0, "teardown");
	return ret;
}

static int r_destroy_channel_busy(void)
{
	struct ibv_comp_channel *ch = ibv_create_comp_channel(F.a.ctx);
	struct ibv_cq *cq, *ev_cq;
	void *ev_ctx;
	int ret;

	REQUIRE(ch != NULL, "ibv_create_comp_channel");
	cq = ibv_create_cq(F.a.ctx, 4, NULL, ch, 0);
	REQUIRE(cq != NULL, "CQ on the channel");
	ret = ibv_destroy_comp_channel(ch);
	if (ret) {
		/* Still a working channel: nothing pending, so EAGAIN (not EINVAL). */
		REQUIRE(fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK) == 0,
			"O_NONBLOCK");
		errno = 0;
		if (ibv_get_cq_event(ch, &ev_cq, &ev_ctx) != -1 || errno != EAGAIN)
			ret = SIDE_EFFECT;
	}
	REQUIRE(ibv_destroy_cq(cq) == 0, "ibv_destroy_cq");
	if (ret)
		REQUIRE(ibv_destroy_comp_channel(ch) == 0, "ibv_destroy_comp_channel");
	return ret;
}

/* ---- queue pairs: creation -------------------------------------------------------- */

static int create_qp(struct ibv_qp_init_attr *init)
{
	struct ibv_qp *qp;

	init->send_cq = F.a.send_cq;
	init->recv_cq = F.a.recv_cq;
	errno = 0;
	qp = ibv_create_qp(F.a.pd, init);
	if (qp) {
		REQUIRE(ibv_destroy_qp(qp) == 0, "ibv_destroy_qp");
		return 0;
	}
	return errno;
}

#define RC_INIT(field, value)                                                            \
	struct ibv_qp_init_attr init = {.cap = {.max_send_wr = 4, .max_recv_wr = 4,        \
						.max_send_sge = 1, .max_recv_sge = 1},     \
					.qp_type = IBV_QPT_RC};                            \
	init.field = value

static int r_qp_type_bad(void) { RC_INIT(qp_type, (enum ibv_qp_type)99); return create_qp(&init); }
static int r_qp_send_wr_max(void)
{
	RC_INIT(cap.max_send_wr, (uint32_t)F.dev.max_qp_wr + 1);
	return create_qp(&init);
}
static int r_qp_recv_wr_max(void)
{
	RC_INIT(cap.max_recv_wr, (uint32_t)F.dev.max_qp_wr + 1);
	return create_qp(&init);
}
static int r_qp_send_sge_max(void)
{
	RC_INIT(cap.max_send_sge, (uint32_t)F.dev.max_sge + 1);
	return create_qp(&init);
}
static int r_qp_recv_sge_max(void)
{
	RC_INIT(cap.max_recv_sge, (uint32_t)F.dev.max_sge + 1);
	return create_qp(&init);
}
static int r_qp_inline_huge(void) { RC_INIT(cap.max_inline_data, 1u << 20); return create_qp(&init); }

/* ---- queue pairs: modify ---------------------------------------------------------- */

static int r_modify_reset_to_rtr(void)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_RTR};

	return modify_unchanged(F.reset_qp, &a, IBV_QP_STATE);
}

static int r_modify_reset_to_rts(void)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_RTS};

	return modify_unchanged(F.reset_qp, &a, IBV_QP_STATE);
}

static int r_modify_init_missing_port(void)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .pkey_index = 0,
				.qp_access_flags = 0};

	return modify_unchanged(F.reset_qp, &a,
				IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_ACCESS_FLAGS);
}

static int r_modify_init_port_2(void)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 2};

	return modify_unchanged(F.reset_qp, &a,
				IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
					IBV_QP_ACCESS_FLAGS);
}

static int r_modify_state_out_of_range(void)
{
	struct ibv_qp_attr a = {.qp_state = (enum ibv_qp_state)42};

	return modify_unchanged(F.reset_qp, &a, IBV_QP_STATE);
}

static int r_modify_wrong_cur_state(void)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .cur_qp_state = IBV_QPS_RTS,
				.pkey_index = 0, .port_num = 1};

	return modify_unchanged(F.reset_qp, &a,
				IBV_QP_STATE | IBV_QP_CUR_STATE | IBV_QP_PKEY_INDEX |
					IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

static void rtr_attr(struct ibv_qp_attr *a, int *mask)
{
	memset(a, 0, sizeof(*a));
	a->qp_state = IBV_QPS_RTR;
	a->path_mtu = IBV_MTU_1024;
	a->dest_qp_num = F.b.qp->qp_num;
	a->ah_attr.is_global = 1;
	a->ah_attr.grh.sgid_index = F.gid;
	a->ah_attr.grh.hop_limit = 64;
	a->ah_attr.port_num = 1;
	REQUIRE(ibv_query_gid(F.a.ctx, 1, F.gid, &a->ah_attr.grh.dgid) == 0, "ibv_query_gid");
	a->max_dest_rd_atomic = 1;
	a->min_rnr_timer = 12;
	*mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
		IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
}

static int r_modify_rtr_missing_dest_qpn(void)
{
	struct ibv_qp_attr a;
	int mask;

	rtr_attr(&a, &mask);
	return modify_unchanged(F.init_qp, &a, mask & ~IBV_QP_DEST_QPN);
}

static int r_modify_rtr_no_grh(void)
{
	struct ibv_qp_attr a;
	int mask;

	rtr_attr(&a, &mask);
	a.ah_attr.is_global = 0;
	return modify_unchanged(F.init_qp, &a, mask);
}

static int r_modify_rtr_sgid_beyond(void)
{
	struct ibv_port_attr pa;
	struct ibv_qp_attr a;
	int mask;

	REQUIRE(ibv_query_port(F.a.ctx, 1, &pa) == 0, "ibv_query_port");
	rtr_attr(&a, &mask);
	a.ah_attr.grh.sgid_index = pa.gid_tbl_len;
	return modify_unchanged(F.init_qp, &a, mask);
}

static int r_modify_rtr_port_2(void)
{
	struct ibv_qp_attr a;
	int mask;

	rtr_attr(&a, &mask);
	a.ah_attr.port_num = 2;
	return modify_unchanged(F.init_qp, &a, mask);
}

static int r_modify_rtr_rd_atomic_huge(void)
{
	struct ibv_qp_attr a;
	int mask;

	rtr_attr(&a, &mask);
	a.max_dest_rd_atomic = 255;
	return modify_unchanged(F.init_qp, &a, mask);
}

/* ---- posting ---------------------------------------------------------------------- */

static int r_post_send_null_bad(void)
{
	struct ibv_sge sge;
	struct ibv_send_wr wr = write_wr(&F.a, &sge, 1, 0, &F.b);
	int ret = ibv_post_send(F.a.qp, &wr, NULL);

	/* Nothing posted: no completion follows. */
	for (int i = 0; i < 1000 && ret; i++)
		if (!poll_none(F.a.send_cq))
			return SIDE_EFFECT;
	return ret;
}

static int r_post_send_null_wr(void)
{
	struct ibv_send_wr *bad = (struct ibv_send_wr *)&bad;
	int ret = ibv_post_send(F.a.qp, NULL, &bad);

	return ret && bad != NULL ? SIDE_EFFECT : ret;
}

static int r_post_recv_null_bad(void)
{
	struct ibv_sge sge = {.addr = (uintptr_t)F.a.buf, .length = 8, .lkey = F.a.mr->lkey};
	struct ibv_recv_wr wr = {.wr_id = 1, .sg_list = &sge, .num_sge = 1};

	return ibv_post_recv(F.init_qp, &wr, NULL);
}

static int r_post_recv_null_wr(void)
{
	struct ibv_recv_wr *bad = (struct ibv_recv_wr *)&bad;
	int ret = ibv_post_recv(F.init_qp, NULL, &bad);

	return ret && bad != NULL ? SIDE_EFFECT : ret;
}

/* The second of three signaled writes has too many SGEs: EINVAL, *bad_wr = the second,
 * the first is posted (one completion, its data written), the third is not. */
static int r_post_send_partial(void)
{
	struct ibv_sge sge[3];
	struct ibv_send_wr wr[3], *bad = NULL;
	struct ibv_wc wc;
	int ret;

	memset(F.b.buf + 256, 0, 64);
	memset(F.a.buf, 0x77, 8);
	for (int i = 0; i < 3; i++) {
		wr[i] = write_wr(&F.a, &sge[i], 300 + i, 256 + 32 * i, &F.b);
		wr[i].next = i < 2 ? &wr[i + 1] : NULL;
	}
	wr[1].num_sge = F.dev.max_sge + 1;
	ret = ibv_post_send(F.a.qp, wr, &bad);
	if (!ret)
		return 0;
	if (bad != &wr[1])
		return SIDE_EFFECT;
	wc = poll_one(F.a.send_cq);
	if (wc.wr_id != 300 || wc.status != IBV_WC_SUCCESS || F.b.buf[256] != 0x77)
		return SIDE_EFFECT;
	for (int i = 0; i < 1000; i++)
		if (!poll_none(F.a.send_cq))
			return SIDE_EFFECT;
	if (F.b.buf[320] != 0)
		return SIDE_EFFECT;
	return ret;
}

static int post_one(struct ibv_qp *qp, struct ibv_send_wr *wr)
{
	struct ibv_send_wr *bad = NULL;
	int ret = ibv_post_send(qp, wr, &bad);

	if (ret && bad != wr)
		return SIDE_EFFECT;
	return ret;
}

static int r_post_send_too_many_sge(void)
{
	struct ibv_sge sge;
	struct ibv_send_wr wr = write_wr(&F.a, &sge, 2, 0, &F.b);

	wr.num_sge = F.dev.max_sge + 1;
	return post_one(F.a.qp, &wr);
}

static int r_post_send_inline_too_long(void)
{
	struct ibv_sge sge;
	struct ibv_send_wr wr = write_wr(&F.a, &sge, 3, 0, &F.b);

	sge.length = 2048; /* max_inline_data is 64 */
	wr.send_flags |= IBV_SEND_INLINE;
	return post_one(F.a.qp, &wr);
}

static int atomic(uint64_t raddr, uint32_t len)
{
	struct ibv_sge sge = {.addr = (uintptr_t)F.a.buf, .length = len, .lkey = F.a.mr->lkey};
	struct ibv_send_wr wr = {.wr_id = 4, .sg_list = &sge, .num_sge = 1,
				 .opcode = IBV_WR_ATOMIC_FETCH_AND_ADD,
				 .send_flags = IBV_SEND_SIGNALED};

	wr.wr.atomic.remote_addr = raddr;
	wr.wr.atomic.rkey = F.b.mr->rkey;
	wr.wr.atomic.compare_add = 1;
	return post_one(F.a.qp, &wr);
}

static int r_atomic_misaligned(void) { return atomic((uintptr_t)F.b.buf + 4, 8); }
static int r_atomic_short(void) { return atomic((uintptr_t)F.b.buf, 4); }

static int r_post_send_reset(void)
{
	struct ibv_sge sge;
	struct ibv_send_wr wr = write_wr(&F.a, &sge, 5, 0, &F.b);

	return post_one(F.reset_qp, &wr);
}

static int r_post_send_init(void)
{
	struct ibv_sge sge;
	struct ibv_send_wr wr = write_wr(&F.a, &sge, 6, 0, &F.b);

	return post_one(F.init_qp, &wr);
}

static int r_post_send_ud_write(void)
{
	struct ibv_sge sge;
	struct ibv_send_wr wr = write_wr(&F.a, &sge, 7, 0, &F.b);

	return post_one(F.ud_qp, &wr);
}

static int r_post_send_opcode_bad(void)
{
	struct ibv_sge sge;
	struct ibv_send_wr wr = write_wr(&F.a, &sge, 8, 0, &F.b);

	wr.opcode = (enum ibv_wr_opcode)77;
	return post_one(F.a.qp, &wr);
}

static int recv_one(struct ibv_qp *qp, int num_sge)
{
	struct ibv_sge sge = {.addr = (uintptr_t)F.a.buf, .length = 8, .lkey = F.a.mr->lkey};
	struct ibv_recv_wr wr = {.wr_id = 9, .sg_list = &sge, .num_sge = num_sge}, *bad = NULL;
	int ret = ibv_post_recv(qp, &wr, &bad);

	if (ret && bad != &wr)
		return SIDE_EFFECT;
	return ret;
}

static int r_post_recv_reset(void) { return recv_one(F.reset_qp, 1); }
static int r_post_recv_too_many_sge(void) { return recv_one(F.init_qp, F.dev.max_sge + 1); }
static int r_post_recv_on_srq_qp(void) { return recv_one(F.srq_qp, 1); }

static int r_post_srq_null_wr(void)
{
	struct ibv_recv_wr *bad = NULL;

	return ibv_post_srq_recv(F.srq, NULL, &bad);
}

static int r_post_srq_too_many_sge(void)
{
	struct ibv_sge sge = {.addr = (uintptr_t)F.a.buf, .length = 8, .lkey = F.a.mr->lkey};
	struct ibv_recv_wr wr = {.wr_id = 10, .sg_list = &sge,
				 .num_sge = F.dev.max_srq_sge + 1}, *bad = NULL;
	int ret = ibv_post_srq_recv(F.srq, &wr, &bad);

	return ret && bad != &wr ? SIDE_EFFECT : ret;
}

/* A local fault discovered at execution: the post succeeds, the completion carries the
 * status (the row's expected value is an ibv_wc_status). Uses a pair of its own: the
 * error moves the QP to ERR. */
static int completion_status_of(void (*make)(struct side *, struct side *,
					     struct ibv_send_wr *, struct ibv_sge *))
{
	struct side a, b;
	struct ibv_sge sge;
	struct ibv_send_wr wr, *bad = NULL;
	struct ibv_wc wc;

	make_pair(&a, &b, IBV_QPT_RC, 16, 8);
	make(&a, &b, &wr, &sge);
	if (ibv_post_send(a.qp, &wr, &bad))
		return SIDE_EFFECT;
	wc = poll_one(a.send_cq);
	destroy_side(&a);
	destroy_side(&b);
	return wc.status;
}

static void bad_lkey(struct side *a, struct side *b, struct ibv_send_wr *wr,
		     struct ibv_sge *sge)
{
	*wr = write_wr(a, sge, 11, 0, b);
	sge->lkey ^= 0x5a5a00;
}

static void bad_rkey(struct side *a, struct side *b, struct ibv_send_wr *wr,
		     struct ibv_sge *sge)
{
	*wr = write_wr(a, sge, 12, 0, b);
	wr->wr.rdma.rkey ^= 0x5a5a00;
}

static void beyond_remote(struct side *a, struct side *b, struct ibv_send_wr *wr,
			  struct ibv_sge *sge)
{
	*wr = write_wr(a, sge, 13, BUF_LEN - 4, b);
}

static int r_post_bad_lkey(void) { return completion_status_of(bad_lkey); }
static int r_post_bad_rkey(void) { return completion_status_of(bad_rkey); }
static int r_post_beyond_remote(void) { return completion_status_of(beyond_remote); }

/* ---- shared receive queues -------------------------------------------------------- */

static int create_srq(uint32_t max_wr, uint32_t max_sge, uint32_t limit)
{
	struct ibv_srq_init_attr init = {.attr = {.max_wr = max_wr, .max_sge = max_sge,
						  .srq_limit = limit}};
	struct ibv_srq *srq;

	errno = 0;
	srq = ibv_create_srq(F.a.pd, &init);
	if (srq) {
		REQUIRE(ibv_destroy_srq(srq) == 0, "ibv_destroy_srq");
		return 0;
	}
	return errno;
}

static int r_srq_wr_max(void) { return create_srq(F.dev.max_srq_wr + 1, 1, 0); }
static int r_srq_sge_max(void) { return create_srq(16, F.dev.max_srq_sge + 1, 0); }
static int r_srq_wr_zero(void) { return create_srq(0, 1, 0); }

static int r_modify_srq_limit_above(void)
{
	struct ibv_srq_attr a, q;
	int ret;

	REQUIRE(ibv_query_srq(F.srq, &q) == 0, "ibv_query_srq");
	a.srq_limit = q.max_wr + 1;
	ret = ibv_modify_srq(F.srq, &a, IBV_SRQ_LIMIT);
	REQUIRE(ibv_query_srq(F.srq, &a) == 0, "ibv_query_srq");
	if (ret && a.srq_limit != q.srq_limit)
		return SIDE_EFFECT;
	return ret;
}

static int r_modify_srq_resize_above(void)
{
	struct ibv_srq_attr a = {.max_wr = F.dev.max_srq_wr + 1};

	return ibv_modify_srq(F.srq, &a, IBV_SRQ_MAX_WR);
}

static int r_destroy_srq_busy(void) { return ibv_destroy_srq(F.srq); }

/* Tag-matching SRQs (ibv_create_srq_ex(3) IBV_SRQT_TM, ibv_post_srq_ops(3)). */
static int tm_srq(uint32_t max_tags, uint32_t comp_mask, struct ibv_srq **out)
{
	struct ibv_srq_init_attr_ex a = {
		.attr = {.max_wr = 4, .max_sge = 1}, .comp_mask = comp_mask,
		.srq_type = IBV_SRQT_TM, .pd = F.a.pd, .cq = F.a.recv_cq,
		.tm_cap = {.max_num_tags = max_tags, .max_ops = 4}};

	*out = ibv_create_srq_ex(F.a.ctx, &a);
	return *out ? 0 : errno;
}

static int tm_create(uint32_t max_tags, uint32_t comp_mask)
{
	struct ibv_srq *srq;
	int err = tm_srq(max_tags, comp_mask, &srq);

	if (!err) {
		REQUIRE(ibv_destroy_srq(srq) == 0, "ibv_destroy_srq");
		return SIDE_EFFECT;
	}
	return err;
}

#define TM_MASK (IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_CQ | IBV_SRQ_INIT_ATTR_TM)
static int r_tm_no_cq(void) { return tm_create(4, TM_MASK & ~IBV_SRQ_INIT_ATTR_CQ); }
static int r_tm_no_tm(void) { return tm_create(4, TM_MASK & ~IBV_SRQ_INIT_ATTR_TM); }
static int r_tm_tags_zero(void) { return tm_create(0, TM_MASK); }
static int r_tm_tags_above(void) { return tm_create(F.tm_max_tags + 1, TM_MASK); }

/* Posts `op` on a fresh tag-matching SRQ of `max_tags` tags after `before` ADDs; the
 * errno, or SIDE_EFFECT if bad_op does not name the refused operation. */
static int tm_ops(uint32_t max_tags, int before, struct ibv_ops_wr *op)
{
	struct ibv_sge sge = {.addr = (uintptr_t)F.a.buf, .length = 64, .lkey = F.a.mr->lkey};
	struct ibv_ops_wr add = {.opcode = IBV_WR_TAG_ADD,
				 .tm = {.add = {.sg_list = &sge, .num_sge = 1, .tag = 7, .mask = ~0ull}}};
	struct ibv_ops_wr *bad = NULL;
	struct ibv_srq *srq;
	int ret;

	REQUIRE(tm_srq(max_tags, TM_MASK, &srq) == 0, "a tag-matching SRQ");
	for (int i = 0; i < before; i++)
		REQUIRE(ibv_post_srq_ops(srq, &add, &bad) == 0, "ibv_post_srq_ops ADD");
	ret = ibv_post_srq_ops(srq, op, &bad);
	REQUIRE(ibv_destroy_srq(srq) == 0, "ibv_destroy_srq");
	if (ret && bad != op)
		return SIDE_EFFECT;
	return ret;
}

static int r_ops_basic_srq(void)
{
	struct ibv_ops_wr op = {.opcode = IBV_WR_TAG_SYNC}, *bad = NULL;
	int ret = ibv_post_srq_ops(F.srq, &op, &bad);

	return ret && bad != &op ? SIDE_EFFECT : ret;
}
static int r_ops_null(void) { return tm_ops(4, 0, NULL); }
static int r_ops_opcode(void)
{
	struct ibv_ops_wr op = {.opcode = (enum ibv_ops_wr_opcode)7};

	return tm_ops(4, 0, &op);
}
static int r_ops_flag(void)
{
	struct ibv_ops_wr op = {.opcode = IBV_WR_TAG_SYNC, .flags = 1 << 5};

	return tm_ops(4, 0, &op);
}
static int r_ops_add_sges(void)
{
	struct ibv_sge sge[32] = {{.addr = (uintptr_t)F.a.buf, .length = 1, .lkey = F.a.mr->lkey}};
	struct ibv_ops_wr op = {.opcode = IBV_WR_TAG_ADD,
				.tm = {.add = {.sg_list = sge, .num_sge = F.tm_max_sge + 1, .mask = ~0ull}}};

	return tm_ops(4, 0, &op);
}
static int r_ops_add_full(void)
{
	struct ibv_sge sge = {.addr = (uintptr_t)F.a.buf, .length = 8, .lkey = F.a.mr->lkey};
	struct ibv_ops_wr op = {.opcode = IBV_WR_TAG_ADD,
				.tm = {.add = {.sg_list = &sge, .num_sge = 1, .tag = 8, .mask = ~0ull}}};

	return tm_ops(2, 2, &op);
}

/* ---- address handles, multicast --------------------------------------------------- */

static int create_ah(int port, int global, int sgid_index)
{
	struct ibv_ah_attr a = {.port_num = port, .is_global = global};
	struct ibv_ah *ah;

	a.grh.sgid_index = sgid_index;
	a.grh.hop_limit = 64;
	REQUIRE(ibv_query_gid(F.a.ctx, 1, F.gid, &a.grh.dgid) == 0, "ibv_query_gid");
	errno = 0;
	ah = ibv_create_ah(F.a.pd, &a);
	if (ah) {
		REQUIRE(ibv_destroy_ah(ah) == 0, "ibv_destroy_ah");
		return 0;
	}
	return errno;
}

static int r_ah_port_2(void) { return create_ah(2, 1, F.gid); }
static int r_ah_port_0(void) { return create_ah(0, 1, F.gid); }
static int r_ah_no_grh(void) { return create_ah(1, 0, 0); }
static int r_ah_sgid_beyond(void)
{
	struct ibv_port_attr pa;

	REQUIRE(ibv_query_port(F.a.ctx, 1, &pa) == 0, "ibv_query_port");
	return create_ah(1, 1, pa.gid_tbl_len);
}

static int r_attach_mcast_rc(void)
{
	union ibv_gid g = {.raw = {0xff, 0x0e, [15] = 1}};

	return ibv_attach_mcast(F.a.qp, &g, 0);
}

static int r_attach_mcast_unicast_gid(void)
{
	union ibv_gid g;

	REQUIRE(ibv_query_gid(F.a.ctx, 1, F.gid, &g) == 0, "ibv_query_gid");
	return ibv_attach_mcast(F.ud_qp, &g, 0);
}

/* ---- the table -------------------------------------------------------------------- */

/* ---- sharing a context through its command fd --------------------------------------- */

/* ibv_import_device(fd) must refuse and leave `fd` open (the caller keeps it). */
static int import_device(int fd, int close_after)
{
	struct ibv_context *ctx;
	int ret;

	errno = 0;
	ctx = ibv_import_device(fd);
	if (ctx) {
		REQUIRE(ibv_close_device(ctx) == 0, "ibv_close_device(imported)");
		return 0;
	}
	ret = errno;
	if (fd >= 0 && close_after >= 0 && fcntl(fd, F_GETFD) == -1)
		return SIDE_EFFECT;
	if (close_after > 0)
		close(fd);
	return ret;
}

static int r_import_device_minus_one(void) { return import_device(-1, -1); }
static int r_import_device_closed_fd(void)
{
	int fd = dup(0);

	REQUIRE(fd >= 0 && close(fd) == 0, "a closed descriptor number");
	return import_device(fd, -1);
}
static int r_import_device_pipe(void)
{
	int p[2], ret;

	REQUIRE(pipe(p) == 0, "pipe");
	ret = import_device(p[0], 1);
	close(p[1]);
	return ret;
}
static int r_import_device_regular_file(void)
{
	int fd = memfd_create("bad_args", 0);

	REQUIRE(fd >= 0, "memfd_create");
	return import_device(fd, 1);
}
static int r_import_device_dev_null(void)
{
	int fd = open("/dev/null", O_RDWR | O_CLOEXEC);

	REQUIRE(fd >= 0, "open /dev/null");
	return import_device(fd, 1);
}
static int r_import_device_own_cmd_fd(void) { return import_device(F.a.ctx->cmd_fd, 0); }

static int import_pd(struct ibv_context *ctx, uint32_t handle)
{
	struct ibv_pd *pd;

	errno = 0;
	pd = ibv_import_pd(ctx, handle);
	if (pd) {
		ibv_unimport_pd(pd);
		return 0;
	}
	return errno;
}

static int import_mr(struct ibv_pd *pd, uint32_t handle)
{
	struct ibv_mr *mr;

	errno = 0;
	mr = ibv_import_mr(pd, handle);
	if (mr) {
		ibv_unimport_mr(mr);
		return 0;
	}
	return errno;
}

static int r_import_pd_unknown(void) { return import_pd(F.a.ctx, 0x7fffff); }
static int r_import_pd_deallocated(void)
{
	struct ibv_pd *pd = ibv_alloc_pd(F.a.ctx);
	uint32_t handle;

	REQUIRE(pd != NULL, "ibv_alloc_pd");
	handle = pd->handle;
	REQUIRE(ibv_dealloc_pd(pd) == 0, "ibv_dealloc_pd");
	return import_pd(F.a.ctx, handle);
}
static int r_import_pd_other_context(void) { return import_pd(F.a.ctx, F.b.pd->handle); }
static int r_import_mr_unknown(void) { return import_mr(F.a.pd, 0x7fffffff); }
static int r_import_mr_deregistered(void)
{
	struct ibv_mr *mr = ibv_reg_mr(F.a.pd, F.a.buf, 64, IBV_ACCESS_LOCAL_WRITE);
	uint32_t handle;

	REQUIRE(mr != NULL, "ibv_reg_mr");
	handle = mr->handle;
	REQUIRE(ibv_dereg_mr(mr) == 0, "ibv_dereg_mr");
	return import_mr(F.a.pd, handle);
}
static int r_import_mr_other_context(void) { return import_mr(F.a.pd, F.b.mr->handle); }
static int r_rereg_imported_mr(void)
{
	struct ibv_mr *mr = ibv_import_mr(F.a.pd, F.a.mr->handle);
	int ret;

	REQUIRE(mr != NULL, "ibv_import_mr");
	errno = 0;
	ret = ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, IBV_ACCESS_LOCAL_WRITE);
	ret = ret == IBV_REREG_MR_ERR_INPUT ? errno : ret == 0 ? 0 : ANY_ERR;
	ibv_unimport_mr(mr);
	return ret;
}

/* ECE: the ibv_ece must come back untouched. */
static int ece_call(int set, uint32_t vendor_id)
{
	struct ibv_ece ece = {.vendor_id = vendor_id, .options = 0x5a, .comp_mask = 0};
	int ret = set ? ibv_set_ece(F.a.qp, &ece) : ibv_query_ece(F.a.qp, &ece);

	if (ret && (ece.vendor_id != vendor_id || ece.options != 0x5a))
		return SIDE_EFFECT;
	return ret;
}
static int r_query_ece(void) { return ece_call(0, 0x02c9); }
static int r_set_ece_vendor_0(void) { return ece_call(1, 0); }
static int r_set_ece_vendor_mlx(void) { return ece_call(1, 0x02c9); }

struct row {
	const char *verb;
	const char *arg;
	int (*run)(void);
	int expect;
	const char *source;
};

#define ROW(verb, arg, fn, expect, source) {verb, arg, fn, expect, source}

static const struct row rows[] = {
	/* devices, ports, events */
	ROW("ibv_get_device_list", "num_devices NULL", r_device_list_null_count, 0,
	    "man ibv_get_device_list: num_devices is optional"),
	ROW("ibv_query_port", "port 0", r_query_port_0, EINVAL,
	    "kernel device.c ib_query_port: rdma_is_port_valid"),
	ROW("ibv_query_port", "port 2 (one port)", r_query_port_2, EINVAL,
	    "kernel device.c ib_query_port: rdma_is_port_valid"),
	ROW("ibv_query_gid", "index = gid_tbl_len", r_query_gid_beyond, ANY_ERR,
	    "rdma-core verbs.c ibv_query_gid: -1"),
	ROW("ibv_query_gid", "port 2", r_query_gid_port_2, ANY_ERR,
	    "rdma-core verbs.c ibv_query_gid: -1"),
	ROW("ibv_query_pkey", "index = max_pkeys", r_query_pkey_beyond, ANY_ERR,
	    "rdma-core verbs.c ibv_query_pkey: -1 (no sysfs entry)"),
	ROW("ibv_get_async_event", "nothing pending, O_NONBLOCK", r_async_event_none, EAGAIN,
	    "rdma-core device.c ibv_get_async_event: read() fails"),
	/* protection domains */
	ROW("ibv_dealloc_pd", "PD with a region (PD still usable)", r_dealloc_pd_busy, EBUSY,
	    "kernel uverbs_std_types.c uverbs_free_pd: ib_destroy_usecnt"),
	/* memory regions */
	ROW("ibv_reg_mr", "addr NULL, length 64", r_reg_null_addr, EFAULT,
	    "kernel umem.c ib_umem_get: pin_user_pages_fast fails"),
	ROW("ibv_reg_mr", "length 0", r_reg_zero_len, EINVAL,
	    "kernel umem.c ib_umem_get: npages == 0"),
	ROW("ibv_reg_mr", "length 2^46", r_reg_huge_len, EINVAL,
	    "kernel umem.c ib_umem_get: npages > UINT_MAX"),
	ROW("ibv_reg_mr", "range wraps past 2^64", r_reg_wraps, EINVAL,
	    "kernel umem.c ib_umem_get: addr + size overflows"),
	ROW("ibv_reg_mr", "unknown access bit 1<<15", r_reg_unknown_bit, EINVAL,
	    "ib_verbs.h ib_check_mr_access: flags & ~IB_ACCESS_SUPPORTED"),
	ROW("ibv_reg_mr", "access bit 1<<31", r_reg_bit_31, EINVAL,
	    "ib_verbs.h ib_check_mr_access: flags & ~IB_ACCESS_SUPPORTED"),
	ROW("ibv_reg_mr", "ON_DEMAND (the device has ODP)", r_reg_odp, 0,
	    "ib_verbs.h ib_check_mr_access: IBK_ON_DEMAND_PAGING set (odp_caps)"),
	ROW("ibv_reg_mr", "REMOTE_WRITE without LOCAL_WRITE", r_reg_rw_no_lw, EINVAL,
	    "ib_verbs.h ib_check_mr_access; man ibv_reg_mr"),
	ROW("ibv_reg_mr", "REMOTE_ATOMIC without LOCAL_WRITE", r_reg_ra_no_lw, EINVAL,
	    "ib_verbs.h ib_check_mr_access; man ibv_reg_mr"),
	ROW("ibv_reg_mr", "REMOTE_WRITE w/o LOCAL_WRITE + ON_DEMAND", r_reg_rw_no_lw_odp, EINVAL,
	    "ib_verbs.h ib_check_mr_access: the LOCAL_WRITE check comes first"),
	ROW("ibv_reg_mr", "unknown bit + ON_DEMAND", r_reg_unknown_and_odp, EINVAL,
	    "ib_verbs.h ib_check_mr_access: unknown bits before ODP"),
	ROW("ibv_reg_mr", "HUGETLB without ON_DEMAND", r_reg_hugetlb, 0,
	    "ib_verbs.h ib_check_mr_access: a supported bit; only ODP umems use it"),
	ROW("ibv_reg_mr", "RELAXED_ORDERING (optional range)", r_reg_relaxed, 0,
	    "man ibv_reg_mr: optional flags may be ignored"),
	ROW("ibv_rereg_mr", "unknown flag 1<<5 (MR unchanged)", r_rereg_unknown_flag, EINVAL,
	    "rdma-core verbs.c ibv_rereg_mr: IBV_REREG_MR_ERR_INPUT"),
	ROW("ibv_rereg_mr", "CHANGE_TRANSLATION, length 0", r_rereg_translation_no_len, EINVAL,
	    "rdma-core verbs.c ibv_rereg_mr: IBV_REREG_MR_ERR_INPUT"),
	ROW("ibv_rereg_mr", "access without CHANGE_ACCESS", r_rereg_access_without_flag, EINVAL,
	    "rdma-core verbs.c ibv_rereg_mr: IBV_REREG_MR_ERR_INPUT"),
	ROW("ibv_rereg_mr", "CHANGE_ACCESS REMOTE_WRITE w/o LOCAL_WRITE", r_rereg_access_rw_no_lw,
	    EINVAL, "uverbs_cmd.c ib_uverbs_rereg_mr: ib_check_mr_access"),
	ROW("ibv_rereg_mr", "CHANGE_ACCESS unknown bit", r_rereg_access_unknown, EINVAL,
	    "uverbs_cmd.c ib_uverbs_rereg_mr: ib_check_mr_access"),
	/* memory windows */
	ROW("ibv_alloc_mw", "type 3", r_alloc_mw_type_3, EINVAL,
	    "uverbs_cmd.c ib_uverbs_alloc_mw: type not 1 or 2"),
	ROW("ibv_bind_mw", "ZERO_BASED access (nothing posted)", r_bind_mw_zero_based, EINVAL,
	    "rdma-core rxe.c rxe_bind_mw"),
	ROW("ibv_dereg_mr", "region with a bound type 1 window", r_dereg_mr_with_bound_mw, EINVAL,
	    "kernel rxe_mr.c rxe_dereg_mr: num_mw > 0 (IBA 10.6.7.2.6)"),
	/* device memory */
	ROW("ibv_alloc_dm", "length 0", r_alloc_dm_zero, EINVAL,
	    "kernel mlx5 dm.c mlx5_cmd_alloc_memic: !length"),
	ROW("ibv_alloc_dm", "length max_dm_size + 1", r_alloc_dm_above_max, EINVAL,
	    "rdma-core mlx5 verbs.c alloc_dm_memic: length > max_dm_size"),
	ROW("ibv_alloc_dm", "fits max_dm_size, none left (frees after)", r_alloc_dm_none_left,
	    ENOMEM, "kernel mlx5 dm.c mlx5_cmd_alloc_memic: no free pages; man: no memory left"),
	ROW("ibv_alloc_dm", "log_align_req 13 (beyond a page)", r_alloc_dm_align_13, EINVAL,
	    "kernel mlx5 dm.c mlx5_cmd_alloc_memic: > max alignment (rverbs: a page)"),
	ROW("ibv_alloc_dm", "log_align_req UINT32_MAX", r_alloc_dm_align_max, EINVAL,
	    "kernel mlx5 dm.c mlx5_cmd_alloc_memic: > max alignment"),
	ROW("ibv_alloc_dm", "log_align_req 12 (a page)", r_alloc_dm_align_page, 0,
	    "man ibv_alloc_dm: alignment for atomics; rverbs' largest"),
	ROW("ibv_alloc_dm", "comp_mask 1", r_alloc_dm_mask_1, EINVAL,
	    "rdma-core mlx5 verbs.c _mlx5dv_alloc_dm: check_comp_mask"),
	ROW("ibv_alloc_dm", "comp_mask 1<<31", r_alloc_dm_mask_31, EINVAL,
	    "rdma-core mlx5 verbs.c _mlx5dv_alloc_dm: check_comp_mask"),
	ROW("ibv_free_dm", "a region over it (still copies, frees after)", r_free_dm_with_mr, EBUSY,
	    "kernel uverbs_std_types_dm.c uverbs_free_dm: ib_destroy_usecnt"),
	ROW("ibv_memcpy_to_dm", "offset = length (nothing written)", r_copy_to_past_end, EFAULT,
	    "rdma-core mlx5 verbs.c mlx5_access_dm: offset + length > length"),
	ROW("ibv_memcpy_to_dm", "across the end (nothing written)", r_copy_to_across_end, EFAULT,
	    "rdma-core mlx5 verbs.c mlx5_access_dm: offset + length > length"),
	ROW("ibv_memcpy_from_dm", "offset + length wraps (nothing read)", r_copy_from_wraps, EFAULT,
	    "rverbs differs (docs/rxe-differences.md): mlx5_access_dm's sum wraps"),
	ROW("ibv_memcpy_to_dm", "offset 2 (nothing written)", r_copy_to_offset_2, EINVAL,
	    "rdma-core mlx5 verbs.c mlx5_access_dm: 4-byte units"),
	ROW("ibv_memcpy_to_dm", "length 6 (nothing written)", r_copy_to_length_6, EINVAL,
	    "rdma-core mlx5 verbs.c mlx5_access_dm: 4-byte units"),
	ROW("ibv_memcpy_from_dm", "unaligned and across the end", r_copy_from_unaligned_across_end,
	    EFAULT, "rdma-core mlx5 verbs.c mlx5_access_dm: the range before the units"),
	ROW("ibv_memcpy_to_dm", "length 0 past the end", r_copy_to_empty_past_end, EFAULT,
	    "rdma-core mlx5 verbs.c mlx5_access_dm: offset + 0 > length"),
	ROW("ibv_memcpy_from_dm", "length 0 at the end", r_copy_from_empty_at_end, 0,
	    "rdma-core mlx5 verbs.c mlx5_access_dm: nothing to copy"),
	ROW("ibv_reg_dm_mr", "without ZERO_BASED (frees after)", r_reg_dm_no_zero_based, EINVAL,
	    "rdma-core cmd_dm.c ibv_cmd_reg_dm_mr: !ZERO_BASED; man ibv_alloc_dm"),
	ROW("ibv_reg_dm_mr", "offset 4000, length 100 (4096)", r_reg_dm_across_end, EINVAL,
	    "kernel uverbs_std_types_mr.c DM_MR_REG: length > dm->length - offset"),
	ROW("ibv_reg_dm_mr", "offset 4097, length 0", r_reg_dm_offset_past_end, EINVAL,
	    "kernel uverbs_std_types_mr.c DM_MR_REG: offset > dm->length"),
	ROW("ibv_reg_dm_mr", "length 4097", r_reg_dm_length_past_end, EINVAL,
	    "kernel uverbs_std_types_mr.c DM_MR_REG: length > dm->length"),
	ROW("ibv_reg_dm_mr", "offset UINT64_MAX, length 2", r_reg_dm_wraps, EINVAL,
	    "kernel uverbs_std_types_mr.c DM_MR_REG: offset > dm->length"),
	ROW("ibv_reg_dm_mr", "ON_DEMAND", r_reg_dm_on_demand, EINVAL,
	    "rdma-core mlx5 verbs.c mlx5_reg_dm_mr: MLX5_DM_ALLOWED_ACCESS"),
	ROW("ibv_reg_dm_mr", "MW_BIND", r_reg_dm_mw_bind, EINVAL,
	    "rdma-core mlx5 verbs.c mlx5_reg_dm_mr: MLX5_DM_ALLOWED_ACCESS"),
	ROW("ibv_reg_dm_mr", "HUGETLB", r_reg_dm_hugetlb, EINVAL,
	    "rdma-core mlx5 verbs.c mlx5_reg_dm_mr: MLX5_DM_ALLOWED_ACCESS"),
	ROW("ibv_reg_dm_mr", "unknown bit 1<<15", r_reg_dm_unknown, EINVAL,
	    "rdma-core mlx5 verbs.c mlx5_reg_dm_mr: MLX5_DM_ALLOWED_ACCESS"),
	ROW("ibv_reg_dm_mr", "REMOTE_WRITE without LOCAL_WRITE", r_reg_dm_rw_no_lw, EINVAL,
	    "kernel uverbs_std_types_mr.c DM_MR_REG: ib_check_mr_access"),
	ROW("ibv_reg_dm_mr", "RELAXED_ORDERING (optional range)", r_reg_dm_relaxed, 0,
	    "rdma-core mlx5 verbs.c: MLX5_DM_ALLOWED_ACCESS has OPTIONAL_RANGE"),
	ROW("ibv_reg_dm_mr", "offset 8, length 0", r_reg_dm_empty, 0,
	    "kernel uverbs_std_types_mr.c DM_MR_REG: inside the allocation"),
	ROW("ibv_reg_dm_mr", "all of it, all remote access", r_reg_dm_all, 0,
	    "rdma-core cmd_dm.c ibv_cmd_reg_dm_mr: addr NULL (zero-based)"),
	/* on-demand paging */
	ROW("ibv_reg_mr", "ON_DEMAND, addr NULL, length 64", r_odp_null_addr, 0,
	    "kernel umem_odp.c ib_umem_odp_get: nothing pinned"),
	ROW("ibv_reg_mr", "ON_DEMAND, addr != NULL, length SIZE_MAX", r_odp_size_max_not_null,
	    EOVERFLOW, "kernel umem_odp.c ib_init_umem_odp: address + length overflows"),
	ROW("ibv_reg_mr", "ON_DEMAND, range wraps past 2^64", r_odp_wraps, EOVERFLOW,
	    "kernel umem_odp.c ib_init_umem_odp: address + length overflows"),
	ROW("ibv_reg_mr", "ON_DEMAND, length 0 (page-aligned addr)", r_odp_zero_len, EINVAL,
	    "kernel umem_odp.c ib_init_umem_odp: no pages"),
	ROW("ibv_reg_mr", "ON_DEMAND, addr NULL, length 0", r_odp_null_zero_len, EOVERFLOW,
	    "kernel umem_odp.c ib_init_umem_odp: end rounds to 0 < page"),
	ROW("ibv_reg_mr", "implicit (NULL, SIZE_MAX, ON_DEMAND)", r_odp_implicit, 0,
	    "kernel mlx5 mr.c create_user_odp_mr: odp_caps IMPLICIT"),
	ROW("ibv_reg_mr_iova2", "implicit with iova 4096", r_odp_implicit_iova, EINVAL,
	    "kernel mlx5 mr.c create_user_odp_mr: implicit needs iova 0"),
	ROW("ibv_reg_mr", "implicit, REMOTE_WRITE w/o LOCAL_WRITE", r_odp_implicit_rw_no_lw, EINVAL,
	    "ib_verbs.h ib_check_mr_access (uverbs_cmd.c ib_uverbs_reg_mr)"),
	ROW("ibv_advise_mr", "PREFETCH_WRITE | FLUSH inside", r_advise_ok, 0,
	    "man ibv_advise_mr"),
	ROW("ibv_advise_mr", "advice 3", r_advise_unknown_advice, EOPNOTSUPP,
	    "kernel mlx5 mr.c mlx5_ib_advise_mr: unknown advice"),
	ROW("ibv_advise_mr", "flags 1<<1", r_advise_unknown_flag, EINVAL,
	    "kernel uverbs_std_types_mr.c ADVISE_MR: uverbs_get_flags32"),
	ROW("ibv_advise_mr", "num_sge 0", r_advise_no_sge, EINVAL,
	    "kernel uverbs_std_types_mr.c ADVISE_MR: SGE list below its minimum size"),
	ROW("ibv_advise_mr", "SGE on a region without ON_DEMAND", r_advise_not_odp, ENOENT,
	    "kernel mlx5 odp.c get_prefetchable_mr: not an on-demand key"),
	ROW("ibv_advise_mr", "lkey of a deregistered region", r_advise_no_such_lkey, ENOENT,
	    "kernel mlx5 odp.c get_prefetchable_mr: no such key (man: EFAULT, wrong)"),
	ROW("ibv_advise_mr", "a memory window's key", r_advise_window_key, EINVAL,
	    "kernel mlx5 odp.c get_prefetchable_mr: mkey not an MR"),
	ROW("ibv_advise_mr", "region of another PD", r_advise_other_pd, EPERM,
	    "kernel mlx5 odp.c get_prefetchable_mr: pd mismatch"),
	ROW("ibv_advise_mr", "PREFETCH_WRITE, read-only region", r_advise_write_read_only, EPERM,
	    "kernel mlx5 odp.c get_prefetchable_mr: !writable"),
	ROW("ibv_advise_mr", "range outside the region, FLUSH", r_advise_outside, EFAULT,
	    "kernel mlx5 odp.c pagefault_mr: outside the umem"),
	ROW("ibv_advise_mr", "range outside the region, no FLUSH", r_advise_outside_no_flush, EFAULT,
	    "rverbs differs (docs/rxe-differences.md): mlx5 queues it, returns 0"),
	/* sharing a context through its command fd; rxe has no import (rdma-core's dummy
	 * ops: EOPNOTSUPP), so the values are rdma-core's and the kernel's as mlx5 reaches
	 * them (docs/rxe-differences.md) */
	ROW("ibv_import_device", "fd -1 (not open)", r_import_device_minus_one, EINVAL,
	    "rdma-core device.c ibv_import_device: fstat fails"),
	ROW("ibv_import_device", "a closed descriptor", r_import_device_closed_fd, EINVAL,
	    "rdma-core device.c ibv_import_device: fstat fails"),
	ROW("ibv_import_device", "a pipe (stays open)", r_import_device_pipe, EINVAL,
	    "rdma-core device.c ibv_import_device: !S_ISCHR"),
	ROW("ibv_import_device", "a regular file (stays open)", r_import_device_regular_file,
	    EINVAL, "rdma-core device.c ibv_import_device: !S_ISCHR"),
	ROW("ibv_import_device", "/dev/null (stays open)", r_import_device_dev_null, ENODEV,
	    "rdma-core device.c ibv_import_device: no device has that cdev"),
	ROW("ibv_import_device", "the context's own cmd_fd (stays open)",
	    r_import_device_own_cmd_fd, EINVAL,
	    "rverbs differs (docs/rxe-differences.md): man says dup it; rdma-core takes it"),
	ROW("ibv_import_pd", "handle naming nothing", r_import_pd_unknown, ENOENT,
	    "kernel rdma_core.c lookup_get_idr_uobject (mlx5_import_pd)"),
	ROW("ibv_import_pd", "handle of a deallocated PD", r_import_pd_deallocated, ENOENT,
	    "kernel rdma_core.c lookup_get_idr_uobject: removed at destroy"),
	ROW("ibv_import_pd", "handle of another context's PD", r_import_pd_other_context, ENOENT,
	    "kernel rdma_core.c lookup_get_idr_uobject: per-file table"),
	ROW("ibv_import_mr", "handle naming nothing", r_import_mr_unknown, ENOENT,
	    "kernel rdma_core.c lookup_get_idr_uobject (ibv_cmd_query_mr)"),
	ROW("ibv_import_mr", "handle of a deregistered MR", r_import_mr_deregistered, ENOENT,
	    "kernel rdma_core.c lookup_get_idr_uobject: removed at destroy"),
	ROW("ibv_import_mr", "handle of another context's MR", r_import_mr_other_context, ENOENT,
	    "kernel rdma_core.c lookup_get_idr_uobject: per-file table"),
	ROW("ibv_rereg_mr", "an imported MR", r_rereg_imported_mr, EINVAL,
	    "rdma-core verbs.c ibv_rereg_mr: mr_type != IBV_MR_TYPE_MR"),
	ROW("ibv_query_ece", "device without ECE (ece untouched)", r_query_ece, EOPNOTSUPP,
	    "rdma-core dummy_ops.c query_ece (rxe sets none)"),
	ROW("ibv_set_ece", "vendor_id 0 (ece untouched)", r_set_ece_vendor_0, EOPNOTSUPP,
	    "rdma-core verbs.c ibv_set_ece: !vendor_id"),
	ROW("ibv_set_ece", "vendor_id 0x2c9 (ece untouched)", r_set_ece_vendor_mlx, EOPNOTSUPP,
	    "rdma-core dummy_ops.c set_ece (rxe sets none)"),
	/* completion queues and channels */
	ROW("ibv_create_cq", "cqe 0", r_cq_zero, EINVAL, "kernel rxe_cq.c rxe_cq_chk_attr: cqe <= 0"),
	ROW("ibv_create_cq", "cqe -1", r_cq_negative, EINVAL,
	    "kernel rxe_cq.c rxe_cq_chk_attr: cqe <= 0"),
	ROW("ibv_create_cq", "cqe max_cqe + 1", r_cq_above_max, EINVAL,
	    "kernel rxe_cq.c rxe_cq_chk_attr: cqe > max_cqe"),
	ROW("ibv_create_cq", "comp_vector -1", r_cq_vector_negative, EINVAL,
	    "uverbs_cmd.c create_cq: comp_vector >= num_comp_vectors"),
	ROW("ibv_create_cq", "comp_vector num_comp_vectors", r_cq_vector_count, EINVAL,
	    "uverbs_cmd.c create_cq: comp_vector >= num_comp_vectors"),
	ROW("ibv_resize_cq", "cqe 0 (cqe unchanged)", r_resize_zero, EINVAL,
	    "kernel rxe_cq.c rxe_cq_chk_attr"),
	ROW("ibv_resize_cq", "cqe -5 (cqe unchanged)", r_resize_negative, EINVAL,
	    "kernel rxe_cq.c rxe_cq_chk_attr"),
	ROW("ibv_resize_cq", "cqe max_cqe + 1 (cqe unchanged)", r_resize_above_max, EINVAL,
	    "kernel rxe_cq.c rxe_cq_chk_attr"),
	ROW("ibv_resize_cq", "below the completions queued", r_resize_below_queued, EINVAL,
	    "kernel rxe_cq.c rxe_cq_chk_attr: cqe < queue count"),
	ROW("ibv_destroy_cq", "CQ of a QP (CQ still polls)", r_destroy_cq_busy, EBUSY,
	    "kernel uverbs_std_types_cq.c uverbs_free_cq: ib_destroy_usecnt"),
	ROW("ibv_poll_cq", "num_entries -1", r_poll_cq_negative, 0,
	    "rdma-core rxe.c rxe_poll_cq: loop bound, 0 polled"),
	ROW("ibv_get_cq_event", "nothing pending, O_NONBLOCK", r_get_cq_event_none, EAGAIN,
	    "rdma-core verbs.c ibv_get_cq_event: read() fails"),
	ROW("ibv_destroy_comp_channel", "channel of a CQ (still usable)", r_destroy_channel_busy,
	    EBUSY, "rdma-core verbs.c ibv_destroy_comp_channel: refcnt"),
	/* queue pairs */
	ROW("ibv_create_qp", "qp_type 99", r_qp_type_bad, EOPNOTSUPP,
	    "kernel rxe_qp.c rxe_qp_chk_init: unsupported type"),
	ROW("ibv_create_qp", "max_send_wr max_qp_wr + 1", r_qp_send_wr_max, EINVAL,
	    "kernel rxe_qp.c rxe_qp_chk_cap"),
	ROW("ibv_create_qp", "max_recv_wr max_qp_wr + 1", r_qp_recv_wr_max, EINVAL,
	    "kernel rxe_qp.c rxe_qp_chk_cap"),
	ROW("ibv_create_qp", "max_send_sge max_sge + 1", r_qp_send_sge_max, EINVAL,
	    "kernel rxe_qp.c rxe_qp_chk_cap"),
	ROW("ibv_create_qp", "max_recv_sge max_sge + 1", r_qp_recv_sge_max, EINVAL,
	    "kernel rxe_qp.c rxe_qp_chk_cap"),
	ROW("ibv_create_qp", "max_inline_data 1 MiB", r_qp_inline_huge, EINVAL,
	    "kernel rxe_qp.c rxe_qp_chk_cap: max_inline_data"),
	ROW("ibv_modify_qp", "RESET -> RTR (state unchanged)", r_modify_reset_to_rtr, EINVAL,
	    "kernel verbs.c ib_modify_qp_is_ok (rxe_qp_chk_attr)"),
	ROW("ibv_modify_qp", "RESET -> RTS (state unchanged)", r_modify_reset_to_rts, EINVAL,
	    "kernel verbs.c ib_modify_qp_is_ok (rxe_qp_chk_attr)"),
	ROW("ibv_modify_qp", "RESET -> INIT without PORT (unchanged)", r_modify_init_missing_port,
	    EINVAL, "kernel verbs.c ib_modify_qp_is_ok: required attributes"),
	ROW("ibv_modify_qp", "RESET -> INIT port 2 (unchanged)", r_modify_init_port_2, EINVAL,
	    "kernel verbs.c _ib_modify_qp: rdma_is_port_valid"),
	ROW("ibv_modify_qp", "qp_state 42 (unchanged)", r_modify_state_out_of_range, EINVAL,
	    "uverbs_cmd.c modify_qp: qp_state > IB_QPS_ERR"),
	ROW("ibv_modify_qp", "cur_qp_state not the state (unchanged)", r_modify_wrong_cur_state,
	    EINVAL, "rverbs differs (docs/rxe-differences.md): rxe uses the caller's value"),
	ROW("ibv_modify_qp", "INIT -> RTR without DEST_QPN (unchanged)",
	    r_modify_rtr_missing_dest_qpn, EINVAL,
	    "kernel verbs.c ib_modify_qp_is_ok: required attributes"),
	ROW("ibv_modify_qp", "INIT -> RTR, RoCE AV without GRH (unchanged)", r_modify_rtr_no_grh,
	    EINVAL, "kernel verbs.c rdma_check_ah_attr: RoCE needs IB_AH_GRH"),
	ROW("ibv_modify_qp", "INIT -> RTR, sgid_index beyond table", r_modify_rtr_sgid_beyond,
	    EINVAL, "kernel cache.c rdma_get_gid_attr: no entry"),
	ROW("ibv_modify_qp", "INIT -> RTR, AV port 2 (unchanged)", r_modify_rtr_port_2, EINVAL,
	    "kernel verbs.c rdma_check_ah_attr: rdma_is_port_valid"),
	ROW("ibv_modify_qp", "INIT -> RTR, max_dest_rd_atomic 255", r_modify_rtr_rd_atomic_huge,
	    EINVAL, "kernel rxe_qp.c rxe_qp_chk_attr: > max_qp_rd_atom"),
	/* posting */
	ROW("ibv_post_send", "bad_wr NULL (nothing posted)", r_post_send_null_bad, EINVAL,
	    "rdma-core rxe.c rxe_post_send: !bad_wr"),
	ROW("ibv_post_send", "wr NULL (*bad_wr = NULL)", r_post_send_null_wr, EINVAL,
	    "rdma-core rxe.c rxe_post_send: !wr_list"),
	ROW("ibv_post_recv", "bad_wr NULL", r_post_recv_null_bad, EINVAL,
	    "rdma-core rxe.c rxe_post_recv: !bad_wr"),
	ROW("ibv_post_recv", "wr NULL (*bad_wr = NULL)", r_post_recv_null_wr, EINVAL,
	    "rdma-core rxe.c rxe_post_recv: !recv_wr"),
	ROW("ibv_post_send", "2nd of 3 WRs bad: 1st posted, 3rd not, *bad_wr = 2nd",
	    r_post_send_partial, EINVAL, "rdma-core rxe.c rxe_post_send; man ibv_post_send"),
	ROW("ibv_post_send", "num_sge max_sge + 1", r_post_send_too_many_sge, EINVAL,
	    "rdma-core rxe.c validate_send_wr: num_sge > max_sge"),
	ROW("ibv_post_send", "INLINE longer than max_inline_data", r_post_send_inline_too_long,
	    EINVAL, "rdma-core rxe.c validate_send_wr: length > max_inline"),
	ROW("ibv_post_send", "atomic at a misaligned address", r_atomic_misaligned, EINVAL,
	    "rdma-core rxe.c validate_send_wr: remote_addr & 7"),
	ROW("ibv_post_send", "atomic with a 4-byte SGE", r_atomic_short, EINVAL,
	    "rdma-core rxe.c validate_send_wr: length < 8"),
	ROW("ibv_post_send", "QP in RESET", r_post_send_reset, EINVAL,
	    "rverbs differs (§12): rxe fails the doorbell with EINVAL, bad_wr NULL"),
	ROW("ibv_post_send", "QP in INIT", r_post_send_init, EINVAL,
	    "rverbs differs (§12): rxe fails the doorbell with EINVAL, bad_wr NULL"),
	ROW("ibv_post_send", "RDMA_WRITE on a UD QP", r_post_send_ud_write, EINVAL,
	    "rverbs differs (§12): rxe completes LOC_QP_OP_ERR later"),
	ROW("ibv_post_send", "opcode 77", r_post_send_opcode_bad, EINVAL,
	    "rverbs differs (§12): rxe completes LOC_QP_OP_ERR later"),
	ROW("ibv_post_send", "bad lkey -> completion status", r_post_bad_lkey,
	    IBV_WC_LOC_PROT_ERR, "rverbs differs (§12): rxe LOC_QP_OP_ERR"),
	ROW("ibv_post_send", "bad rkey -> completion status", r_post_bad_rkey,
	    IBV_WC_REM_ACCESS_ERR, "kernel rxe_resp.c check_rkey: NAK remote access error"),
	ROW("ibv_post_send", "write past the remote region -> status", r_post_beyond_remote,
	    IBV_WC_REM_ACCESS_ERR, "kernel rxe_resp.c check_rkey: mr_check_range"),
	ROW("ibv_post_recv", "QP in RESET", r_post_recv_reset, EINVAL,
	    "rdma-core rxe.c rxe_post_recv: C10-97.2.1"),
	ROW("ibv_post_recv", "num_sge max_sge + 1", r_post_recv_too_many_sge, EINVAL,
	    "rdma-core rxe.c rxe_post_one_recv: num_sge > max_sge"),
	ROW("ibv_post_recv", "QP attached to an SRQ", r_post_recv_on_srq_qp, EINVAL,
	    "rdma-core rxe.c rxe_post_recv: no receive queue"),
	ROW("ibv_post_srq_recv", "wr NULL", r_post_srq_null_wr, 0,
	    "rdma-core rxe.c rxe_post_srq_recv: empty list"),
	ROW("ibv_post_srq_recv", "num_sge max_srq_sge + 1", r_post_srq_too_many_sge, EINVAL,
	    "rdma-core rxe.c rxe_post_one_recv: num_sge > max_sge"),
	/* shared receive queues */
	ROW("ibv_create_srq", "max_wr max_srq_wr + 1", r_srq_wr_max, EINVAL,
	    "kernel rxe_srq.c rxe_srq_chk_init"),
	ROW("ibv_create_srq", "max_sge max_srq_sge + 1", r_srq_sge_max, EINVAL,
	    "kernel rxe_srq.c rxe_srq_chk_init"),
	ROW("ibv_create_srq", "max_wr 0", r_srq_wr_zero, EINVAL,
	    "kernel rxe_srq.c rxe_srq_chk_init: max_wr <= 0"),
	ROW("ibv_modify_srq", "srq_limit above max_wr (unchanged)", r_modify_srq_limit_above,
	    EINVAL, "kernel rxe_srq.c rxe_srq_chk_attr"),
	ROW("ibv_modify_srq", "max_wr max_srq_wr + 1", r_modify_srq_resize_above, EINVAL,
	    "kernel rxe_srq.c rxe_srq_chk_attr"),
	ROW("ibv_destroy_srq", "SRQ of a QP", r_destroy_srq_busy, EBUSY,
	    "kernel uverbs_std_types_srq.c uverbs_free_srq: ib_destroy_usecnt"),
	/* tag-matching SRQs */
	ROW("ibv_create_srq_ex", "IBV_SRQT_TM without IBV_SRQ_INIT_ATTR_CQ", r_tm_no_cq, EINVAL,
	    "ibv_create_srq_ex(3): TM SRQs need cq; mlx5 verbs.c mlx5_create_srq_ex"),
	ROW("ibv_create_srq_ex", "IBV_SRQT_TM without IBV_SRQ_INIT_ATTR_TM", r_tm_no_tm, EINVAL,
	    "ibv_create_srq_ex(3): tm_cap valid with IBV_SRQ_INIT_ATTR_TM; mlx5 verbs.c"),
	ROW("ibv_create_srq_ex", "tm_cap.max_num_tags 0", r_tm_tags_zero, EINVAL,
	    "kernel mlx5 srq.c: max_num_tags within tm_caps"),
	ROW("ibv_create_srq_ex", "tm_cap.max_num_tags tm_caps.max_num_tags + 1", r_tm_tags_above,
	    EINVAL, "kernel mlx5 srq.c: max_num_tags within tm_caps"),
	ROW("ibv_post_srq_ops", "basic SRQ (bad_op = op)", r_ops_basic_srq, EINVAL,
	    "rdma-core mlx5 verbs.c mlx5_post_srq_ops: no command QP"),
	ROW("ibv_post_srq_ops", "op NULL", r_ops_null, 0, "mlx5_post_srq_ops: empty list"),
	ROW("ibv_post_srq_ops", "opcode 7 (bad_op = op)", r_ops_opcode, EINVAL,
	    "mlx5_post_srq_ops: unknown opcode"),
	ROW("ibv_post_srq_ops", "flags bit 5 (bad_op = op)", r_ops_flag, EINVAL,
	    "ibv_post_srq_ops(3): enum ibv_ops_flags; rverbs refuses unknown bits"),
	ROW("ibv_post_srq_ops", "ADD num_sge tm_caps.max_sge + 1 (bad_op = op)", r_ops_add_sges,
	    EINVAL, "mlx5_post_srq_ops (MLX5_DEBUG): num_sge above the tagged buffer's"),
	ROW("ibv_post_srq_ops", "ADD to a full tag list (bad_op = op)", r_ops_add_full, ENOMEM,
	    "mlx5_post_srq_ops: tag matching list is full"),
	/* address handles, multicast */
	ROW("ibv_create_ah", "port 2", r_ah_port_2, EINVAL,
	    "uverbs_cmd.c ib_uverbs_create_ah: rdma_is_port_valid"),
	ROW("ibv_create_ah", "port 0", r_ah_port_0, EINVAL,
	    "uverbs_cmd.c ib_uverbs_create_ah: rdma_is_port_valid"),
	ROW("ibv_create_ah", "RoCE without GRH", r_ah_no_grh, EINVAL,
	    "kernel verbs.c rdma_check_ah_attr: RoCE needs IB_AH_GRH"),
	ROW("ibv_create_ah", "sgid_index beyond table", r_ah_sgid_beyond, EINVAL,
	    "kernel cache.c rdma_get_gid_attr: no entry"),
	ROW("ibv_attach_mcast", "RC QP", r_attach_mcast_rc, EINVAL,
	    "kernel verbs.c ib_attach_mcast: qp_type != UD"),
	ROW("ibv_attach_mcast", "unicast GID", r_attach_mcast_unicast_gid, EINVAL,
	    "kernel verbs.c ib_attach_mcast: !rdma_is_multicast_addr"),
};

static const char *outcome(int v, char *buf, size_t n)
{
	if (v == 0)
		return "0";
	if (v == ANY_ERR)
		return "fails";
	if (v == SIDE_EFFECT)
		return "partial side effect";
	snprintf(buf, n, "%d (%s)", v, v < 200 ? strerror(v) : "?");
	return buf;
}

static void setup(void)
{
	struct ibv_srq_init_attr sinit = {.attr = {.max_wr = 16, .max_sge = 1}};
	struct ibv_qp_init_attr ud = {.cap = {.max_send_wr = 4, .max_recv_wr = 4,
					      .max_send_sge = 1, .max_recv_sge = 1},
				      .qp_type = IBV_QPT_UD};

	make_pair(&F.a, &F.b, IBV_QPT_RC, 16, 8);
	F.gid = loopback_gid_index(F.a.ctx);
	REQUIRE(ibv_query_device(F.a.ctx, &F.dev) == 0, "ibv_query_device");
	{
		struct ibv_device_attr_ex ax;

		REQUIRE(ibv_query_device_ex(F.a.ctx, NULL, &ax) == 0 && ax.max_dm_size >= 4096,
			"ibv_query_device_ex: max_dm_size");
		F.max_dm_size = ax.max_dm_size;
		F.tm_max_tags = ax.tm_caps.max_num_tags;
		F.tm_max_sge = ax.tm_caps.max_sge;
		REQUIRE(F.tm_max_tags >= 2 && F.tm_max_sge < 32, "ibv_query_device_ex: tm_caps");
	}
	F.reset_qp = new_rc_qp(&F.a, NULL);
	F.init_qp = new_rc_qp(&F.a, NULL);
	to_init(F.init_qp, ALL_ACCESS);
	ud.send_cq = F.a.send_cq;
	ud.recv_cq = F.a.recv_cq;
	F.ud_qp = ibv_create_qp(F.a.pd, &ud);
	REQUIRE(F.ud_qp != NULL, "ibv_create_qp(UD)");
	to_rts(F.ud_qp, 0, F.gid, 0);
	F.srq = ibv_create_srq(F.a.pd, &sinit);
	REQUIRE(F.srq != NULL, "ibv_create_srq");
	F.srq_qp = new_rc_qp(&F.a, F.srq);
	to_init(F.srq_qp, ALL_ACCESS);
}

static void teardown(void)
{
	REQUIRE(ibv_destroy_qp(F.srq_qp) == 0 && ibv_destroy_srq(F.srq) == 0, "SRQ teardown");
	REQUIRE(ibv_destroy_qp(F.ud_qp) == 0 && ibv_destroy_qp(F.init_qp) == 0 &&
			ibv_destroy_qp(F.reset_qp) == 0,
		"QP teardown");
	destroy_side(&F.a);
	destroy_side(&F.b);
}

int main(void)
{
	int failed = 0, n = sizeof(rows) / sizeof(rows[0]);
	char got_s[64], want_s[64];

	setvbuf(stdout, NULL, _IOLBF, 0);
	setup();
	for (int i = 0; i < n; i++) {
		const struct row *r = &rows[i];
		int got = r->run();

		if (got == r->expect || (r->expect == ANY_ERR && got != 0 && got != SIDE_EFFECT)) {
			printf("ok - %s: %s -> %s [%s]\n", r->verb, r->arg,
			       outcome(got, got_s, sizeof(got_s)), r->source);
		} else {
			printf("FAIL - %s: %s -> %s, expected %s [%s]\n", r->verb, r->arg,
			       outcome(got, got_s, sizeof(got_s)),
			       outcome(r->expect, want_s, sizeof(want_s)), r->source);
			failed++;
		}
	}
	/* The fixture survived every refused call: the pair still carries traffic. */
	post_write(&F.a, 999, 8, (uintptr_t)F.b.buf, F.b.mr->rkey, IBV_SEND_SIGNALED);
	CHECK(poll_one(F.a.send_cq).status == IBV_WC_SUCCESS,
	      "after the table, the RC pair still completes a write");
	teardown();
	printf("# %d rows, %d failed\n", n, failed);
	if (failed)
		return 1;
	printf("# bad_args: all checks passed\n");
	return 0;
}
