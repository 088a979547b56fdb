/* read-before-completion: a receiver polls its receive buffer for the message instead
 * of polling the CQ, although ibv_query_qp_data_in_order(3) answers 0 for SENDs on its
 * QP: the bytes are guaranteed to be in the buffer only once the completion was polled
 * (ibv_poll_cq(3)). The sender is another process (forked before any verb), and the
 * receive buffer is private to the receiver (a MAP_SHARED anonymous mapping stays where
 * it is: peers write it with cross-memory attach, whose kernel copy makes no ordering
 * promise), which is what makes rverbs answer 0. The sanitizer places the message late
 * (at the poll), so the early read sees the old bytes, and reports it with the read's
 * line. --fixed polls the completion first, then reads. */
#include <sys/mman.h>
#include <sys/wait.h>

#include "sanitizer.h"

#define WR_ID 0x62
#define MSG "hello from the peer"

/* The sender: connects to the receiver's QP, sends MSG once told to, says when its
 * completion arrived. */
static int sender(int from, int to)
{
	struct side s;
	uint32_t qpn;
	char go;
	struct ibv_sge sge;
	struct ibv_send_wr wr = {.wr_id = 1, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_SIGNALED};
	struct ibv_send_wr *bad = NULL;
	struct ibv_wc wc;

	make_side(&s, IBV_QPT_RC, 16, 16);
	put(to, &s.qp->qp_num, sizeof(s.qp->qp_num));
	get(from, &qpn, sizeof(qpn));
	to_rts(s.qp, qpn, loopback_gid_index(s.ctx), ALL_ACCESS);
	get(from, &go, 1);
	snprintf(s.buf, 64, MSG);
	sge = (struct ibv_sge){.addr = (uintptr_t)s.buf, .length = 64, .lkey = s.mr->lkey};
	REQUIRE(ibv_post_send(s.qp, &wr, &bad) == 0, "ibv_post_send (SEND)");
	wc = poll_one(s.send_cq);
	REQUIRE(wc.status == IBV_WC_SUCCESS, "the SEND completes (%s)", ibv_wc_status_str(wc.status));
	put(to, "s", 1);
	get(from, &go, 1); /* the receiver is done with the QP */
	free_side(&s);
	return 0;
}

int main(int argc, char **argv)
{
	int fixed = fixed_run(argc, argv);
	int down[2], up[2], status = 0;
	struct side r;
	struct ibv_mr *mr;
	struct ibv_sge sge;
	struct ibv_recv_wr wr = {.wr_id = WR_ID, .sg_list = &sge, .num_sge = 1};
	struct ibv_recv_wr *bad = NULL;
	struct ibv_wc wc;
	uint32_t peer;
	volatile char *buf;
	char seen = 0, sent;
	long spins = 0;
	pid_t pid;

	setvbuf(stdout, NULL, _IOLBF, 0);
	REQUIRE(pipe(down) == 0 && pipe(up) == 0, "pipe");
	pid = fork();
	REQUIRE(pid >= 0, "fork");
	if (pid == 0) {
		/* Only the parent writes down and reads up: a receiver that dies (abort) ends
		 * the sender's reads. */
		close(down[1]);
		close(up[0]);
		exit(sender(down[0], up[1]));
	}
	close(down[0]);
	close(up[1]);
	make_side(&r, IBV_QPT_RC, 16, 16);
	buf = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	REQUIRE(buf != MAP_FAILED, "mmap");
	mr = ibv_reg_mr(r.pd, (void *)buf, 4096, IBV_ACCESS_LOCAL_WRITE);
	REQUIRE(mr != NULL, "ibv_reg_mr (receive buffer)");
	get(up[0], &peer, sizeof(peer));
	put(down[1], &r.qp->qp_num, sizeof(r.qp->qp_num));
	to_rts(r.qp, peer, loopback_gid_index(r.ctx), ALL_ACCESS);
	REQUIRE(ibv_query_qp_data_in_order(r.qp, IBV_WR_SEND, 0) == 0,
		"SENDs are not guaranteed in order on this QP (a private region here)");
	sge = (struct ibv_sge){.addr = (uintptr_t)buf, .length = 4096, .lkey = mr->lkey};
	REQUIRE(ibv_post_recv(r.qp, &wr, &bad) == 0, "ibv_post_recv");
	printf("qpn 0x%x lkey 0x%x addr 0x%lx wr_id 0x%x\n", r.qp->qp_num, mr->lkey,
	       (unsigned long)(uintptr_t)buf, WR_ID);
	put(down[1], "g", 1);
	get(up[0], &sent, 1); /* the peer's SEND completed: the message was placed */
	if (fixed) {
		wc = poll_one(r.recv_cq);
		seen = buf[0];
	} else {
		while (spins++ < 1000 && (seen = buf[0]) != 'h') /* BUG */
			;
		printf("early read saw %s\n", seen == 'h' ? "the message" : "the old bytes");
		wc = poll_one(r.recv_cq);
	}
	REQUIRE(wc.wr_id == WR_ID && wc.status == IBV_WC_SUCCESS && wc.byte_len == 64,
		"the receive completes (%s, %u bytes)", ibv_wc_status_str(wc.status), wc.byte_len);
	REQUIRE(!strcmp((const char *)buf, MSG), "after the poll the buffer holds the message");
	put(down[1], "d", 1);
	REQUIRE(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0,
		"the sender exits 0");
	REQUIRE(ibv_dereg_mr(mr) == 0, "ibv_dereg_mr (receive buffer)");
	munmap((void *)buf, 4096);
	free_side(&r);
	printf("done\n");
	return 0;
}
