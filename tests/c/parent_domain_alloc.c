/* The custom allocators of ibv_alloc_parent_domain(3) (IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS)
 * through the drop-in libibverbs.so.1. The allocators below record every call and hand out
 * memory of their own arena. rverbs asks them for the send queue's ring of every QP created
 * on the parent domain (ibv_create_qp, ibv_create_qp_ex; RC and UD), and for nothing else:
 * CQ, receive and SRQ rings are shared segments other processes map (docs/memory.md,
 * "Custom allocators"). Checked: the arguments of each call (the parent domain, its
 * pd_context, size, alignment, resource type 1), that the ring really lives in the arena
 * (the work requests' wr_ids and inline bytes of RC and UD traffic are found in the
 * buffer handed out, and the traffic's bytes arrive), that `free` gets the same pointer
 * and type exactly once, inside ibv_destroy_qp, that IBV_ALLOCATOR_USE_DEFAULT leaves the
 * ring to rverbs (traffic fine, no free), that NULL fails the create with ENOMEM (no free,
 * nothing held), that the parent domain is EBUSY while its QPs exist (mlx5), and that a QP
 * on a plain PD, or on a parent domain whose `free` is NULL (mlx5's
 * mlx5_is_custom_alloc), asks nothing. */
#define _GNU_SOURCE
#include "common.h"
#if __has_include(<valgrind/memcheck.h>)
#include <valgrind/memcheck.h>
#else
#define VALGRIND_MAKE_MEM_DEFINED(addr, len) ((void)(addr), (void)(len))
#endif

#define ARENA_LEN (4u << 20)
#define MAX_CALLS 64
/* The resource type rverbs passes: RDMA_DRIVER_UNKNOWN << 32 | 1 (docs/memory.md). */
#define RES_TYPE_SEND_QUEUE 1ull

static unsigned char *arena;
static size_t arena_used;

enum answer { ANSWER_ARENA, ANSWER_DEFAULT, ANSWER_NULL };
static enum answer answer = ANSWER_ARENA;

struct call {
	struct ibv_pd *pd;
	void *pd_context;
	size_t size, alignment;
	uint64_t type;
	void *ptr;
};
static struct call allocs[MAX_CALLS], frees[MAX_CALLS];
static int n_allocs, n_frees;

static void *rec_alloc(struct ibv_pd *pd, void *pd_context, size_t size, size_t alignment,
		       uint64_t resource_type)
{
	void *p = NULL;

	REQUIRE(n_allocs < MAX_CALLS, "fewer than %d alloc calls", MAX_CALLS);
	switch (answer) {
	case ANSWER_DEFAULT:
		p = IBV_ALLOCATOR_USE_DEFAULT;
		break;
	case ANSWER_NULL:
		p = NULL;
		break;
	case ANSWER_ARENA: {
		size_t start;

		REQUIRE(alignment && !(alignment & (alignment - 1)),
			"alloc's alignment %zu is a power of two", alignment);
		start = (arena_used + alignment - 1) & ~(alignment - 1);
		REQUIRE(start + size <= ARENA_LEN, "the arena holds %zu more bytes", size);
		p = arena + start;
		arena_used = start + size;
		/* ibv_alloc_parent_domain(3): the callback zeroes the buffer. */
		memset(p, 0, size);
		break;
	}
	}
	allocs[n_allocs++] = (struct call){pd, pd_context, size, alignment, resource_type, p};
	return p;
}

static void rec_free(struct ibv_pd *pd, void *pd_context, void *ptr, uint64_t resource_type)
{
	REQUIRE(n_frees < MAX_CALLS, "fewer than %d free calls", MAX_CALLS);
	frees[n_frees++] = (struct call){pd, pd_context, 0, 0, resource_type, ptr};
}

static int tag; /* the parent domain's pd_context is &tag */

static struct ibv_pd *parent_over(struct ibv_context *ctx, struct ibv_pd *pd, int with_free)
{
	struct ibv_parent_domain_init_attr pa = {
		.pd = pd,
		.comp_mask = IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS |
			     IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT,
		.alloc = rec_alloc,
		.free = with_free ? rec_free : NULL,
		.pd_context = &tag,
	};
	struct ibv_pd *parent = ibv_alloc_parent_domain(ctx, &pa);

	REQUIRE(parent != NULL, "ibv_alloc_parent_domain with ALLOCATORS | PD_CONTEXT");
	return parent;
}

/* The shared state of the checks: one context, its PD, a parent domain over it, CQs
 * created on the parent domain, and a region registered on it. */
static struct ibv_context *ctx;
static struct ibv_pd *pd, *parent;
static struct ibv_cq *scq, *rcq;
static struct ibv_mr *mr;
static char *buf;
static int gid;

static struct ibv_qp *rc_qp(struct ibv_pd *on)
{
	struct ibv_qp_init_attr init = {
		.send_cq = scq,
		.recv_cq = rcq,
		.cap = {.max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 2,
			.max_recv_sge = 2, .max_inline_data = 64},
		.qp_type = IBV_QPT_RC,
	};

	return ibv_create_qp(on, &init);
}

/* Through the create_qp_ex op (comp_mask beyond IBV_QP_INIT_ATTR_PD). */
static struct ibv_qp *qp_ex(struct ibv_pd *on, enum ibv_qp_type type)
{
	struct ibv_qp_init_attr_ex init = {
		.send_cq = scq,
		.recv_cq = rcq,
		.cap = {.max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 2,
			.max_recv_sge = 2, .max_inline_data = 64},
		.qp_type = type,
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
		.pd = on,
		.send_ops_flags = IBV_QP_EX_WITH_SEND,
	};

	return ibv_create_qp_ex(ctx, &init);
}

/* The last alloc call was for a send ring of a QP on `parent`, answered from the arena. */
static void check_last_alloc(const char *what)
{
	struct call *c = &allocs[n_allocs - 1];
	unsigned char *p = c->ptr;

	CHECK(c->pd == parent && c->pd_context == &tag,
	      "%s: alloc got the parent domain as pd and its pd_context", what);
	CHECK(c->type == RES_TYPE_SEND_QUEUE && c->size > 0 && c->alignment >= 8,
	      "%s: alloc asked %zu bytes aligned to %zu, resource type %#llx", what, c->size,
	      c->alignment, (unsigned long long)c->type);
	CHECK(p >= arena && p + c->size <= arena + ARENA_LEN &&
		      (uintptr_t)p % c->alignment == 0,
	      "%s: the arena answered an aligned buffer", what);
}

/* Whether the buffer alloc call `i` handed out holds `len` bytes equal to `needle`.
 * The ring holds Rust values, whose padding bytes memcheck sees as undefined: marked
 * defined before the scan, so the program also runs clean under valgrind. */
static int ring_holds(int i, const void *needle, size_t len)
{
	VALGRIND_MAKE_MEM_DEFINED(allocs[i].ptr, allocs[i].size);
	return memmem(allocs[i].ptr, allocs[i].size, needle, len) != NULL;
}

static void post_send_inline(struct ibv_qp *qp, uint64_t wr_id, const char *msg, size_t len,
			     struct ibv_ah *ah, uint32_t remote_qpn)
{
	struct ibv_sge sge = {.addr = (uintptr_t)msg, .length = (uint32_t)len, .lkey = 0};
	struct ibv_send_wr wr = {.wr_id = wr_id, .sg_list = &sge, .num_sge = 1,
				 .opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE};
	struct ibv_send_wr *bad = NULL;

	if (ah) {
		wr.wr.ud.ah = ah;
		wr.wr.ud.remote_qpn = remote_qpn;
		wr.wr.ud.remote_qkey = 0x11111111;
	}
	REQUIRE(ibv_post_send(qp, &wr, &bad) == 0, "ibv_post_send(inline SEND wr_id %#llx)",
		(unsigned long long)wr_id);
}

static void post_recv_on(struct ibv_qp *qp, uint64_t wr_id, uint32_t off, uint32_t len)
{
	struct ibv_sge sge = {.addr = (uintptr_t)buf + off, .length = len, .lkey = mr->lkey};
	struct ibv_recv_wr wr = {.wr_id = wr_id, .sg_list = &sge, .num_sge = 1};
	struct ibv_recv_wr *bad = NULL;

	REQUIRE(ibv_post_recv(qp, &wr, &bad) == 0, "ibv_post_recv");
}

static void post_rdma(struct ibv_qp *qp, enum ibv_wr_opcode op, uint64_t wr_id,
		      uint32_t local_off, uint32_t remote_off, uint32_t len)
{
	struct ibv_sge sge = {.addr = (uintptr_t)buf + local_off, .length = len,
			      .lkey = mr->lkey};
	struct ibv_send_wr wr = {.wr_id = wr_id, .sg_list = &sge, .num_sge = 1,
				 .opcode = op, .send_flags = IBV_SEND_SIGNALED};
	struct ibv_send_wr *bad = NULL;

	wr.wr.rdma.remote_addr = (uintptr_t)buf + remote_off;
	wr.wr.rdma.rkey = mr->rkey;
	REQUIRE(ibv_post_send(qp, &wr, &bad) == 0, "ibv_post_send(opcode %d)", op);
}

/* RC traffic from `a` to `b` (connected): inline SENDs around the ring, an RDMA WRITE,
 * an RDMA READ, a SEND that waits for its receive and a WRITE queued behind it, every
 * byte checked. */
static void rc_traffic(struct ibv_qp *a, struct ibv_qp *b, uint64_t base_id)
{
	struct ibv_wc wc;
	char msg[48];

	for (int i = 0; i < 40; i++) {
		int len = snprintf(msg, sizeof(msg), "inline send %02d through the ring", i);

		post_recv_on(b, base_id + 100 + i, 0, 64);
		post_send_inline(a, base_id + i, msg, (size_t)len + 1, NULL, 0);
		wc = poll_one(scq);
		REQUIRE(wc.status == IBV_WC_SUCCESS && wc.wr_id == base_id + i,
			"SEND %d completes (status %d)", i, wc.status);
		wc = poll_one(rcq);
		REQUIRE(wc.status == IBV_WC_SUCCESS && wc.byte_len == (uint32_t)len + 1 &&
				!strcmp(buf, msg),
			"RECV %d holds the inline bytes", i);
	}
	CHECK(1, "40 inline SENDs (the 16-entry ring wrapped twice), each received intact");
	memset(buf + 1024, 0x5a, 128);
	post_rdma(a, IBV_WR_RDMA_WRITE, base_id + 200, 1024, 2048, 128);
	wc = poll_one(scq);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == base_id + 200, "RDMA WRITE completes");
	for (int i = 0; i < 128; i++)
		REQUIRE((unsigned char)buf[2048 + i] == 0x5a, "written byte %d", i);
	memcpy(buf + 3072, "read back through the ring", 27);
	post_rdma(a, IBV_WR_RDMA_READ, base_id + 201, 3200, 3072, 27);
	wc = poll_one(scq);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == base_id + 201 &&
		      !memcmp(buf + 3200, "read back through the ring", 27),
	      "RDMA READ completes with the bytes");
	{
		/* A request posted behind one that waits goes through the send queue's ring,
		 * whatever the express lane (which runs a request on an empty queue inside the
		 * post) takes: a SEND that finds no receive at `b` waits for one (RNR), and the
		 * WRITE posted after it is queued behind it. Its WQE, wr_id included, is written
		 * where alloc said. */
		struct ibv_sge sge = {.addr = (uintptr_t)buf + 3840, .length = 8, .lkey = mr->lkey};
		struct ibv_send_wr send = {.wr_id = base_id + 202, .sg_list = &sge, .num_sge = 1,
					   .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED};
		struct ibv_send_wr write = {.wr_id = base_id + 203, .sg_list = &sge, .num_sge = 1,
					    .opcode = IBV_WR_RDMA_WRITE,
					    .send_flags = IBV_SEND_SIGNALED};
		struct ibv_send_wr *bad = NULL;

		memcpy(buf + 3840, "queued!", 8);
		write.wr.rdma.remote_addr = (uintptr_t)buf + 3848;
		write.wr.rdma.rkey = mr->rkey;
		REQUIRE(ibv_post_send(a, &send, &bad) == 0, "ibv_post_send(SEND, no receive yet)");
		REQUIRE(ibv_post_send(a, &write, &bad) == 0, "ibv_post_send(WRITE behind it)");
		post_recv_on(b, base_id + 204, 3900, 64);
		wc = poll_one(scq);
		CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == base_id + 202,
		      "the SEND completes once a receive is posted");
		wc = poll_one(scq);
		CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == base_id + 203 &&
			      !memcmp(buf + 3848, "queued!", 8),
		      "the WRITE queued behind it completes after it, with its bytes");
		wc = poll_one(rcq);
		CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == base_id + 204 &&
			      !memcmp(buf + 3900, "queued!", 8),
		      "the receive holds the SEND's bytes");
	}
}

static void rc_on_the_arena(void)
{
	struct ibv_qp *a, *b;
	int first = n_allocs;
	const uint64_t base = 0x5eedf00dcafe0000ull;
	uint64_t queued_id = base + 203;
	char last[48];

	a = rc_qp(parent);
	CHECK(a && a->pd == parent && n_allocs == first + 1,
	      "ibv_create_qp(RC) on the parent domain calls alloc once");
	check_last_alloc("RC by ibv_create_qp");
	b = qp_ex(parent, IBV_QPT_RC);
	CHECK(b && b->pd == parent && n_allocs == first + 2,
	      "ibv_create_qp_ex(RC) on the parent domain calls alloc once");
	check_last_alloc("RC by ibv_create_qp_ex");
	CHECK(allocs[first].ptr != allocs[first + 1].ptr, "each QP has its own buffer");
	CHECK(n_frees == 0, "free not called while the QPs exist");
	to_rts(a, b->qp_num, gid, ALL_ACCESS);
	to_rts(b, a->qp_num, gid, ALL_ACCESS);
	rc_traffic(a, b, base);

	snprintf(last, sizeof(last), "inline send %02d through the ring", 39);
	CHECK(ring_holds(first, last, strlen(last)),
	      "the last inline SEND's bytes are in the buffer alloc handed out");
	CHECK(ring_holds(first, &queued_id, sizeof(queued_id)),
	      "the queued WRITE's wr_id is in the buffer alloc handed out");
	CHECK(!ring_holds(first + 1, &queued_id, sizeof(queued_id)),
	      "and not in the other QP's buffer");

	CHECK(ibv_dealloc_pd(parent) == EBUSY,
	      "ibv_dealloc_pd(parent domain) while its QPs exist: EBUSY (mlx5 counts them)");
	CHECK(ibv_destroy_qp(a) == 0 && n_frees == 1, "ibv_destroy_qp calls free once");
	CHECK(frees[0].ptr == allocs[first].ptr && frees[0].pd == parent &&
		      frees[0].pd_context == &tag && frees[0].type == RES_TYPE_SEND_QUEUE,
	      "free got alloc's pointer and type, the parent domain and its pd_context");
	CHECK(ibv_destroy_qp(b) == 0 && n_frees == 2 && frees[1].ptr == allocs[first + 1].ptr,
	      "the second QP's buffer is freed at its destroy");
}

static void ud_on_the_arena(void)
{
	struct ibv_qp *u, *plain;
	struct ibv_ah_attr aa = {0};
	struct ibv_ah *ah;
	struct ibv_wc wc;
	static const char msg[] = "a datagram from the arena's ring";
	const uint64_t id = 0x0dd00dd0beef0002ull;
	int first = n_allocs, freed = n_frees;

	u = qp_ex(parent, IBV_QPT_UD);
	CHECK(u && n_allocs == first + 1, "ibv_create_qp_ex(UD) on the parent domain calls alloc once");
	check_last_alloc("UD");
	plain = qp_ex(pd, IBV_QPT_UD);
	CHECK(plain && n_allocs == first + 1, "a UD QP on the plain PD calls no allocator");
	to_rts(u, 0, gid, 0);
	to_rts(plain, 0, gid, 0);
	aa.is_global = 1;
	aa.port_num = 1;
	aa.grh.sgid_index = gid;
	aa.grh.hop_limit = 64;
	REQUIRE(ibv_query_gid(ctx, 1, gid, &aa.grh.dgid) == 0, "ibv_query_gid");
	ah = ibv_create_ah(parent, &aa);
	REQUIRE(ah != NULL, "ibv_create_ah on the parent domain");
	memset(buf, 0, 256);
	post_recv_on(plain, 9, 0, 256);
	post_send_inline(u, id, msg, sizeof(msg), ah, plain->qp_num);
	wc = poll_one(scq);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == id, "UD SEND completes");
	wc = poll_one(rcq);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.byte_len == 40 + sizeof(msg) &&
		      !memcmp(buf + 40, msg, sizeof(msg)),
	      "the datagram arrives after its 40-byte GRH");
	CHECK(ring_holds(first, msg, sizeof(msg)) && ring_holds(first, &id, sizeof(id)),
	      "the UD request's wr_id and inline bytes are in the buffer alloc handed out");
	CHECK(ibv_destroy_ah(ah) == 0, "ibv_destroy_ah");
	CHECK(ibv_destroy_qp(plain) == 0 && n_frees == freed, "destroying the plain QP frees nothing");
	CHECK(ibv_destroy_qp(u) == 0 && n_frees == freed + 1 && frees[freed].ptr == allocs[first].ptr,
	      "destroying the UD QP frees its buffer");
}

static void use_default(void)
{
	struct ibv_qp *a, *b;
	int first = n_allocs, freed = n_frees;

	answer = ANSWER_DEFAULT;
	a = rc_qp(parent);
	b = qp_ex(parent, IBV_QPT_RC);
	CHECK(a && b && n_allocs == first + 2 && allocs[first].ptr == IBV_ALLOCATOR_USE_DEFAULT,
	      "alloc answering IBV_ALLOCATOR_USE_DEFAULT: the QPs are created");
	to_rts(a, b->qp_num, gid, ALL_ACCESS);
	to_rts(b, a->qp_num, gid, ALL_ACCESS);
	rc_traffic(a, b, 0x1000);
	CHECK(ibv_destroy_qp(a) == 0 && ibv_destroy_qp(b) == 0 && n_frees == freed,
	      "rings rverbs allocated itself are never handed to free");
	answer = ANSWER_ARENA;
}

static void alloc_fails(void)
{
	struct ibv_qp *q;
	int first = n_allocs, freed = n_frees;

	answer = ANSWER_NULL;
	errno = 0;
	q = rc_qp(parent);
	CHECK(!q && errno == ENOMEM && n_allocs == first + 1,
	      "alloc answering NULL: ibv_create_qp fails with ENOMEM");
	errno = 0;
	q = qp_ex(parent, IBV_QPT_UD);
	CHECK(!q && errno == ENOMEM && n_allocs == first + 2,
	      "alloc answering NULL: ibv_create_qp_ex fails with ENOMEM");
	CHECK(n_frees == freed, "no free for a NULL answer");
	answer = ANSWER_ARENA;
}

static void no_free_no_custom_alloc(void)
{
	struct ibv_pd *half = parent_over(ctx, pd, 0);
	struct ibv_qp *q;
	int first = n_allocs;

	q = rc_qp(half);
	CHECK(q && n_allocs == first,
	      "a parent domain whose free is NULL calls no allocator (mlx5_is_custom_alloc)");
	CHECK(ibv_destroy_qp(q) == 0 && ibv_dealloc_pd(half) == 0, "destroy it");
	q = rc_qp(pd);
	CHECK(q && n_allocs == first, "an RC QP on the plain PD calls no allocator");
	CHECK(ibv_destroy_qp(q) == 0, "destroy it");
}

int main(void)
{
	struct ibv_cq_init_attr_ex ca = {
		.cqe = 256,
		.wc_flags = IBV_WC_STANDARD_FLAGS,
		.comp_mask = IBV_CQ_INIT_ATTR_MASK_PD,
	};
	int arena_allocs = 0;

	arena = aligned_alloc(4096, ARENA_LEN);
	REQUIRE(arena != NULL, "the arena");
	ctx = open_ctx();
	pd = ibv_alloc_pd(ctx);
	REQUIRE(pd != NULL, "ibv_alloc_pd");
	parent = parent_over(ctx, pd, 1);
	ca.parent_domain = parent;
	scq = ibv_cq_ex_to_cq(ibv_create_cq_ex(ctx, &ca));
	rcq = ibv_create_cq(ctx, 256, NULL, NULL, 0);
	CHECK(scq && rcq && n_allocs == 0,
	      "CQs (one on the parent domain) call no allocator: CQ rings are shared segments");
	buf = aligned_alloc(4096, BUF_LEN);
	REQUIRE(buf != NULL, "buffer");
	memset(buf, 0, BUF_LEN);
	mr = ibv_reg_mr(parent, buf, BUF_LEN, ALL_ACCESS);
	CHECK(mr && n_allocs == 0, "ibv_reg_mr on the parent domain calls no allocator");
	gid = loopback_gid_index(ctx);

	rc_on_the_arena();
	ud_on_the_arena();
	use_default();
	alloc_fails();
	no_free_no_custom_alloc();

	for (int i = 0; i < n_allocs; i++) {
		int matched = 0;

		if (allocs[i].ptr == NULL || allocs[i].ptr == IBV_ALLOCATOR_USE_DEFAULT)
			continue;
		arena_allocs++;
		for (int j = 0; j < n_frees; j++)
			matched += frees[j].ptr == allocs[i].ptr && frees[j].type == allocs[i].type;
		REQUIRE(matched == 1, "arena buffer %d freed exactly once (%d)", i, matched);
	}
	CHECK(arena_allocs == 3 && n_frees == 3,
	      "every buffer from the arena was freed exactly once (%d allocs, %d frees)",
	      arena_allocs, n_frees);
	CHECK(ibv_dereg_mr(mr) == 0 && ibv_destroy_cq(scq) == 0 && ibv_destroy_cq(rcq) == 0,
	      "dereg the MR, destroy the CQs");
	CHECK(ibv_dealloc_pd(parent) == 0 && ibv_dealloc_pd(pd) == 0,
	      "the parent domain and the PD deallocate: no failed create left a hold");
	CHECK(ibv_close_device(ctx) == 0, "ibv_close_device");
	free(buf);
	free(arena);
	printf("# parent_domain_alloc: all checks passed\n");
	return 0;
}
