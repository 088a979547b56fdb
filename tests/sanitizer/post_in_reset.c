/* post-in-bad-state: ibv_post_send to a QP in INIT, which cannot execute send work
 * requests before RTS (ibv_modify_qp(3)); rverbs refuses it with EINVAL as rxe does, and
 * the sanitizer reports it with the QP's state history. --fixed brings the QP to RTS. */
#include "sanitizer.h"

int main(int argc, char **argv)
{
	struct side a, b;
	struct ibv_sge sge;
	struct ibv_send_wr wr = {.wr_id = 7, .num_sge = 1, .opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_SIGNALED};
	struct ibv_send_wr *bad = NULL;
	struct ibv_recv_wr rwr = {.wr_id = 8, .num_sge = 1};
	struct ibv_recv_wr *rbad = NULL;
	int fixed = fixed_run(argc, argv), rc;

	make_side(&a, IBV_QPT_RC, 16, 16);
	make_side(&b, IBV_QPT_RC, 16, 16);
	sge = (struct ibv_sge){.addr = (uintptr_t)a.buf, .length = 8, .lkey = a.mr->lkey};
	wr.sg_list = &sge;
	rwr.sg_list = &(struct ibv_sge){.addr = (uintptr_t)b.buf, .length = 8, .lkey = b.mr->lkey};
	to_init(a.qp, ALL_ACCESS);
	printf("qpn 0x%x\n", a.qp->qp_num);
	if (fixed) {
		int gid = loopback_gid_index(a.ctx);

		to_rts(b.qp, a.qp->qp_num, gid, ALL_ACCESS);
		REQUIRE(ibv_post_recv(b.qp, &rwr, &rbad) == 0, "ibv_post_recv");
		to_rts(a.qp, b.qp->qp_num, gid, ALL_ACCESS);
	}
	rc = ibv_post_send(a.qp, &wr, &bad); /* BUG */
	printf("ibv_post_send returned %d\n", rc);
	if (fixed) {
		REQUIRE(rc == 0, "ibv_post_send in RTS");
		(void)poll_one(a.send_cq);
		(void)poll_one(b.recv_cq);
	} else {
		REQUIRE(rc == EINVAL && bad == &wr, "ibv_post_send in INIT is EINVAL (as rxe)");
	}
	free_side(&a);
	free_side(&b);
	printf("done\n");
	return 0;
}
