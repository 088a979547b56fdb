/* mr-memory-freed: the program frees (free(3), not munmap) the heap buffer of a
 * registered region while a receive posted into it is outstanding. The block stays
 * mapped, so nothing faults, but a NIC keeps the pages it pinned at ibv_reg_mr(3) and
 * would place the next message there, into whatever malloc hands out next. Found by
 * the free watch (librverbs_free.so, preloaded by run.sh as `rverbs run --sanitize`
 * does) when free is called. --fixed destroys the QP and deregisters first, then frees. */
#include "sanitizer.h"

int main(int argc, char **argv)
{
	struct side a;
	int fixed = fixed_run(argc, argv);

	make_side(&a, IBV_QPT_RC, 16, 16);
	to_init(a.qp, ALL_ACCESS);
	post_recv(&a, 0x61, 0, 64);
	printf("lkey 0x%x qpn 0x%x buf %p\n", a.mr->lkey, a.qp->qp_num, (void *)a.buf);
	fflush(stdout);
	if (!fixed)
		free(a.buf); /* BUG */
	/* Posted receives are discarded with the QP (no finding), then the region goes. */
	REQUIRE(ibv_destroy_qp(a.qp) == 0, "ibv_destroy_qp");
	REQUIRE(ibv_dereg_mr(a.mr) == 0, "ibv_dereg_mr");
	if (fixed)
		free(a.buf);
	REQUIRE(ibv_destroy_cq(a.send_cq) == 0, "ibv_destroy_cq (send)");
	REQUIRE(ibv_destroy_cq(a.recv_cq) == 0, "ibv_destroy_cq (recv)");
	REQUIRE(ibv_dealloc_pd(a.pd) == 0, "ibv_dealloc_pd");
	REQUIRE(ibv_close_device(a.ctx) == 0, "ibv_close_device");
	printf("done\n");
	return 0;
}
