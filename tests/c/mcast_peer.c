/* One side of UD multicast across hosts through the verbs (ibv_attach_mcast(3)), for
 * tests/conformance/mcast_netns.sh: not a conformance program of its own (the Rust tests
 * do not run it). It reaches groups the connection manager does not join: an IPv6 group,
 * which rdma_join_multicast refuses on a RoCE v2 port as the kernel does.
 *
 *   mcast_peer recv GROUP FROM COUNT
 *       attaches a UD QP (Q_Key 0x11111111) to GROUP (an IPv6 address, or an IPv4 one as
 *       its IPv4-mapped GID), prints "attached", then receives COUNT messages within 10 s:
 *       "message 0" … in order, each with IBV_WC_GRH and a GRH area holding the packet's
 *       IP header: source FROM, destination GROUP.
 *   mcast_peer send GROUP SGID_INDEX COUNT WRONG
 *       sends WRONG messages "wrong <i>" with a Q_Key the receivers do not have, then COUNT
 *       messages "message <i>" with theirs, to QPN 0xFFFFFF from GID SGID_INDEX (hop limit
 *       64). A receiver that took a wrong one sees it first and fails.
 */
#include "common.h"

#include <arpa/inet.h>
#include <time.h>

#define QKEY 0x11111111
#define MCAST_QPN 0xffffff
#define MSG_MAX 64

/* `text` as a GID: an IPv6 address, or an IPv4 one IPv4-mapped (::ffff:a.b.c.d). */
static union ibv_gid gid_of(const char *text)
{
	union ibv_gid g;
	struct in_addr v4;

	memset(&g, 0, sizeof(g));
	if (inet_pton(AF_INET6, text, g.raw) == 1)
		return g;
	REQUIRE(inet_pton(AF_INET, text, &v4) == 1, "\"%s\" is an IP address", text);
	g.raw[10] = g.raw[11] = 0xff;
	memcpy(g.raw + 12, &v4, 4);
	return g;
}

static int is_v4(const union ibv_gid *g)
{
	static const uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

	return !memcmp(g->raw, prefix, 12);
}

static double now_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

static int recv_side(const char *group_text, const char *from_text, int count)
{
	union ibv_gid group = gid_of(group_text), from = gid_of(from_text);
	struct side s;
	const size_t slot = 40 + MSG_MAX;
	double deadline;
	int got = 0;

	REQUIRE(count > 0 && (size_t)count * slot <= BUF_LEN, "COUNT fits the buffer");
	make_side(&s, IBV_QPT_UD, 64, 64);
	to_rts(s.qp, 0, 0, 0);
	for (int i = 0; i < count; i++)
		post_recv(&s, i, i * slot, slot);
	CHECK(ibv_attach_mcast(s.qp, &group, 0) == 0, "QP 0x%x attached to %s", s.qp->qp_num,
	      group_text);
	printf("attached\n");
	fflush(stdout);
	deadline = now_s() + 10;
	while (got < count) {
		struct ibv_wc wc;
		char want[MSG_MAX];
		const uint8_t *grh = (const uint8_t *)s.buf + got * slot;
		int n = ibv_poll_cq(s.recv_cq, 1, &wc);

		REQUIRE(n >= 0, "ibv_poll_cq");
		if (n == 0) {
			CHECK(now_s() < deadline, "%d of %d messages within 10 s", got, count);
			continue;
		}
		snprintf(want, sizeof(want), "message %d", got);
		CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == (uint64_t)got &&
			      (wc.wc_flags & IBV_WC_GRH) && wc.byte_len == 40 + strlen(want) &&
			      !memcmp(grh + 40, want, strlen(want)),
		      "received \"%s\" (status %d, wr_id %llu, byte_len %u, \"%.*s\")", want,
		      wc.status, (unsigned long long)wc.wr_id, wc.byte_len, (int)strlen(want),
		      (const char *)grh + 40);
		if (is_v4(&group))
			CHECK(!memcmp(grh + 32, from.raw + 12, 4) && !memcmp(grh + 36, group.raw + 12, 4),
			      "its GRH area holds the IPv4 header from %s to %s", from_text,
			      group_text);
		else
			CHECK(!memcmp(grh + 8, from.raw, 16) && !memcmp(grh + 24, group.raw, 16),
			      "its GRH area holds the IPv6 header from %s to %s", from_text,
			      group_text);
		got++;
	}
	CHECK(ibv_detach_mcast(s.qp, &group, 0) == 0, "ibv_detach_mcast");
	destroy_side(&s);
	printf("received %d\n", got);
	return 0;
}

static void send_one(struct side *s, struct ibv_ah *ah, uint32_t qkey, const char *msg)
{
	struct ibv_sge sge = {.addr = (uintptr_t)s->buf, .length = strlen(msg),
			      .lkey = s->mr->lkey};
	struct ibv_send_wr wr = {.sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_SIGNALED};
	struct ibv_send_wr *bad = NULL;
	struct ibv_wc wc;

	strcpy(s->buf, msg);
	wr.wr.ud.ah = ah;
	wr.wr.ud.remote_qpn = MCAST_QPN;
	wr.wr.ud.remote_qkey = qkey;
	REQUIRE(ibv_post_send(s->qp, &wr, &bad) == 0, "UD SEND \"%s\" posted", msg);
	wc = poll_one(s->send_cq);
	REQUIRE(wc.status == IBV_WC_SUCCESS, "\"%s\" completes", msg);
}

static int send_side(const char *group_text, int sgid_index, int count, int wrong)
{
	struct ibv_ah_attr aa = {.is_global = 1, .port_num = 1};
	struct side s;
	struct ibv_ah *ah;
	char msg[MSG_MAX];

	make_side(&s, IBV_QPT_UD, 64, 64);
	to_rts(s.qp, 0, 0, 0);
	aa.grh.dgid = gid_of(group_text);
	aa.grh.sgid_index = sgid_index;
	aa.grh.hop_limit = 64;
	ah = ibv_create_ah(s.pd, &aa);
	REQUIRE(ah != NULL, "ibv_create_ah towards %s", group_text);
	for (int i = 0; i < wrong; i++) {
		snprintf(msg, sizeof(msg), "wrong %d", i);
		send_one(&s, ah, QKEY + 1, msg);
	}
	for (int i = 0; i < count; i++) {
		snprintf(msg, sizeof(msg), "message %d", i);
		send_one(&s, ah, QKEY, msg);
	}
	REQUIRE(ibv_destroy_ah(ah) == 0, "destroy AH");
	destroy_side(&s);
	printf("sent %d (and %d with a wrong Q_Key) from QP to %s\n", count, wrong, group_text);
	return 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc == 5 && !strcmp(argv[1], "recv"))
		return recv_side(argv[2], argv[3], atoi(argv[4]));
	if (argc == 6 && !strcmp(argv[1], "send"))
		return send_side(argv[2], atoi(argv[3]), atoi(argv[4]), atoi(argv[5]));
	fprintf(stderr, "usage: mcast_peer recv GROUP FROM COUNT | send GROUP SGID_INDEX COUNT WRONG\n");
	return 2;
}
