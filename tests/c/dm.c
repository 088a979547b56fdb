/* Device memory (ibv_alloc_dm(3)) through the drop-in libibverbs.so.1: max_dm_size,
 * allocation limits and comp_mask, the inline ibv_memcpy_to_dm / ibv_memcpy_from_dm
 * (4-byte units inside the allocation), ibv_reg_dm_mr (ZERO_BASED, inside the
 * allocation), a peer QP's RDMA WRITE and READ through the zero-based region, and
 * ibv_free_dm: EBUSY while a region holds the memory (docs/memory.md, "Device memory"). */
#include "common.h"

int main(void)
{
	struct side a, b;
	struct ibv_device_attr_ex ax;
	struct ibv_alloc_dm_attr da = {.length = 4096};
	struct ibv_dm *dm;
	struct ibv_mr *mr;
	char buf[64];
	struct ibv_wc wc;
	int za = IBV_ACCESS_ZERO_BASED | ALL_ACCESS;

	setvbuf(stdout, NULL, _IOLBF, 0);
	make_pair(&a, &b, IBV_QPT_RC, 64, 16);
	REQUIRE(ibv_query_device_ex(b.ctx, NULL, &ax) == 0, "ibv_query_device_ex");
	CHECK(ax.max_dm_size == 256 * 1024, "max_dm_size 256 KiB (got %llu)", (unsigned long long)ax.max_dm_size);

	printf("# ibv_alloc_dm\n");
	{
		struct ibv_alloc_dm_attr big = {.length = ax.max_dm_size + 1};
		struct ibv_alloc_dm_attr mask = {.length = 64, .comp_mask = 1};

		errno = 0;
		CHECK(ibv_alloc_dm(b.ctx, &big) == NULL && errno == EINVAL,
		      "past max_dm_size: NULL/EINVAL (mlx5's alloc_dm_memic)");
		errno = 0;
		CHECK(ibv_alloc_dm(b.ctx, &mask) == NULL && errno == EINVAL, "comp_mask 1: NULL/EINVAL");
	}
	dm = ibv_alloc_dm(b.ctx, &da);
	REQUIRE(dm != NULL, "ibv_alloc_dm(4096)");
	CHECK(dm->context == b.ctx, "dm->context");

	printf("# ibv_memcpy_to_dm / ibv_memcpy_from_dm\n");
	memset(buf, 0xee, sizeof(buf));
	CHECK(ibv_memcpy_from_dm(buf, dm, 0, 16) == 0 && buf[0] == 0 && buf[15] == 0 && buf[16] == (char)0xee,
	      "fresh device memory reads zeros, exactly 16 bytes");
	CHECK(ibv_memcpy_to_dm(dm, 2048 + 8, "0123456789abcdef", 16) == 0, "copy 16 bytes in");
	CHECK(ibv_memcpy_from_dm(buf, dm, 2048 + 8, 16) == 0 && !memcmp(buf, "0123456789abcdef", 16),
	      "and back");
	CHECK(ibv_memcpy_to_dm(dm, 2, "abcd", 4) == EINVAL, "an offset not in 4-byte units: EINVAL");
	CHECK(ibv_memcpy_to_dm(dm, 0, "abcdef", 6) == EINVAL, "a length not in 4-byte units: EINVAL");
	CHECK(ibv_memcpy_from_dm(buf, dm, 4096, 4) == EFAULT, "past the allocation: EFAULT (mlx5_access_dm)");

	printf("# ibv_reg_dm_mr\n");
	errno = 0;
	CHECK(ibv_reg_dm_mr(b.pd, dm, 0, 64, ALL_ACCESS) == NULL && errno == EINVAL,
	      "without IBV_ACCESS_ZERO_BASED: NULL/EINVAL");
	errno = 0;
	CHECK(ibv_reg_dm_mr(b.pd, dm, 4000, 100, za) == NULL && errno == EINVAL,
	      "past the allocation: NULL/EINVAL");
	mr = ibv_reg_dm_mr(b.pd, dm, 2048, 1024, za);
	REQUIRE(mr != NULL, "ibv_reg_dm_mr([2048, 3072), ZERO_BASED | remote access)");

	printf("# a peer QP through the zero-based region\n");
	strcpy(a.buf, "written by the peer!");
	post_write(&a, 1, 20, 100, mr->rkey, IBV_SEND_SIGNALED);
	wc = poll_one(a.send_cq);
	CHECK(wc.status == IBV_WC_SUCCESS, "RDMA WRITE to region address 100");
	CHECK(ibv_memcpy_from_dm(buf, dm, 2048 + 100, 20) == 0 && !memcmp(buf, "written by the peer!", 20),
	      "the bytes are at device memory offset 2148");
	{
		struct ibv_sge sge = {.addr = (uintptr_t)a.buf + 512, .length = 16, .lkey = a.mr->lkey};
		struct ibv_send_wr wr = {.wr_id = 2, .sg_list = &sge, .num_sge = 1,
					 .opcode = IBV_WR_RDMA_READ, .send_flags = IBV_SEND_SIGNALED};
		struct ibv_send_wr *bad = NULL;

		wr.wr.rdma.remote_addr = 8;
		wr.wr.rdma.rkey = mr->rkey;
		REQUIRE(ibv_post_send(a.qp, &wr, &bad) == 0, "post RDMA READ");
		wc = poll_one(a.send_cq);
		CHECK(wc.status == IBV_WC_SUCCESS && !memcmp(a.buf + 512, "0123456789abcdef", 16),
		      "RDMA READ of region address 8 returns what ibv_memcpy_to_dm put there");
	}
	post_write(&a, 3, 20, 1020, mr->rkey, IBV_SEND_SIGNALED);
	wc = poll_one(a.send_cq);
	CHECK(wc.status == IBV_WC_REM_ACCESS_ERR, "a WRITE past the region's 1024 bytes: REM_ACCESS_ERR");

	printf("# ibv_free_dm\n");
	CHECK(ibv_free_dm(dm) == EBUSY, "while a region holds it: EBUSY");
	CHECK(ibv_dereg_mr(mr) == 0, "ibv_dereg_mr of the region");
	CHECK(ibv_free_dm(dm) == 0, "then ibv_free_dm");

	/* a's QP is in ERR after the access error: no clean teardown of the pair is needed
	 * beyond destroying it. */
	destroy_side(&a);
	destroy_side(&b);
	printf("# dm: all checks passed\n");
	return 0;
}
