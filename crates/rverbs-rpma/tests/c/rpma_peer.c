/*
 * rpma_peer: one side of a librpma connection, for the interoperability tests of
 * crates/rverbs-rpma (tests/interop.rs). Written for this repository; links Debian's
 * librpma (1.2) and runs on the drop-in libibverbs.so.1 / librdmacm.so.1.
 *
 *   rpma_peer server <addr> <port> <mode> [rust] [clients]
 *   rpma_peer client <addr> <port> <mode> [rust] [index [clients]]
 *
 * "rust" says the other side is the Rust model (it holds the Rust texts). `clients`
 * (default 2) is how many clients the server of srq and multi serves, and how many
 * names a multi client expects; `index` (default 0) numbers a client of srq and multi.
 *
 * Modes (the server's part / the client's part):
 *   read   exposes a READ_SRC region holding SERVER_TEXT / reads it and checks it
 *   write  exposes a WRITE_DST|FLUSH_TYPE_VISIBILITY region / writes CLIENT_TEXT into
 *          it and flushes (RPMA_FLUSH_TYPE_VISIBILITY); the server checks it
 *   send   receives PING (receive posted before accepting) and answers PONG / sends
 *          PING and receives PONG
 *   wimm   exposes a WRITE_DST region and posts a 1-byte receive / writes CLIENT_TEXT
 *          with immediate data IMM; the server checks both
 *   aw     exposes a WRITE_DST|FLUSH_TYPE_VISIBILITY region / writes CLIENT_TEXT at
 *          AW_TEXT_OFF, then atomically writes the 8-byte word C_WORD at 0
 *          (rpma_atomic_write, fenced after the write; librpma 1.2: an inline RDMA
 *          WRITE) and flushes; the server checks word and text
 *   simm   posts two receives before accepting / sends CLIENT_TEXT with immediate
 *          data IMM, then 0 bytes with IMM + 1 (rpma_send_with_imm); the server
 *          checks each receive's immediate data, length and bytes
 *   rcq    both sides configure a receive CQ (rpma_conn_cfg_set_rcq_size): ROUNDS
 *          ping-pongs of a u64 (the client sends RCQ_START, the server answers v + 1,
 *          the client sends that + 1, ...); every receive must complete on the RCQ
 *          (rpma_conn_get_rcq), every send on the main CQ, and both are empty at the
 *          end (the main CQ never yields a RECV)
 *   srq    the server receives through a shared RQ with its own RCQ (rpma_srq_new,
 *          rpma_conn_cfg_set_srq) and serves `clients` connections in turn, ROUNDS
 *          ping-pongs each, checking that each receive names the connection's QP /
 *          a client (SRQ_BASE * (index + 1) as its first value) ping-pongs as in rcq
 *          on its main CQ
 *   scch   as rcq, with the CQ and the RCQ sharing one completion channel
 *          (rpma_conn_cfg_set_compl_channel): both sides wait with rpma_conn_wait,
 *          which must name the CQ that fired (rpma_cq_wait answers
 *          RPMA_E_SHARED_CHANNEL); then, as librpma's example 08, the client sends DONE
 *          unsignaled and disconnects at once, and the server must find DONE on its
 *          RCQ, without waiting, once it saw RPMA_CONN_CLOSED (data posted before
 *          rpma_conn_disconnect reaches the peer first)
 *   multi  one thread, epoll over the endpoint's fd, each connection's event fd and
 *          its CQ's fd (all O_NONBLOCK): on ESTABLISHED it reads the client's name
 *          (its region's descriptor in the connect's private data); once it has the
 *          names of all `clients` it sends every client the list, so it only finishes
 *          if it serves all of them at the same time / a client names itself
 *          "<C|Rust> client <index>", receives the list (receive posted before
 *          connecting) and checks it holds the `clients` names, each once
 *
 * Region descriptors travel in the private data of the accept (of the connect in
 * multi) as { u16 data_offset; u8 mr_desc_size; u8 pcfg_desc_size; char desc[24]; }
 * (native byte order), the layout librpma's examples use. The server prints
 * "listening" once rpma_ep_listen() returned; both sides print "ok <mode>" on success
 * and exit 0, or print FAIL and what failed and exit 1. The client disconnects first;
 * the server waits for RPMA_CONN_CLOSED, then disconnects.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <librpma.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>

#define SERVER_TEXT "text of the C server"
#define CLIENT_TEXT "text of the C client"
#define RUST_SERVER_TEXT "text of the Rust server"
#define RUST_CLIENT_TEXT "text of the Rust client"
#define C_WORD "C-atomic" /* 8 bytes, no NUL */
#define RUST_WORD "R-atomic"
#define PING "ping"
#define PONG "pong"
#define IMM 0xC0FFEEu
#define REGION 64
#define AW_TEXT_OFF 8
#define ROUNDS 3
#define RCQ_START 7
#define RCQ_SIZE 10
#define SRQ_BASE 100
#define SRQ_SLOTS 4
#define DONE UINT64_MAX
#define NAME_SIZE 32
#define MAX_CLIENTS 8
#define EPOLL_WAIT_MS 10000
#define EP_TOKEN UINT64_MAX

struct pdata_layout {
	uint16_t data_offset;
	uint8_t mr_desc_size;
	uint8_t pcfg_desc_size;
	char desc[24];
};

static const char *mode;
static bool peer_is_rust; /* texts the other side is expected to hold */
static int clients = 2;   /* srq, multi: clients of the server */
static int index_ = 0;    /* srq, multi: the client's number */
/* scch: the connection whose shared completion channel every wait goes through */
static struct rpma_conn *shared_conn;

static void fail(const char *what, int ret)
{
	printf("FAIL %s %s: %d (%s)\n", mode, what, ret, ret < 0 ? rpma_err_2str(ret) : "check");
	fflush(stdout);
	exit(1);
}

#define TRY(call)                              \
	do {                                   \
		int ret_ = (call);             \
		if (ret_)                      \
			fail(#call, ret_);     \
	} while (0)

static void *region(size_t size)
{
	void *p = NULL;
	if (posix_memalign(&p, 4096, size))
		fail("posix_memalign", 0);
	memset(p, 0, size);
	return p;
}

static void expect_event(struct rpma_conn *conn, enum rpma_conn_event want)
{
	enum rpma_conn_event ev = RPMA_CONN_UNDEFINED;
	TRY(rpma_conn_next_event(conn, &ev));
	if (ev != want) {
		printf("unexpected event: %s\n", rpma_utils_conn_event_2str(ev));
		fail("rpma_conn_next_event", 0);
	}
}

/*
 * Waits for the next completion event of `cq`, through the shared completion channel
 * of `shared_conn` if it is set (the event may then be the other CQ's).
 */
static void wait_cq(struct rpma_cq *cq)
{
	if (!shared_conn) {
		TRY(rpma_cq_wait(cq));
		return;
	}
	struct rpma_cq *fired = NULL, *main_cq = NULL, *rcq = NULL;
	bool is_rcq = false;
	TRY(rpma_conn_wait(shared_conn, 0, &fired, &is_rcq));
	TRY(rpma_conn_get_cq(shared_conn, &main_cq));
	TRY(rpma_conn_get_rcq(shared_conn, &rcq));
	if (fired != (is_rcq ? rcq : main_cq))
		fail("rpma_conn_wait: the CQ that fired", is_rcq);
}

/*
 * Takes the next completion of `cq` with a success status, waiting for one if there is
 * none (polled first: one completion event may stand for several completions).
 */
static void next_wc(struct rpma_cq *cq, struct ibv_wc *wc)
{
	for (;;) {
		int ret = rpma_cq_get_wc(cq, 1, wc, NULL);
		if (ret == 0)
			break;
		if (ret != RPMA_E_NO_COMPLETION)
			fail("rpma_cq_get_wc", ret);
		wait_cq(cq);
	}
	if (wc->status != IBV_WC_SUCCESS) {
		printf("completion status: %s\n", ibv_wc_status_str(wc->status));
		fail("completion", 0);
	}
}

/* Takes the next completion of `cq`, which must have `opcode` and a success status. */
static void expect_wc(struct rpma_cq *cq, enum ibv_wc_opcode opcode, struct ibv_wc *wc)
{
	next_wc(cq, wc);
	if (wc->opcode != opcode) {
		printf("completion opcode %d, expected %d\n", wc->opcode, opcode);
		fail("completion", 0);
	}
}

/* `cq` holds no completion. */
static void expect_empty(struct rpma_cq *cq, const char *which)
{
	struct ibv_wc wc;
	int ret = rpma_cq_get_wc(cq, 1, &wc, NULL);
	if (ret == 0) {
		printf("%s: unexpected completion, opcode %d, wr_id %" PRIu64 "\n", which, wc.opcode,
			wc.wr_id);
		fail(which, 0);
	}
	if (ret != RPMA_E_NO_COMPLETION)
		fail(which, ret);
}

/*
 * Waits for the completions of a send and of a receive of `recv_len` bytes: on `cq`
 * and `rcq` respectively if there is a receive CQ, else both on `cq` in either order.
 */
static void expect_sent_and_received(struct rpma_cq *cq, struct rpma_cq *rcq, uint32_t recv_len)
{
	struct ibv_wc wc;
	if (rcq) {
		expect_wc(cq, IBV_WC_SEND, &wc);
		expect_wc(rcq, IBV_WC_RECV, &wc);
		if (wc.byte_len != recv_len)
			fail("received length", (int)wc.byte_len);
		return;
	}
	bool sent = false, received = false;
	while (!(sent && received)) {
		next_wc(cq, &wc);
		if (wc.opcode == IBV_WC_SEND && !sent) {
			sent = true;
		} else if (wc.opcode == IBV_WC_RECV && !received) {
			if (wc.byte_len != recv_len)
				fail("received length", (int)wc.byte_len);
			received = true;
		} else {
			fail("completion opcode", wc.opcode);
		}
	}
}

static void check_text(const char *got, const char *want)
{
	if (strcmp(got, want) != 0) {
		printf("got \"%s\", expected \"%s\"\n", got, want);
		fail("text", 0);
	}
}

/* The name of multi client `i` whose side is Rust or C. */
static void client_name(char name[NAME_SIZE], bool rust, int i)
{
	memset(name, 0, NAME_SIZE);
	snprintf(name, NAME_SIZE, "%s client %d", rust ? "Rust" : "C", i);
}

/*
 * Checks that the `n` names at `names` (NAME_SIZE bytes each) are those of multi
 * clients 0..n-1 of one side, each once.
 */
static void check_names(const char *names, int n, bool rust)
{
	char want[NAME_SIZE];
	unsigned seen = 0;
	for (int k = 0; k < n; k++) {
		const char *got = names + (size_t)k * NAME_SIZE;
		int i;
		for (i = 0; i < n; i++) {
			client_name(want, rust, i);
			if (!memcmp(got, want, NAME_SIZE))
				break;
		}
		if (i == n || (seen & (1u << i))) {
			printf("name %d: \"%.*s\"\n", k, NAME_SIZE, got);
			fail("names", k);
		}
		seen |= 1u << i;
	}
}

/* scch: the connection's CQs share its completion channel. */
static void check_shared_channel(struct rpma_conn *conn, struct rpma_cq *cq, struct rpma_cq *rcq)
{
	int fd = -1, cq_fd = -1, rcq_fd = -1;
	TRY(rpma_conn_get_compl_fd(conn, &fd));
	TRY(rpma_cq_get_fd(cq, &cq_fd));
	TRY(rpma_cq_get_fd(rcq, &rcq_fd));
	if (fd < 0 || cq_fd != fd || rcq_fd != fd)
		fail("rpma_cq_get_fd of a shared channel", cq_fd);
	int ret = rpma_cq_wait(cq);
	if (ret != RPMA_E_SHARED_CHANNEL)
		fail("rpma_cq_wait on a shared channel", ret);
	shared_conn = conn;
}

/* Client side of rcq, scch and srq: ROUNDS ping-pongs of a u64 starting at `v`. */
static void ping_pong(struct rpma_conn *conn, struct rpma_mr_local *mr, char *mem, struct rpma_cq *cq,
		struct rpma_cq *rcq, uint64_t v)
{
	for (int r = 0; r < ROUNDS; r++) {
		TRY(rpma_recv(conn, mr, 8, 8, (void *)1));
		memcpy(mem, &v, 8);
		TRY(rpma_send(conn, mr, 0, 8, RPMA_F_COMPLETION_ALWAYS, (void *)2));
		expect_sent_and_received(cq, rcq, 8);
		uint64_t got;
		memcpy(&got, mem + 8, 8);
		if (got != v + 1) {
			printf("sent %" PRIu64 ", got %" PRIu64 "\n", v, got);
			fail("answer", r);
		}
		v = got + 1;
	}
	expect_empty(cq, "main CQ");
	if (rcq)
		expect_empty(rcq, "receive CQ");
}

/* The server of read, write, send, wimm, aw, simm and rcq: one connection. */
static int server(struct rpma_peer *peer, const char *addr, const char *port)
{
	struct rpma_ep *ep = NULL;
	struct rpma_conn_cfg *cfg = NULL;
	struct rpma_conn_req *req = NULL;
	struct rpma_conn *conn = NULL;
	struct rpma_mr_local *mr = NULL, *msg_mr = NULL;
	struct rpma_cq *cq = NULL, *rcq = NULL;
	struct ibv_wc wc;
	char *mem = region(REGION);
	char *msg = region(REGION);
	int usage = 0;

	if (strcmp(mode, "read") && strcmp(mode, "write") && strcmp(mode, "send") && strcmp(mode, "wimm") &&
			strcmp(mode, "aw") && strcmp(mode, "simm") && strcmp(mode, "rcq") && strcmp(mode, "scch"))
		fail("unknown mode", 0);
	if (!strcmp(mode, "read")) {
		strcpy(mem, SERVER_TEXT);
		usage = RPMA_MR_USAGE_READ_SRC;
	} else if (!strcmp(mode, "write") || !strcmp(mode, "aw")) {
		usage = RPMA_MR_USAGE_WRITE_DST | RPMA_MR_USAGE_FLUSH_TYPE_VISIBILITY;
	} else if (!strcmp(mode, "wimm")) {
		usage = RPMA_MR_USAGE_WRITE_DST;
	}
	if (usage)
		TRY(rpma_mr_reg(peer, mem, REGION, usage, &mr));
	bool rcq_mode = !strcmp(mode, "rcq") || !strcmp(mode, "scch");
	if (!strcmp(mode, "send") || !strcmp(mode, "simm") || rcq_mode)
		TRY(rpma_mr_reg(peer, msg, REGION, RPMA_MR_USAGE_RECV | RPMA_MR_USAGE_SEND, &msg_mr));
	if (!strcmp(mode, "wimm"))
		TRY(rpma_mr_reg(peer, msg, 1, RPMA_MR_USAGE_RECV, &msg_mr));
	if (rcq_mode) {
		TRY(rpma_conn_cfg_new(&cfg));
		TRY(rpma_conn_cfg_set_rcq_size(cfg, RCQ_SIZE));
		TRY(rpma_conn_cfg_set_compl_channel(cfg, !strcmp(mode, "scch")));
	}

	TRY(rpma_ep_listen(peer, addr, port, &ep));
	printf("listening\n");
	fflush(stdout);

	TRY(rpma_ep_next_conn_req(ep, cfg, &req));
	if (!strcmp(mode, "send"))
		TRY(rpma_conn_req_recv(req, msg_mr, 0, REGION, (void *)1));
	if (!strcmp(mode, "wimm"))
		TRY(rpma_conn_req_recv(req, msg_mr, 0, 1, (void *)2));
	if (!strcmp(mode, "simm")) {
		TRY(rpma_conn_req_recv(req, msg_mr, 0, 32, (void *)1));
		TRY(rpma_conn_req_recv(req, msg_mr, 32, 32, (void *)2));
	}
	if (rcq_mode)
		TRY(rpma_conn_req_recv(req, msg_mr, 0, 8, (void *)1));

	struct pdata_layout layout;
	memset(&layout, 0, sizeof(layout));
	struct rpma_conn_private_data pdata = { &layout, sizeof(layout) };
	if (mr) {
		size_t size = 0;
		TRY(rpma_mr_get_descriptor_size(mr, &size));
		layout.mr_desc_size = (uint8_t)size;
		TRY(rpma_mr_get_descriptor(mr, layout.desc));
	}
	TRY(rpma_conn_req_connect(&req, mr ? &pdata : NULL, &conn));
	expect_event(conn, RPMA_CONN_ESTABLISHED);
	TRY(rpma_conn_get_cq(conn, &cq));
	TRY(rpma_conn_get_rcq(conn, &rcq));
	if ((rcq != NULL) != (cfg != NULL) || rcq == cq)
		fail("rpma_conn_get_rcq", 0);
	if (!strcmp(mode, "scch"))
		check_shared_channel(conn, cq, rcq);

	const char *peer_text = peer_is_rust ? RUST_CLIENT_TEXT : CLIENT_TEXT;
	if (!strcmp(mode, "send")) {
		expect_wc(cq, IBV_WC_RECV, &wc);
		if (wc.wr_id != 1 || wc.byte_len != sizeof(PING))
			fail("receive", 0);
		check_text(msg, PING);
		strcpy(msg, PONG);
		TRY(rpma_send(conn, msg_mr, 0, sizeof(PONG), RPMA_F_COMPLETION_ALWAYS, (void *)3));
		expect_wc(cq, IBV_WC_SEND, &wc);
	} else if (!strcmp(mode, "wimm")) {
		expect_wc(cq, IBV_WC_RECV_RDMA_WITH_IMM, &wc);
		if (!(wc.wc_flags & IBV_WC_WITH_IMM) || ntohl(wc.imm_data) != IMM)
			fail("immediate data", (int)ntohl(wc.imm_data));
		check_text(mem, peer_text);
	} else if (!strcmp(mode, "simm")) {
		/* The receive queue is FIFO: the first message lands in the first receive. */
		for (uint64_t i = 1; i <= 2; i++) {
			expect_wc(cq, IBV_WC_RECV, &wc);
			if (wc.wr_id != i)
				fail("receive wr_id", (int)wc.wr_id);
			if (!(wc.wc_flags & IBV_WC_WITH_IMM) || ntohl(wc.imm_data) != IMM + i - 1)
				fail("immediate data", (int)ntohl(wc.imm_data));
			uint32_t want = i == 1 ? strlen(peer_text) + 1 : 0;
			if (wc.byte_len != want)
				fail("received length", (int)wc.byte_len);
		}
		check_text(msg, peer_text);
	} else if (rcq_mode) {
		for (int r = 0; r < ROUNDS; r++) {
			expect_wc(rcq, IBV_WC_RECV, &wc);
			uint64_t v;
			memcpy(&v, msg, 8);
			if (wc.byte_len != 8 || v != RCQ_START + 2 * (uint64_t)r)
				fail("ping", (int)v);
			/* scch: the last receive takes DONE. */
			if (r + 1 < ROUNDS || shared_conn)
				TRY(rpma_recv(conn, msg_mr, 0, 8, (void *)1));
			v++;
			memcpy(msg + 8, &v, 8);
			TRY(rpma_send(conn, msg_mr, 8, 8, RPMA_F_COMPLETION_ALWAYS, (void *)2));
			expect_wc(cq, IBV_WC_SEND, &wc);
		}
		expect_empty(cq, "main CQ");
		if (!shared_conn)
			expect_empty(rcq, "receive CQ");
	}

	expect_event(conn, RPMA_CONN_CLOSED);
	if (shared_conn) {
		/* DONE was sent before the client disconnected: it is here already. */
		int ret = rpma_cq_get_wc(rcq, 1, &wc, NULL);
		if (ret)
			fail("DONE before RPMA_CONN_CLOSED", ret);
		uint64_t v;
		memcpy(&v, msg, 8);
		if (wc.status != IBV_WC_SUCCESS || wc.opcode != IBV_WC_RECV || wc.byte_len != 8 || v != DONE)
			fail("DONE", wc.status);
		expect_empty(rcq, "receive CQ");
		shared_conn = NULL;
	}
	if (!strcmp(mode, "write"))
		check_text(mem, peer_text);
	if (!strcmp(mode, "aw")) {
		if (memcmp(mem, peer_is_rust ? RUST_WORD : C_WORD, 8)) {
			printf("word \"%.8s\"\n", mem);
			fail("atomic write", 0);
		}
		check_text(mem + AW_TEXT_OFF, peer_text);
	}
	TRY(rpma_conn_disconnect(conn));
	TRY(rpma_conn_delete(&conn));
	if (mr)
		TRY(rpma_mr_dereg(&mr));
	if (msg_mr)
		TRY(rpma_mr_dereg(&msg_mr));
	if (cfg)
		TRY(rpma_conn_cfg_delete(&cfg));
	TRY(rpma_ep_shutdown(&ep));
	free(mem);
	free(msg);
	return 0;
}

/* The server of srq: `clients` connections in turn, receiving through one shared RQ. */
static int server_srq(struct rpma_peer *peer, const char *addr, const char *port)
{
	struct rpma_srq_cfg *scfg = NULL;
	struct rpma_srq *srq = NULL;
	struct rpma_cq *rcq = NULL;
	struct rpma_conn_cfg *cfg = NULL;
	struct rpma_mr_local *mr = NULL;
	struct rpma_ep *ep = NULL;
	struct ibv_wc wc;
	char *msg = region(REGION);

	TRY(rpma_srq_cfg_new(&scfg));
	TRY(rpma_srq_cfg_set_rq_size(scfg, 2 * SRQ_SLOTS));
	TRY(rpma_srq_cfg_set_rcq_size(scfg, RCQ_SIZE));
	TRY(rpma_srq_new(peer, scfg, &srq));
	TRY(rpma_srq_get_rcq(srq, &rcq));
	if (!rcq)
		fail("rpma_srq_get_rcq", 0);
	TRY(rpma_conn_cfg_new(&cfg));
	TRY(rpma_conn_cfg_set_srq(cfg, srq));
	TRY(rpma_mr_reg(peer, msg, REGION, RPMA_MR_USAGE_RECV | RPMA_MR_USAGE_SEND, &mr));
	/* Slot s receives into bytes 8s..8s+8 and is posted again once it completed. */
	for (uintptr_t s = 0; s < SRQ_SLOTS; s++)
		TRY(rpma_srq_recv(srq, mr, 8 * s, 8, (void *)s));

	TRY(rpma_ep_listen(peer, addr, port, &ep));
	printf("listening\n");
	fflush(stdout);

	for (int k = 0; k < clients; k++) {
		struct rpma_conn_req *req = NULL;
		struct rpma_conn *conn = NULL;
		struct rpma_cq *cq = NULL, *conn_rcq = NULL;
		uint32_t qp_num = 0;
		TRY(rpma_ep_next_conn_req(ep, cfg, &req));
		TRY(rpma_conn_req_connect(&req, NULL, &conn));
		expect_event(conn, RPMA_CONN_ESTABLISHED);
		TRY(rpma_conn_get_qp_num(conn, &qp_num));
		TRY(rpma_conn_get_cq(conn, &cq));
		TRY(rpma_conn_get_rcq(conn, &conn_rcq));
		if (conn_rcq)
			fail("the connection has a receive CQ of its own", k);
		uint64_t want = SRQ_BASE * (uint64_t)(k + 1);
		for (int r = 0; r < ROUNDS; r++) {
			expect_wc(rcq, IBV_WC_RECV, &wc);
			if (wc.qp_num != qp_num) {
				printf("receive of QP %u on the connection of QP %u\n", wc.qp_num, qp_num);
				fail("wc.qp_num", k);
			}
			if (wc.byte_len != 8 || wc.wr_id >= SRQ_SLOTS)
				fail("receive", (int)wc.wr_id);
			uint64_t v;
			memcpy(&v, msg + 8 * wc.wr_id, 8);
			if (v != want) {
				printf("client %d sent %" PRIu64 ", expected %" PRIu64 "\n", k, v, want);
				fail("ping", k);
			}
			TRY(rpma_srq_recv(srq, mr, 8 * wc.wr_id, 8, (void *)(uintptr_t)wc.wr_id));
			v++;
			memcpy(msg + 8 * SRQ_SLOTS, &v, 8);
			TRY(rpma_send(conn, mr, 8 * SRQ_SLOTS, 8, RPMA_F_COMPLETION_ALWAYS, (void *)SRQ_SLOTS));
			expect_wc(cq, IBV_WC_SEND, &wc);
			want = v + 1;
		}
		expect_event(conn, RPMA_CONN_CLOSED);
		TRY(rpma_conn_disconnect(conn));
		TRY(rpma_conn_delete(&conn));
		printf("served client %d (QP %u)\n", k, qp_num);
		fflush(stdout);
	}
	expect_empty(rcq, "SRQ's receive CQ");

	TRY(rpma_ep_shutdown(&ep));
	TRY(rpma_conn_cfg_delete(&cfg));
	TRY(rpma_srq_delete(&srq));
	TRY(rpma_srq_cfg_delete(&scfg));
	TRY(rpma_mr_dereg(&mr));
	free(msg);
	return 0;
}

/* A connection of the multi server. */
struct mclient {
	struct rpma_conn *conn;
	struct rpma_cq *cq;
	struct rpma_mr_remote *remote;
	size_t offset; /* of the name in the client's region */
	int event_fd, cq_fd;
	bool answered;
};

/* Makes `fd` non-blocking and watches it for input under `token`. */
static void watch(int epfd, int fd, uint64_t token)
{
	int flags = fcntl(fd, F_GETFL);
	if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK))
		fail("fcntl", errno);
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = token };
	if (epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev))
		fail("epoll_ctl(ADD)", errno);
}

static void unwatch(int epfd, int fd)
{
	if (epoll_ctl(epfd, EPOLL_CTL_DEL, fd, NULL))
		fail("epoll_ctl(DEL)", errno);
}

/*
 * The server of multi: one thread multiplexes the endpoint and `clients` connections.
 * Tokens: EP_TOKEN for the endpoint, 2i for the events of connection i, 2i + 1 for
 * its completions.
 */
static int server_multi(struct rpma_peer *peer, const char *addr, const char *port)
{
	struct mclient cl[MAX_CLIENTS];
	struct rpma_mr_local *names_mr = NULL, *answer_mr = NULL;
	struct rpma_ep *ep = NULL;
	size_t size = (size_t)clients * NAME_SIZE;
	char *names = region(size);
	char *answer = region(size);
	int accepted = 0, named = 0, closed = 0, fd = -1;

	if (clients < 1 || clients > MAX_CLIENTS)
		fail("clients", clients);
	memset(cl, 0, sizeof(cl));
	TRY(rpma_mr_reg(peer, names, size, RPMA_MR_USAGE_READ_DST, &names_mr));
	TRY(rpma_mr_reg(peer, answer, size, RPMA_MR_USAGE_SEND, &answer_mr));
	TRY(rpma_ep_listen(peer, addr, port, &ep));
	printf("listening\n");
	fflush(stdout);

	int epfd = epoll_create1(EPOLL_CLOEXEC);
	if (epfd < 0)
		fail("epoll_create1", errno);
	TRY(rpma_ep_get_fd(ep, &fd));
	watch(epfd, fd, EP_TOKEN);

	while (closed < clients) {
		struct epoll_event ev;
		int n = epoll_wait(epfd, &ev, 1, EPOLL_WAIT_MS);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			fail("epoll_wait", errno);
		if (n == 0) {
			printf("accepted %d, named %d, closed %d\n", accepted, named, closed);
			fail("epoll_wait: nothing happened", 0);
		}

		if (ev.data.u64 == EP_TOKEN) {
			struct rpma_conn_req *req = NULL;
			int ret = rpma_ep_next_conn_req(ep, NULL, &req);
			if (ret == RPMA_E_NO_EVENT)
				continue;
			if (ret)
				fail("rpma_ep_next_conn_req", ret);
			if (accepted == clients)
				fail("more clients than expected", accepted + 1);
			struct mclient *c = &cl[accepted];
			struct rpma_conn_private_data pdata = { NULL, 0 };
			TRY(rpma_conn_req_get_private_data(req, &pdata));
			struct pdata_layout *layout = pdata.ptr;
			if (pdata.len < sizeof(*layout))
				fail("private data", pdata.len);
			TRY(rpma_mr_remote_from_descriptor(layout->desc, layout->mr_desc_size, &c->remote));
			c->offset = layout->data_offset;
			TRY(rpma_conn_req_connect(&req, NULL, &c->conn));
			TRY(rpma_conn_get_event_fd(c->conn, &c->event_fd));
			watch(epfd, c->event_fd, 2 * (uint64_t)accepted);
			TRY(rpma_conn_get_cq(c->conn, &c->cq));
			TRY(rpma_cq_get_fd(c->cq, &c->cq_fd));
			watch(epfd, c->cq_fd, 2 * (uint64_t)accepted + 1);
			accepted++;
			continue;
		}

		int i = (int)(ev.data.u64 / 2);
		struct mclient *c = &cl[i];
		if (ev.data.u64 % 2 == 0) {
			enum rpma_conn_event e = RPMA_CONN_UNDEFINED;
			int ret = rpma_conn_next_event(c->conn, &e);
			if (ret == RPMA_E_NO_EVENT)
				continue;
			if (ret)
				fail("rpma_conn_next_event", ret);
			if (e == RPMA_CONN_ESTABLISHED) {
				TRY(rpma_read(c->conn, names_mr, (size_t)i * NAME_SIZE, c->remote, c->offset,
						NAME_SIZE, RPMA_F_COMPLETION_ALWAYS, (void *)(uintptr_t)i));
			} else if (e == RPMA_CONN_CLOSED) {
				if (!c->answered)
					fail("closed before the answer", i);
				unwatch(epfd, c->event_fd);
				unwatch(epfd, c->cq_fd);
				TRY(rpma_conn_disconnect(c->conn));
				TRY(rpma_conn_delete(&c->conn));
				TRY(rpma_mr_remote_delete(&c->remote));
				closed++;
			} else {
				printf("unexpected event: %s\n", rpma_utils_conn_event_2str(e));
				fail("rpma_conn_next_event", i);
			}
			continue;
		}

		int ret = rpma_cq_wait(c->cq);
		if (ret == RPMA_E_NO_COMPLETION)
			continue;
		if (ret)
			fail("rpma_cq_wait", ret);
		struct ibv_wc wc;
		while ((ret = rpma_cq_get_wc(c->cq, 1, &wc, NULL)) == 0) {
			if (wc.status != IBV_WC_SUCCESS) {
				printf("completion status: %s\n", ibv_wc_status_str(wc.status));
				fail("completion", i);
			}
			if (wc.opcode == IBV_WC_SEND)
				continue;
			if (wc.opcode != IBV_WC_RDMA_READ || wc.wr_id != (uint64_t)i)
				fail("completion opcode", wc.opcode);
			if (++named < clients)
				continue;
			/* Every client's name is here: send each the list. */
			check_names(names, clients, peer_is_rust);
			memcpy(answer, names, size);
			for (int k = 0; k < clients; k++) {
				printf("- %s\n", answer + (size_t)k * NAME_SIZE);
				TRY(rpma_send(cl[k].conn, answer_mr, 0, size, RPMA_F_COMPLETION_ALWAYS,
						(void *)(uintptr_t)k));
				cl[k].answered = true;
			}
			fflush(stdout);
		}
		if (ret != RPMA_E_NO_COMPLETION)
			fail("rpma_cq_get_wc", ret);
	}

	unwatch(epfd, fd);
	TRY(rpma_ep_shutdown(&ep));
	TRY(rpma_mr_dereg(&names_mr));
	TRY(rpma_mr_dereg(&answer_mr));
	free(names);
	free(answer);
	return 0;
}

/* The client of multi: names itself, receives the names of all clients. */
static int client_multi(struct rpma_peer *peer, const char *addr, const char *port)
{
	struct rpma_conn_req *req = NULL;
	struct rpma_conn *conn = NULL;
	struct rpma_mr_local *mr = NULL;
	struct rpma_cq *cq = NULL;
	struct ibv_wc wc;
	size_t size = NAME_SIZE + (size_t)clients * NAME_SIZE;
	char *mem = region(size);

	if (clients < 1 || clients > MAX_CLIENTS || index_ >= clients)
		fail("clients", clients);
	client_name(mem, false, index_);
	TRY(rpma_mr_reg(peer, mem, size, RPMA_MR_USAGE_READ_SRC | RPMA_MR_USAGE_RECV, &mr));
	struct pdata_layout layout;
	memset(&layout, 0, sizeof(layout));
	size_t desc_size = 0;
	TRY(rpma_mr_get_descriptor_size(mr, &desc_size));
	layout.mr_desc_size = (uint8_t)desc_size;
	TRY(rpma_mr_get_descriptor(mr, layout.desc));
	struct rpma_conn_private_data pdata = { &layout, sizeof(layout) };

	TRY(rpma_conn_req_new(peer, addr, port, NULL, &req));
	TRY(rpma_conn_req_recv(req, mr, NAME_SIZE, (size_t)clients * NAME_SIZE, (void *)1));
	TRY(rpma_conn_req_connect(&req, &pdata, &conn));
	expect_event(conn, RPMA_CONN_ESTABLISHED);
	TRY(rpma_conn_get_cq(conn, &cq));
	expect_wc(cq, IBV_WC_RECV, &wc);
	if (wc.byte_len != (uint32_t)clients * NAME_SIZE)
		fail("received length", (int)wc.byte_len);
	check_names(mem + NAME_SIZE, clients, false);

	TRY(rpma_conn_disconnect(conn));
	expect_event(conn, RPMA_CONN_CLOSED);
	TRY(rpma_conn_delete(&conn));
	TRY(rpma_mr_dereg(&mr));
	free(mem);
	return 0;
}

/* The client of every mode but multi. */
static int client(struct rpma_peer *peer, const char *addr, const char *port)
{
	struct rpma_conn_cfg *cfg = NULL;
	struct rpma_conn_req *req = NULL;
	struct rpma_conn *conn = NULL;
	struct rpma_mr_local *mr = NULL;
	struct rpma_mr_remote *remote = NULL;
	struct rpma_cq *cq = NULL, *rcq = NULL;
	struct ibv_wc wc;
	char *mem = region(REGION);

	TRY(rpma_mr_reg(peer, mem, REGION,
			RPMA_MR_USAGE_READ_DST | RPMA_MR_USAGE_WRITE_SRC | RPMA_MR_USAGE_SEND |
				RPMA_MR_USAGE_RECV,
			&mr));
	if (!strcmp(mode, "rcq") || !strcmp(mode, "scch")) {
		TRY(rpma_conn_cfg_new(&cfg));
		TRY(rpma_conn_cfg_set_rcq_size(cfg, RCQ_SIZE));
		TRY(rpma_conn_cfg_set_compl_channel(cfg, !strcmp(mode, "scch")));
	}
	TRY(rpma_conn_req_new(peer, addr, port, cfg, &req));
	TRY(rpma_conn_req_connect(&req, NULL, &conn));
	expect_event(conn, RPMA_CONN_ESTABLISHED);
	TRY(rpma_conn_get_cq(conn, &cq));
	TRY(rpma_conn_get_rcq(conn, &rcq));
	if ((rcq != NULL) != (cfg != NULL) || rcq == cq)
		fail("rpma_conn_get_rcq", 0);
	if (!strcmp(mode, "scch"))
		check_shared_channel(conn, cq, rcq);

	struct rpma_conn_private_data pdata = { NULL, 0 };
	TRY(rpma_conn_get_private_data(conn, &pdata));
	struct pdata_layout *layout = pdata.ptr;
	bool needs_region = !strcmp(mode, "read") || !strcmp(mode, "write") || !strcmp(mode, "wimm") ||
			    !strcmp(mode, "aw");
	if (needs_region) {
		if (pdata.len < sizeof(*layout))
			fail("private data", pdata.len);
		TRY(rpma_mr_remote_from_descriptor(layout->desc, layout->mr_desc_size, &remote));
	}

	if (!strcmp(mode, "read")) {
		size_t size = 0;
		TRY(rpma_mr_remote_get_size(remote, &size));
		if (size > REGION)
			fail("remote size", (int)size);
		TRY(rpma_read(conn, mr, 0, remote, layout->data_offset, size, RPMA_F_COMPLETION_ALWAYS, (void *)1));
		expect_wc(cq, IBV_WC_RDMA_READ, &wc);
		check_text(mem, peer_is_rust ? RUST_SERVER_TEXT : SERVER_TEXT);
	} else if (!strcmp(mode, "write")) {
		int types = 0;
		TRY(rpma_mr_remote_get_flush_type(remote, &types));
		if (!(types & RPMA_MR_USAGE_FLUSH_TYPE_VISIBILITY))
			fail("flush type", types);
		strcpy(mem, CLIENT_TEXT);
		TRY(rpma_write(conn, remote, layout->data_offset, mr, 0, sizeof(CLIENT_TEXT),
				RPMA_F_COMPLETION_ON_ERROR, (void *)1));
		TRY(rpma_flush(conn, remote, layout->data_offset, sizeof(CLIENT_TEXT),
				RPMA_FLUSH_TYPE_VISIBILITY, RPMA_F_COMPLETION_ALWAYS, (void *)2));
		expect_wc(cq, IBV_WC_RDMA_READ, &wc);
		if (wc.wr_id != 2)
			fail("flush completion", (int)wc.wr_id);
	} else if (!strcmp(mode, "send")) {
		TRY(rpma_recv(conn, mr, 32, 32, (void *)1));
		strcpy(mem, PING);
		TRY(rpma_send(conn, mr, 0, sizeof(PING), RPMA_F_COMPLETION_ALWAYS, (void *)2));
		expect_sent_and_received(cq, NULL, sizeof(PONG));
		check_text(mem + 32, PONG);
	} else if (!strcmp(mode, "wimm")) {
		strcpy(mem, CLIENT_TEXT);
		TRY(rpma_write_with_imm(conn, remote, layout->data_offset, mr, 0, sizeof(CLIENT_TEXT),
				RPMA_F_COMPLETION_ALWAYS, IMM, (void *)1));
		expect_wc(cq, IBV_WC_RDMA_WRITE, &wc);
	} else if (!strcmp(mode, "aw")) {
		size_t off = layout->data_offset;
		if (off % RPMA_ATOMIC_WRITE_ALIGNMENT)
			fail("data offset", (int)off);
		strcpy(mem, CLIENT_TEXT);
		TRY(rpma_write(conn, remote, off + AW_TEXT_OFF, mr, 0, sizeof(CLIENT_TEXT),
				RPMA_F_COMPLETION_ON_ERROR, (void *)1));
		TRY(rpma_atomic_write(conn, remote, off, C_WORD, RPMA_F_COMPLETION_ALWAYS, (void *)2));
		TRY(rpma_flush(conn, remote, off, AW_TEXT_OFF + sizeof(CLIENT_TEXT),
				RPMA_FLUSH_TYPE_VISIBILITY, RPMA_F_COMPLETION_ALWAYS, (void *)3));
		/* librpma 1.2 emulates the atomic write with an RDMA WRITE. */
		expect_wc(cq, IBV_WC_RDMA_WRITE, &wc);
		if (wc.wr_id != 2)
			fail("atomic write completion", (int)wc.wr_id);
		expect_wc(cq, IBV_WC_RDMA_READ, &wc);
		if (wc.wr_id != 3)
			fail("flush completion", (int)wc.wr_id);
	} else if (!strcmp(mode, "simm")) {
		strcpy(mem, CLIENT_TEXT);
		TRY(rpma_send_with_imm(conn, mr, 0, sizeof(CLIENT_TEXT), RPMA_F_COMPLETION_ALWAYS, IMM,
				(void *)1));
		TRY(rpma_send_with_imm(conn, NULL, 0, 0, RPMA_F_COMPLETION_ALWAYS, IMM + 1, (void *)2));
		for (uint64_t i = 1; i <= 2; i++) {
			expect_wc(cq, IBV_WC_SEND, &wc);
			if (wc.wr_id != i)
				fail("send completion", (int)wc.wr_id);
		}
	} else if (!strcmp(mode, "rcq")) {
		ping_pong(conn, mr, mem, cq, rcq, RCQ_START);
	} else if (!strcmp(mode, "scch")) {
		ping_pong(conn, mr, mem, cq, rcq, RCQ_START);
		/* Unsignaled, and disconnecting right after it (librpma's example 08). */
		uint64_t done = DONE;
		memcpy(mem, &done, 8);
		TRY(rpma_send(conn, mr, 0, 8, RPMA_F_COMPLETION_ON_ERROR, (void *)3));
		shared_conn = NULL;
	} else if (!strcmp(mode, "srq")) {
		ping_pong(conn, mr, mem, cq, NULL, SRQ_BASE * (uint64_t)(index_ + 1));
	} else {
		fail("unknown mode", 0);
	}

	TRY(rpma_conn_disconnect(conn));
	expect_event(conn, RPMA_CONN_CLOSED);
	TRY(rpma_conn_delete(&conn));
	if (remote)
		TRY(rpma_mr_remote_delete(&remote));
	if (cfg)
		TRY(rpma_conn_cfg_delete(&cfg));
	TRY(rpma_mr_dereg(&mr));
	free(mem);
	return 0;
}

int main(int argc, char *argv[])
{
	if (argc < 5) {
		fprintf(stderr,
			"usage: %s server|client <addr> <port> read|write|send|wimm|aw|simm|rcq|srq|scch|multi "
			"[rust] [index] [clients]\n",
			argv[0]);
		return 2;
	}
	mode = argv[4];
	bool is_server = !strcmp(argv[1], "server");
	int arg = 5;
	if (arg < argc && !strcmp(argv[arg], "rust")) {
		peer_is_rust = true;
		arg++;
	}
	if (!is_server && arg < argc)
		index_ = atoi(argv[arg++]);
	if (arg < argc)
		clients = atoi(argv[arg++]);
	struct ibv_context *ctx = NULL;
	struct rpma_peer *peer = NULL;
	TRY(rpma_utils_get_ibv_context(argv[2],
			is_server ? RPMA_UTIL_IBV_CONTEXT_LOCAL : RPMA_UTIL_IBV_CONTEXT_REMOTE, &ctx));
	TRY(rpma_peer_new(ctx, &peer));
	int ret;
	if (is_server)
		ret = !strcmp(mode, "srq")	 ? server_srq(peer, argv[2], argv[3]) :
		      !strcmp(mode, "multi") ? server_multi(peer, argv[2], argv[3]) :
					       server(peer, argv[2], argv[3]);
	else
		ret = !strcmp(mode, "multi") ? client_multi(peer, argv[2], argv[3]) :
					       client(peer, argv[2], argv[3]);
	TRY(rpma_peer_delete(&peer));
	if (ret == 0)
		printf("ok %s\n", mode);
	return ret;
}
