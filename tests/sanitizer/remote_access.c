/* remote-access-explained: an RDMA WRITE of 64 bytes to the last 32 bytes of the
 * peer's region: the range leaves the region (ibv_post_send(3): the remote range must
 * lie in a region registered with IBV_ACCESS_REMOTE_WRITE, ibv_reg_mr(3)). The WRITE
 * completes with IBV_WC_REM_ACCESS_ERR; the sanitizer explains it when the completion is
 * polled: the rkey, the range asked, the region's range, and where the region was
 * registered (both sides are of this process). --fixed writes inside the region. */
#include "sanitizer.h"

int main(int argc, char **argv)
{
	struct side a, b;
	struct ibv_wc wc;
	uint64_t raddr;
	int fixed = fixed_run(argc, argv);

	make_pair(&a, &b, IBV_QPT_RC, 16, 16);
	raddr = (uintptr_t)b.buf + BUF_LEN - 32;
	printf("rkey 0x%x qpn 0x%x raddr 0x%lx region 0x%lx-0x%lx\n", b.mr->rkey, a.qp->qp_num, (unsigned long)raddr,
	       (unsigned long)(uintptr_t)b.buf, (unsigned long)((uintptr_t)b.buf + BUF_LEN));
	fflush(stdout);
	if (fixed)
		write_to(&a, 0x5c, 32, raddr, b.mr->rkey);
	else
		write_to(&a, 0x5c, 64, raddr, b.mr->rkey); /* BUG */
	wc = poll_one(a.send_cq);
	REQUIRE(wc.wr_id == 0x5c && wc.status == (fixed ? IBV_WC_SUCCESS : IBV_WC_REM_ACCESS_ERR),
		"the WRITE completes (status %d)", wc.status);
	free_side(&a);
	free_side(&b);
	printf("done\n");
	return 0;
}
