/* rdma_cm multicast (rdma_join_multicast(3), rdma_join_multicast_ex(3),
 * rdma_leave_multicast(3); rdma-core 44 librdmacm over the kernel's rdma_cm on RoCE v2):
 *  - rdma_join_multicast_ex: comp_mask beyond ADDRESS | JOIN_FLAGS is ENOTSUP; without
 *    ADDRESS or JOIN_FLAGS, or with an unknown flag, EINVAL; an AF_UNIX address EINVAL;
 *  - an id without a device, or not UD, cannot join (EINVAL);
 *  - MULTICAST_JOIN: param.ud.private_data is the join's context (length 0), qp_num
 *    0xFFFFFF, qkey RDMA_UDP_QKEY, ah_attr global with dgid ::ffff:<group>, hop limit 64,
 *    the id's source GID index, port 1; the id's QP is attached;
 *  - a send-only member sends with that address vector and is not attached; a full
 *    member receives (the GRH area's IPv4 header names the group);
 *  - rdma_leave_multicast detaches (nothing more arrives); leaving again EADDRNOTAVAIL;
 *  - a synchronous id's join waits for the event and parks it in id->event.
 */
#include <arpa/inet.h>
#include <sys/un.h>
#include <unistd.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

#include "common.h"

#define QKEY 0x01234567u

static struct rdma_cm_event *expect_event(struct rdma_event_channel *ch,
					  enum rdma_cm_event_type type, const char *who)
{
	struct rdma_cm_event *ev = NULL;

	REQUIRE(rdma_get_cm_event(ch, &ev) == 0, "%s: rdma_get_cm_event", who);
	CHECK(ev->event == type, "%s: %s (got %s, status %d)", who, rdma_event_str(type),
	      rdma_event_str(ev->event), ev->status);
	return ev;
}

static struct sockaddr_in in4(uint32_t host_order_addr)
{
	struct sockaddr_in a;

	memset(&a, 0, sizeof(a));
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(host_order_addr);
	return a;
}

/* A UD id on `ch` (NULL: synchronous) resolved from 127.0.0.1 to the loopback, which
 * attaches the device (an id only bound to 127.0.0.1 has none, as in the kernel), with a
 * QP from rdma_create_qp. */
static struct rdma_cm_id *member(struct rdma_event_channel *ch)
{
	struct rdma_cm_id *id;
	struct sockaddr_in lo = in4(INADDR_LOOPBACK);
	struct ibv_qp_init_attr qia;

	REQUIRE(rdma_create_id(ch, &id, NULL, RDMA_PS_UDP) == 0, "rdma_create_id(UDP)");
	REQUIRE(rdma_resolve_addr(id, (struct sockaddr *)&lo, (struct sockaddr *)&lo, 2000) == 0,
		"rdma_resolve_addr(127.0.0.1 -> 127.0.0.1)");
	if (ch) {
		struct rdma_cm_event *ev;

		REQUIRE(rdma_get_cm_event(ch, &ev) == 0 && ev->event == RDMA_CM_EVENT_ADDR_RESOLVED,
			"ADDR_RESOLVED");
		rdma_ack_cm_event(ev);
	}
	memset(&qia, 0, sizeof(qia));
	qia.qp_type = IBV_QPT_UD;
	qia.cap.max_send_wr = qia.cap.max_recv_wr = 4;
	qia.cap.max_send_sge = qia.cap.max_recv_sge = 1;
	REQUIRE(rdma_create_qp(id, NULL, &qia) == 0, "rdma_create_qp(UD)");
	return id;
}

static int recv_within(struct ibv_cq *cq, struct ibv_wc *wc, long bound)
{
	for (long i = 0; i < bound; i++) {
		int n = ibv_poll_cq(cq, 1, wc);
		if (n)
			return n;
	}
	return 0;
}

int main(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *a, *b, *rc, *bare, *sync;
	struct rdma_cm_event *ev;
	struct rdma_cm_join_mc_attr_ex mc;
	/* A group of this process only (groups are host-wide): 239.p.p.33. */
	uint32_t pid = (uint32_t)getpid();
	struct sockaddr_in grp = in4(0xef000021u | ((pid & 0xffff) << 8));
	struct sockaddr_un un;
	char buf[256], *rbuf;
	struct ibv_mr *mr, *rmr;
	struct ibv_ah *ah;
	struct ibv_wc wc;
	union ibv_gid want;
	int saved_ctx = 0x5eed;

	setvbuf(stdout, NULL, _IOLBF, 0);
	REQUIRE(ch, "rdma_create_event_channel");
	a = member(ch);
	b = member(ch);

	/* rdma_join_multicast_ex argument checks. */
	memset(&mc, 0, sizeof(mc));
	mc.addr = (struct sockaddr *)&grp;
	mc.comp_mask = RDMA_CM_JOIN_MC_ATTR_ADDRESS | RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS | 4;
	errno = 0;
	CHECK(rdma_join_multicast_ex(a, &mc, NULL) == -1 && errno == ENOTSUP,
	      "join_ex with a reserved comp_mask bit: ENOTSUP");
	mc.comp_mask = RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS;
	errno = 0;
	CHECK(rdma_join_multicast_ex(a, &mc, NULL) == -1 && errno == EINVAL,
	      "join_ex without ADDRESS: EINVAL");
	mc.comp_mask = RDMA_CM_JOIN_MC_ATTR_ADDRESS;
	errno = 0;
	CHECK(rdma_join_multicast_ex(a, &mc, NULL) == -1 && errno == EINVAL,
	      "join_ex without JOIN_FLAGS: EINVAL");
	mc.comp_mask = RDMA_CM_JOIN_MC_ATTR_ADDRESS | RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS;
	mc.join_flags = RDMA_MC_JOIN_FLAG_RESERVED;
	errno = 0;
	CHECK(rdma_join_multicast_ex(a, &mc, NULL) == -1 && errno == EINVAL,
	      "join_ex with an unknown flag: EINVAL");
	memset(&un, 0, sizeof(un));
	un.sun_family = AF_UNIX;
	errno = 0;
	CHECK(rdma_join_multicast(a, (struct sockaddr *)&un, NULL) == -1 && errno == EINVAL,
	      "an AF_UNIX address: EINVAL");

	/* Who may join. */
	REQUIRE(rdma_create_id(ch, &bare, NULL, RDMA_PS_UDP) == 0, "rdma_create_id");
	errno = 0;
	CHECK(rdma_join_multicast(bare, (struct sockaddr *)&grp, NULL) == -1 && errno == EINVAL,
	      "an id without a device: EINVAL");
	REQUIRE(rdma_create_id(ch, &rc, NULL, RDMA_PS_TCP) == 0, "rdma_create_id(TCP)");
	{
		struct sockaddr_in lo = in4(INADDR_LOOPBACK);
		REQUIRE(rdma_bind_addr(rc, (struct sockaddr *)&lo) == 0, "bind");
	}
	errno = 0;
	CHECK(rdma_join_multicast(rc, (struct sockaddr *)&grp, NULL) == -1 && errno == EINVAL,
	      "an RC id: EINVAL");

	/* b joins as a full member. */
	CHECK(rdma_join_multicast(b, (struct sockaddr *)&grp, &saved_ctx) == 0, "rdma_join_multicast");
	ev = expect_event(ch, RDMA_CM_EVENT_MULTICAST_JOIN, "b");
	memset(&want, 0, sizeof(want));
	want.raw[10] = want.raw[11] = 0xff;
	memcpy(&want.raw[12], &grp.sin_addr, 4);
	CHECK(ev->id == b && ev->status == 0, "the event names the id, status 0");
	CHECK(ev->param.ud.private_data == &saved_ctx && ev->param.ud.private_data_len == 0,
	      "param.ud.private_data is the join's context, length 0");
	CHECK(ev->param.ud.qp_num == 0xffffff && ev->param.ud.qkey == QKEY,
	      "qp_num 0xFFFFFF, qkey RDMA_UDP_QKEY");
	CHECK(ev->param.ud.ah_attr.is_global && !memcmp(&ev->param.ud.ah_attr.grh.dgid, &want, 16),
	      "a global address vector towards ::ffff:<group>");
	CHECK(ev->param.ud.ah_attr.grh.hop_limit == 64 && ev->param.ud.ah_attr.port_num == 1 &&
		      ev->param.ud.ah_attr.dlid == 0,
	      "hop limit 64, port 1, LID 0");
	{
		union ibv_gid sgid;
		REQUIRE(ibv_query_gid(b->verbs, 1, ev->param.ud.ah_attr.grh.sgid_index, &sgid) == 0,
			"query the source GID");
		CHECK(!memcmp(&sgid, &b->route.addr.addr.ibaddr.sgid, 16),
		      "the source GID index is the id's");
	}
	rdma_ack_cm_event(ev);
	CHECK(ibv_destroy_qp(b->qp) == EBUSY, "b's QP is attached (ibv_destroy_qp: EBUSY)");

	/* a joins send-only and sends to the group. */
	mc.join_flags = RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER;
	CHECK(rdma_join_multicast_ex(a, &mc, NULL) == 0, "rdma_join_multicast_ex(SENDONLY)");
	ev = expect_event(ch, RDMA_CM_EVENT_MULTICAST_JOIN, "a");
	ah = ibv_create_ah(a->pd, &ev->param.ud.ah_attr);
	REQUIRE(ah, "ibv_create_ah from the join's address vector");
	rdma_ack_cm_event(ev);

	rbuf = calloc(1, 4096);
	rmr = rdma_reg_msgs(b, rbuf, 4096);
	mr = rdma_reg_msgs(a, buf, sizeof(buf));
	REQUIRE(rmr && mr, "rdma_reg_msgs");
	REQUIRE(rdma_post_recv(b, NULL, rbuf, 4096, rmr) == 0, "rdma_post_recv(b)");
	REQUIRE(rdma_post_recv(a, NULL, rbuf + 2048, 2048, rmr) == 0, "rdma_post_recv(a)");
	strcpy(buf, "to the group");
	REQUIRE(rdma_post_ud_send(a, NULL, buf, 13, mr, IBV_SEND_SIGNALED, ah, 0xffffff) == 0,
		"rdma_post_ud_send to the group");
	REQUIRE(rdma_get_send_comp(a, &wc) == 1 && wc.status == IBV_WC_SUCCESS, "send completion");
	CHECK(recv_within(b->recv_cq, &wc, POLL_BOUND) == 1 && wc.status == IBV_WC_SUCCESS &&
		      wc.byte_len == 40 + 13 && wc.src_qp == a->qp->qp_num,
	      "the full member receives (status %d, %u bytes, from QP %#x)", wc.status, wc.byte_len,
	      wc.src_qp);
	/* An IPv4 group: the GRH area holds 20 zero bytes and the IPv4 header (RoCE v2). */
	CHECK(!strcmp(rbuf + 40, "to the group") && !memcmp(rbuf + 36, &grp.sin_addr, 4),
	      "the payload follows the GRH, whose IPv4 header names the group");
	CHECK(recv_within(a->recv_cq, &wc, 1000) == 0, "the send-only member is not attached");

	/* Leave. */
	CHECK(rdma_leave_multicast(b, (struct sockaddr *)&grp) == 0, "rdma_leave_multicast(b)");
	errno = 0;
	CHECK(rdma_leave_multicast(b, (struct sockaddr *)&grp) == -1 && errno == EADDRNOTAVAIL,
	      "leaving again: EADDRNOTAVAIL");
	REQUIRE(rdma_post_recv(b, NULL, rbuf, 4096, rmr) == 0, "rdma_post_recv(b)");
	REQUIRE(rdma_post_ud_send(a, NULL, buf, 13, mr, IBV_SEND_SIGNALED, ah, 0xffffff) == 0,
		"rdma_post_ud_send");
	REQUIRE(rdma_get_send_comp(a, &wc) == 1, "send completion");
	CHECK(recv_within(b->recv_cq, &wc, 1000) == 0, "after leaving, nothing arrives");
	CHECK(rdma_leave_multicast(a, (struct sockaddr *)&grp) == 0, "rdma_leave_multicast(a)");

	/* A synchronous id: the join waits for its event. */
	sync = member(NULL);
	CHECK(rdma_join_multicast(sync, (struct sockaddr *)&grp, &saved_ctx) == 0 && sync->event &&
		      sync->event->event == RDMA_CM_EVENT_MULTICAST_JOIN &&
		      sync->event->param.ud.private_data == &saved_ctx,
	      "a synchronous join parks MULTICAST_JOIN in id->event");
	CHECK(rdma_leave_multicast(sync, (struct sockaddr *)&grp) == 0, "and leaves");

	ibv_destroy_ah(ah);
	rdma_dereg_mr(mr);
	rdma_dereg_mr(rmr);
	free(rbuf);
	rdma_destroy_qp(sync);
	rdma_destroy_id(sync);
	rdma_destroy_qp(a);
	rdma_destroy_qp(b);
	REQUIRE(rdma_destroy_id(a) == 0 && rdma_destroy_id(b) == 0, "rdma_destroy_id");
	rdma_destroy_id(bare);
	rdma_destroy_id(rc);
	rdma_destroy_event_channel(ch);
	printf("# cm_mcast: all checks passed\n");
	return 0;
}
