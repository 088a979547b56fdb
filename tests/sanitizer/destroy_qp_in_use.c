/* destroy-qp-in-use: ibv_destroy_qp of a QP whose SEND the device has not finished:
 * the peer has no receive posted, so the SEND is refused (RNR) and retried, and the
 * destroy discards it without a completion (ibv_post_send(3) NOTES: a request is
 * outstanding until its completion is retrieved). The message is lost and the program
 * cannot know. A receive of its own is still posted on the QP at the destroy, which is
 * normal (servers keep a ring posted) and not reported. --fixed has the peer post a
 * receive and polls the SEND's completion before the destroy. */
#include "sanitizer.h"

int main(int argc, char **argv)
{
	struct side a, b;
	struct ibv_sge sge;
	struct ibv_send_wr wr = {.wr_id = 0x5e, .sg_list = &sge, .num_sge = 1,
				 .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED};
	struct ibv_send_wr *bad = NULL;
	int fixed = fixed_run(argc, argv);

	make_pair(&a, &b, IBV_QPT_RC, 16, 16);
	post_recv(&a, 0x30, 512, 64);
	printf("qpn 0x%x wr_id 0x%x\n", a.qp->qp_num, 0x5e);
	fflush(stdout);
	sge = (struct ibv_sge){.addr = (uintptr_t)a.buf, .length = 64, .lkey = a.mr->lkey};
	REQUIRE(ibv_post_send(a.qp, &wr, &bad) == 0, "ibv_post_send (SEND)");
	if (fixed) {
		struct ibv_wc wc;

		post_recv(&b, 0x31, 0, 64);
		wc = poll_one(a.send_cq);
		REQUIRE(wc.wr_id == 0x5e && wc.status == IBV_WC_SUCCESS, "the SEND completes");
		wc = poll_one(b.recv_cq);
		REQUIRE(wc.wr_id == 0x31 && wc.byte_len == 64, "the peer got it");
	}
	REQUIRE(ibv_destroy_qp(a.qp) == 0, "ibv_destroy_qp"); /* BUG */
	a.qp = make_qp(&a, IBV_QPT_RC, 16);
	free_side(&a);
	free_side(&b);
	printf("done\n");
	return 0;
}
