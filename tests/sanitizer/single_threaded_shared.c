/* single-threaded-cq-shared: a CQ created with IBV_CREATE_CQ_ATTR_SINGLE_THREADED, whose
 * provider then takes no lock (ibv_create_cq_ex(3): the application accesses it from one
 * thread), polled by a second thread while the first is inside a batch of extended
 * polling. Two barriers make the overlap certain: the second thread polls after the
 * first opened its batch and before it ends it. --fixed ends the batch before the
 * second thread polls. */
#include <pthread.h>

#include "sanitizer.h"

struct shared {
	struct ibv_cq_ex *cq;
	pthread_barrier_t entered, done;
	int polled;
};

static void *second(void *p)
{
	struct shared *s = p;
	struct ibv_wc wc;

	pthread_barrier_wait(&s->entered);
	s->polled = ibv_poll_cq(ibv_cq_ex_to_cq(s->cq), 1, &wc); /* BUG */
	pthread_barrier_wait(&s->done);
	return NULL;
}

int main(int argc, char **argv)
{
	struct side a, b;
	struct ibv_cq_init_attr_ex attr = {.cqe = 16, .wc_flags = IBV_WC_STANDARD_FLAGS,
					   .comp_mask = IBV_CQ_INIT_ATTR_MASK_FLAGS,
					   .flags = IBV_CREATE_CQ_ATTR_SINGLE_THREADED};
	struct shared s = {0};
	pthread_t t;
	int fixed = fixed_run(argc, argv);

	make_pair(&a, &b, IBV_QPT_RC, 16, 16);
	s.cq = ibv_create_cq_ex(a.ctx, &attr);
	REQUIRE(s.cq != NULL, "ibv_create_cq_ex(SINGLE_THREADED)");
	reconnect_sending_to(&a, &b, ibv_cq_ex_to_cq(s.cq));
	write_to(&a, 1, 8, (uintptr_t)b.buf, b.mr->rkey);
	write_to(&a, 2, 8, (uintptr_t)b.buf, b.mr->rkey);
	REQUIRE(pthread_barrier_init(&s.entered, NULL, 2) == 0 &&
			pthread_barrier_init(&s.done, NULL, 2) == 0, "pthread_barrier_init");
	REQUIRE(start_poll_bounded(s.cq) == 0 && s.cq->wr_id == 1, "ibv_start_poll: the first WRITE");
	if (fixed)
		ibv_end_poll(s.cq);
	REQUIRE(pthread_create(&t, NULL, second, &s) == 0, "pthread_create");
	pthread_barrier_wait(&s.entered);
	pthread_barrier_wait(&s.done);
	if (!fixed)
		ibv_end_poll(s.cq);
	REQUIRE(pthread_join(t, NULL) == 0, "pthread_join");
	/* Both completions are there before the batch: the second thread gets the other. */
	printf("polled %d\n", s.polled);
	unhook(&a, ibv_cq_ex_to_cq(s.cq));
	free_side(&a);
	free_side(&b);
	printf("done\n");
	return 0;
}
