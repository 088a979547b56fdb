/* ibv_query_qp_data_in_order(3) through the ABI. The v44 header does not
 * declare the v46 flag names, so they are spelled out here with their upstream values.
 *  - flags 0: 1 if whole messages of `op` are written in order, else 0;
 *  - RETURN_CAPS: a mask of WHOLE_MSG (1) | ALIGNED_128_BYTES (2); WHOLE_MSG implies
 *    ALIGNED_128_BYTES;
 *  - unknown flag bits, or opcodes the man page does not describe: 0;
 *  - and when the device claims WHOLE_MSG for RDMA WRITE, a reader polling the last byte
 *    of a written message sees the whole message.
 * rverbs claims nothing for data peers place in this process when some region here is
 * reached by other processes with cross-memory attach (kernel copies are not ordered):
 * a connected QP whose peer is in this process is answered, an unconnected UD QP only if
 * no such region exists (RVERBS_SHARED_MR=1 makes registered memory shareable).
 */
#include "common.h"

#define RETURN_CAPS (1u << 0)
#define WHOLE_MSG 1
#define ALIGNED_128 2

int main(void)
{
	struct side a, b, u;
	enum ibv_wr_opcode ops[] = {IBV_WR_RDMA_WRITE, IBV_WR_RDMA_READ, IBV_WR_SEND};
	int caps, whole;

	setvbuf(stdout, NULL, _IOLBF, 0);
	make_pair(&a, &b, IBV_QPT_RC, 16, 16);
	for (unsigned i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
		whole = ibv_query_qp_data_in_order(b.qp, ops[i], 0);
		caps = ibv_query_qp_data_in_order(b.qp, ops[i], RETURN_CAPS);
		CHECK(whole == 0 || whole == 1, "RC op %d, flags 0: 0 or 1 (%d)", ops[i], whole);
		CHECK((caps & ~(WHOLE_MSG | ALIGNED_128)) == 0,
		      "RC op %d, RETURN_CAPS: only WHOLE_MSG|ALIGNED_128 bits (0x%x)", ops[i], caps);
		CHECK(whole == !!(caps & WHOLE_MSG),
		      "flags 0 answers whether RETURN_CAPS has WHOLE_MSG");
		CHECK(!(caps & WHOLE_MSG) || (caps & ALIGNED_128),
		      "WHOLE_MSG implies ALIGNED_128_BYTES");
#if defined(__x86_64__)
		CHECK(whole == 1 && caps == (WHOLE_MSG | ALIGNED_128),
		      "x86-64 RC: whole messages land in order (0x%x)", caps);
#endif
	}
	CHECK(ibv_query_qp_data_in_order(b.qp, IBV_WR_RDMA_WRITE, 1u << 7) == 0,
	      "unknown flag bits give 0");
	CHECK(ibv_query_qp_data_in_order(b.qp, IBV_WR_ATOMIC_FETCH_AND_ADD, RETURN_CAPS) == 0,
	      "atomics are not described by the man page: 0");
	CHECK(ibv_query_qp_data_in_order(NULL, IBV_WR_SEND, 0) == 0, "a NULL QP gives 0");

	make_side(&u, IBV_QPT_UD, 16, 16);
#if defined(__x86_64__)
	{
		const char *shared = getenv("RVERBS_SHARED_MR");
		int expect = shared && strcmp(shared, "1") == 0 ? (WHOLE_MSG | ALIGNED_128) : 0;

		CHECK(ibv_query_qp_data_in_order(u.qp, IBV_WR_SEND, RETURN_CAPS) == expect,
		      "UD SEND: claimed exactly when no region here is reached by kernel copies (0x%x)",
		      expect);
		CHECK(ibv_query_qp_data_in_order(u.qp, IBV_WR_RDMA_READ, RETURN_CAPS) == 0,
		      "UD carries no RDMA READ: 0");
	}
#endif
	CHECK(ibv_query_qp_data_in_order(u.qp, IBV_WR_RDMA_WRITE, RETURN_CAPS) == 0,
	      "UD carries no RDMA WRITE: 0");

	if (ibv_query_qp_data_in_order(b.qp, IBV_WR_RDMA_WRITE, 0) == 1) {
		/* The claim, tested: after an RDMA WRITE of a message whose last byte is
		 * non-zero, seeing that byte means the rest is there too. */
		for (int round = 0; round < 50; round++) {
			uint32_t len = 1024 + 37 * round;
			unsigned char v = (unsigned char)(round + 1);

			memset(a.buf, v, len);
			memset(b.buf, 0, BUF_LEN);
			post_write(&a, round, len, (uintptr_t)b.buf, b.mr->rkey, 0);
			for (long i = 0; i < POLL_BOUND &&
					 __atomic_load_n((unsigned char *)&b.buf[len - 1],
							 __ATOMIC_ACQUIRE) != v;
			     i++)
				;
			REQUIRE(b.buf[len - 1] == (char)v, "last byte of round %d arrives", round);
			for (uint32_t k = 0; k < len; k++)
				REQUIRE((unsigned char)b.buf[k] == v,
					"round %d: byte %u present once the last byte is", round, k);
		}
		CHECK(1, "50 RDMA WRITEs: the last byte implies the whole message");
	}
	destroy_side(&u);
	destroy_side(&a);
	destroy_side(&b);
	printf("# data_in_order: all checks passed\n");
	return 0;
}
