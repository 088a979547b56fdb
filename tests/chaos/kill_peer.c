/* One node of the "death at any instant" harness (tests/chaos/kill.py).
 *
 * Compiled against the installed <infiniband/verbs.h> and <rdma/rdma_cma.h>, run on the
 * rverbs drop-in. Every node of a group runs this program; the driver kills one of them
 * with SIGKILL at a point chosen by its seed and checks what the others (the survivors)
 * report. A node is the same program whichever it turns out to be: traffic in both
 * directions, so a victim dies in the middle of the same work its survivors do.
 *
 *   kill_peer <mode> <self> <nodes> <seed> [fork]
 *
 * mode: rc, uc, ud, srq (RC over a shared receive queue), shcq (RC, one CQ for the
 * sends and receives of every QP, and one SRQ), chan (RC, send completions waited for
 * through a completion channel: the node sleeps in poll(2) on the channel's fd, then
 * ibv_get_cq_event), cm (RC connected with rdma_cm: node 0 listens, node 1 connects).
 *
 * fork: once the device is open, the node forks a child that uses no verbs and lives
 * until the driver closes the node's stdin (it says "CHILD <pid>"): a victim's child
 * outlives it, which must not keep the victim's endpoint alive (or its directory).
 *
 * Protocol, one line at a time (stdin from the driver, stdout to it):
 *   out "INFO <fields>"        what peers need to reach this node
 *   in  "PEER <i> <fields>"    node i's INFO
 *   in  "CONNECT"              every INFO is delivered: connect the QPs
 *   out "READY"                QPs in RTS (cm: ESTABLISHED), receives posted
 *   in  "START"                every node is READY: start traffic
 *   out "POSTED"               the first work request is posted
 *   in  "DEAD <i>"             node i was killed: stop posting to it, post a few more
 *                              WRs to it anyway, then account for every WR outstanding
 *   out "REPORT k=v ..."       the accounting (and "FAIL <why>" lines before it)
 *   in  "QUIET"                srq, shcq: every survivor reported (nobody posts any
 *                              more): account for the SRQ's receives (account_srq)
 *   out "SRQ k=v ..." "QUIETED" that account (and "FAIL <why>" lines before it)
 *   in  "EXIT"                 every survivor reported: exit (receives stay posted
 *                              and are replenished until then, so live peers complete)
 *
 * What a survivor checks once told of a death (exit status 1 and a FAIL line if not):
 *  - every signaled send-side WR it had outstanding on a QP to the dead node, and every
 *    WR it posts there afterwards, completes (success or an error status) within a
 *    deadline derived from the QP's timeout and retry_cnt as ibv_query_qp reports them;
 *  - every WR on a QP to a node still alive completes with IBV_WC_SUCCESS;
 *  - cm: RDMA_CM_EVENT_DISCONNECTED (or, during the handshake, an error event) arrives
 *    within the deadline;
 *  - the canary pages around its registered buffer are intact (no byte landed outside
 *    the registered region).
 *  - rc, uc, chan, cm: once the QP to the dead node is moved to ERR, every receive posted
 *    on it completes (success or flush) within 5 s, including one the dead node was
 *    placing a message into when it died.
 *  - srq, shcq: once every survivor reported, every receive posted to the SRQ is in it
 *    (a probe QP of the node takes them until RNR) or completes within 5 s, the QPs to
 *    the dead node moved to ERR (a receive the dead node took and was placing flushes).
 * Receives are not required to complete before that: a node waiting only for receives
 * from a dead peer waits for ever on real RDMA too. An SRQ's receives are not accounted
 * (they stay in the SRQ, and verbs cannot count them).
 *
 * Loops are bounded by deadlines; waits are poll(2) on descriptors (stdin, completion
 * channel, rdma_cm event channel), never sleeps.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <execinfo.h>
#include <signal.h>
#include <inttypes.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define MAX_NODES 4
#define WINDOW 16          /* signaled send WRs outstanding per QP */
#define AFTER_DEATH 8      /* WRs posted to a dead node after being told */
#define RQ_DEPTH 64
#define CQ_DEPTH 1024
#define PAGE 4096
#define CANARY_LEN (2 * PAGE)
#define REG_LEN (256 * 1024)
#define SRC_OFF 0                 /* gather sources */
#define RECV_OFF (64 * 1024)      /* receive buffers (shared by the slots) */
#define TARGET_OFF (128 * 1024)   /* where peers WRITE and do atomics */
#define LAND_OFF (192 * 1024)     /* where READ and atomic results land */
#define MAX_MSG 4096
#define UD_MSG 1024
#define GRH 40
#define QKEY 0x11111111u
#define CANARY_BYTE 0xC5
/* wr_id of a send WR: tag | node << 48 | sequence (receives' wr_ids lack the tag; the
 * opcode of an error completion is undefined, so the wr_id tells them apart). */
#define SEND_TAG (1ull << 63)

enum mode { RC, UC, UD, SRQ, SHCQ, CHAN, CM };
static const char *mode_names[] = { "rc", "uc", "ud", "srq", "shcq", "chan", "cm" };

struct peer {
	int present;          /* a QP to this node exists */
	int dead;             /* told it died */
	uint32_t qpn;         /* its QP for us */
	uint32_t rkey;
	uint64_t addr;
	union ibv_gid gid;
	struct ibv_qp *qp;    /* our QP to it (UD: the one QP) */
	struct ibv_ah *ah;
	int outstanding;
	unsigned long posted, ok, err, flushed, after_posted;
	unsigned long status_count[32];
	int recv_outstanding; /* own receive queue: posted, neither completed nor flushed */
	unsigned long recv_flushed, recv_err;
	double deadline_ms;   /* from the QP's timeout and retry_cnt */
	double drain_ms;      /* told → last outstanding WR completed */
	unsigned opc;         /* rotation of opcodes */
};

static enum mode mode;
static int self, nodes;
static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_cq *send_cq, *recv_cq;
static struct ibv_comp_channel *chan;
static struct ibv_srq *srq;
static struct ibv_qp *ud_qp;
static struct ibv_mr *mr;
static unsigned char *mem, *buf;
static struct peer peers[MAX_NODES];
static union ibv_gid my_gid;
static unsigned long long rng;
static int started, connected, failed;
static unsigned long recvs_done, chan_wakeups;
static unsigned long srq_posted, srq_done;  /* receives posted to the SRQ, and completed */
static int no_repost;                       /* the SRQ's account: receives are not posted again */
static int fail_count;

/* rdma_cm */
static struct rdma_event_channel *cm_ch;
static struct rdma_cm_id *cm_listen, *cm_id;
static const char *cm_state = "none";
static int cm_terminal;     /* an event that ends the connection arrived */
static const char *cm_terminal_name = "-";

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static uint32_t rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t)(rng >> 11);
}

static void out(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	fflush(stdout);
}

/* A failure of the harness's checks: reported, the node goes on to its report. */
static void fail(const char *fmt, ...)
{
	va_list ap;
	printf("FAIL node %d: ", self);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf(" (errno %d)\n", errno);
	fflush(stdout);
	failed = 1;
	fail_count++;
}

/* A setup step that cannot fail unless something is broken: fatal. */
#define MUST(cond, ...)                                \
	do {                                           \
		if (!(cond)) {                         \
			fail(__VA_ARGS__);             \
			exit(2);                       \
		}                                      \
	} while (0)

/* ---- stdin, line by line, without blocking ---- */
static char inbuf[8192];
static size_t inlen;
static int stdin_eof;

/* Next complete line from stdin into `line`, waiting at most `ms` (0: do not wait). */
static int read_line(char *line, size_t cap, int ms)
{
	for (;;) {
		char *nl = memchr(inbuf, '\n', inlen);
		if (nl) {
			size_t n = (size_t)(nl - inbuf);
			if (n >= cap)
				n = cap - 1;
			memcpy(line, inbuf, n);
			line[n] = 0;
			inlen -= (size_t)(nl - inbuf) + 1;
			memmove(inbuf, nl + 1, inlen);
			return 1;
		}
		if (stdin_eof)
			return 0;
		struct pollfd p = { .fd = 0, .events = POLLIN };
		if (poll(&p, 1, ms) <= 0)
			return 0;
		ssize_t r = read(0, inbuf + inlen, sizeof(inbuf) - inlen);
		if (r <= 0) {
			stdin_eof = 1; /* the driver is gone: treat as EXIT */
			return 0;
		}
		inlen += (size_t)r;
		ms = 0;
	}
}

/* ---- memory ---- */
static void alloc_buffers(void)
{
	mem = mmap(NULL, CANARY_LEN + REG_LEN + CANARY_LEN, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	MUST(mem != MAP_FAILED, "mmap");
	memset(mem, CANARY_BYTE, CANARY_LEN);
	memset(mem + CANARY_LEN + REG_LEN, CANARY_BYTE, CANARY_LEN);
	buf = mem + CANARY_LEN;
	for (size_t i = 0; i < REG_LEN; i++)
		buf[i] = (unsigned char)(i * 7 + self);
}

static int canaries_intact(void)
{
	for (size_t i = 0; i < CANARY_LEN; i++)
		if (mem[i] != CANARY_BYTE || mem[CANARY_LEN + REG_LEN + i] != CANARY_BYTE)
			return 0;
	return 1;
}

static void setup_pd_mr(struct ibv_context *c)
{
	ctx = c;
	pd = ibv_alloc_pd(ctx);
	MUST(pd, "ibv_alloc_pd");
	mr = ibv_reg_mr(pd, buf, REG_LEN,
			IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
				IBV_ACCESS_REMOTE_ATOMIC);
	MUST(mr, "ibv_reg_mr");
	if (mode == CHAN) {
		chan = ibv_create_comp_channel(ctx);
		MUST(chan, "ibv_create_comp_channel");
	}
	send_cq = ibv_create_cq(ctx, CQ_DEPTH, NULL, chan, 0);
	MUST(send_cq, "ibv_create_cq");
	if (mode == SHCQ) {
		recv_cq = send_cq;
	} else {
		recv_cq = ibv_create_cq(ctx, CQ_DEPTH, NULL, NULL, 0);
		MUST(recv_cq, "ibv_create_cq (recv)");
	}
	if (mode == SRQ || mode == SHCQ) {
		struct ibv_srq_init_attr sa = { .attr = { .max_wr = RQ_DEPTH * MAX_NODES, .max_sge = 1 } };
		srq = ibv_create_srq(pd, &sa);
		MUST(srq, "ibv_create_srq");
	}
}

static struct ibv_context *open_rverbs0(void)
{
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	struct ibv_context *c = NULL;
	MUST(list && n >= 1, "ibv_get_device_list");
	for (int i = 0; i < n; i++)
		if (!strcmp(ibv_get_device_name(list[i]), "rverbs0"))
			c = ibv_open_device(list[i]);
	ibv_free_device_list(list);
	MUST(c, "ibv_open_device(rverbs0)");
	return c;
}

static struct ibv_qp *create_qp(enum ibv_qp_type t)
{
	struct ibv_qp_init_attr ia = {
		.send_cq = send_cq,
		.recv_cq = recv_cq,
		.srq = srq,
		.qp_type = t,
		.cap = { .max_send_wr = WINDOW + AFTER_DEATH + 4, .max_recv_wr = srq ? 0 : RQ_DEPTH,
			 .max_send_sge = 1, .max_recv_sge = 1 },
		.sq_sig_all = 0,
	};
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);
	MUST(qp, "ibv_create_qp");
	return qp;
}

/* ---- receives ---- */
/* Each QP has a receive queue of its own (wr_id = peer << 32 | slot). */
static int own_queues(void)
{
	return mode == RC || mode == UC || mode == CHAN || mode == CM;
}

static void post_recv_one(struct ibv_qp *qp, uint64_t id)
{
	struct ibv_sge sge = { .addr = (uintptr_t)(buf + RECV_OFF + (id % 15) * PAGE),
			       .length = MAX_MSG, .lkey = mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = id, .sg_list = &sge, .num_sge = 1 }, *bad;
	int rc = srq ? ibv_post_srq_recv(srq, &wr, &bad) : ibv_post_recv(qp, &wr, &bad);
	/* A QP in ERR still takes receives (they flush); only a programming error fails. */
	if (rc)
		fail("post_recv: %d", rc);
	else if (own_queues())
		peers[(id >> 32) % MAX_NODES].recv_outstanding++;
	else if (srq)
		srq_posted++;
}

/* A receive's completion: own receive queues are accounted per peer (wr_id's high half). */
static void recv_completed(const struct ibv_wc *wc)
{
	recvs_done++;
	if (srq)
		srq_done++;
	if (!own_queues())
		return;
	struct peer *p = &peers[(wc->wr_id >> 32) % MAX_NODES];
	p->recv_outstanding--;
	if (wc->status == IBV_WC_WR_FLUSH_ERR)
		p->recv_flushed++;
	else if (wc->status != IBV_WC_SUCCESS)
		p->recv_err++;
}

static void post_initial_recvs(void)
{
	if (srq) {
		for (int i = 0; i < RQ_DEPTH * (nodes - 1); i++)
			post_recv_one(NULL, (uint64_t)i);
		return;
	}
	if (mode == UD) {
		for (int i = 0; i < RQ_DEPTH; i++)
			post_recv_one(ud_qp, (uint64_t)i);
		return;
	}
	for (int j = 0; j < nodes; j++) {
		if (!peers[j].present || !peers[j].qp)
			continue;
		for (int i = 0; i < RQ_DEPTH; i++)
			post_recv_one(peers[j].qp, ((uint64_t)j << 32) | (uint64_t)i);
	}
}

/* ---- QP state ---- */
static void to_init(struct ibv_qp *qp)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1 };
	int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
	if (mode == UD) {
		a.qkey = QKEY;
		mask |= IBV_QP_QKEY;
	} else {
		a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
				    (mode == UC ? 0 : IBV_ACCESS_REMOTE_ATOMIC);
		mask |= IBV_QP_ACCESS_FLAGS;
	}
	MUST(!ibv_modify_qp(qp, &a, mask), "modify to INIT");
}

static void connect_qp(struct peer *p)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_RTR,
		.path_mtu = IBV_MTU_1024,
		.dest_qp_num = p->qpn,
		.rq_psn = 0,
		.max_dest_rd_atomic = 16,
		.min_rnr_timer = 1,
		.ah_attr = { .is_global = 1, .port_num = 1,
			     .grh = { .dgid = p->gid, .sgid_index = 0, .hop_limit = 1 } },
	};
	int mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
	if (mode != UC)
		mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
	MUST(!ibv_modify_qp(p->qp, &a, mask), "modify to RTR");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 0;
	mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
	if (mode != UC) {
		a.timeout = 12;   /* 16.8 ms */
		a.retry_cnt = 3;
		a.rnr_retry = 7;  /* RNR retried for ever while the peer lives */
		a.max_rd_atomic = 16;
		mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
	}
	MUST(!ibv_modify_qp(p->qp, &a, mask), "modify to RTS");
}

static void ud_ready(void)
{
	to_init(ud_qp);
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_RTR };
	MUST(!ibv_modify_qp(ud_qp, &a, IBV_QP_STATE), "UD to RTR");
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 0;
	MUST(!ibv_modify_qp(ud_qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN), "UD to RTS");
}

/* The longest an RC requester may take to give up on a silent peer: (retry_cnt + 1)
 * ACK timeouts of 4.096 us * 2^timeout, as the QP reports them, doubled, plus 3 s for a
 * loaded machine (2 cores shared with builds) and the progress thread's scheduling. */
static double deadline_for(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;
	double ack_ms = 0;
	int retry = 0;
	if (qp && qp->qp_type == IBV_QPT_RC && !ibv_query_qp(qp, &a, IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT, &ia)) {
		ack_ms = a.timeout ? 4.096e-3 * (double)(1ull << (a.timeout & 31)) : 0;
		retry = a.retry_cnt;
	}
	return 2.0 * (retry + 1) * ack_ms + 3000.0;
}

/* ---- traffic ---- */
static int peer_of_qp(uint32_t qpn)
{
	for (int j = 0; j < nodes; j++)
		if (peers[j].present && peers[j].qp && peers[j].qp->qp_num == qpn)
			return j;
	return -1;
}

static int post_one(int j)
{
	struct peer *p = &peers[j];
	struct ibv_sge sge = { .lkey = mr->lkey };
	struct ibv_send_wr wr = { .sg_list = &sge, .num_sge = 1, .send_flags = IBV_SEND_SIGNALED }, *bad;
	uint32_t len = 1 + rnd() % MAX_MSG;
	static const enum ibv_wr_opcode rc_ops[] = { IBV_WR_RDMA_WRITE, IBV_WR_SEND, IBV_WR_RDMA_READ,
						     IBV_WR_ATOMIC_FETCH_AND_ADD, IBV_WR_ATOMIC_CMP_AND_SWP,
						     IBV_WR_RDMA_WRITE_WITH_IMM, IBV_WR_SEND_WITH_IMM };
	static const enum ibv_wr_opcode uc_ops[] = { IBV_WR_RDMA_WRITE, IBV_WR_SEND, IBV_WR_RDMA_WRITE_WITH_IMM };
	enum ibv_wr_opcode op;

	if (mode == UD) {
		op = IBV_WR_SEND;
		len = 1 + rnd() % UD_MSG;
		wr.wr.ud.ah = p->ah;
		wr.wr.ud.remote_qpn = p->qpn;
		wr.wr.ud.remote_qkey = QKEY;
	} else if (mode == UC) {
		op = uc_ops[p->opc++ % 3];
	} else {
		op = rc_ops[p->opc++ % 7];
	}
	wr.opcode = op;
	wr.wr_id = SEND_TAG | ((uint64_t)j << 48) | p->posted;
	sge.addr = (uintptr_t)(buf + SRC_OFF + rnd() % (64 * 1024 - MAX_MSG));
	sge.length = len;
	uint64_t raddr = p->addr + TARGET_OFF + rnd() % (64 * 1024 - MAX_MSG);
	switch (op) {
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_WRITE_WITH_IMM:
		wr.imm_data = htonl(0x1234);
		wr.wr.rdma.remote_addr = raddr;
		wr.wr.rdma.rkey = p->rkey;
		break;
	case IBV_WR_RDMA_READ:
		sge.addr = (uintptr_t)(buf + LAND_OFF + rnd() % (64 * 1024 - MAX_MSG));
		wr.wr.rdma.remote_addr = raddr;
		wr.wr.rdma.rkey = p->rkey;
		break;
	case IBV_WR_ATOMIC_FETCH_AND_ADD:
	case IBV_WR_ATOMIC_CMP_AND_SWP:
		sge.addr = (uintptr_t)(buf + LAND_OFF + (rnd() % 1024) * 8);
		sge.length = 8;
		wr.wr.atomic.remote_addr = (raddr & ~7ull);
		wr.wr.atomic.rkey = p->rkey;
		wr.wr.atomic.compare_add = 1;
		wr.wr.atomic.swap = 2;
		break;
	case IBV_WR_SEND_WITH_IMM:
		wr.imm_data = htonl(0x5678);
		break;
	default:
		break;
	}
	struct ibv_qp *qp = mode == UD ? ud_qp : p->qp;
	int rc = ibv_post_send(qp, &wr, &bad);
	if (rc) {
		/* Posting is allowed in ERR (the WR flushes); a refusal is a defect. */
		fail("ibv_post_send to node %d: %d (%s)", j, rc, strerror(rc));
		return 0;
	}
	p->posted++;
	p->outstanding++;
	if (!started) {
		started = 1;
		out("POSTED");
	}
	return 1;
}

/* Polls both CQs once; reposts receives. Returns the number of completions. */
static int poll_cqs(void)
{
	struct ibv_wc wc[32];
	int total = 0, n;
	if (!send_cq)
		return 0; /* cm: no QP yet */
	n = ibv_poll_cq(send_cq, 32, wc);
	if (n < 0) {
		fail("ibv_poll_cq: %d", n);
		return 0;
	}
	for (int i = 0; i < n; i++) {
		if (!(wc[i].wr_id & SEND_TAG)) {
			recv_completed(&wc[i]);
			if (wc[i].status == IBV_WC_SUCCESS && !no_repost) {
				int j = peer_of_qp(wc[i].qp_num);
				post_recv_one(j >= 0 ? peers[j].qp : NULL, wc[i].wr_id);
			}
			continue;
		}
		int j = (int)((wc[i].wr_id >> 48) & 0xff);
		if (j < 0 || j >= nodes || !peers[j].present) {
			fail("send completion with unknown wr_id %" PRIx64, wc[i].wr_id);
			continue;
		}
		struct peer *p = &peers[j];
		p->outstanding--;
		p->status_count[wc[i].status & 31]++;
		if (wc[i].status == IBV_WC_SUCCESS)
			p->ok++;
		else if (wc[i].status == IBV_WC_WR_FLUSH_ERR)
			p->flushed++;
		else
			p->err++;
		if (wc[i].status != IBV_WC_SUCCESS && !p->dead && p->err + p->flushed == 1)
			out("NOTE node %d: first error completion towards node %d: %s", self, j,
			    ibv_wc_status_str(wc[i].status));
	}
	total += n;
	if (recv_cq != send_cq) {
		n = ibv_poll_cq(recv_cq, 32, wc);
		if (n < 0) {
			fail("ibv_poll_cq(recv): %d", n);
			return total;
		}
		for (int i = 0; i < n; i++) {
			recv_completed(&wc[i]);
			if (wc[i].status != IBV_WC_SUCCESS || no_repost)
				continue;
			if (mode == UD)
				post_recv_one(ud_qp, wc[i].wr_id);
			else {
				int j = peer_of_qp(wc[i].qp_num);
				if (srq || j >= 0)
					post_recv_one(j >= 0 ? peers[j].qp : NULL, wc[i].wr_id);
			}
		}
		total += n;
	}
	return total;
}

/* Waits for a send completion through the completion channel, at most `ms`. */
static void chan_wait(int ms)
{
	struct pollfd p[2] = { { .fd = chan->fd, .events = POLLIN }, { .fd = 0, .events = POLLIN } };
	if (ibv_req_notify_cq(send_cq, 0)) {
		fail("ibv_req_notify_cq");
		return;
	}
	if (poll_cqs() > 0)
		return; /* raced with a completion: the notification stays armed, harmlessly */
	if (poll(p, 2, ms) > 0 && (p[0].revents & POLLIN)) {
		struct ibv_cq *cq;
		void *cq_ctx;
		if (ibv_get_cq_event(chan, &cq, &cq_ctx)) {
			fail("ibv_get_cq_event");
			return;
		}
		ibv_ack_cq_events(cq, 1);
		chan_wakeups++;
	}
}

static int total_outstanding(void)
{
	int t = 0;
	for (int j = 0; j < nodes; j++)
		if (peers[j].present)
			t += peers[j].outstanding;
	return t;
}

/* ---- rdma_cm ---- */
struct cm_priv {
	uint64_t addr;
	uint32_t rkey;
};

static void cm_create_qp(struct rdma_cm_id *id)
{
	if (!pd)
		setup_pd_mr(id->verbs);
	struct ibv_qp_init_attr ia = {
		.send_cq = send_cq, .recv_cq = recv_cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = WINDOW + AFTER_DEATH + 4, .max_recv_wr = RQ_DEPTH,
			 .max_send_sge = 1, .max_recv_sge = 1 },
	};
	MUST(!rdma_create_qp(id, pd, &ia), "rdma_create_qp");
	int j = 1 - self;
	peers[j].present = 1;
	peers[j].qp = id->qp;
	for (int i = 0; i < RQ_DEPTH; i++)
		post_recv_one(id->qp, ((uint64_t)j << 32) | (uint64_t)i);
}

static struct rdma_conn_param cm_param(struct cm_priv *pv)
{
	pv->addr = (uintptr_t)buf;
	pv->rkey = mr->rkey;
	struct rdma_conn_param cp = { .private_data = pv, .private_data_len = sizeof(*pv),
				      .responder_resources = 16, .initiator_depth = 16,
				      .retry_count = 3, .rnr_retry_count = 7 };
	return cp;
}

/* Handles one rdma_cm event if one arrives within `ms`. */
static void cm_step(int ms)
{
	struct pollfd p = { .fd = cm_ch->fd, .events = POLLIN };
	if (poll(&p, 1, ms) <= 0)
		return;
	struct rdma_cm_event *ev;
	if (rdma_get_cm_event(cm_ch, &ev)) {
		fail("rdma_get_cm_event");
		return;
	}
	struct rdma_cm_event e = *ev;
	struct cm_priv pv;
	int j = 1 - self;
	if (e.event == RDMA_CM_EVENT_ESTABLISHED && e.param.conn.private_data_len >= sizeof(pv) &&
	    e.param.conn.private_data)
		memcpy(&pv, e.param.conn.private_data, sizeof(pv));
	else if (e.event == RDMA_CM_EVENT_CONNECT_REQUEST && e.param.conn.private_data)
		memcpy(&pv, e.param.conn.private_data, sizeof(pv));
	rdma_ack_cm_event(ev);
	switch (e.event) {
	case RDMA_CM_EVENT_ADDR_RESOLVED:
		cm_state = "route";
		if (rdma_resolve_route(cm_id, 2000)) {
			cm_terminal = 1;
			cm_terminal_name = "resolve-route-failed";
		}
		break;
	case RDMA_CM_EVENT_ROUTE_RESOLVED: {
		cm_create_qp(cm_id);
		struct cm_priv mine;
		struct rdma_conn_param cp = cm_param(&mine);
		cm_state = "connecting";
		if (rdma_connect(cm_id, &cp)) {
			/* The server may already be dead: a refusal is an answer, not a hang. */
			cm_terminal = 1;
			cm_terminal_name = "connect-failed";
		}
		break;
	}
	case RDMA_CM_EVENT_CONNECT_REQUEST: {
		if (cm_id) { /* one connection per run */
			rdma_reject(e.id, NULL, 0);
			break;
		}
		cm_id = e.id;
		peers[j].addr = pv.addr;
		peers[j].rkey = pv.rkey;
		cm_create_qp(cm_id);
		struct cm_priv mine;
		struct rdma_conn_param cp = cm_param(&mine);
		cm_state = "accepting";
		if (rdma_accept(cm_id, &cp)) {
			/* The client may already be dead: a refusal is an answer, not a hang. */
			cm_terminal = 1;
			cm_terminal_name = "accept-failed";
		}
		break;
	}
	case RDMA_CM_EVENT_ESTABLISHED:
		if (self == 1) {
			peers[j].addr = pv.addr;
			peers[j].rkey = pv.rkey;
		}
		peers[j].deadline_ms = deadline_for(cm_id->qp);
		cm_state = "established";
		connected = 1;
		out("READY");
		break;
	case RDMA_CM_EVENT_DISCONNECTED:
		cm_state = "disconnected";
		cm_terminal = 1;
		cm_terminal_name = rdma_event_str(e.event);
		break;
	case RDMA_CM_EVENT_ADDR_ERROR:
	case RDMA_CM_EVENT_ROUTE_ERROR:
	case RDMA_CM_EVENT_CONNECT_ERROR:
	case RDMA_CM_EVENT_UNREACHABLE:
	case RDMA_CM_EVENT_REJECTED:
		cm_terminal = 1;
		cm_terminal_name = rdma_event_str(e.event);
		cm_state = "failed";
		break;
	default:
		out("NOTE node %d: cm event %s", self, rdma_event_str(e.event));
		break;
	}
}

/* A crash of a survivor is what the harness hunts: say where, then die of the signal. */
static void on_crash(int sig)
{
	void *frames[64];
	int n = backtrace(frames, 64);
	static const char msg[] = "CRASH backtrace:\n";
	if (write(2, msg, sizeof(msg) - 1) < 0)
		_exit(128 + sig);
	backtrace_symbols_fd(frames, n, 2);
	signal(sig, SIG_DFL);
	raise(sig);
}

/* A child that uses no verbs and lives until every writer of stdin is gone (the
 * driver closes it at the end of the round); poll with no events consumes nothing. */
static void fork_idle_child(void)
{
	fflush(stdout);
	pid_t pid = fork();
	MUST(pid >= 0, "fork");
	if (pid == 0) {
		for (int i = 0; i < 600; i++) {
			struct pollfd p = { .fd = 0, .events = 0 };
			if (poll(&p, 1, 200) > 0 && (p.revents & (POLLHUP | POLLERR | POLLNVAL)))
				break;
		}
		_exit(0);
	}
	out("CHILD %d", (int)pid);
}

/* One round of completions (through the channel, at most `chan_ms`, in chan mode) and,
 * in cm mode, of rdma_cm events. */
static void step(int chan_ms)
{
	if (mode == CHAN)
		chan_wait(chan_ms);
	else
		poll_cqs();
	if (mode == CM)
		cm_step(0);
}

/* Every receive posted on the QP to a dead node completes once that QP is moved to ERR
 * (ibv_modify_qp(3): outstanding WRs flush with IBV_WC_WR_FLUSH_ERR), including one the
 * dead node was placing a message into when it died. Only own receive queues: an SRQ's
 * receives stay in the SRQ, which verbs cannot count. */
static void account_dead_receives(void)
{
	if (!own_queues())
		return;
	int any = 0;
	for (int j = 0; j < nodes; j++) {
		struct peer *p = &peers[j];
		/* cm: receives are posted before the connection is established, or fails. */
		if (!p->present || !p->dead || !p->qp || !p->recv_outstanding)
			continue;
		struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };
		if (ibv_modify_qp(p->qp, &a, IBV_QP_STATE))
			fail("ibv_modify_qp(ERR) of the QP to dead node %d: %s", j, strerror(errno));
		any = 1;
	}
	if (!any)
		return;
	double since = now_ms();
	for (;;) {
		int left = 0;
		for (int j = 0; j < nodes; j++)
			if (peers[j].present && peers[j].dead)
				left += peers[j].recv_outstanding;
		if (left == 0)
			return;
		if (now_ms() - since > 5000) {
			fail("%d receive(s) on the QP to the dead node neither completed nor flushed 5 s after "
			     "it moved to ERR", left);
			return;
		}
		step(10);
	}
}

/* The probe of account_srq: a QP of this node connected to another of its own, which
 * takes its receives from the SRQ and completes them to the receive CQ; the sender's RNR
 * retry count is 0, so a SEND the SRQ has no receive for fails at once. */
static struct ibv_qp *probe_qp(struct ibv_cq *cq, int on_srq)
{
	struct ibv_qp_init_attr ia = {
		.send_cq = cq, .recv_cq = recv_cq, .qp_type = IBV_QPT_RC, .srq = on_srq ? srq : NULL,
		.cap = { .max_send_wr = 1, .max_recv_wr = on_srq ? 0 : 1, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);
	MUST(qp, "ibv_create_qp (probe)");
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1 };
	MUST(!ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS), "probe INIT");
	return qp;
}

static void probe_connect(struct ibv_qp *qp, uint32_t dest)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024, .dest_qp_num = dest, .max_dest_rd_atomic = 1,
		.min_rnr_timer = 1, .ah_attr = { .is_global = 1, .port_num = 1, .grh = { .dgid = my_gid, .hop_limit = 1 } },
	};
	MUST(!ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
					    IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER), "probe RTR");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 12;
	a.retry_cnt = 3;
	a.rnr_retry = 0;
	a.max_rd_atomic = 1;
	MUST(!ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
					    IBV_QP_MAX_QP_RD_ATOMIC), "probe RTS");
}

/* srq, shcq: once every survivor reported, no node posts any more, so every receive this
 * node posted to its SRQ is in the SRQ, completed, or being completed by a live peer.
 * The QPs to dead nodes move to ERR (a dead taker's recorded takes flush, ibv_modify_qp(3)),
 * then SENDs of no bytes from a probe QP of this node take what the SRQ holds until one
 * finds it empty (RNR, the probe retries none); every receive posted must then be
 * completed (success, flush or error) within 5 s. One a dead peer took and nobody
 * completes is missing for ever. Receives are not posted again from here on. */
static void account_srq(void)
{
	if (!srq || !connected)
		return;
	no_repost = 1;
	for (int j = 0; j < nodes; j++) {
		struct peer *p = &peers[j];
		if (!p->present || !p->dead || !p->qp)
			continue;
		struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };
		if (ibv_modify_qp(p->qp, &a, IBV_QP_STATE))
			fail("ibv_modify_qp(ERR) of the QP to dead node %d: %s", j, strerror(errno));
	}
	struct ibv_cq *cq = ibv_create_cq(ctx, 4, NULL, NULL, 0);
	MUST(cq, "ibv_create_cq (probe)");
	struct ibv_qp *tx = probe_qp(cq, 0), *rx = probe_qp(cq, 1);
	probe_connect(tx, rx->qp_num);
	probe_connect(rx, tx->qp_num);
	unsigned long probes = 0;
	int empty = 0;
	while (!empty && !failed && probes <= srq_posted) {
		struct ibv_send_wr wr = { .wr_id = SEND_TAG | 0xfe, .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED }, *bad;
		MUST(!ibv_post_send(tx, &wr, &bad), "probe post_send");
		struct ibv_wc wc;
		double t0 = now_ms();
		int n;
		while ((n = ibv_poll_cq(cq, 1, &wc)) == 0 && now_ms() - t0 < 5000)
			poll_cqs();
		if (n != 1)
			fail("srq: the probe's SEND %lu did not complete in 5 s", probes);
		else if (wc.status == IBV_WC_RNR_RETRY_EXC_ERR)
			empty = 1;
		else if (wc.status != IBV_WC_SUCCESS)
			fail("srq: the probe's SEND %lu completed with %s", probes, ibv_wc_status_str(wc.status));
		else
			probes++;
	}
	double t0 = now_ms();
	while (srq_done < srq_posted && now_ms() - t0 < 5000)
		poll_cqs();
	if (srq_done != srq_posted)
		fail("srq: %lu receive(s) posted to the SRQ neither in it, nor completed, nor flushed (%lu posted, %lu completed, "
		     "%lu taken by the probe)", srq_posted - srq_done, srq_posted, srq_done, probes);
	out("SRQ posted=%lu completed=%lu probed=%lu", srq_posted, srq_done, probes);
	ibv_destroy_qp(tx);
	ibv_destroy_qp(rx);
	ibv_destroy_cq(cq);
}

/* ---- main ---- */
static void report(double since_told)
{
	char line[2048];
	int n = snprintf(line, sizeof(line), "REPORT node=%d mode=%s", self, mode_names[mode]);
	unsigned long ok_dead = 0, err_dead = 0, fl_dead = 0, after = 0, ok_live = 0,
		      bad_live = 0, left = 0, recv_flushed = 0, recv_err = 0;
	int recv_left = 0;
	double drain = 0, deadline = 0;
	for (int j = 0; j < nodes; j++) {
		struct peer *p = &peers[j];
		if (!p->present)
			continue;
		if (p->dead) {
			ok_dead += p->ok;
			err_dead += p->err;
			fl_dead += p->flushed;
			after += p->after_posted;
			recv_left += p->recv_outstanding;
			recv_flushed += p->recv_flushed;
			recv_err += p->recv_err;
			if (p->drain_ms > drain)
				drain = p->drain_ms;
			if (p->deadline_ms > deadline)
				deadline = p->deadline_ms;
		} else {
			ok_live += p->ok;
			bad_live += p->err + p->flushed;
		}
		left += (unsigned long)p->outstanding;
	}
	n += snprintf(line + n, sizeof(line) - (size_t)n,
		      " connected=%d started=%d dead_ok=%lu dead_err=%lu dead_flush=%lu after_death=%lu"
		      " live_ok=%lu live_bad=%lu left=%lu drain_ms=%.1f deadline_ms=%.0f recvs=%lu"
		      " recv_left=%d recv_flushed=%lu recv_err=%lu"
		      " chan_wakeups=%lu canary=%s cm=%s cm_event=%s statuses=",
		      connected, started, ok_dead, err_dead, fl_dead, after, ok_live, bad_live, left, drain,
		      deadline, recvs_done, recv_left, recv_flushed, recv_err, chan_wakeups, canaries_intact() ? "ok" : "BROKEN", cm_state,
		      cm_terminal_name);
	int first = 1;
	for (int s = 0; s < 32; s++) {
		unsigned long c = 0;
		for (int j = 0; j < nodes; j++)
			if (peers[j].present && peers[j].dead)
				c += peers[j].status_count[s];
		if (c) {
			n += snprintf(line + n, sizeof(line) - (size_t)n, "%s%d:%lu", first ? "" : ",", s, c);
			first = 0;
		}
	}
	if (first)
		n += snprintf(line + n, sizeof(line) - (size_t)n, "-");
	snprintf(line + n, sizeof(line) - (size_t)n, " failed=%d report_ms=%.1f", fail_count, since_told);
	out("%s", line);
}

int main(int argc, char **argv)
{
	if (argc != 5 && argc != 6) {
		fprintf(stderr, "usage: kill_peer rc|uc|ud|srq|shcq|chan|cm <self> <nodes> <seed> [fork]\n");
		return 2;
	}
	mode = RC;
	for (int m = 0; m <= CM; m++)
		if (!strcmp(argv[1], mode_names[m]))
			mode = (enum mode)m;
	self = atoi(argv[2]);
	nodes = atoi(argv[3]);
	rng = strtoull(argv[4], NULL, 0) * 2654435761ull + (unsigned)self * 40503u + 1;
	MUST(nodes >= 2 && nodes <= MAX_NODES && self >= 0 && self < nodes, "bad arguments");
	MUST(mode != CM || nodes == 2, "cm runs with two nodes");
	setvbuf(stdout, NULL, _IOLBF, 0);
	signal(SIGSEGV, on_crash);
	signal(SIGBUS, on_crash);
	signal(SIGABRT, on_crash);
	signal(SIGILL, on_crash);
	alloc_buffers();

	char line[512];
	if (mode == CM) {
		cm_ch = rdma_create_event_channel();
		MUST(cm_ch, "rdma_create_event_channel");
		if (self == 0) {
			MUST(!rdma_create_id(cm_ch, &cm_listen, NULL, RDMA_PS_TCP), "rdma_create_id");
			struct sockaddr_in sin = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(0x7f000001) };
			MUST(!rdma_bind_addr(cm_listen, (struct sockaddr *)&sin), "rdma_bind_addr");
			MUST(!rdma_listen(cm_listen, 4), "rdma_listen");
			cm_state = "listening";
			out("INFO %u", ntohs(rdma_get_src_port(cm_listen)));
		} else {
			MUST(!rdma_create_id(cm_ch, &cm_id, NULL, RDMA_PS_TCP), "rdma_create_id");
			cm_state = "idle";
			out("INFO -");
		}
	} else {
		setup_pd_mr(open_rverbs0());
		if (argc == 6 && !strcmp(argv[5], "fork"))
			fork_idle_child();
		MUST(!ibv_query_gid(ctx, 1, 0, &my_gid), "ibv_query_gid");
		char gid[64];
		for (int i = 0; i < 16; i++)
			sprintf(gid + 2 * i, "%02x", my_gid.raw[i]);
		char qpns[128] = "";
		if (mode == UD) {
			ud_qp = create_qp(IBV_QPT_UD);
			ud_ready();
		}
		for (int j = 0; j < nodes; j++) {
			uint32_t q = 0;
			if (j != self) {
				peers[j].present = 1;
				if (mode == UD) {
					peers[j].qp = ud_qp;
				} else {
					peers[j].qp = create_qp(mode == UC ? IBV_QPT_UC : IBV_QPT_RC);
					to_init(peers[j].qp);
				}
				q = peers[j].qp->qp_num;
			}
			sprintf(qpns + strlen(qpns), " %u", q);
		}
		out("INFO %s %u %" PRIu64 "%s", gid, mr->rkey, (uint64_t)(uintptr_t)buf, qpns);
	}

	/* Setup: until START or a death. */
	double told_at = -1;
	int go = 0, done = 0;
	double t0 = now_ms();
	while (!done && !go) {
		if (now_ms() - t0 > 60000) {
			fail("no START within 60 s");
			break;
		}
		if (mode == CM && cm_ch)
			cm_step(0);
		if (!read_line(line, sizeof(line), mode == CM ? 5 : 1000)) {
			if (stdin_eof)
				return 3;
			continue;
		}
		int i;
		if (sscanf(line, "PEER %d", &i) == 1 && i >= 0 && i < nodes && i != self) {
			struct peer *p = &peers[i];
			if (mode == CM) {
				unsigned port;
				if (self == 1 && sscanf(line, "PEER %*d %u", &port) == 1) {
					struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
								   .sin_addr.s_addr = htonl(0x7f000001) };
					cm_state = "resolving";
					MUST(!rdma_resolve_addr(cm_id, NULL, (struct sockaddr *)&sin, 2000), "rdma_resolve_addr");
				}
				continue;
			}
			char gid[64];
			uint64_t addr;
			uint32_t rkey, q[MAX_NODES] = { 0 };
			int k = sscanf(line, "PEER %*d %63s %u %" SCNu64 " %u %u %u %u", gid, &rkey, &addr, &q[0], &q[1],
				       &q[2], &q[3]);
			MUST(k >= 3 + nodes, "bad PEER line: %s", line);
			for (int b = 0; b < 16; b++)
				sscanf(gid + 2 * b, "%2hhx", &p->gid.raw[b]);
			p->rkey = rkey;
			p->addr = addr;
			p->qpn = q[self];
		} else if (!strcmp(line, "CONNECT") && mode != CM) {
			for (int j = 0; j < nodes; j++) {
				if (!peers[j].present)
					continue;
				if (mode == UD) {
					struct ibv_ah_attr aa = { .is_global = 1, .port_num = 1,
								  .grh = { .dgid = peers[j].gid, .sgid_index = 0, .hop_limit = 1 } };
					peers[j].ah = ibv_create_ah(pd, &aa);
					MUST(peers[j].ah, "ibv_create_ah");
				} else {
					connect_qp(&peers[j]);
				}
				peers[j].deadline_ms = deadline_for(peers[j].qp);
			}
			post_initial_recvs();
			connected = 1;
			out("READY");
		} else if (!strcmp(line, "START")) {
			go = 1;
		} else if (sscanf(line, "DEAD %d", &i) == 1 && i >= 0 && i < nodes) {
			peers[i].dead = 1;
			told_at = now_ms();
			done = 1;
		} else if (!strcmp(line, "EXIT")) {
			return 0;
		}
	}

	/* Traffic: keep WINDOW signaled WRs outstanding per live peer, until a death. */
	double t_start = now_ms();
	while (go && !done) {
		if (now_ms() - t_start > 120000) {
			fail("no DEAD within 120 s of START");
			break;
		}
		for (int j = 0; j < nodes; j++) {
			struct peer *p = &peers[j];
			/* An error completion means the QP is in ERR (the node noticed the death
			 * before being told): posting more would only flush. */
			if (!p->present || p->dead || !connected || p->err + p->flushed)
				continue;
			while (p->outstanding < WINDOW && !failed)
				if (!post_one(j))
					break;
		}
		step(50);
		int i;
		if (read_line(line, sizeof(line), 0)) {
			if (sscanf(line, "DEAD %d", &i) == 1 && i >= 0 && i < nodes) {
				peers[i].dead = 1;
				told_at = now_ms();
				done = 1;
			} else if (!strcmp(line, "EXIT")) {
				return 0;
			}
		} else if (stdin_eof) {
			return 3;
		}
	}
	if (told_at < 0)
		told_at = now_ms();

	/* Drain: a few more WRs to the dead node, then every outstanding WR must complete
	 * by the deadline; live peers keep completing (we do not post more to them). */
	for (int j = 0; j < nodes; j++) {
		struct peer *p = &peers[j];
		if (p->present && p->dead && connected && (mode != CM || cm_id->qp)) {
			for (int k = 0; k < AFTER_DEATH; k++)
				if (post_one(j))
					p->after_posted++;
		}
	}
	double deadline = 0;
	for (int j = 0; j < nodes; j++)
		if (peers[j].present && peers[j].deadline_ms > deadline)
			deadline = peers[j].deadline_ms;
	if (deadline == 0)
		deadline = deadline_for(NULL);
	if (mode == CM && deadline < 10000)
		deadline = 10000; /* rdma_cm learns of the death through its own pidfd watch */
	int cm_needs_event = mode == CM && cm_id && strcmp(cm_state, "idle") != 0 && !cm_terminal;
	for (;;) {
		double el = now_ms() - told_at;
		for (int j = 0; j < nodes; j++)
			if (peers[j].present && peers[j].dead && peers[j].outstanding == 0 && peers[j].drain_ms == 0)
				peers[j].drain_ms = el > 0 ? el : 0.001;
		int cm_wait = cm_needs_event && !cm_terminal;
		if (total_outstanding() == 0 && !cm_wait)
			break;
		if (el > deadline) {
			if (total_outstanding())
				fail("%d send WR(s) still outstanding %.0f ms after the death (deadline %.0f ms)",
				     total_outstanding(), el, deadline);
			if (cm_wait)
				fail("no terminal rdma_cm event (state %s) %.0f ms after the death", cm_state, el);
			break;
		}
		if (mode == CHAN && total_outstanding())
			chan_wait(50);
		else
			poll_cqs();
		if (mode == CM)
			cm_step(total_outstanding() ? 0 : 20);
	}
	for (int j = 0; j < nodes; j++) {
		struct peer *p = &peers[j];
		if (p->present && !p->dead && p->err + p->flushed)
			fail("%lu WR(s) to live node %d completed in error", p->err + p->flushed, j);
	}
	account_dead_receives();
	if (!canaries_intact())
		fail("a byte outside the registered region changed");
	report(now_ms() - told_at);

	/* Until EXIT: keep receives replenished so live peers' WRs complete. */
	double t_exit = now_ms();
	while (now_ms() - t_exit < 60000) {
		if (read_line(line, sizeof(line), 1)) {
			if (!strcmp(line, "EXIT"))
				break;
			if (!strcmp(line, "QUIET")) {
				account_srq();
				out("QUIETED");
			}
		}
		if (stdin_eof)
			break;
		poll_cqs();
		if (mode == CM)
			cm_step(0);
	}
	return failed ? 1 : 0;
}
