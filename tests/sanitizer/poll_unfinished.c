/* cq-poll-unfinished: a batch of extended polling that ibv_start_poll opened is never
 * ended with ibv_end_poll, and the CQ is destroyed. ibv_create_cq_ex(3): after
 * ibv_start_poll returns 0, ibv_end_poll must be called before the next ibv_start_poll
 * and before the CQ is destroyed (a provider holds the CQ's lock meanwhile: a second
 * ibv_start_poll of the same thread would wait for ever). --fixed ends the batch. */
#include "sanitizer.h"

int main(int argc, char **argv)
{
	struct side a, b;
	struct ibv_cq_init_attr_ex attr = {.cqe = 16, .wc_flags = IBV_WC_STANDARD_FLAGS};
	struct ibv_cq_ex *cq;
	int fixed = fixed_run(argc, argv);

	make_pair(&a, &b, IBV_QPT_RC, 16, 16);
	cq = ibv_create_cq_ex(a.ctx, &attr);
	REQUIRE(cq != NULL, "ibv_create_cq_ex");
	reconnect_sending_to(&a, &b, ibv_cq_ex_to_cq(cq));
	write_to(&a, 7, 8, (uintptr_t)b.buf, b.mr->rkey);
	REQUIRE(start_poll_bounded(cq) == 0 && cq->wr_id == 7 && cq->status == IBV_WC_SUCCESS,
		"ibv_start_poll: the WRITE's completion");
	REQUIRE(ibv_next_poll(cq) == ENOENT, "ibv_next_poll: no more");
	if (fixed)
		ibv_end_poll(cq);
	unhook(&a, NULL);
	REQUIRE(ibv_destroy_cq(ibv_cq_ex_to_cq(cq)) == 0, "ibv_destroy_cq"); /* BUG */
	free_side(&a);
	free_side(&b);
	printf("done\n");
	return 0;
}
