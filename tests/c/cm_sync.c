/* rdma_cm, synchronous ids (rdma_create_id(NULL, ...), rdma_create_ep(3)), in the style
 * of rdma-core's rdma_server / rdma_client examples, server on a second thread:
 *  - rdma_create_ep(RAI_PASSIVE) binds (ephemeral port) and keeps the QP attributes;
 *    rdma_listen; rdma_get_request returns a new synchronous id with its QP already
 *    created (library CQs and channels in the id) and the CONNECT_REQUEST parked in
 *    id->event;
 *  - rdma_create_ep (active) resolves address and route synchronously, creates the QP
 *    with the id's PD (none given) and writes the caps back; rdma_reg_msgs uses id->pd;
 *  - rdma_connect blocks until ESTABLISHED (parked in id->event), rdma_accept until the
 *    server's ESTABLISHED;
 *  - rdma_post_send/recv + rdma_get_send_comp/rdma_get_recv_comp (the inline helpers of
 *    rdma_verbs.h over the library's CQs and channels), both directions;
 *  - rdma_disconnect blocks until DISCONNECTED on both sides; rdma_destroy_ep;
 *  - a synchronous connect to a port nobody listens on: -1 / ECONNREFUSED, the REJECTED
 *    event (status 8) parked in id->event;
 *  - rdma_migrate_id of a synchronous id onto an event channel: the next event (the
 *    route) arrives there; rdma_get_request on an asynchronous listener: EINVAL.
 */
#include <arpa/inet.h>
#include <pthread.h>
#include <semaphore.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

#include "common.h"

static sem_t listening;
static char port_str[16];

static void *server(void *arg)
{
	struct rdma_addrinfo hints, *res;
	struct ibv_qp_init_attr attr;
	struct rdma_cm_id *listen_id, *id;
	struct ibv_wc wc;
	char recv_msg[64], send_msg[64] = "pong";
	struct ibv_mr *mr, *smr;

	(void)arg;
	memset(&hints, 0, sizeof(hints));
	hints.ai_flags = RAI_PASSIVE;
	hints.ai_port_space = RDMA_PS_TCP;
	CHECK(rdma_getaddrinfo("127.0.0.1", "0", &hints, &res) == 0, "server: rdma_getaddrinfo (passive)");
	memset(&attr, 0, sizeof(attr));
	attr.cap.max_send_wr = attr.cap.max_recv_wr = 2;
	attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
	attr.cap.max_inline_data = 16;
	attr.sq_sig_all = 1;
	CHECK(rdma_create_ep(&listen_id, res, NULL, &attr) == 0, "server: rdma_create_ep (passive)");
	rdma_freeaddrinfo(res);
	/* Bound to the loopback: no device yet, as in the kernel's rdma_cm (measured on rxe);
	 * the request's id gets one. */
	CHECK(listen_id->qp == NULL && listen_id->channel != NULL && listen_id->verbs == NULL,
	      "server: a bound synchronous id with its own channel, no QP, no device yet");
	CHECK(rdma_listen(listen_id, 0) == 0, "server: rdma_listen");
	snprintf(port_str, sizeof(port_str), "%u", ntohs(rdma_get_src_port(listen_id)));
	sem_post(&listening);

	CHECK(rdma_get_request(listen_id, &id) == 0, "server: rdma_get_request");
	CHECK(id != listen_id && id->qp != NULL && id->qp->qp_type == IBV_QPT_RC &&
		      id->send_cq && id->recv_cq && id->send_cq_channel && id->recv_cq_channel,
	      "server: the request's id has the endpoint's QP, with the library's CQs");
	CHECK(id->event && id->event->event == RDMA_CM_EVENT_CONNECT_REQUEST &&
		      id->event->listen_id == listen_id && id->channel != listen_id->channel,
	      "server: CONNECT_REQUEST parked in id->event; the id is synchronous itself");
	mr = rdma_reg_msgs(id, recv_msg, sizeof(recv_msg));
	smr = rdma_reg_msgs(id, send_msg, sizeof(send_msg));
	REQUIRE(mr && smr, "server: rdma_reg_msgs");
	CHECK(rdma_post_recv(id, NULL, recv_msg, sizeof(recv_msg), mr) == 0, "server: rdma_post_recv");
	CHECK(rdma_accept(id, NULL) == 0, "server: rdma_accept blocks until ESTABLISHED");
	CHECK(id->event && id->event->event == RDMA_CM_EVENT_ESTABLISHED,
	      "server: ESTABLISHED parked in id->event");
	CHECK(rdma_get_recv_comp(id, &wc) == 1 && wc.status == IBV_WC_SUCCESS &&
		      !strcmp(recv_msg, "ping"),
	      "server: rdma_get_recv_comp: the client's message");
	CHECK(rdma_post_send(id, NULL, send_msg, sizeof(send_msg), smr, 0) == 0,
	      "server: rdma_post_send");
	CHECK(rdma_get_send_comp(id, &wc) == 1 && wc.status == IBV_WC_SUCCESS,
	      "server: rdma_get_send_comp");
	CHECK(rdma_disconnect(id) == 0 && id->event->event == RDMA_CM_EVENT_DISCONNECTED,
	      "server: rdma_disconnect returns with DISCONNECTED parked");
	rdma_dereg_mr(mr);
	rdma_dereg_mr(smr);
	rdma_destroy_ep(id);
	rdma_destroy_ep(listen_id);
	return NULL;
}

int main(void)
{
	struct rdma_addrinfo hints, *res;
	struct ibv_qp_init_attr attr;
	struct rdma_cm_id *id;
	struct ibv_wc wc;
	char send_msg[64] = "ping", recv_msg[64];
	struct ibv_mr *mr, *smr;
	pthread_t thread;

	setvbuf(stdout, NULL, _IOLBF, 0);
	sem_init(&listening, 0, 0);
	REQUIRE(pthread_create(&thread, NULL, server, NULL) == 0, "pthread_create");
	sem_wait(&listening);

	memset(&hints, 0, sizeof(hints));
	hints.ai_port_space = RDMA_PS_TCP;
	CHECK(rdma_getaddrinfo("127.0.0.1", port_str, &hints, &res) == 0,
	      "client: rdma_getaddrinfo 127.0.0.1:%s", port_str);
	memset(&attr, 0, sizeof(attr));
	attr.cap.max_send_wr = attr.cap.max_recv_wr = 2;
	attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
	attr.sq_sig_all = 1;
	CHECK(rdma_create_ep(&id, res, NULL, &attr) == 0, "client: rdma_create_ep (active)");
	CHECK(id->verbs && id->pd && id->qp && id->qp->pd == id->pd &&
		      attr.qp_type == IBV_QPT_RC && attr.cap.max_send_wr >= 2 &&
		      id->route.num_paths == 1,
	      "client: resolved, QP on the id's PD, type and caps written back");
	CHECK(id->event && id->event->event == RDMA_CM_EVENT_ROUTE_RESOLVED,
	      "client: ROUTE_RESOLVED parked in id->event");
	mr = rdma_reg_msgs(id, recv_msg, sizeof(recv_msg));
	smr = rdma_reg_msgs(id, send_msg, sizeof(send_msg));
	REQUIRE(mr && smr, "client: rdma_reg_msgs");
	CHECK(rdma_post_recv(id, NULL, recv_msg, sizeof(recv_msg), mr) == 0, "client: rdma_post_recv");
	CHECK(rdma_connect(id, NULL) == 0, "client: rdma_connect (NULL param, QP on the id) blocks");
	CHECK(id->event && id->event->event == RDMA_CM_EVENT_ESTABLISHED &&
		      id->event->param.conn.private_data_len == 196,
	      "client: ESTABLISHED parked in id->event");
	CHECK(rdma_post_send(id, NULL, send_msg, sizeof(send_msg), smr, 0) == 0,
	      "client: rdma_post_send");
	CHECK(rdma_get_send_comp(id, &wc) == 1 && wc.status == IBV_WC_SUCCESS,
	      "client: rdma_get_send_comp");
	CHECK(rdma_get_recv_comp(id, &wc) == 1 && wc.status == IBV_WC_SUCCESS &&
		      !strcmp(recv_msg, "pong"),
	      "client: rdma_get_recv_comp: the server's answer");
	CHECK(rdma_disconnect(id) == 0 && id->event->event == RDMA_CM_EVENT_DISCONNECTED,
	      "client: rdma_disconnect returns with DISCONNECTED parked");
	rdma_dereg_mr(mr);
	rdma_dereg_mr(smr);
	rdma_destroy_ep(id);
	pthread_join(thread, NULL);

	/* Nobody listens any more: ECONNREFUSED. */
	CHECK(rdma_create_ep(&id, res, NULL, NULL) == 0, "client: rdma_create_ep without a QP");
	struct rdma_conn_param cp;
	memset(&cp, 0, sizeof(cp));
	cp.qp_num = 77;
	errno = 0;
	CHECK(rdma_connect(id, &cp) == -1 && errno == ECONNREFUSED,
	      "synchronous connect to a port nobody listens on: -1 / ECONNREFUSED");
	CHECK(id->event && id->event->event == RDMA_CM_EVENT_REJECTED && id->event->status == 8,
	      "the REJECTED event (status 8) is parked in id->event");
	rdma_destroy_ep(id);

	/* Synchronous -> asynchronous. */
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_event *ev;
	REQUIRE(ch, "rdma_create_event_channel");
	CHECK(rdma_create_id(NULL, &id, NULL, RDMA_PS_TCP) == 0 && id->channel != NULL,
	      "rdma_create_id(NULL channel): a synchronous id");
	CHECK(rdma_resolve_addr(id, NULL, res->ai_dst_addr, 2000) == 0 && id->event &&
		      id->event->event == RDMA_CM_EVENT_ADDR_RESOLVED && id->verbs,
	      "synchronous rdma_resolve_addr: ADDR_RESOLVED parked");
	CHECK(rdma_migrate_id(id, ch) == 0 && id->channel == ch && id->event == NULL,
	      "rdma_migrate_id onto a channel: the parked event is acked");
	CHECK(rdma_resolve_route(id, 2000) == 0 && id->event == NULL,
	      "rdma_resolve_route now returns at once");
	REQUIRE(rdma_get_cm_event(ch, &ev) == 0, "rdma_get_cm_event");
	CHECK(ev->event == RDMA_CM_EVENT_ROUTE_RESOLVED && ev->id == id,
	      "ROUTE_RESOLVED arrives on the channel");
	rdma_ack_cm_event(ev);
	errno = 0;
	CHECK(rdma_get_request(id, &id) == -1 && errno == EINVAL,
	      "rdma_get_request on an asynchronous id: EINVAL");
	CHECK(rdma_destroy_id(id) == 0, "rdma_destroy_id");
	rdma_destroy_event_channel(ch);
	rdma_freeaddrinfo(res);
	printf("# cm_sync: all checks passed\n");
	return 0;
}
