/* The software cost of one RDMA WRITE through the C ABI: ibv_post_send of a signaled
 * 8-byte WRITE between two QPs of this process, then ibv_poll_cq of its completion, in
 * a loop. Prints ns per post+poll for 3 rounds of 2 000 000.
 *
 *   scripts/build-dropin.sh >/dev/null
 *   gcc -O2 -I tests/c -o /tmp/post_poll scripts/bench/post_poll.c -L target/dropin -libverbs
 *   LD_LIBRARY_PATH=target/dropin taskset -c 1 /tmp/post_poll
 */
#include "common.h"
#include <time.h>

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(void)
{
	struct side a, b;
	struct ibv_wc wc;
	const int n = 2000000;

	make_pair(&a, &b, IBV_QPT_RC, 256, 64);
	for (int round = 0; round < 3; round++) {
		double t0 = now();

		for (int i = 0; i < n; i++) {
			struct ibv_sge sge = {.addr = (uintptr_t)a.buf, .length = 8, .lkey = a.mr->lkey};
			struct ibv_send_wr wr = {
				.wr_id = i, .sg_list = &sge, .num_sge = 1,
				.opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED,
			}, *bad;

			wr.wr.rdma.remote_addr = (uintptr_t)b.buf;
			wr.wr.rdma.rkey = b.mr->rkey;
			if (ibv_post_send(a.qp, &wr, &bad)) {
				fprintf(stderr, "post_send failed\n");
				return 1;
			}
			while (ibv_poll_cq(a.send_cq, 1, &wc) == 0)
				;
			if (wc.status != IBV_WC_SUCCESS) {
				fprintf(stderr, "completion status %d\n", wc.status);
				return 1;
			}
		}
		printf("post_send + poll_cq: %.1f ns\n", (now() - t0) / n * 1e9);
	}
	return 0;
}
