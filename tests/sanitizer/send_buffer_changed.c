/* send-buffer-changed: the buffer of a posted RDMA WRITE is filled with the next message
 * before the WRITE's completion was polled (ibv_post_send(3) NOTES: the buffers of a work
 * request may be reused only once it has fully executed and its completion was
 * retrieved). rverbs executes the WRITE inside ibv_post_send, so the peer got the first
 * message; a NIC may still be reading the buffer and send the second, or a mix. The
 * sanitizer sees the change when the completion is polled: its report names the post
 * and the poll, and the BUG line lies between them. --fixed polls first. */
#include "sanitizer.h"

int main(int argc, char **argv)
{
	struct side a, b;
	struct ibv_wc wc;
	struct ibv_mr *mr;
	struct ibv_sge sge;
	struct ibv_send_wr wr = {.wr_id = 0x5b, .sg_list = &sge, .num_sge = 1,
				 .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED};
	struct ibv_send_wr *bad = NULL;
	char *msg = aligned_alloc(4096, 4096);
	int fixed = fixed_run(argc, argv);

	make_pair(&a, &b, IBV_QPT_RC, 16, 16);
	/* A send buffer only this process writes (no remote access), as applications
	 * register the messages they send. */
	REQUIRE(msg != NULL, "aligned_alloc");
	memset(msg, 0, 4096);
	mr = ibv_reg_mr(a.pd, msg, 4096, IBV_ACCESS_LOCAL_WRITE);
	REQUIRE(mr != NULL, "ibv_reg_mr (send buffer)");
	snprintf(msg, 64, "first message");
	sge = (struct ibv_sge){.addr = (uintptr_t)msg, .length = 64, .lkey = mr->lkey};
	wr.wr.rdma.remote_addr = (uintptr_t)b.buf;
	wr.wr.rdma.rkey = b.mr->rkey;
	printf("lkey 0x%x qpn 0x%x addr 0x%lx wr_id 0x%x\n", mr->lkey, a.qp->qp_num,
	       (unsigned long)(uintptr_t)msg, 0x5b);
	fflush(stdout);
	REQUIRE(ibv_post_send(a.qp, &wr, &bad) == 0, "ibv_post_send (RDMA WRITE)");
	if (fixed) {
		wc = poll_one(a.send_cq);
		snprintf(msg, 64, "second message");
	} else {
		snprintf(msg, 64, "second message"); /* BUG */
		wc = poll_one(a.send_cq);
	}
	REQUIRE(wc.wr_id == 0x5b && wc.status == IBV_WC_SUCCESS, "the WRITE completes");
	REQUIRE(!strcmp(b.buf, "first message"), "the peer got the first message (rverbs)");
	REQUIRE(ibv_dereg_mr(mr) == 0, "ibv_dereg_mr (send buffer)");
	free(msg);
	free_side(&a);
	free_side(&b);
	printf("done\n");
	return 0;
}
