/* Foreign and destroyed object pointers (docs/capi.md: they are refused, not
 * dereferenced):
 *  - a pointer to a 4-byte allocation that ends where an inaccessible page begins, one
 *    that starts right after an inaccessible page, a malloc(4) and a stack byte, cast to
 *    ibv_context / ibv_pd / ibv_mr / ibv_mw / ibv_cq / ibv_comp_channel / ibv_qp /
 *    ibv_srq / ibv_ah / ibv_xrcd / ibv_dm and passed to every verb (or ops slot: the
 *    inline wrappers dereference the object themselves; the device-memory copies are
 *    reached through a live ibv_dm's own function pointers) that takes one: each returns
 *    its documented error (EINVAL in that verb's convention). A read past or before the
 *    4 guarded bytes faults (SIGSEGV, the test fails) whichever library performs it, so
 *    this also checks that the library reads nothing through a pointer it did not hand
 *    out (AddressSanitizer would only see reads of instrumented code, not of the library);
 *  - a live object of one kind passed as another kind is refused the same way;
 *  - after destroy, the pointer is refused too (second destroy, post/poll through it);
 *  - the import verbs (ibv_import_pd/mr, ibv_unimport_pd/mr) and ECE among them: the
 *    unimport calls, which return nothing, set errno EINVAL and release nothing.
 */
#include <sys/mman.h>
#include <unistd.h>

#include "common.h"

/* `n` bytes ending where a PROT_NONE page begins. */
static void *end_of_page(size_t n)
{
	long pg = sysconf(_SC_PAGESIZE);
	char *p = mmap(NULL, 2 * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	REQUIRE(p != MAP_FAILED && mprotect(p + pg, pg, PROT_NONE) == 0, "guard page");
	memset(p + pg - n, 0x5a, n);
	return p + pg - n;
}

/* 4 accessible bytes starting right after a PROT_NONE page (the rest of the page is
 * made inaccessible too). */
static void *start_of_page(void)
{
	long pg = sysconf(_SC_PAGESIZE);
	char *p = mmap(NULL, 2 * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	REQUIRE(p != MAP_FAILED && mprotect(p, pg, PROT_NONE) == 0, "guard page");
	memset(p + pg, 0x5a, 4);
	return p + pg;
}

/* Every verb that takes an object, given `f` (not an object of the library) as that
 * object; `ctx`, `pd` and `cq` are live objects for the other arguments. */
static void refuse_all(const char *what, void *f, struct ibv_context *ctx, struct ibv_pd *pd,
		       struct ibv_cq *cq, struct ibv_dm *dm)
{
	struct verbs_context *vctx = verbs_get_ctx(ctx);
	struct ibv_device_attr dattr;
	struct ibv_qp_attr qattr;
	struct ibv_qp_init_attr qinit;
	struct ibv_srq_attr sattr;
	struct ibv_ah_attr ah_attr;
	struct ibv_wc wc;
	struct ibv_sge sge = {.addr = 0, .length = 0, .lkey = 0};
	struct ibv_send_wr swr = {.sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND}, *sbad;
	struct ibv_recv_wr rwr = {.sg_list = &sge, .num_sge = 1}, *rbad;
	struct ibv_srq_init_attr srq_init = {.attr = {.max_wr = 4, .max_sge = 1}};
	struct ibv_xrcd_init_attr xinit = {.comp_mask = IBV_XRCD_INIT_ATTR_FD |
						       IBV_XRCD_INIT_ATTR_OFLAGS,
					   .fd = -1, .oflags = O_CREAT};
	struct ibv_alloc_dm_attr dm_attr = {.length = 64};
	struct ibv_sge odp_sge = {.addr = 0, .length = 8, .lkey = 0};
	struct ibv_cq *cq_out;
	struct ibv_ece ece = {.vendor_id = 1, .options = 7};
	void *ctx_out;
	char buf[64];

	printf("# %s\n", what);
	/* Contexts. */
	CHECK(ibv_close_device(f) == EINVAL, "%s: ibv_close_device -> EINVAL", what);
	errno = 0;
	CHECK(ibv_alloc_pd(f) == NULL && errno == EINVAL, "%s: ibv_alloc_pd(ctx) -> NULL/EINVAL", what);
	CHECK(ibv_query_device(f, &dattr) == EINVAL, "%s: ibv_query_device -> EINVAL", what);
	errno = 0;
	CHECK(ibv_create_cq(f, 4, NULL, NULL, 0) == NULL && errno == EINVAL,
	      "%s: ibv_create_cq(ctx) -> NULL/EINVAL", what);
	errno = 0;
	CHECK(ibv_create_comp_channel(f) == NULL && errno == EINVAL,
	      "%s: ibv_create_comp_channel(ctx) -> NULL/EINVAL", what);
	errno = 0;
	CHECK(vctx->open_xrcd(f, &xinit) == NULL && errno == EINVAL,
	      "%s: open_xrcd(ctx) -> NULL/EINVAL", what);
	/* PDs. */
	CHECK(ibv_dealloc_pd(f) == EINVAL, "%s: ibv_dealloc_pd -> EINVAL", what);
	errno = 0;
	CHECK(ibv_reg_mr(f, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE) == NULL && errno == EINVAL,
	      "%s: ibv_reg_mr(pd) -> NULL/EINVAL", what);
	memset(&qinit, 0, sizeof(qinit));
	qinit.send_cq = cq;
	qinit.recv_cq = cq;
	qinit.qp_type = IBV_QPT_RC;
	qinit.cap.max_send_wr = qinit.cap.max_recv_wr = 4;
	qinit.cap.max_send_sge = qinit.cap.max_recv_sge = 1;
	errno = 0;
	CHECK(ibv_create_qp(f, &qinit) == NULL && errno == EINVAL,
	      "%s: ibv_create_qp(pd) -> NULL/EINVAL", what);
	errno = 0;
	CHECK(ibv_create_srq(f, &srq_init) == NULL && errno == EINVAL,
	      "%s: ibv_create_srq(pd) -> NULL/EINVAL", what);
	memset(&ah_attr, 0, sizeof(ah_attr));
	ah_attr.port_num = 1;
	errno = 0;
	CHECK(ibv_create_ah(f, &ah_attr) == NULL && errno == EINVAL,
	      "%s: ibv_create_ah(pd) -> NULL/EINVAL", what);
	errno = 0;
	CHECK(ctx->ops.alloc_mw(f, IBV_MW_TYPE_1) == NULL && errno == EINVAL,
	      "%s: alloc_mw(pd) -> NULL/EINVAL", what);
	/* A CQ argument of a live PD's QP. */
	qinit.send_cq = f;
	errno = 0;
	CHECK(ibv_create_qp(pd, &qinit) == NULL && errno == EINVAL,
	      "%s: ibv_create_qp(send_cq) -> NULL/EINVAL", what);
	qinit.send_cq = cq;
	qinit.srq = f;
	errno = 0;
	CHECK(ibv_create_qp(pd, &qinit) == NULL && errno == EINVAL,
	      "%s: ibv_create_qp(srq) -> NULL/EINVAL", what);
	/* MRs and MWs. */
	CHECK(ibv_dereg_mr(f) == EINVAL, "%s: ibv_dereg_mr -> EINVAL", what);
	CHECK(ctx->ops.dealloc_mw(f) == EINVAL, "%s: dealloc_mw -> EINVAL", what);
	/* CQs and channels. */
	CHECK(ctx->ops.poll_cq(f, 1, &wc) == -EINVAL, "%s: poll_cq -> -EINVAL", what);
	CHECK(ctx->ops.req_notify_cq(f, 0) == EINVAL, "%s: req_notify_cq -> EINVAL", what);
	CHECK(ibv_resize_cq(f, 8) == EINVAL, "%s: ibv_resize_cq -> EINVAL", what);
	CHECK(ibv_destroy_cq(f) == EINVAL, "%s: ibv_destroy_cq -> EINVAL", what);
	errno = 0;
	ibv_ack_cq_events(f, 1);
	CHECK(errno == EINVAL, "%s: ibv_ack_cq_events sets EINVAL", what);
	CHECK(ibv_destroy_comp_channel(f) == EINVAL, "%s: ibv_destroy_comp_channel -> EINVAL", what);
	errno = 0;
	CHECK(ibv_get_cq_event(f, &cq_out, &ctx_out) == -1 && errno == EINVAL,
	      "%s: ibv_get_cq_event(channel) -> -1/EINVAL", what);
	/* QPs. */
	memset(&qattr, 0, sizeof(qattr));
	qattr.qp_state = IBV_QPS_INIT;
	CHECK(ibv_modify_qp(f, &qattr, IBV_QP_STATE) == EINVAL, "%s: ibv_modify_qp -> EINVAL", what);
	CHECK(ibv_query_qp(f, &qattr, IBV_QP_STATE, &qinit) == EINVAL,
	      "%s: ibv_query_qp -> EINVAL", what);
	sbad = NULL;
	CHECK(ctx->ops.post_send(f, &swr, &sbad) == EINVAL && sbad == &swr,
	      "%s: post_send -> EINVAL, *bad_wr = wr", what);
	rbad = NULL;
	CHECK(ctx->ops.post_recv(f, &rwr, &rbad) == EINVAL && rbad == &rwr,
	      "%s: post_recv -> EINVAL, *bad_wr = wr", what);
	CHECK(ibv_destroy_qp(f) == EINVAL, "%s: ibv_destroy_qp -> EINVAL", what);
	/* SRQs. */
	rbad = NULL;
	CHECK(ctx->ops.post_srq_recv(f, &rwr, &rbad) == EINVAL && rbad == &rwr,
	      "%s: post_srq_recv -> EINVAL, *bad_wr = wr", what);
	CHECK(ibv_query_srq(f, &sattr) == EINVAL, "%s: ibv_query_srq -> EINVAL", what);
	CHECK(ibv_modify_srq(f, &sattr, 0) == EINVAL, "%s: ibv_modify_srq -> EINVAL", what);
	CHECK(ibv_destroy_srq(f) == EINVAL, "%s: ibv_destroy_srq -> EINVAL", what);
	{
		struct ibv_ops_wr op = {.opcode = IBV_WR_TAG_SYNC}, *obad = NULL;

		CHECK(vctx->post_srq_ops(f, &op, &obad) == EINVAL && obad == &op,
		      "%s: post_srq_ops -> EINVAL, *bad_op = op", what);
	}
	/* AHs and XRC domains. */
	CHECK(ibv_destroy_ah(f) == EINVAL, "%s: ibv_destroy_ah -> EINVAL", what);
	CHECK(vctx->close_xrcd(f) == EINVAL, "%s: close_xrcd -> EINVAL", what);
	/* Device memory (ibv_alloc_dm(3)), and ibv_advise_mr(3) on a PD. */
	errno = 0;
	CHECK(vctx->alloc_dm(f, &dm_attr) == NULL && errno == EINVAL,
	      "%s: alloc_dm(ctx) -> NULL/EINVAL", what);
	CHECK(vctx->free_dm(f) == EINVAL, "%s: free_dm -> EINVAL", what);
	memset(buf, 0x77, sizeof(buf));
	CHECK(dm->memcpy_to_dm(f, 0, buf, 8) == EINVAL, "%s: memcpy_to_dm -> EINVAL", what);
	CHECK(dm->memcpy_from_dm(buf, f, 0, 8) == EINVAL && buf[0] == 0x77 && buf[7] == 0x77,
	      "%s: memcpy_from_dm -> EINVAL, nothing written", what);
	errno = 0;
	CHECK(ibv_reg_dm_mr(pd, f, 0, 64, IBV_ACCESS_ZERO_BASED) == NULL && errno == EINVAL,
	      "%s: ibv_reg_dm_mr(dm) -> NULL/EINVAL", what);
	errno = 0;
	CHECK(vctx->reg_dm_mr(f, dm, 0, 64, IBV_ACCESS_ZERO_BASED) == NULL && errno == EINVAL,
	      "%s: reg_dm_mr(pd) -> NULL/EINVAL", what);
	odp_sge.addr = (uintptr_t)buf;
	CHECK(vctx->advise_mr(f, IBV_ADVISE_MR_ADVICE_PREFETCH, IBV_ADVISE_MR_FLAG_FLUSH, &odp_sge,
			      1) == EINVAL,
	      "%s: advise_mr(pd) -> EINVAL", what);
	/* Import (ibv_import_pd(3), ibv_import_mr(3)) and ECE (ibv_query_ece(3)). */
	errno = 0;
	CHECK(ibv_import_pd(f, pd->handle) == NULL && errno == EINVAL,
	      "%s: ibv_import_pd(ctx) -> NULL/EINVAL", what);
	errno = 0;
	CHECK(ibv_import_mr(f, 1) == NULL && errno == EINVAL,
	      "%s: ibv_import_mr(pd) -> NULL/EINVAL", what);
	errno = 0;
	ibv_unimport_pd(f);
	CHECK(errno == EINVAL, "%s: ibv_unimport_pd sets EINVAL", what);
	errno = 0;
	ibv_unimport_mr(f);
	CHECK(errno == EINVAL, "%s: ibv_unimport_mr sets EINVAL", what);
	CHECK(ibv_query_ece(f, &ece) == EINVAL && ece.options == 7,
	      "%s: ibv_query_ece(qp) -> EINVAL, ece untouched", what);
	CHECK(ibv_set_ece(f, &ece) == EINVAL && ece.options == 7,
	      "%s: ibv_set_ece(qp, vendor_id 1) -> EINVAL, ece untouched", what);
}

int main(void)
{
	struct ibv_context *ctx = open_ctx();
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 8, NULL, NULL, 0);
	struct ibv_alloc_dm_attr dm_attr = {.length = 64};
	struct ibv_dm *dm = ibv_alloc_dm(ctx, &dm_attr);
	struct verbs_context *vctx = verbs_get_ctx(ctx);
	struct ibv_dm *dead_dm;
	struct ibv_cq *dead_cq;
	struct ibv_pd *dead_pd;
	struct ibv_qp *dead_qp;
	struct ibv_mr *dead_mr;
	struct ibv_qp_init_attr init = {.send_cq = NULL, .qp_type = IBV_QPT_RC,
					.cap = {.max_send_wr = 4, .max_recv_wr = 4,
						.max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_comp_channel *dead_ch;
	struct ibv_context *dead_ctx;
	struct ibv_wc wc;
	struct ibv_sge sge = {.addr = 0, .length = 0, .lkey = 0};
	struct ibv_send_wr swr = {.sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND}, *sbad;
	char stack_byte = 0x5a;
	char buf[64];
	void *small = malloc(4);

	REQUIRE(pd && cq && dm && small, "setup: PD, CQ, device memory, malloc(4)");
	memset(small, 0x5a, 4);
	refuse_all("4 bytes before a PROT_NONE page", end_of_page(4), ctx, pd, cq, dm);
	refuse_all("4 bytes after a PROT_NONE page", start_of_page(), ctx, pd, cq, dm);
	refuse_all("malloc(4)", small, ctx, pd, cq, dm);
	refuse_all("a stack byte", &stack_byte, ctx, pd, cq, dm);

	printf("# live objects of another kind\n");
	CHECK(ctx->ops.poll_cq((struct ibv_cq *)pd, 1, &wc) == -EINVAL,
	      "a PD as a CQ: poll_cq -> -EINVAL");
	CHECK(ibv_dealloc_pd((struct ibv_pd *)cq) == EINVAL, "a CQ as a PD: ibv_dealloc_pd -> EINVAL");
	CHECK(ibv_destroy_qp((struct ibv_qp *)cq) == EINVAL, "a CQ as a QP: ibv_destroy_qp -> EINVAL");
	CHECK(ibv_close_device((struct ibv_context *)pd) == EINVAL,
	      "a PD as a context: ibv_close_device -> EINVAL");
	CHECK(vctx->free_dm((struct ibv_dm *)pd) == EINVAL, "a PD as device memory: free_dm -> EINVAL");
	CHECK(dm->memcpy_to_dm((struct ibv_dm *)cq, 0, buf, 8) == EINVAL,
	      "a CQ as device memory: memcpy_to_dm -> EINVAL");
	CHECK(ibv_dealloc_pd((struct ibv_pd *)dm) == EINVAL, "device memory as a PD: ibv_dealloc_pd -> EINVAL");
	errno = 0;
	CHECK(ibv_reg_dm_mr(pd, (struct ibv_dm *)pd, 0, 8, IBV_ACCESS_ZERO_BASED) == NULL &&
		      errno == EINVAL,
	      "a PD as device memory: ibv_reg_dm_mr -> NULL/EINVAL");
	errno = 0;
	ibv_unimport_mr((struct ibv_mr *)pd);
	CHECK(errno == EINVAL, "a PD as an MR: ibv_unimport_mr sets EINVAL");
	{
		struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);

		CHECK(mr != NULL && ibv_dereg_mr(mr) == 0, "... and the PD stays usable");
	}
	errno = 0;
	ibv_unimport_pd((struct ibv_pd *)cq);
	CHECK(errno == EINVAL && ibv_req_notify_cq(cq, 0) == 0,
	      "a CQ as a PD: ibv_unimport_pd sets EINVAL, the CQ stays");
	errno = 0;
	CHECK(ibv_import_mr((struct ibv_pd *)ctx, 1) == NULL && errno == EINVAL,
	      "a context as a PD: ibv_import_mr -> NULL/EINVAL");

	printf("# destroyed objects\n");
	dead_mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	REQUIRE(dead_mr && ibv_dereg_mr(dead_mr) == 0, "reg + dereg an MR");
	CHECK(ibv_dereg_mr(dead_mr) == EINVAL, "ibv_dereg_mr of a deregistered MR -> EINVAL");
	errno = 0;
	ibv_unimport_mr(dead_mr);
	CHECK(errno == EINVAL, "ibv_unimport_mr of a deregistered MR sets EINVAL");
	init.send_cq = init.recv_cq = cq;
	dead_qp = ibv_create_qp(pd, &init);
	REQUIRE(dead_qp && ibv_destroy_qp(dead_qp) == 0, "create + destroy a QP");
	sbad = NULL;
	CHECK(ctx->ops.post_send(dead_qp, &swr, &sbad) == EINVAL && sbad == &swr,
	      "post_send on a destroyed QP -> EINVAL");
	CHECK(ibv_destroy_qp(dead_qp) == EINVAL, "ibv_destroy_qp of a destroyed QP -> EINVAL");
	{
		struct ibv_ece ece = {.vendor_id = 1};

		CHECK(ibv_query_ece(dead_qp, &ece) == EINVAL && ibv_set_ece(dead_qp, &ece) == EINVAL,
		      "ibv_query_ece / ibv_set_ece on a destroyed QP -> EINVAL");
	}
	{
		/* A tag-matching SRQ: its list operations through the pointer after destroy,
		 * and a live one passed as a QP. */
		struct ibv_srq_init_attr_ex tm = {
			.attr = {.max_wr = 4, .max_sge = 1},
			.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD |
				     IBV_SRQ_INIT_ATTR_CQ | IBV_SRQ_INIT_ATTR_TM,
			.srq_type = IBV_SRQT_TM, .pd = pd, .cq = cq,
			.tm_cap = {.max_num_tags = 4, .max_ops = 4}};
		struct ibv_ops_wr op = {.opcode = IBV_WR_TAG_SYNC}, *obad = NULL;
		struct ibv_srq *srq = ibv_create_srq_ex(ctx, &tm);

		REQUIRE(srq != NULL, "a tag-matching SRQ");
		CHECK(ibv_destroy_qp((struct ibv_qp *)srq) == EINVAL,
		      "a tag-matching SRQ as a QP: ibv_destroy_qp -> EINVAL");
		CHECK(vctx->post_srq_ops((struct ibv_srq *)cq, &op, &obad) == EINVAL && obad == &op,
		      "a CQ as a tag-matching SRQ: post_srq_ops -> EINVAL");
		REQUIRE(ibv_destroy_srq(srq) == 0, "destroy the tag-matching SRQ");
		obad = NULL;
		CHECK(vctx->post_srq_ops(srq, &op, &obad) == EINVAL && obad == &op,
		      "post_srq_ops on a destroyed tag-matching SRQ -> EINVAL");
		CHECK(ibv_destroy_srq(srq) == EINVAL, "ibv_destroy_srq of a destroyed SRQ -> EINVAL");
	}
	dead_cq = ibv_create_cq(ctx, 4, NULL, NULL, 0);
	REQUIRE(dead_cq && ibv_destroy_cq(dead_cq) == 0, "create + destroy a CQ");
	CHECK(ctx->ops.poll_cq(dead_cq, 1, &wc) == -EINVAL, "poll_cq on a destroyed CQ -> -EINVAL");
	CHECK(ibv_destroy_cq(dead_cq) == EINVAL, "ibv_destroy_cq of a destroyed CQ -> EINVAL");
	dead_ch = ibv_create_comp_channel(ctx);
	REQUIRE(dead_ch && ibv_destroy_comp_channel(dead_ch) == 0, "create + destroy a channel");
	CHECK(ibv_destroy_comp_channel(dead_ch) == EINVAL,
	      "ibv_destroy_comp_channel of a destroyed channel -> EINVAL");
	dead_pd = ibv_alloc_pd(ctx);
	REQUIRE(dead_pd && ibv_dealloc_pd(dead_pd) == 0, "alloc + dealloc a PD");
	CHECK(ibv_dealloc_pd(dead_pd) == EINVAL, "ibv_dealloc_pd of a deallocated PD -> EINVAL");
	errno = 0;
	ibv_unimport_pd(dead_pd);
	CHECK(errno == EINVAL, "ibv_unimport_pd of a deallocated PD sets EINVAL");
	errno = 0;
	CHECK(ibv_import_mr(dead_pd, 1) == NULL && errno == EINVAL,
	      "ibv_import_mr on a deallocated PD -> NULL/EINVAL");
	errno = 0;
	CHECK(ibv_reg_mr(dead_pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE) == NULL &&
		      errno == EINVAL,
	      "ibv_reg_mr on a deallocated PD -> NULL/EINVAL");
	dead_dm = ibv_alloc_dm(ctx, &dm_attr);
	REQUIRE(dead_dm && ibv_free_dm(dead_dm) == 0, "alloc + free device memory");
	CHECK(vctx->free_dm(dead_dm) == EINVAL, "free_dm of freed device memory -> EINVAL");
	CHECK(dm->memcpy_to_dm(dead_dm, 0, buf, 8) == EINVAL,
	      "memcpy_to_dm into freed device memory -> EINVAL");
	memset(buf, 0x77, sizeof(buf));
	CHECK(dm->memcpy_from_dm(buf, dead_dm, 0, 8) == EINVAL && buf[0] == 0x77,
	      "memcpy_from_dm out of freed device memory -> EINVAL, nothing written");
	errno = 0;
	CHECK(ibv_reg_dm_mr(pd, dead_dm, 0, 8, IBV_ACCESS_ZERO_BASED) == NULL && errno == EINVAL,
	      "ibv_reg_dm_mr over freed device memory -> NULL/EINVAL");
	dead_ctx = open_ctx();
	REQUIRE(ibv_close_device(dead_ctx) == 0, "open + close a context");
	CHECK(ibv_close_device(dead_ctx) == EINVAL, "ibv_close_device of a closed context -> EINVAL");
	errno = 0;
	CHECK(ibv_alloc_pd(dead_ctx) == NULL && errno == EINVAL,
	      "ibv_alloc_pd on a closed context -> NULL/EINVAL");
	errno = 0;
	CHECK(ibv_import_pd(dead_ctx, pd->handle) == NULL && errno == EINVAL,
	      "ibv_import_pd on a closed context -> NULL/EINVAL");

	REQUIRE(ibv_free_dm(dm) == 0 && ibv_destroy_cq(cq) == 0 && ibv_dealloc_pd(pd) == 0 &&
			ibv_close_device(ctx) == 0,
		"teardown");
	free(small);
	printf("# foreign_ptr: all checks passed\n");
	return 0;
}
