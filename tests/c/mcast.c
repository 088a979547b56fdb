/* UD multicast through the ABI (ibv_attach_mcast(3), ibv_detach_mcast(3); rxe_mcast.c),
 * three UD QPs of three contexts in one process, as perftest's ib_send_bw -M would use it:
 *  - the device reports max_mcast_grp / max_mcast_qp_attach > 0;
 *  - attach: only UD QPs (EINVAL for RC), only multicast GIDs (EINVAL), twice is fine;
 *  - a UD SEND to the group (AH dgid = the group, remote_qpn 0xFFFFFF) reaches both
 *    members: each completion names its own qp_num, src_qp = the sender, IBV_WC_GRH, and
 *    the GRH area carries the group as destination;
 *  - ibv_destroy_qp of an attached QP is EBUSY;
 *  - after ibv_detach_mcast only the remaining member receives; detaching a non-member
 *    is EINVAL.
 */
#include "common.h"

#define QKEY 0x11111111
#define MCAST_QPN 0xffffff

static const union ibv_gid group = {.raw = {0xff, 0x0e, 0, 0, 0, 0, 0, 0,
					    0, 0, 0, 0, 0x12, 0x34, 0x56, 0x78}};

static void mcast_send(struct side *s, struct ibv_ah *ah, uint64_t wr_id, const char *msg)
{
	struct ibv_sge sge = {.addr = (uintptr_t)s->buf + 2048, .length = strlen(msg),
			      .lkey = s->mr->lkey};
	struct ibv_send_wr wr = {.wr_id = wr_id, .sg_list = &sge, .num_sge = 1,
				 .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED};
	struct ibv_send_wr *bad = NULL;
	struct ibv_wc wc;

	strcpy(s->buf + 2048, msg);
	wr.wr.ud.ah = ah;
	wr.wr.ud.remote_qpn = MCAST_QPN;
	wr.wr.ud.remote_qkey = QKEY;
	CHECK(ibv_post_send(s->qp, &wr, &bad) == 0, "UD SEND to the group posted");
	wc = poll_one(s->send_cq);
	CHECK(wc.wr_id == wr_id && wc.status == IBV_WC_SUCCESS, "the multicast send completes");
}

static void check_member(struct side *m, uint64_t wr_id, struct side *sender, const char *msg)
{
	struct ibv_wc wc = poll_one(m->recv_cq);
	size_t len = strlen(msg);

	CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == wr_id && wc.qp_num == m->qp->qp_num &&
		      wc.src_qp == sender->qp->qp_num && (wc.wc_flags & IBV_WC_GRH) &&
		      wc.byte_len == 40 + len && !memcmp(m->buf + 40, msg, len),
	      "member QP 0x%x received \"%s\" (qp_num, src_qp, GRH, byte_len)", m->qp->qp_num,
	      msg);
	CHECK(!memcmp(m->buf + 24, group.raw, 16), "the GRH's destination is the group");
}

int main(void)
{
	struct side a, b, c, rc;
	struct ibv_device_attr attr;
	struct ibv_ah_attr aa = {.is_global = 1, .port_num = 1};
	struct ibv_ah *ah;
	union ibv_gid unicast;
	int gid;

	setvbuf(stdout, NULL, _IOLBF, 0);
	make_side(&a, IBV_QPT_UD, 16, 8);
	make_side(&b, IBV_QPT_UD, 16, 8);
	make_side(&c, IBV_QPT_UD, 16, 8);
	make_side(&rc, IBV_QPT_RC, 16, 8);
	gid = loopback_gid_index(a.ctx);
	REQUIRE(ibv_query_device(a.ctx, &attr) == 0, "ibv_query_device");
	CHECK(attr.max_mcast_grp > 0 && attr.max_mcast_qp_attach >= 2,
	      "max_mcast_grp %d, max_mcast_qp_attach %d", attr.max_mcast_grp,
	      attr.max_mcast_qp_attach);
	to_rts(a.qp, 0, gid, 0);
	to_rts(b.qp, 0, gid, 0);
	to_rts(c.qp, 0, gid, 0);

	printf("# attach\n");
	REQUIRE(ibv_query_gid(a.ctx, 1, gid, &unicast) == 0, "a unicast GID");
	CHECK(ibv_attach_mcast(b.qp, &unicast, 0) == EINVAL, "a unicast GID: EINVAL");
	CHECK(ibv_attach_mcast(rc.qp, &group, 0) == EINVAL, "an RC QP: EINVAL");
	CHECK(ibv_attach_mcast(b.qp, &group, 0) == 0 && ibv_attach_mcast(c.qp, &group, 0) == 0,
	      "two UD QPs attach to the group");
	CHECK(ibv_attach_mcast(b.qp, &group, 0) == 0, "attaching twice: 0 (one attachment)");

	printf("# delivery to both members\n");
	aa.grh.dgid = group;
	aa.grh.sgid_index = gid;
	aa.grh.hop_limit = 64;
	ah = ibv_create_ah(a.pd, &aa);
	CHECK(ah != NULL, "ibv_create_ah towards the group");
	post_recv(&b, 1, 0, 40 + 64);
	post_recv(&c, 2, 0, 40 + 64);
	mcast_send(&a, ah, 10, "to the group");
	check_member(&b, 1, &a, "to the group");
	check_member(&c, 2, &a, "to the group");
	{
		struct ibv_wc wc;

		CHECK(ibv_poll_cq(b.recv_cq, 1, &wc) == 0 && ibv_poll_cq(c.recv_cq, 1, &wc) == 0,
		      "one copy per member (attached twice or not)");
	}
	CHECK(ibv_destroy_qp(b.qp) == EBUSY, "ibv_destroy_qp of an attached QP: EBUSY");

	printf("# detach\n");
	CHECK(ibv_detach_mcast(c.qp, &group, 0) == 0, "ibv_detach_mcast(c)");
	CHECK(ibv_detach_mcast(c.qp, &group, 0) == EINVAL, "detaching a non-member: EINVAL");
	post_recv(&b, 3, 0, 40 + 64);
	post_recv(&c, 4, 0, 40 + 64);
	mcast_send(&a, ah, 11, "after detach");
	check_member(&b, 3, &a, "after detach");
	{
		struct ibv_wc wc;

		/* In-process delivery happens inside ibv_post_send: nothing can be late. */
		CHECK(ibv_poll_cq(c.recv_cq, 1, &wc) == 0, "the detached QP received nothing");
	}
	CHECK(ibv_detach_mcast(b.qp, &group, 0) == 0, "ibv_detach_mcast(b)");
	REQUIRE(ibv_destroy_ah(ah) == 0, "destroy AH");
	destroy_side(&a);
	destroy_side(&b);
	destroy_side(&c);
	destroy_side(&rc);
	printf("# mcast: all checks passed\n");
	return 0;
}
