/* wc-field-not-requested: ibv_wc_read_qp_num on an extended CQ created without
 * IBV_WC_EX_WITH_QP_NUM in its wc_flags. ibv_create_cq_ex(3): "Only fields that the user
 * requested via wc_flags in ibv_create_cq_ex could be queried"; a provider fills only
 * those (wr_id, status, opcode, vendor_err and wc_flags always). The field is read twice,
 * reported once. --fixed requests the field. */
#include "sanitizer.h"

int main(int argc, char **argv)
{
	struct side a, b;
	int fixed = fixed_run(argc, argv);
	struct ibv_cq_init_attr_ex attr = {
		.cqe = 16, .wc_flags = IBV_WC_EX_WITH_BYTE_LEN | (fixed ? IBV_WC_EX_WITH_QP_NUM : 0)};
	struct ibv_cq_ex *cq;
	uint32_t qpn = 0;

	make_pair(&a, &b, IBV_QPT_RC, 16, 16);
	cq = ibv_create_cq_ex(a.ctx, &attr);
	REQUIRE(cq != NULL, "ibv_create_cq_ex");
	reconnect_sending_to(&a, &b, ibv_cq_ex_to_cq(cq));
	printf("qpn 0x%x wc_flags 0x%llx\n", a.qp->qp_num, (unsigned long long)attr.wc_flags);
	fflush(stdout);
	write_to(&a, 7, 8, (uintptr_t)b.buf, b.mr->rkey);
	REQUIRE(start_poll_bounded(cq) == 0 && cq->wr_id == 7 && cq->status == IBV_WC_SUCCESS,
		"ibv_start_poll: the WRITE's completion");
	REQUIRE(ibv_wc_read_byte_len(cq) == 8, "ibv_wc_read_byte_len (requested)");
	for (int i = 0; i < 2; i++)
		qpn = ibv_wc_read_qp_num(cq); /* BUG */
	ibv_end_poll(cq);
	printf("read qp_num 0x%x\n", qpn);
	unhook(&a, NULL);
	REQUIRE(ibv_destroy_cq(ibv_cq_ex_to_cq(cq)) == 0, "ibv_destroy_cq");
	free_side(&a);
	free_side(&b);
	printf("done\n");
	return 0;
}
