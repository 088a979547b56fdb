/* ibv_alloc_td(3), ibv_alloc_parent_domain(3) and the CQ on a parent domain of
 * ibv_create_cq_ex(3) (IBV_CQ_INIT_ATTR_MASK_PD), through the drop-in libibverbs.so.1:
 * argument checks, EBUSY between the domains, objects created on a parent domain
 * (CQ, QP, SRQ, MR, AH) and RC traffic between two parent domains with the bytes
 * checked. The allocators here answer IBV_ALLOCATOR_USE_DEFAULT: each QP asks once (for
 * its send queue's ring), nothing is freed, and the CQs ask nothing (their rings are
 * shared segments: docs/memory.md, "Custom allocators"); tests/c/parent_domain_alloc.c
 * covers allocators that hand out memory. */
#include "common.h"

static int allocs, frees;
static void *seen_context;

static void *count_alloc(struct ibv_pd *pd, void *pd_context, size_t size, size_t align,
			 uint64_t resource_type)
{
	(void)pd; (void)size; (void)align; (void)resource_type;
	seen_context = pd_context;
	allocs++;
	return IBV_ALLOCATOR_USE_DEFAULT;
}

static void count_free(struct ibv_pd *pd, void *pd_context, void *ptr, uint64_t resource_type)
{
	(void)pd; (void)pd_context; (void)ptr; (void)resource_type;
	frees++;
}

static struct ibv_cq_ex *cq_on(struct ibv_context *ctx, struct ibv_pd *parent, uint32_t flags)
{
	struct ibv_cq_init_attr_ex a = {
		.cqe = 64,
		.wc_flags = IBV_WC_STANDARD_FLAGS,
		.comp_mask = IBV_CQ_INIT_ATTR_MASK_PD | IBV_CQ_INIT_ATTR_MASK_FLAGS,
		.flags = flags,
		.parent_domain = parent,
	};

	return ibv_create_cq_ex(ctx, &a);
}

static int marker;

/* A side whose CQs, QP and MR are created on a parent domain (with a thread domain). */
struct pside {
	struct side s;
	struct ibv_td *td;
	struct ibv_pd *plain;
};

static void make_pside(struct pside *p)
{
	struct ibv_td_init_attr tda = {0};
	struct ibv_parent_domain_init_attr pa = {0};

	memset(p, 0, sizeof(*p));
	p->s.ctx = open_ctx();
	p->plain = ibv_alloc_pd(p->s.ctx);
	p->td = ibv_alloc_td(p->s.ctx, &tda);
	REQUIRE(p->plain && p->td, "ibv_alloc_pd, ibv_alloc_td");
	pa.pd = p->plain;
	pa.td = p->td;
	pa.comp_mask = IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS | IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT;
	pa.alloc = count_alloc;
	pa.free = count_free;
	pa.pd_context = &marker;
	p->s.pd = ibv_alloc_parent_domain(p->s.ctx, &pa);
	REQUIRE(p->s.pd != NULL, "ibv_alloc_parent_domain");
	p->s.send_cq = ibv_cq_ex_to_cq(cq_on(p->s.ctx, p->s.pd, 0));
	p->s.recv_cq = ibv_cq_ex_to_cq(cq_on(p->s.ctx, p->s.pd, IBV_CREATE_CQ_ATTR_SINGLE_THREADED));
	REQUIRE(p->s.send_cq && p->s.recv_cq, "two CQs on the parent domain");
	p->s.buf = aligned_alloc(4096, BUF_LEN);
	memset(p->s.buf, 0, BUF_LEN);
	p->s.mr = ibv_reg_mr(p->s.pd, p->s.buf, BUF_LEN,
			     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
	REQUIRE(p->s.mr && p->s.mr->pd == p->s.pd, "ibv_reg_mr on the parent domain");
	p->s.qp = make_qp(&p->s, IBV_QPT_RC, 16);
}

static void free_pside(struct pside *p)
{
	CHECK(ibv_destroy_qp(p->s.qp) == 0 && ibv_dereg_mr(p->s.mr) == 0, "destroy QP, dereg MR");
	CHECK(ibv_dealloc_pd(p->s.pd) == EBUSY, "dealloc of a parent domain with CQs: EBUSY");
	CHECK(ibv_destroy_cq(p->s.send_cq) == 0 && ibv_destroy_cq(p->s.recv_cq) == 0, "destroy the CQs");
	CHECK(ibv_dealloc_pd(p->plain) == EBUSY, "dealloc of a PD a parent domain uses: EBUSY");
	CHECK(ibv_dealloc_td(p->td) == EBUSY, "dealloc of a TD a parent domain uses: EBUSY");
	CHECK(ibv_dealloc_pd(p->s.pd) == 0, "dealloc of the parent domain once its CQs are gone");
	CHECK(ibv_dealloc_td(p->td) == 0 && ibv_dealloc_pd(p->plain) == 0,
	      "then the TD and the PD");
	free(p->s.buf);
	CHECK(ibv_close_device(p->s.ctx) == 0, "ibv_close_device");
}

static void arguments(void)
{
	struct ibv_context *ctx = open_ctx(), *other = open_ctx();
	struct ibv_td_init_attr tda = {0};
	struct ibv_parent_domain_init_attr pa = {0};
	struct ibv_pd *pd = ibv_alloc_pd(ctx), *pd_other = ibv_alloc_pd(other), *parent;
	struct ibv_td *td, *td_other;

	REQUIRE(pd && pd_other, "ibv_alloc_pd x2");
	errno = 0;
	CHECK(!ibv_alloc_td(ctx, NULL) && errno == EINVAL, "ibv_alloc_td(NULL attr): NULL/EINVAL");
	tda.comp_mask = 1;
	errno = 0;
	CHECK(!ibv_alloc_td(ctx, &tda) && errno == EINVAL, "ibv_alloc_td(comp_mask 1): NULL/EINVAL");
	tda.comp_mask = 0;
	td = ibv_alloc_td(ctx, &tda);
	td_other = ibv_alloc_td(other, &tda);
	CHECK(td && td->context == ctx && td_other, "ibv_alloc_td fills context");

	errno = 0;
	CHECK(!ibv_alloc_parent_domain(ctx, &pa) && errno == EINVAL,
	      "ibv_alloc_parent_domain without a PD: NULL/EINVAL");
	pa.pd = pd;
	pa.comp_mask = 1 << 2;
	errno = 0;
	CHECK(!ibv_alloc_parent_domain(ctx, &pa) && errno == EINVAL,
	      "an unknown comp_mask bit: NULL/EINVAL");
	pa.comp_mask = 0;
	pa.pd = pd_other;
	errno = 0;
	CHECK(!ibv_alloc_parent_domain(ctx, &pa) && errno == EINVAL,
	      "a PD of another context: NULL/EINVAL");
	pa.pd = pd;
	pa.td = td_other;
	errno = 0;
	CHECK(!ibv_alloc_parent_domain(ctx, &pa) && errno == EINVAL,
	      "a TD of another context: NULL/EINVAL");
	pa.td = td;
	parent = ibv_alloc_parent_domain(ctx, &pa);
	CHECK(parent && parent != pd && parent->context == ctx && parent->handle == pd->handle,
	      "ibv_alloc_parent_domain: a new ibv_pd with the context and handle of its PD");
	pa.pd = parent;
	pa.td = NULL;
	errno = 0;
	CHECK(!ibv_alloc_parent_domain(ctx, &pa) && errno == EINVAL,
	      "a parent domain over a parent domain: NULL/EINVAL");

	errno = 0;
	CHECK(!cq_on(ctx, pd, 0) && errno == EINVAL,
	      "ibv_create_cq_ex with MASK_PD and a plain PD: NULL/EINVAL");
	errno = 0;
	CHECK(!cq_on(other, parent, 0) && errno == EINVAL,
	      "ibv_create_cq_ex with a parent domain of another context: NULL/EINVAL");
	errno = 0;
	CHECK(!cq_on(ctx, (struct ibv_pd *)&tda, 0) && errno == EINVAL,
	      "ibv_create_cq_ex with a pointer that is no PD: NULL/EINVAL");

	CHECK(ibv_dealloc_pd(pd) == EBUSY && ibv_dealloc_td(td) == EBUSY,
	      "PD and TD of a parent domain: EBUSY");
	CHECK(ibv_dealloc_pd(parent) == 0, "ibv_dealloc_pd(parent domain)");
	CHECK(ibv_dealloc_pd(parent) == EINVAL, "a second ibv_dealloc_pd of it: EINVAL");
	CHECK(ibv_dealloc_td(td) == 0 && ibv_dealloc_pd(pd) == 0, "then the TD and the PD");
	CHECK(ibv_dealloc_td(td_other) == 0 && ibv_dealloc_pd(pd_other) == 0, "the other context's");
	CHECK(ibv_close_device(ctx) == 0 && ibv_close_device(other) == 0, "close both contexts");
}

static void objects_and_traffic(void)
{
	struct pside a, b;
	struct ibv_wc wc;
	struct ibv_sge sge;
	struct ibv_send_wr swr = {0}, *bad_s;
	struct ibv_recv_wr rwr = {0}, *bad_r;
	struct ibv_srq_init_attr sa = {.attr = {.max_wr = 4, .max_sge = 1}};
	struct ibv_ah_attr aa = {0};
	struct ibv_srq *srq;
	struct ibv_ah *ah;
	static const char msg[] = "over a parent domain";
	int gid;

	make_pside(&a);
	make_pside(&b);
	CHECK(a.s.qp->pd == a.s.pd, "a QP created on a parent domain names it as its pd");

	srq = ibv_create_srq(a.s.pd, &sa);
	CHECK(srq && srq->pd == a.s.pd, "ibv_create_srq on a parent domain");
	CHECK(ibv_destroy_srq(srq) == 0, "ibv_destroy_srq");
	gid = loopback_gid_index(a.s.ctx);
	aa.is_global = 1;
	aa.port_num = 1;
	aa.grh.sgid_index = gid;
	aa.grh.hop_limit = 64;
	REQUIRE(ibv_query_gid(a.s.ctx, 1, gid, &aa.grh.dgid) == 0, "ibv_query_gid");
	ah = ibv_create_ah(a.s.pd, &aa);
	CHECK(ah && ah->pd == a.s.pd, "ibv_create_ah on a parent domain");
	CHECK(ibv_destroy_ah(ah) == 0, "ibv_destroy_ah");

	to_rts(a.s.qp, b.s.qp->qp_num, gid, IBV_ACCESS_REMOTE_WRITE);
	to_rts(b.s.qp, a.s.qp->qp_num, gid, IBV_ACCESS_REMOTE_WRITE);

	/* SEND: a's buffer to b's receive at offset 256. */
	memcpy(a.s.buf, msg, sizeof(msg));
	sge = (struct ibv_sge){.addr = (uintptr_t)b.s.buf + 256, .length = 64, .lkey = b.s.mr->lkey};
	rwr.wr_id = 5;
	rwr.sg_list = &sge;
	rwr.num_sge = 1;
	CHECK(ibv_post_recv(b.s.qp, &rwr, &bad_r) == 0, "ibv_post_recv on b");
	sge = (struct ibv_sge){.addr = (uintptr_t)a.s.buf, .length = sizeof(msg), .lkey = a.s.mr->lkey};
	swr.wr_id = 6;
	swr.sg_list = &sge;
	swr.num_sge = 1;
	swr.opcode = IBV_WR_SEND;
	swr.send_flags = IBV_SEND_SIGNALED;
	CHECK(ibv_post_send(a.s.qp, &swr, &bad_s) == 0, "ibv_post_send SEND on a");
	wc = poll_one(a.s.send_cq);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 6,
	      "SEND completes on a's CQ of its parent domain");
	wc = poll_one(b.s.recv_cq);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 5 &&
		      wc.byte_len == sizeof(msg),
	      "RECV completes on b's SINGLE_THREADED CQ of its parent domain (%u bytes)", wc.byte_len);
	CHECK(!memcmp(b.s.buf + 256, msg, sizeof(msg)), "the bytes arrived");

	/* RDMA WRITE into b's region registered on its parent domain. */
	memset(a.s.buf, 0x5a, 128);
	swr.wr_id = 7;
	swr.opcode = IBV_WR_RDMA_WRITE;
	sge.length = 128;
	swr.wr.rdma.remote_addr = (uintptr_t)b.s.buf + 1024;
	swr.wr.rdma.rkey = b.s.mr->rkey;
	CHECK(ibv_post_send(a.s.qp, &swr, &bad_s) == 0, "ibv_post_send RDMA WRITE on a");
	wc = poll_one(a.s.send_cq);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 7,
	      "RDMA WRITE completes");
	for (int i = 0; i < 128; i++)
		REQUIRE((unsigned char)b.s.buf[1024 + i] == 0x5a, "byte %d written", i);
	CHECK(1, "the 128 written bytes are in b's region");

	free_pside(&a);
	free_pside(&b);
	/* docs/memory.md, "Custom allocators": one alloc per QP (its send queue's ring), none
	 * for the CQs; a USE_DEFAULT answer is never freed. */
	CHECK(allocs == 2 && frees == 0 && seen_context == &marker,
	      "alloc was asked once per QP with the pd_context, free never (USE_DEFAULT)");
}

int main(void)
{
	arguments();
	objects_and_traffic();
	printf("# parent_domain: all checks passed\n");
	return 0;
}
