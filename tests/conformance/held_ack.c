/* A held ACK leaves by its deadline when the application leaves the library (docs/network.md,
 * "Coalesced ACKs"): RC across two hosts (RoCEv2 over UDP), both run with
 * RVERBS_BUSY_POLL=1 (ACKs are held only there). The server busy-polls its CQ for each of
 * the client's SENDs, telling it over TCP when it polls (its polls then receive the SEND
 * inline and hold its ACK for its next requests, which never come), then sleeps PAUSE ms
 * outside the library before it polls again. The client times each SEND from
 * ibv_post_send to its send completion, which waits for the server's ACK: it must come
 * within LIMIT ms (the hold's 200 us deadline plus the progress thread's wake-up), not
 * when the server polls again after its pause. The QP's ACK timeout (4 s) is far beyond,
 * so a retransmission cannot hide a lost deadline.
 *
 *   held_ack [-d dev] [-g gid index] [-p tcp port]            server
 *   held_ack [-d dev] [-g gid index] [-p tcp port] SERVER     client
 * The client prints "held_ack: all N sends completed within LIMIT ms (slowest X us)" and
 * exits 0 on success. */
#include <arpa/inet.h>
#include <getopt.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define SENDS 10
#define PAUSE_MS 200
#define LIMIT_MS 100
#define SPIN 2000000000L

struct peer {
	uint32_t qpn;
	uint8_t gid[16];
};

static int tcp_pair(const char *host, int port)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
	int s = socket(AF_INET, SOCK_STREAM, 0), one = 1;

	if (s < 0)
		return -1;
	if (host == NULL) {
		int c;

		setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		a.sin_addr.s_addr = htonl(INADDR_ANY);
		if (bind(s, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(s, 1) != 0)
			return -1;
		c = accept(s, NULL, NULL);
		close(s);
		return c;
	}
	if (inet_pton(AF_INET, host, &a.sin_addr) != 1)
		return -1;
	for (int tries = 0; tries < 200; tries++) {
		if (connect(s, (struct sockaddr *)&a, sizeof(a)) == 0)
			return s;
		usleep(50000);
	}
	return -1;
}

static int swap_bytes(int s, const void *mine, void *theirs, size_t n)
{
	if (write(s, mine, n) != (ssize_t)n)
		return -1;
	for (size_t got = 0; got < n;) {
		ssize_t r = read(s, (char *)theirs + got, n - got);

		if (r <= 0)
			return -1;
		got += (size_t)r;
	}
	return 0;
}

static int to_rts(struct ibv_qp *qp, int gidx, const struct peer *p)
{
	struct ibv_qp_attr a;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		return -1;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = p->qpn;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.port_num = 1;
	a.ah_attr.grh.sgid_index = gidx;
	a.ah_attr.grh.hop_limit = 64;
	memcpy(a.ah_attr.grh.dgid.raw, p->gid, 16);
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
				      IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		return -1;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 20; /* 4.096 us * 2^20: about 4 s */
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
					    IBV_QP_MAX_QP_RD_ATOMIC);
}

/* Busy-polls `cq` for one completion; 0 and the completion in *wc, or -1. */
static int spin_poll(struct ibv_cq *cq, struct ibv_wc *wc)
{
	for (long i = 0; i < SPIN; i++) {
		int n = ibv_poll_cq(cq, 1, wc);

		if (n < 0)
			return -1;
		if (n == 1)
			return wc->status == IBV_WC_SUCCESS ? 0 : -1;
	}
	return -1;
}

static double now_us(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

int main(int argc, char **argv)
{
	const char *dev_name = "rverbs0";
	int gidx = 0, port = 18515, opt;

	while ((opt = getopt(argc, argv, "d:g:p:")) != -1) {
		switch (opt) {
		case 'd': dev_name = optarg; break;
		case 'g': gidx = atoi(optarg); break;
		case 'p': port = atoi(optarg); break;
		default: return 2;
		}
	}
	const char *server = optind < argc ? argv[optind] : NULL;
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_device *dev = NULL;

	for (int i = 0; list != NULL && list[i] != NULL; i++)
		if (strcmp(ibv_get_device_name(list[i]), dev_name) == 0)
			dev = list[i];
	if (dev == NULL) {
		fprintf(stderr, "held_ack: no device %s\n", dev_name);
		return 1;
	}
	struct ibv_context *ctx = ibv_open_device(dev);
	struct ibv_pd *pd = ctx ? ibv_alloc_pd(ctx) : NULL;
	struct ibv_cq *cq = ctx ? ibv_create_cq(ctx, 2 * SENDS, NULL, NULL, 0) : NULL;
	static char buf[64];
	struct ibv_mr *mr = pd ? ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE) : NULL;
	struct ibv_qp_init_attr qa = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
				      .cap = {.max_send_wr = SENDS, .max_recv_wr = SENDS, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *qp = mr && cq ? ibv_create_qp(pd, &qa) : NULL;
	union ibv_gid gid;
	struct peer me, them;

	if (qp == NULL || ibv_query_gid(ctx, 1, gidx, &gid) != 0) {
		fprintf(stderr, "held_ack: device set-up failed\n");
		return 1;
	}
	me.qpn = qp->qp_num;
	memcpy(me.gid, gid.raw, 16);
	struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = 8, .lkey = mr->lkey};
	int s = tcp_pair(server, port);

	if (s < 0 || swap_bytes(s, &me, &them, sizeof(me)) != 0 || to_rts(qp, gidx, &them) != 0) {
		fprintf(stderr, "held_ack: connecting failed\n");
		return 1;
	}
	for (int i = 0; server == NULL && i < SENDS; i++) {
		struct ibv_recv_wr wr = {.wr_id = i, .sg_list = &sge, .num_sge = 1}, *bad;

		if (ibv_post_recv(qp, &wr, &bad)) {
			fprintf(stderr, "held_ack: ibv_post_recv failed\n");
			return 1;
		}
	}
	/* The receives are posted before the client sends. */
	if (swap_bytes(s, "r", buf + 32, 1) != 0) {
		fprintf(stderr, "held_ack: connecting failed\n");
		return 1;
	}
	struct ibv_wc wc;
	double slowest = 0;
	int late = 0;

	for (int i = 0; i < SENDS; i++) {
		char go;

		if (server == NULL) {
			/* Tells the client it polls, receives inline (the CQ is empty until the SEND
			 * arrives), then leaves the library. */
			if (write(s, "g", 1) != 1 || spin_poll(cq, &wc) != 0 || wc.opcode != IBV_WC_RECV) {
				fprintf(stderr, "held_ack: receive %d failed\n", i);
				return 1;
			}
			usleep(PAUSE_MS * 1000);
			continue;
		}
		struct ibv_send_wr wr = {.wr_id = i, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
					 .send_flags = IBV_SEND_SIGNALED}, *bad;

		/* The server polls by the time this SEND arrives. */
		if (read(s, &go, 1) != 1) {
			fprintf(stderr, "held_ack: the server went away\n");
			return 1;
		}
		usleep(1000);
		double t0 = now_us();

		if (ibv_post_send(qp, &wr, &bad) != 0 || spin_poll(cq, &wc) != 0 || wc.opcode != IBV_WC_SEND) {
			fprintf(stderr, "held_ack: send %d failed\n", i);
			return 1;
		}
		double took = now_us() - t0;

		if (took > slowest)
			slowest = took;
		if (took > LIMIT_MS * 1000.0) {
			late++;
			fprintf(stderr, "held_ack: send %d completed after %.0f us\n", i, took);
		}
	}
	/* Both sides done before either destroys its QP (destroying sends what is held). */
	if (swap_bytes(s, "d", buf + 32, 1) != 0) {
		fprintf(stderr, "held_ack: the final exchange failed\n");
		return 1;
	}
	ibv_destroy_qp(qp);
	ibv_dereg_mr(mr);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	if (server != NULL) {
		if (late) {
			printf("held_ack: %d of %d sends completed after more than %d ms\n", late, SENDS, LIMIT_MS);
			return 1;
		}
		printf("held_ack: all %d sends completed within %d ms (slowest %.0f us)\n", SENDS, LIMIT_MS, slowest);
	}
	return 0;
}
