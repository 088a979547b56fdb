/* rdma_cm, failures and argument checks (rdma-core 44 librdmacm over the kernel's
 * rdma_cm, rdma_cm(7)):
 *  - an O_NONBLOCK channel with nothing queued: rdma_get_cm_event is -1 / EAGAIN, the fd
 *    is not readable; NULL arguments are EINVAL;
 *  - connecting to a port nobody listens on: REJECTED with status 8 (IBTA "invalid
 *    service ID"), reported asynchronously (rdma_connect returns 0);
 *  - rdma_reject with private data: the peer gets REJECTED, status 28 (consumer
 *    reject), the private data zero-padded to 148 bytes;
 *  - a connect without a QP and with conn_param (qp_num given): CONNECT_REQUEST carries
 *    that QP number; without a QP nor conn_param: EINVAL;
 *  - rdma_set_option: TOS/ACK_TIMEOUT take a u8, REUSEADDR/AFONLY an int (wrong length
 *    EINVAL), unknown names and levels ENOSYS;
 *  - addresses: an AF_UNIX address is EINVAL (librdmacm without AF_IB support);
 *    binding a port in use is EADDRINUSE; an address not of this host EADDRNOTAVAIL;
 *  - rdma_migrate_id(id, NULL) makes an async id synchronous, a second time EINVAL;
 *  - rdma_create_srq: id->srq, used by rdma_create_qp; a second QP on an id: EINVAL;
 *  - rdma_disconnect / rdma_create_qp on an id without a device: EINVAL; rdma_accept
 *    on an id without a request: EINVAL.
 */
#include <arpa/inet.h>
#include <poll.h>
#include <sys/un.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

#include "common.h"

static struct rdma_cm_event *expect_event(struct rdma_event_channel *ch,
					  enum rdma_cm_event_type type, const char *who)
{
	struct rdma_cm_event *ev = NULL;

	REQUIRE(rdma_get_cm_event(ch, &ev) == 0, "%s: rdma_get_cm_event", who);
	CHECK(ev->event == type, "%s: %s (got %s, status %d)", who, rdma_event_str(type),
	      rdma_event_str(ev->event), ev->status);
	return ev;
}

static int all_zero(const void *p, size_t n)
{
	const unsigned char *c = p;

	for (size_t i = 0; i < n; i++)
		if (c[i])
			return 0;
	return 1;
}

static struct sockaddr_in loopback(uint16_t port)
{
	struct sockaddr_in a;

	memset(&a, 0, sizeof(a));
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	a.sin_port = htons(port);
	return a;
}

/* An active id on `ch` with its route resolved towards 127.0.0.1:port. */
static struct rdma_cm_id *resolved(struct rdma_event_channel *ch, uint16_t port)
{
	struct rdma_cm_id *id;
	struct sockaddr_in dst = loopback(port);
	struct rdma_cm_event *ev;

	REQUIRE(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0, "rdma_create_id");
	REQUIRE(rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000) == 0,
		"rdma_resolve_addr");
	ev = expect_event(ch, RDMA_CM_EVENT_ADDR_RESOLVED, "active");
	rdma_ack_cm_event(ev);
	REQUIRE(rdma_resolve_route(id, 2000) == 0, "rdma_resolve_route");
	ev = expect_event(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, "active");
	rdma_ack_cm_event(ev);
	return id;
}

int main(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_event *ev;
	struct rdma_cm_id *id, *listener, *child;
	struct rdma_conn_param cp;

	setvbuf(stdout, NULL, _IOLBF, 0);
	REQUIRE(ch, "rdma_create_event_channel");

	/* O_NONBLOCK. */
	REQUIRE(fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK) == 0, "O_NONBLOCK");
	errno = 0;
	CHECK(rdma_get_cm_event(ch, &ev) == -1 && errno == EAGAIN,
	      "non-blocking channel, nothing queued: -1 / EAGAIN");
	{
		struct pollfd p = { .fd = ch->fd, .events = POLLIN };
		CHECK(poll(&p, 1, 0) == 0, "and its fd is not readable");
	}
	REQUIRE(fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) & ~O_NONBLOCK) == 0, "blocking again");
	errno = 0;
	CHECK(rdma_get_cm_event(ch, NULL) == -1 && errno == EINVAL, "rdma_get_cm_event(ch, NULL): EINVAL");
	errno = 0;
	CHECK(rdma_ack_cm_event(NULL) == -1 && errno == EINVAL, "rdma_ack_cm_event(NULL): EINVAL");
	errno = 0;
	CHECK(rdma_create_id(ch, &id, NULL, 0x4242) == -1 && errno == EINVAL,
	      "rdma_create_id with an unknown port space: EINVAL");

	/* A free port: bind an ephemeral one, then let it go. */
	REQUIRE(rdma_create_id(ch, &listener, NULL, RDMA_PS_TCP) == 0, "rdma_create_id");
	struct sockaddr_in a = loopback(0);
	REQUIRE(rdma_bind_addr(listener, (struct sockaddr *)&a) == 0, "bind an ephemeral port");
	uint16_t free_port = ntohs(rdma_get_src_port(listener));
	REQUIRE(rdma_destroy_id(listener) == 0, "rdma_destroy_id");

	/* An SRQ on an id: rdma_create_qp uses it; rdma_destroy_srq frees it. */
	id = resolved(ch, free_port);
	{
		struct ibv_srq_init_attr sa;
		struct ibv_qp_init_attr qia;

		memset(&sa, 0, sizeof(sa));
		sa.attr.max_wr = 4;
		sa.attr.max_sge = 1;
		CHECK(rdma_create_srq(id, NULL, &sa) == 0 && id->srq && id->srq->pd == id->pd &&
			      sa.attr.max_wr >= 4,
		      "rdma_create_srq: id->srq on the id's PD, sizes written back");
		memset(&qia, 0, sizeof(qia));
		qia.qp_type = IBV_QPT_RC;
		qia.cap.max_send_wr = 2;
		qia.cap.max_recv_wr = 2;
		qia.cap.max_send_sge = qia.cap.max_recv_sge = 1;
		CHECK(rdma_create_qp(id, NULL, &qia) == 0 && id->qp->srq == id->srq &&
			      qia.srq == id->srq,
		      "rdma_create_qp takes the id's SRQ");
		errno = 0;
		CHECK(rdma_create_qp(id, NULL, &qia) == -1 && errno == EINVAL,
		      "a second rdma_create_qp on the id: EINVAL");
		rdma_destroy_qp(id);
		rdma_destroy_srq(id);
		CHECK(id->qp == NULL && id->srq == NULL && id->recv_cq == NULL,
		      "rdma_destroy_qp / rdma_destroy_srq clear the id");
	}
	REQUIRE(rdma_destroy_id(id) == 0, "rdma_destroy_id");

	/* Nobody listens: REJECTED(8). */
	id = resolved(ch, free_port);
	memset(&cp, 0, sizeof(cp));
	cp.qp_num = 0x123;
	cp.retry_count = 7;
	CHECK(rdma_connect(id, &cp) == 0, "rdma_connect to a port nobody listens on returns 0");
	ev = expect_event(ch, RDMA_CM_EVENT_REJECTED, "active");
	CHECK(ev->status == 8 && ev->id == id, "REJECTED, status 8 (invalid service ID)");
	rdma_ack_cm_event(ev);
	REQUIRE(rdma_destroy_id(id) == 0, "rdma_destroy_id");

	/* rdma_reject with private data: REJECTED(28) + data. */
	REQUIRE(rdma_create_id(ch, &listener, NULL, RDMA_PS_TCP) == 0, "rdma_create_id");
	a = loopback(0);
	REQUIRE(rdma_bind_addr(listener, (struct sockaddr *)&a) == 0, "bind");
	REQUIRE(rdma_listen(listener, 0) == 0, "rdma_listen (backlog 0 = the maximum)");
	uint16_t port = ntohs(rdma_get_src_port(listener));
	{
		struct rdma_cm_id *dup;
		REQUIRE(rdma_create_id(ch, &dup, NULL, RDMA_PS_TCP) == 0, "rdma_create_id");
		struct sockaddr_in same = loopback(port);
		errno = 0;
		CHECK(rdma_bind_addr(dup, (struct sockaddr *)&same) == -1 && errno == EADDRINUSE,
		      "binding the listener's port again: EADDRINUSE");
		struct sockaddr_in far = loopback(0);
		far.sin_addr.s_addr = inet_addr("192.0.2.77");
		errno = 0;
		CHECK(rdma_bind_addr(dup, (struct sockaddr *)&far) == -1 && errno == EADDRNOTAVAIL,
		      "binding an address of no local interface: EADDRNOTAVAIL");
		struct sockaddr_un un;
		memset(&un, 0, sizeof(un));
		un.sun_family = AF_UNIX;
		errno = 0;
		CHECK(rdma_bind_addr(dup, (struct sockaddr *)&un) == -1 && errno == EINVAL,
		      "an AF_UNIX address: EINVAL");
		errno = 0;
		CHECK(rdma_disconnect(dup) == -1 && errno == EINVAL,
		      "rdma_disconnect on an id without a device: EINVAL");
		struct ibv_qp_init_attr qia;
		memset(&qia, 0, sizeof(qia));
		qia.qp_type = IBV_QPT_RC;
		qia.cap.max_send_wr = qia.cap.max_recv_wr = 1;
		errno = 0;
		CHECK(rdma_create_qp(dup, NULL, &qia) == -1 && errno == EINVAL,
		      "rdma_create_qp on an id without a device: EINVAL");
		errno = 0;
		CHECK(rdma_accept(dup, &cp) == -1 && errno == EINVAL,
		      "rdma_accept without a connection request: EINVAL");

		uint8_t tos = 32;
		int on = 1;
		CHECK(rdma_set_option(dup, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, 1) == 0,
		      "RDMA_OPTION_ID_TOS (u8)");
		CHECK(rdma_set_option(dup, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &tos, 1) == 0,
		      "RDMA_OPTION_ID_ACK_TIMEOUT (u8)");
		CHECK(rdma_set_option(dup, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &on,
				      sizeof(on)) == 0,
		      "RDMA_OPTION_ID_REUSEADDR (int)");
		errno = 0;
		CHECK(rdma_set_option(dup, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &on, sizeof(on)) == -1 &&
			      errno == EINVAL,
		      "TOS with an int-sized value: EINVAL");
		errno = 0;
		CHECK(rdma_set_option(dup, RDMA_OPTION_ID, 99, &on, sizeof(on)) == -1 &&
			      errno == ENOSYS,
		      "an unknown RDMA_OPTION_ID name: ENOSYS");
		errno = 0;
		CHECK(rdma_set_option(dup, 7, 0, &on, sizeof(on)) == -1 && errno == ENOSYS,
		      "an unknown level: ENOSYS");
		CHECK(rdma_migrate_id(dup, NULL) == 0 && dup->channel != ch && dup->channel != NULL,
		      "rdma_migrate_id(id, NULL): the id is synchronous, on a channel of its own");
		errno = 0;
		CHECK(rdma_migrate_id(dup, NULL) == -1 && errno == EINVAL,
		      "rdma_migrate_id(sync id, NULL): EINVAL");
		CHECK(rdma_migrate_id(dup, ch) == 0 && dup->channel == ch,
		      "and back to an event channel");
		REQUIRE(rdma_destroy_id(dup) == 0, "rdma_destroy_id");
	}

	id = resolved(ch, port);
	memset(&cp, 0, sizeof(cp));
	errno = 0;
	CHECK(rdma_connect(id, NULL) == -1 && errno == EINVAL,
	      "rdma_connect without a QP and without conn_param: EINVAL");
	cp.qp_num = 0xabcde;
	cp.private_data = "knock";
	cp.private_data_len = 6;
	CHECK(rdma_connect(id, &cp) == 0, "rdma_connect without a QP (qp_num in conn_param)");
	ev = expect_event(ch, RDMA_CM_EVENT_CONNECT_REQUEST, "passive");
	child = ev->id;
	CHECK(ev->param.conn.qp_num == 0xabcde && ev->param.conn.private_data_len == 56 &&
		      !strcmp(ev->param.conn.private_data, "knock"),
	      "CONNECT_REQUEST: the given QP number and the private data");
	rdma_ack_cm_event(ev);
	{
		char big[149];
		memset(big, 'x', sizeof(big));
		errno = 0;
		CHECK(rdma_reject(child, big, sizeof(big)) == -1 && errno == EINVAL,
		      "rdma_reject with 149 bytes of private data: EINVAL");
	}
	CHECK(rdma_reject(child, "go away", 8) == 0, "rdma_reject with private data");
	ev = expect_event(ch, RDMA_CM_EVENT_REJECTED, "active");
	CHECK(ev->id == id && ev->status == 28, "REJECTED, status 28 (consumer reject)");
	CHECK(ev->param.conn.private_data_len == 148 &&
		      !strcmp(ev->param.conn.private_data, "go away") &&
		      all_zero((const char *)ev->param.conn.private_data + 8, 140),
	      "the reject's private data, zero-padded to 148 bytes");
	rdma_ack_cm_event(ev);
	REQUIRE(rdma_destroy_id(child) == 0, "rdma_destroy_id (rejected request)");
	REQUIRE(rdma_destroy_id(id) == 0, "rdma_destroy_id (active)");
	REQUIRE(rdma_destroy_id(listener) == 0, "rdma_destroy_id (listener)");
	{
		struct pollfd p = { .fd = ch->fd, .events = POLLIN };
		CHECK(poll(&p, 1, 100) == 0, "nothing else was queued");
	}
	rdma_destroy_event_channel(ch);
	printf("# cm_errors: all checks passed\n");
	return 0;
}
