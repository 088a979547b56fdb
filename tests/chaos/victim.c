/* A victim of the hostile-segment harness (tests/chaos/hostile_seg.sh): checked RC
 * traffic over the drop-in libibverbs.so.1, one or more connections ("links") per
 * process, each with its own PD, CQs, QP and a registered buffer fenced by canary pages.
 *
 *   victim <xdir> <name> <seconds> <link>...
 *          link = c:<tag>[:<stall>] (client) | s:<tag>[:<stall>] (server)
 *
 * The two ends of link <tag> meet through files in <xdir>: <tag>.s and <tag>.c hold
 * "qpn rkey addr" of each end. A client, for <seconds>, repeats: RDMA WRITE of a
 * pattern into the server's buffer, RDMA READ of it back, compare; SEND of a numbered
 * message, wait for the server's echo, compare; then sends BYE. A server echoes every
 * message it receives, after checking it, until BYE.
 *
 * After its first link is set up (before the others), the process
 * writes <xdir>/<name>.inv: its endpoint directory, and for that first link the segment
 * files, QPN, key and CQ numbers it created: what the scribbler may attack. Links after
 * the first are the "untouched" ones that must keep working.
 *
 * Every wait is bounded by time: a link whose step waits longer than its <stall> seconds
 * (default VICTIM_STALL, else 5) reports a stall, and the process gives up 3 of its
 * longest stalls after its <seconds>. Output: "READY <name> <pid>" once connected, one
 * line per link,
 *   LINK <name> <tag> <role> msgs=<n> result=<ok|verbs-error:...|mismatch:...|stall:...>
 * and "CANARY ok" or "CANARY BAD <where>". Exit status: 0 all links ok; 3 some link
 * reported an error (an error completion, a failed verb, a stall it noticed, data that
 * changed) but every link after the first is ok; 10 a link after the first failed;
 * 11 canaries changed; 12 setup failed.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define PAGE 4096
#define REGION_PAGES 4
#define REGION (REGION_PAGES * PAGE)
#define MSG 256
#define RECVS 8
#define CANARY_BYTE 0xC5
#define BYE UINT64_MAX

enum { IDLE, W_WRITE, W_READ, W_SEND, DONE, FAILED };

struct link {
	char tag[64];
	int client;
	double stall;
	struct ibv_pd *pd;
	struct ibv_cq *scq, *rcq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	uint8_t *area; /* canary page, REGION, canary page */
	uint8_t *buf;  /* area + PAGE */
	uint32_t rqpn, rrkey;
	uint64_t raddr;
	int state;
	uint64_t seq, msgs;
	int send_done, recv_done;
	double since;
	char result[160];
};

static struct ibv_context *ctx;
/* Seconds a connection may wait for one step before it reports a stall: VICTIM_STALL,
 * or the link's own ("c:<tag>:<seconds>"). A verb on an attacked object may block the
 * (single) thread of its process for the bounds of docs/shared-state.md (up to 4 s), so
 * the untouched connection's two ends get more. */
static double STALL_DEFAULT = 5.0;
#define STALL_SEC (l->stall)
static int gid_index;

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

static void die_setup(const char *what)
{
	printf("SETUP-FAILED %s (errno %d %s)\n", what, errno, strerror(errno));
	fflush(stdout);
	exit(12);
}

static void fail(struct link *l, const char *fmt, ...)
{
	va_list ap;
	if (l->state == FAILED)
		return;
	va_start(ap, fmt);
	vsnprintf(l->result, sizeof(l->result), fmt, ap);
	va_end(ap);
	l->state = FAILED;
}

static void pattern(uint8_t *p, size_t n, uint64_t seq, const char *tag)
{
	uint64_t x = seq * 0x9E3779B97F4A7C15ull ^ (uint64_t)tag[0] << 56;
	for (size_t i = 0; i < n; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		p[i] = (uint8_t)x;
	}
}

static int find_gid(void)
{
	static const uint8_t want[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1};
	struct ibv_port_attr pa;
	union ibv_gid g;
	if (ibv_query_port(ctx, 1, &pa))
		die_setup("ibv_query_port");
	for (int i = 0; i < pa.gid_tbl_len; i++)
		if (!ibv_query_gid(ctx, 1, i, &g) && !memcmp(g.raw, want, 16))
			return i;
	die_setup("no ::ffff:127.0.0.1 GID");
	return -1;
}

static void setup(struct link *l)
{
	l->pd = ibv_alloc_pd(ctx);
	l->scq = ibv_create_cq(ctx, 32, NULL, NULL, 0);
	l->rcq = ibv_create_cq(ctx, 32, NULL, NULL, 0);
	if (!l->pd || !l->scq || !l->rcq)
		die_setup("pd/cq");
	l->area = mmap(NULL, REGION + 2 * PAGE, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (l->area == MAP_FAILED)
		die_setup("mmap");
	memset(l->area, CANARY_BYTE, PAGE);
	memset(l->area + PAGE + REGION, CANARY_BYTE, PAGE);
	l->buf = l->area + PAGE;
	memset(l->buf, 0, REGION);
	l->mr = ibv_reg_mr(l->pd, l->buf, REGION,
			   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
	if (!l->mr)
		die_setup("ibv_reg_mr");
	struct ibv_qp_init_attr init = {
		.send_cq = l->scq, .recv_cq = l->rcq, .qp_type = IBV_QPT_RC,
		.cap = {.max_send_wr = 8, .max_recv_wr = RECVS, .max_send_sge = 1, .max_recv_sge = 1},
	};
	l->qp = ibv_create_qp(l->pd, &init);
	if (!l->qp)
		die_setup("ibv_create_qp");
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1,
				.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ};
	if (ibv_modify_qp(l->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		die_setup("INIT");
}

static void publish(const char *xdir, struct link *l)
{
	char path[512], tmp[520];
	snprintf(path, sizeof(path), "%s/%s.%c", xdir, l->tag, l->client ? 'c' : 's');
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	FILE *f = fopen(tmp, "w");
	if (!f)
		die_setup("publish");
	fprintf(f, "%u %u %llu\n", l->qp->qp_num, l->mr->rkey, (unsigned long long)(uintptr_t)l->buf);
	fclose(f);
	if (rename(tmp, path))
		die_setup("rename");
}

static int lookup(const char *xdir, struct link *l)
{
	char path[512];
	unsigned long long addr;
	snprintf(path, sizeof(path), "%s/%s.%c", xdir, l->tag, l->client ? 's' : 'c');
	FILE *f = fopen(path, "r");
	if (!f)
		return 0;
	int n = fscanf(f, "%u %u %llu", &l->rqpn, &l->rrkey, &addr);
	fclose(f);
	l->raddr = addr;
	return n == 3;
}

static void connect_qp(struct link *l)
{
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	if (ibv_query_gid(ctx, 1, gid_index, &a.ah_attr.grh.dgid))
		die_setup("query_gid");
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = l->rqpn;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.sgid_index = gid_index;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.port_num = 1;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	if (ibv_modify_qp(l->qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				     IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		die_setup("RTR");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 12;
	a.retry_cnt = 3;
	a.rnr_retry = 3;
	a.max_rd_atomic = 1;
	if (ibv_modify_qp(l->qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
				     IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC))
		die_setup("RTS");
}

/* Receive slot k uses bytes [2048 + k*MSG, ...) of the buffer. */
static int post_recv(struct link *l, int k)
{
	struct ibv_sge s = {(uintptr_t)(l->buf + 2048 + k * MSG), MSG, l->mr->lkey};
	struct ibv_recv_wr wr = {.wr_id = (uint64_t)k, .sg_list = &s, .num_sge = 1}, *bad;
	return ibv_post_recv(l->qp, &wr, &bad);
}

static int post_send(struct link *l, enum ibv_wr_opcode op, uint8_t *local, uint32_t len, uint64_t raddr)
{
	struct ibv_sge s = {(uintptr_t)local, len, l->mr->lkey};
	struct ibv_send_wr wr = {.wr_id = op, .sg_list = &s, .num_sge = 1, .opcode = op,
				 .send_flags = IBV_SEND_SIGNALED}, *bad;
	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = l->rrkey;
	return ibv_post_send(l->qp, &wr, &bad);
}

/* Polls both CQs once. Returns -1 after failing the link on an error. */
static int reap(struct link *l, struct ibv_wc *rwc, int *got_recv)
{
	struct ibv_wc wc;
	int n = ibv_poll_cq(l->scq, 1, &wc);
	if (n < 0)
		return fail(l, "verbs-error:poll-send-cq=%d", n), -1;
	if (n == 1) {
		if (wc.status != IBV_WC_SUCCESS)
			return fail(l, "verbs-error:send-wc-%s", ibv_wc_status_str(wc.status)), -1;
		l->send_done = 1;
	}
	n = ibv_poll_cq(l->rcq, 1, rwc);
	if (n < 0)
		return fail(l, "verbs-error:poll-recv-cq=%d", n), -1;
	if (n == 1) {
		if (rwc->status != IBV_WC_SUCCESS)
			return fail(l, "verbs-error:recv-wc-%s", ibv_wc_status_str(rwc->status)), -1;
		if (rwc->wr_id >= RECVS)
			return fail(l, "mismatch:recv-wr_id-%llu", (unsigned long long)rwc->wr_id), -1;
		*got_recv = 1;
	}
	return 0;
}

static void client_step(struct link *l, double end)
{
	uint8_t want[MSG];
	struct ibv_wc rwc;
	int got = 0;

	if (l->state == DONE || l->state == FAILED)
		return;
	if (reap(l, &rwc, &got))
		return;
	if (l->state != IDLE && now() - l->since > STALL_SEC)
		return fail(l, "stall:state-%d", l->state);
	switch (l->state) {
	case IDLE:
		if (l->seq == BYE)
			return;
		if (now() > end)
			l->seq = BYE;
		else
			l->seq++;
		if (l->seq != BYE) {
			pattern(l->buf, MSG, l->seq, l->tag);
			l->send_done = 0;
			if (post_send(l, IBV_WR_RDMA_WRITE, l->buf, MSG, l->raddr + 1024))
				return fail(l, "verbs-error:post-write-errno-%d", errno);
			l->state = W_WRITE;
		} else {
			memset(l->buf, 0xff, 8);
			l->send_done = l->recv_done = 0;
			if (post_send(l, IBV_WR_SEND, l->buf, 8, 0))
				return fail(l, "verbs-error:post-bye-errno-%d", errno);
			l->state = W_SEND;
		}
		l->since = now();
		return;
	case W_WRITE:
		if (!l->send_done)
			return;
		memset(l->buf + MSG, 0, MSG);
		l->send_done = 0;
		if (post_send(l, IBV_WR_RDMA_READ, l->buf + MSG, MSG, l->raddr + 1024))
			return fail(l, "verbs-error:post-read-errno-%d", errno);
		l->state = W_READ;
		l->since = now();
		return;
	case W_READ:
		if (!l->send_done)
			return;
		if (memcmp(l->buf, l->buf + MSG, MSG))
			return fail(l, "mismatch:read-back-seq-%llu", (unsigned long long)l->seq);
		memcpy(l->buf + 1024, &l->seq, 8);
		pattern(l->buf + 1024 + 8, MSG - 8, l->seq + 1, l->tag);
		l->send_done = l->recv_done = 0;
		if (post_send(l, IBV_WR_SEND, l->buf + 1024, MSG, 0))
			return fail(l, "verbs-error:post-send-errno-%d", errno);
		l->state = W_SEND;
		l->since = now();
		return;
	case W_SEND:
		if (got) {
			uint8_t *m = l->buf + 2048 + rwc.wr_id * MSG;
			uint64_t s;
			memcpy(&s, m, 8);
			pattern(want, MSG - 8, l->seq + 1, l->tag);
			if (l->seq != BYE && (rwc.byte_len != MSG || s != l->seq || memcmp(m + 8, want, MSG - 8)))
				return fail(l, "mismatch:echo-seq-%llu", (unsigned long long)l->seq);
			if (post_recv(l, (int)rwc.wr_id))
				return fail(l, "verbs-error:post-recv-errno-%d", errno);
			l->recv_done = 1;
		}
		if (l->seq == BYE && l->send_done) {
			l->state = DONE;
			return;
		}
		if (l->send_done && l->recv_done) {
			l->msgs++;
			l->state = IDLE;
		}
		return;
	}
}

static void server_step(struct link *l)
{
	uint8_t want[MSG];
	struct ibv_wc rwc;
	int got = 0;

	if (l->state == DONE || l->state == FAILED)
		return;
	if (reap(l, &rwc, &got))
		return;
	if (l->state == W_SEND) {
		if (!l->send_done) {
			if (now() - l->since > STALL_SEC)
				fail(l, "stall:echo");
			return;
		}
		l->state = IDLE;
	}
	if (!got)
		return;
	uint8_t *m = l->buf + 2048 + rwc.wr_id * MSG;
	uint64_t s;
	memcpy(&s, m, 8);
	if (s == BYE && rwc.byte_len == 8) {
		l->state = DONE;
		return;
	}
	pattern(want, MSG - 8, s + 1, l->tag);
	if (rwc.byte_len != MSG || memcmp(m + 8, want, MSG - 8))
		return fail(l, "mismatch:message-seq-%llu", (unsigned long long)s);
	memcpy(l->buf + 1024 + PAGE, m, MSG); /* echo from the second page */
	if (post_recv(l, (int)rwc.wr_id))
		return fail(l, "verbs-error:post-recv-errno-%d", errno);
	l->send_done = 0;
	if (post_send(l, IBV_WR_SEND, l->buf + 1024 + PAGE, MSG, 0))
		return fail(l, "verbs-error:post-echo-errno-%d", errno);
	l->msgs++;
	l->state = W_SEND;
	l->since = now();
}

/* The endpoint directory: the one holding the "hdr" segment this process maps. */
static int endpoint_dir(char *out, size_t n)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[1024];
	int found = 0;
	if (!f)
		return 0;
	while (!found && fgets(line, sizeof(line), f)) {
		char *p = strchr(line, '/');
		size_t len;
		if (!p)
			continue;
		len = strcspn(p, "\n");
		p[len] = 0;
		if (len > 4 && !strcmp(p + len - 4, "/hdr") && strstr(p, "/ep-")) {
			p[len - 4] = 0;
			snprintf(out, n, "%s", p);
			found = 1;
		}
	}
	fclose(f);
	return found;
}

static void inventory(const char *xdir, const char *name, struct link *l)
{
	char dir[512], path[600], tmp[610];
	if (!endpoint_dir(dir, sizeof(dir))) {
		/* No host-wide endpoint (the device runs privately): nothing to list. */
		printf("NO-ENDPOINT %s\n", name);
		snprintf(dir, sizeof(dir), "-");
	}
	snprintf(path, sizeof(path), "%s/%s.inv", xdir, name);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	FILE *f = fopen(tmp, "w");
	if (!f)
		die_setup("inventory");
	fprintf(f, "dir %s\nqpn %u\nkey %u\n", dir, l->qp->qp_num, l->mr->lkey);
	DIR *d = dir[0] == '/' ? opendir(dir) : NULL;
	struct dirent *e;
	while (d && (e = readdir(d)))
		if (e->d_name[0] != '.')
			fprintf(f, "file %s\n", e->d_name);
	if (d)
		closedir(d);
	fclose(f);
	if (rename(tmp, path))
		die_setup("rename inventory");
}

int main(int argc, char **argv)
{
	if (argc < 5) {
		fprintf(stderr, "usage: victim <xdir> <name> <seconds> c:<tag>|s:<tag>...\n");
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (getenv("VICTIM_STALL"))
		STALL_DEFAULT = atof(getenv("VICTIM_STALL"));
	const char *xdir = argv[1], *name = argv[2];
	double end = now() + atof(argv[3]);
	int nl = argc - 4;
	struct link *links = calloc(nl, sizeof(*links));
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list || n < 1)
		die_setup("no device");
	ctx = ibv_open_device(list[0]);
	if (!ctx)
		die_setup("ibv_open_device");
	gid_index = find_gid();
	for (int i = 0; i < nl; i++) {
		struct link *l = &links[i];
		l->client = argv[4 + i][0] == 'c';
		snprintf(l->tag, sizeof(l->tag), "%s", argv[4 + i] + 2);
		char *colon = strchr(l->tag, ':');
		l->stall = STALL_DEFAULT;
		if (colon) {
			*colon = 0;
			l->stall = atof(colon + 1);
		}
		setup(l);
		if (i == 0)
			inventory(xdir, name, l);
		publish(xdir, l);
	}
	/* Meet the other ends (bounded), connect, post the receives. */
	double deadline = now() + 30;
	for (int i = 0; i < nl; i++) {
		while (!lookup(xdir, &links[i])) {
			if (now() > deadline)
				die_setup("the other end never published");
			usleep(10000);
		}
		connect_qp(&links[i]);
		for (int k = 0; k < RECVS; k++)
			if (post_recv(&links[i], k))
				die_setup("post_recv");
	}
	/* Both ends must have posted their receives before the first SEND: a client
	 * waits a moment (a SEND before that would meet RNR and retry, also fine). */
	usleep(200000);
	printf("READY %s %d\n", name, (int)getpid());
	double longest = 0;
	for (int i = 0; i < nl; i++)
		longest = links[i].stall > longest ? links[i].stall : longest;
	double hard_end = end + 3 * longest;
	for (;;) {
		int active = 0;
		for (int i = 0; i < nl; i++) {
			if (links[i].client)
				client_step(&links[i], end);
			else
				server_step(&links[i]);
			active += links[i].state != DONE && links[i].state != FAILED;
		}
		if (!active)
			break;
		if (now() > hard_end) {
			for (int i = 0; i < nl; i++)
				if (links[i].state != DONE)
					fail(&links[i], "stall:never-finished");
			break;
		}
	}
	int status = 0;
	for (int i = 0; i < nl; i++) {
		struct link *l = &links[i];
		printf("LINK %s %s %s msgs=%llu result=%s\n", name, l->tag, l->client ? "client" : "server",
		       (unsigned long long)l->msgs, l->state == DONE ? "ok" : l->result);
		if (l->state != DONE)
			status = i == 0 ? (status ? status : 3) : 10;
	}
	for (int i = 0; i < nl; i++) {
		struct link *l = &links[i];
		for (int k = 0; k < PAGE; k++) {
			if (l->area[k] != CANARY_BYTE || l->area[PAGE + REGION + k] != CANARY_BYTE) {
				printf("CANARY BAD link %s %s byte %d\n", l->tag,
				       l->area[k] != CANARY_BYTE ? "below" : "above", k);
				return 11;
			}
		}
	}
	printf("CANARY ok\n");
	/* Tear down what still can be (errors here are the harness's to ignore). */
	for (int i = 0; i < nl; i++) {
		ibv_destroy_qp(links[i].qp);
		ibv_dereg_mr(links[i].mr);
	}
	return status;
}
