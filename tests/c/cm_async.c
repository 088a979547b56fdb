/* rdma_cm, asynchronous: a client and a server in one process over 127.0.0.1, each with
 * its own event channel, driven by one thread (rdma_cm(7), rdma-core 44 librdmacm):
 *  - bind (ephemeral port) + listen: id->verbs set for a specific address;
 *  - resolve_addr -> ADDR_RESOLVED (verbs, port_num, source address with a port), the
 *    route resolved from inside the event handler before the ack -> ROUTE_RESOLVED
 *    (one path record, GIDs);
 *  - rdma_create_qp with NULL CQs: the library's CQs and completion channels in the id,
 *    the QP in INIT (receives may be posted), caps written back; a PD of the CM's
 *    context taken when none is given (server side);
 *  - connect with private data -> CONNECT_REQUEST on the listener's channel: a new id
 *    with the listener's context and channel, listen_id, REQ private data zero-padded
 *    to 56 bytes, the initiator depth / responder resources crossed over;
 *  - accept with private data -> ESTABLISHED on both sides (the client's with the REP
 *    data padded to 196, the server's with none);
 *  - a SEND/RECV through the CQs rdma_create_qp made (waited for on their channels);
 *  - disconnect -> DISCONNECTED on both sides, the peer's rdma_disconnect returns 0,
 *    posted receives flush;
 * *  - rdma_destroy_qp, rdma_destroy_id,
 *    rdma_destroy_event_channel.
 */
#include <arpa/inet.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

#include "common.h"

static struct rdma_cm_event *expect_event(struct rdma_event_channel *ch,
					  enum rdma_cm_event_type type, const char *who)
{
	struct rdma_cm_event *ev = NULL;

	REQUIRE(rdma_get_cm_event(ch, &ev) == 0, "%s: rdma_get_cm_event", who);
	CHECK(ev->event == type && ev->status == 0, "%s: %s (got %s, status %d)", who,
	      rdma_event_str(type), rdma_event_str(ev->event), ev->status);
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

/* Waits for one completion on the CQ (armed, through its completion channel). */
static void wait_wc(struct ibv_cq *cq, struct ibv_comp_channel *ch, struct ibv_wc *wc,
		    const char *what)
{
	for (int i = 0; i < 3; i++) {
		int n = ibv_poll_cq(cq, 1, wc);

		REQUIRE(n >= 0, "%s: ibv_poll_cq", what);
		if (n == 1)
			return;
		REQUIRE(ibv_req_notify_cq(cq, 0) == 0, "%s: ibv_req_notify_cq", what);
		n = ibv_poll_cq(cq, 1, wc);
		if (n == 1)
			return;
		struct ibv_cq *ev_cq;
		void *ev_ctx;
		REQUIRE(ibv_get_cq_event(ch, &ev_cq, &ev_ctx) == 0, "%s: ibv_get_cq_event", what);
		REQUIRE(ev_cq == cq, "%s: the event names the CQ", what);
		ibv_ack_cq_events(ev_cq, 1);
	}
	CHECK(0, "%s: a completion arrives", what);
}

int main(void)
{
	static int server_ctx, client_ctx;
	struct rdma_event_channel *sch, *cch;
	struct rdma_cm_id *listener, *client, *child;
	struct rdma_cm_event *ev;
	struct sockaddr_in addr;
	uint16_t port;

	setvbuf(stdout, NULL, _IOLBF, 0);

	sch = rdma_create_event_channel();
	cch = rdma_create_event_channel();
	CHECK(sch && cch && sch->fd >= 0 && cch->fd >= 0 && sch->fd != cch->fd,
	      "rdma_create_event_channel: two channels with their own fds");
	CHECK(fcntl(sch->fd, F_GETFD) & FD_CLOEXEC, "the channel fd is close-on-exec");

	/* Server: bind to 127.0.0.1 with an ephemeral port, listen. */
	CHECK(rdma_create_id(sch, &listener, &server_ctx, RDMA_PS_TCP) == 0,
	      "rdma_create_id (server, PS_TCP)");
	CHECK(listener->channel == sch && listener->context == &server_ctx &&
		      listener->ps == RDMA_PS_TCP && listener->qp_type == IBV_QPT_RC &&
		      listener->verbs == NULL,
	      "a new id: channel, context, ps, qp_type; no device yet");
	memset(&addr, 0, sizeof(addr));
	addr.sin_family = AF_INET;
	addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	CHECK(rdma_bind_addr(listener, (struct sockaddr *)&addr) == 0, "rdma_bind_addr 127.0.0.1:0");
	port = ntohs(rdma_get_src_port(listener));
	/* The kernel's rdma_cm attaches no device to a loopback bind (measured on rxe):
	 * like the any-address, the device comes with the connection request. */
	CHECK(port != 0 && listener->verbs == NULL,
	      "bound to loopback: ephemeral port %u, no device (as the kernel's rdma_cm)", port);
	CHECK(rdma_get_local_addr(listener)->sa_family == AF_INET &&
		      ((struct sockaddr_in *)rdma_get_local_addr(listener))->sin_addr.s_addr ==
			      htonl(INADDR_LOOPBACK),
	      "rdma_get_local_addr: 127.0.0.1");
	CHECK(rdma_listen(listener, 4) == 0, "rdma_listen");
	{
		struct pollfd p = { .fd = sch->fd, .events = POLLIN };
		CHECK(poll(&p, 1, 0) == 0, "the server channel is not readable: nothing queued");
	}

	/* Client: resolve address, then the route from inside the handler. */
	CHECK(rdma_create_id(cch, &client, &client_ctx, RDMA_PS_TCP) == 0, "rdma_create_id (client)");
	addr.sin_port = htons(port);
	CHECK(rdma_resolve_addr(client, NULL, (struct sockaddr *)&addr, 2000) == 0,
	      "rdma_resolve_addr");
	{
		struct pollfd p = { .fd = cch->fd, .events = POLLIN };
		CHECK(poll(&p, 1, 5000) == 1 && (p.revents & POLLIN),
		      "the client channel is readable with an event queued");
	}
	ev = expect_event(cch, RDMA_CM_EVENT_ADDR_RESOLVED, "client");
	CHECK(ev->id == client && client->verbs != NULL &&
		      client->port_num == 1 && rdma_get_src_port(client) != 0 &&
		      ntohs(rdma_get_dst_port(client)) == port,
	      "ADDR_RESOLVED: a verbs context, port_num, ports");
	CHECK(rdma_resolve_route(client, 2000) == 0, "rdma_resolve_route before the ack");
	REQUIRE(rdma_ack_cm_event(ev) == 0, "rdma_ack_cm_event");
	ev = expect_event(cch, RDMA_CM_EVENT_ROUTE_RESOLVED, "client");
	CHECK(client->route.num_paths == 1 && client->route.path_rec != NULL &&
		      client->route.path_rec->mtu >= IBV_MTU_1024 &&
		      !all_zero(&client->route.addr.addr.ibaddr.sgid, 16) &&
		      !all_zero(&client->route.addr.addr.ibaddr.dgid, 16),
	      "ROUTE_RESOLVED: one path record, GIDs");
	rdma_ack_cm_event(ev);

	/* Client QP with the library's CQs. */
	struct ibv_pd *cpd = ibv_alloc_pd(client->verbs);
	REQUIRE(cpd, "ibv_alloc_pd on id->verbs");
	struct ibv_qp_init_attr qia;
	memset(&qia, 0, sizeof(qia));
	qia.qp_type = IBV_QPT_RC;
	qia.cap.max_send_wr = 8;
	qia.cap.max_recv_wr = 8;
	qia.cap.max_send_sge = 1;
	qia.cap.max_recv_sge = 1;
	qia.sq_sig_all = 1;
	CHECK(rdma_create_qp(client, cpd, &qia) == 0, "rdma_create_qp (client, NULL CQs)");
	CHECK(client->qp && client->pd == cpd && client->send_cq && client->recv_cq &&
		      client->send_cq != client->recv_cq && client->send_cq_channel &&
		      client->recv_cq_channel && qia.send_cq == client->send_cq &&
		      qia.recv_cq == client->recv_cq && qia.cap.max_send_wr >= 8,
	      "the library's CQs and channels are in the id and the attributes; caps back");
	CHECK(client->qp->state == IBV_QPS_INIT && client->qp->pd == cpd,
	      "the QP is in INIT");
	char *cbuf = calloc(1, BUF_LEN);
	struct ibv_mr *cmr = ibv_reg_mr(cpd, cbuf, BUF_LEN, IBV_ACCESS_LOCAL_WRITE);
	REQUIRE(cbuf && cmr, "client buffer");
	CHECK(rdma_post_recv(client, NULL, cbuf + 1024, 64, cmr) == 0,
	      "a receive posted in INIT (rdma_post_recv)");

	/* Connect with private data. */
	struct rdma_conn_param cp;
	memset(&cp, 0, sizeof(cp));
	cp.private_data = "hello";
	cp.private_data_len = 6;
	cp.responder_resources = 1;
	cp.initiator_depth = 1;
	cp.retry_count = 7;
	cp.rnr_retry_count = 7;
	CHECK(rdma_connect(client, &cp) == 0, "rdma_connect with 6 bytes of private data");

	ev = expect_event(sch, RDMA_CM_EVENT_CONNECT_REQUEST, "server");
	child = ev->id;
	CHECK(child && child != listener && ev->listen_id == listener,
	      "CONNECT_REQUEST: a new id, listen_id = the listener");
	CHECK(child->context == &server_ctx && child->channel == sch && child->verbs != NULL &&
		      child->port_num == 1 && child->ps == RDMA_PS_TCP &&
		      child->qp_type == IBV_QPT_RC,
	      "the new id inherits the listener's context and channel; verbs, port_num");
	CHECK(ntohs(rdma_get_src_port(child)) == port &&
		      rdma_get_dst_port(child) == rdma_get_src_port(client),
	      "the new id's addresses: ours and the client's");
	CHECK(ev->param.conn.private_data_len == 56 && ev->param.conn.private_data &&
		      !strcmp(ev->param.conn.private_data, "hello") &&
		      all_zero((const char *)ev->param.conn.private_data + 6, 50),
	      "REQ private data: ours, zero-padded to 56 bytes");
	CHECK(ev->param.conn.initiator_depth == 1 && ev->param.conn.responder_resources == 1 &&
		      ev->param.conn.retry_count == 7 && ev->param.conn.rnr_retry_count == 7 &&
		      ev->param.conn.qp_num == client->qp->qp_num,
	      "REQ parameters: depths, retry counts, the client's QP number");
	rdma_ack_cm_event(ev);

	/* Server QP: no PD given -> the id's (the CM's) PD. */
	memset(&qia, 0, sizeof(qia));
	qia.qp_type = IBV_QPT_RC;
	qia.cap.max_send_wr = 8;
	qia.cap.max_recv_wr = 8;
	qia.cap.max_send_sge = 1;
	qia.cap.max_recv_sge = 1;
	CHECK(rdma_create_qp(child, NULL, &qia) == 0, "rdma_create_qp (server, NULL PD and CQs)");
	CHECK(child->qp && child->pd && child->pd->context == child->verbs,
	      "the server QP uses the id's PD");
	char *sbuf = calloc(1, BUF_LEN);
	struct ibv_mr *smr = rdma_reg_msgs(child, sbuf, BUF_LEN);
	REQUIRE(sbuf && smr, "rdma_reg_msgs on id->pd");
	CHECK(rdma_post_recv(child, NULL, sbuf, 64, smr) == 0, "server receive posted");
	CHECK(rdma_post_recv(child, NULL, sbuf + 64, 64, smr) == 0, "a second one (will flush)");

	memset(&cp, 0, sizeof(cp));
	cp.private_data = "world";
	cp.private_data_len = 6;
	cp.responder_resources = 1;
	cp.initiator_depth = 1;
	CHECK(rdma_accept(child, &cp) == 0, "rdma_accept with private data");
	CHECK(child->qp->qp_num != 0, "accepted");

	ev = expect_event(cch, RDMA_CM_EVENT_ESTABLISHED, "client");
	CHECK(ev->id == client && ev->param.conn.private_data_len == 196 &&
		      !strcmp(ev->param.conn.private_data, "world") &&
		      all_zero((const char *)ev->param.conn.private_data + 6, 190) &&
		      ev->param.conn.qp_num == child->qp->qp_num,
	      "client ESTABLISHED: REP private data padded to 196, the server's QP number");
	rdma_ack_cm_event(ev);
	ev = expect_event(sch, RDMA_CM_EVENT_ESTABLISHED, "server");
	CHECK(ev->id == child && ev->param.conn.private_data_len == 0,
	      "server ESTABLISHED on the listener's channel, no private data");
	rdma_ack_cm_event(ev);

	/* SEND client -> server. */
	strcpy(cbuf, "ping through rdma_cm");
	CHECK(rdma_post_send(client, NULL, cbuf, 32, cmr, 0) == 0, "rdma_post_send");
	struct ibv_wc wc;
	wait_wc(client->send_cq, client->send_cq_channel, &wc, "client send");
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_SEND, "the SEND completes");
	wait_wc(child->recv_cq, child->recv_cq_channel, &wc, "server recv");
	CHECK(wc.status == IBV_WC_SUCCESS && wc.byte_len == 32 &&
		      !strcmp(sbuf, "ping through rdma_cm"),
	      "the server receives it");

	/* Disconnect from the client side. */
	CHECK(rdma_disconnect(client) == 0, "rdma_disconnect (client)");
	ev = expect_event(sch, RDMA_CM_EVENT_DISCONNECTED, "server");
	CHECK(ev->id == child, "server DISCONNECTED");
	rdma_ack_cm_event(ev);
	CHECK(rdma_disconnect(child) == 0, "the server's rdma_disconnect after DISCONNECTED: 0");
	ev = expect_event(cch, RDMA_CM_EVENT_DISCONNECTED, "client");
	CHECK(ev->id == client, "client DISCONNECTED");
	rdma_ack_cm_event(ev);
	CHECK(rdma_disconnect(child) == 0, "a second rdma_disconnect: 0");
	wait_wc(child->recv_cq, child->recv_cq_channel, &wc, "server flush");
	CHECK(wc.status == IBV_WC_WR_FLUSH_ERR, "the remaining receive flushes");
	wait_wc(client->recv_cq, client->recv_cq_channel, &wc, "client flush");
	CHECK(wc.status == IBV_WC_WR_FLUSH_ERR, "the client's receive flushes");
	{
		struct pollfd p[2] = { { .fd = sch->fd, .events = POLLIN },
				       { .fd = cch->fd, .events = POLLIN } };
		CHECK(poll(p, 2, 200) == 0, "exactly one DISCONNECTED each: nothing else queued");
	}

	/* Teardown. */
	rdma_dereg_mr(smr);
	rdma_dereg_mr(cmr);
	rdma_destroy_qp(child);
	CHECK(child->qp == NULL && child->send_cq == NULL && child->recv_cq == NULL &&
		      child->send_cq_channel == NULL && child->recv_cq_channel == NULL,
	      "rdma_destroy_qp clears the QP and the library's CQs");
	rdma_destroy_qp(client);
	CHECK(ibv_dealloc_pd(cpd) == 0, "the client's PD is free again");
	CHECK(rdma_destroy_id(child) == 0, "rdma_destroy_id (server connection)");
	CHECK(rdma_destroy_id(client) == 0, "rdma_destroy_id (client)");
	CHECK(rdma_destroy_id(listener) == 0, "rdma_destroy_id (listener)");
	rdma_destroy_event_channel(sch);
	rdma_destroy_event_channel(cch);
	free(cbuf);
	free(sbuf);
	printf("# cm_async: all checks passed\n");
	return 0;
}
