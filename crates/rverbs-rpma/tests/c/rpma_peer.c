/*
 * rpma_peer: one side of a librpma connection, for the interoperability tests of
 * crates/rverbs-rpma (tests/interop.rs). Written for this repository; links Debian's
 * librpma (1.2) and runs on the drop-in libibverbs.so.1 / librdmacm.so.1.
 *
 *   rpma_peer server <addr> <port> <mode>
 *   rpma_peer client <addr> <port> <mode>
 *
 * Modes (the server's part / the client's part):
 *   read   exposes a READ_SRC region holding SERVER_TEXT / reads it and checks it
 *   write  exposes a WRITE_DST|FLUSH_TYPE_VISIBILITY region / writes CLIENT_TEXT into
 *          it and flushes (RPMA_FLUSH_TYPE_VISIBILITY); the server checks it
 *   send   receives PING (receive posted before accepting) and answers PONG / sends
 *          PING and receives PONG
 *   wimm   exposes a WRITE_DST region and posts a 1-byte receive / writes CLIENT_TEXT
 *          with immediate data IMM; the server checks both
 *
 * Region descriptors travel in the private data of the accept as
 * { u16 data_offset; u8 mr_desc_size; u8 pcfg_desc_size; char desc[24]; } (native
 * byte order), the layout librpma's examples use. The server prints "listening" once
 * rpma_ep_listen() returned; both sides print "ok <mode>" on success and exit 0, or
 * print what failed and exit 1. The client disconnects first; the server waits for
 * RPMA_CONN_CLOSED, then disconnects.
 */
#include <arpa/inet.h>
#include <inttypes.h>
#include <librpma.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SERVER_TEXT "text of the C server"
#define CLIENT_TEXT "text of the C client"
#define RUST_SERVER_TEXT "text of the Rust server"
#define RUST_CLIENT_TEXT "text of the Rust client"
#define PING "ping"
#define PONG "pong"
#define IMM 0xC0FFEEu
#define REGION 64

struct pdata_layout {
	uint16_t data_offset;
	uint8_t mr_desc_size;
	uint8_t pcfg_desc_size;
	char desc[24];
};

static const char *mode;
static bool peer_is_rust; /* texts the other side is expected to hold */

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

/* Waits for one completion of `cq` with `opcode` and a success status. */
static void expect_wc(struct rpma_cq *cq, enum ibv_wc_opcode opcode, struct ibv_wc *wc)
{
	for (;;) {
		TRY(rpma_cq_wait(cq));
		int ret = rpma_cq_get_wc(cq, 1, wc, NULL);
		if (ret == RPMA_E_NO_COMPLETION)
			continue;
		if (ret)
			fail("rpma_cq_get_wc", ret);
		break;
	}
	if (wc->status != IBV_WC_SUCCESS) {
		printf("completion status: %s\n", ibv_wc_status_str(wc->status));
		fail("completion", 0);
	}
	if (wc->opcode != opcode) {
		printf("completion opcode %d, expected %d\n", wc->opcode, opcode);
		fail("completion", 0);
	}
}

static void check_text(const char *got, const char *want)
{
	if (strcmp(got, want) != 0) {
		printf("got \"%s\", expected \"%s\"\n", got, want);
		fail("text", 0);
	}
}

static int server(struct rpma_peer *peer, const char *addr, const char *port)
{
	struct rpma_ep *ep = NULL;
	struct rpma_conn_req *req = NULL;
	struct rpma_conn *conn = NULL;
	struct rpma_mr_local *mr = NULL, *msg_mr = NULL;
	struct rpma_cq *cq = NULL;
	struct ibv_wc wc;
	char *mem = region(REGION);
	char *msg = region(REGION);
	int usage = 0;

	if (!strcmp(mode, "read")) {
		strcpy(mem, SERVER_TEXT);
		usage = RPMA_MR_USAGE_READ_SRC;
	} else if (!strcmp(mode, "write")) {
		usage = RPMA_MR_USAGE_WRITE_DST | RPMA_MR_USAGE_FLUSH_TYPE_VISIBILITY;
	} else if (!strcmp(mode, "wimm")) {
		usage = RPMA_MR_USAGE_WRITE_DST;
	}
	if (usage)
		TRY(rpma_mr_reg(peer, mem, REGION, usage, &mr));
	if (!strcmp(mode, "send"))
		TRY(rpma_mr_reg(peer, msg, REGION, RPMA_MR_USAGE_RECV | RPMA_MR_USAGE_SEND, &msg_mr));
	if (!strcmp(mode, "wimm"))
		TRY(rpma_mr_reg(peer, msg, 1, RPMA_MR_USAGE_RECV, &msg_mr));

	TRY(rpma_ep_listen(peer, addr, port, &ep));
	printf("listening\n");
	fflush(stdout);

	TRY(rpma_ep_next_conn_req(ep, NULL, &req));
	if (!strcmp(mode, "send"))
		TRY(rpma_conn_req_recv(req, msg_mr, 0, REGION, (void *)1));
	if (!strcmp(mode, "wimm"))
		TRY(rpma_conn_req_recv(req, msg_mr, 0, 1, (void *)2));

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
	}

	expect_event(conn, RPMA_CONN_CLOSED);
	if (!strcmp(mode, "write"))
		check_text(mem, peer_text);
	TRY(rpma_conn_disconnect(conn));
	TRY(rpma_conn_delete(&conn));
	if (mr)
		TRY(rpma_mr_dereg(&mr));
	if (msg_mr)
		TRY(rpma_mr_dereg(&msg_mr));
	TRY(rpma_ep_shutdown(&ep));
	free(mem);
	free(msg);
	return 0;
}

static int client(struct rpma_peer *peer, const char *addr, const char *port)
{
	struct rpma_conn_req *req = NULL;
	struct rpma_conn *conn = NULL;
	struct rpma_mr_local *mr = NULL;
	struct rpma_mr_remote *remote = NULL;
	struct rpma_cq *cq = NULL;
	struct ibv_wc wc;
	char *mem = region(REGION);

	TRY(rpma_mr_reg(peer, mem, REGION,
			RPMA_MR_USAGE_READ_DST | RPMA_MR_USAGE_WRITE_SRC | RPMA_MR_USAGE_SEND |
				RPMA_MR_USAGE_RECV,
			&mr));
	TRY(rpma_conn_req_new(peer, addr, port, NULL, &req));
	TRY(rpma_conn_req_connect(&req, NULL, &conn));
	expect_event(conn, RPMA_CONN_ESTABLISHED);
	TRY(rpma_conn_get_cq(conn, &cq));

	struct rpma_conn_private_data pdata = { NULL, 0 };
	TRY(rpma_conn_get_private_data(conn, &pdata));
	struct pdata_layout *layout = pdata.ptr;
	bool needs_region = strcmp(mode, "send") != 0;
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
		bool sent = false, received = false;
		while (!(sent && received)) {
			TRY(rpma_cq_wait(cq));
			int ret;
			while ((ret = rpma_cq_get_wc(cq, 1, &wc, NULL)) == 0) {
				if (wc.status != IBV_WC_SUCCESS)
					fail(ibv_wc_status_str(wc.status), 0);
				if (wc.opcode == IBV_WC_SEND)
					sent = true;
				else if (wc.opcode == IBV_WC_RECV && wc.byte_len == sizeof(PONG))
					received = true;
				else
					fail("completion opcode", wc.opcode);
			}
			if (ret != RPMA_E_NO_COMPLETION)
				fail("rpma_cq_get_wc", ret);
		}
		check_text(mem + 32, PONG);
	} else if (!strcmp(mode, "wimm")) {
		strcpy(mem, CLIENT_TEXT);
		TRY(rpma_write_with_imm(conn, remote, layout->data_offset, mr, 0, sizeof(CLIENT_TEXT),
				RPMA_F_COMPLETION_ALWAYS, IMM, (void *)1));
		expect_wc(cq, IBV_WC_RDMA_WRITE, &wc);
	} else {
		fail("unknown mode", 0);
	}

	TRY(rpma_conn_disconnect(conn));
	expect_event(conn, RPMA_CONN_CLOSED);
	TRY(rpma_conn_delete(&conn));
	if (remote)
		TRY(rpma_mr_remote_delete(&remote));
	TRY(rpma_mr_dereg(&mr));
	free(mem);
	return 0;
}

int main(int argc, char *argv[])
{
	if (argc < 5) {
		fprintf(stderr, "usage: %s server|client <addr> <port> read|write|send|wimm [rust]\n", argv[0]);
		return 2;
	}
	mode = argv[4];
	peer_is_rust = argc > 5 && !strcmp(argv[5], "rust");
	bool is_server = !strcmp(argv[1], "server");
	struct ibv_context *ctx = NULL;
	struct rpma_peer *peer = NULL;
	TRY(rpma_utils_get_ibv_context(argv[2],
			is_server ? RPMA_UTIL_IBV_CONTEXT_LOCAL : RPMA_UTIL_IBV_CONTEXT_REMOTE, &ctx));
	TRY(rpma_peer_new(ctx, &peer));
	int ret = is_server ? server(peer, argv[2], argv[3]) : client(peer, argv[2], argv[3]);
	TRY(rpma_peer_delete(&peer));
	if (ret == 0)
		printf("ok %s\n", mode);
	return ret;
}
