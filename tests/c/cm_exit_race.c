/* A thread racing with the process's exit (docs/capi.md, "Threads racing with exit"):
 * rping's CM thread loops on rdma_get_cm_event while its main thread destroys the event
 * channel and returns from main. Once the library's exit handlers run:
 *  - the exiting thread's own rdma_get_cm_event / ibv_get_cq_event on a destroyed
 *    channel is -1/EINVAL, as before exit (it must not wait for itself);
 *  - another thread's waits (2 s) for the exit to end the process, with main's status;
 *    an exit that waits for that thread (a destructor joining it) goes on once the
 *    call has failed with -1/EINVAL after that bounded wait.
 * Before exit, another thread's call is -1/EINVAL at once.
 *
 * The checks run in an atexit handler registered before the device is opened, so it runs
 * after the library's handlers have started (atexit(3): reverse order of registration).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <time.h>
#include <rdma/rdma_cma.h>

#include "common.h"

static struct rdma_event_channel *dead_cm;
static struct ibv_comp_channel *dead_comp;
static volatile int returned;

static void *cm_getter(void *arg)
{
	struct rdma_cm_event *ev = NULL;

	(void)arg;
	if (rdma_get_cm_event(dead_cm, &ev) == -1 && errno == EINVAL)
		returned = EINVAL;
	else
		returned = -1;
	return NULL;
}

static void *comp_getter(void *arg)
{
	struct ibv_cq *cq = NULL;
	void *ctx = NULL;

	(void)arg;
	returned = ibv_get_cq_event(dead_comp, &cq, &ctx) == -1 && errno == EINVAL ? EINVAL : -1;
	return NULL;
}

/* Whether thread `t` ended within `secs` seconds (then it is joined). */
static int ends_within(pthread_t t, int secs)
{
	struct timespec until;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += secs;
	return pthread_timedjoin_np(t, NULL, &until) == 0;
}

/* Starts `fn` on a thread; whether it returned within `secs` seconds. */
static int returns_within(void *(*fn)(void *), int secs)
{
	pthread_t t;

	returned = 0;
	if (pthread_create(&t, NULL, fn, NULL) != 0)
		return -1;
	return ends_within(t, secs);
}

/* In an atexit handler a failure leaves with _exit (exit may not be called again). */
#define CHECK_AT_EXIT(cond, ...)                                             \
	do {                                                                 \
		int held_ = (cond);                                          \
		printf(held_ ? "ok - " : "FAIL - ");                         \
		printf(__VA_ARGS__);                                         \
		printf("\n");                                                \
		if (!held_) {                                                \
			fflush(stdout);                                      \
			_exit(1);                                            \
		}                                                            \
	} while (0)

static void during_exit(void)
{
	struct rdma_cm_event *ev = NULL;
	struct ibv_cq *cq = NULL;
	void *ctx = NULL;

	errno = 0;
	CHECK_AT_EXIT(rdma_get_cm_event(dead_cm, &ev) == -1 && errno == EINVAL,
		      "during exit, the exiting thread: rdma_get_cm_event(destroyed channel) -> -1/EINVAL");
	errno = 0;
	CHECK_AT_EXIT(ibv_get_cq_event(dead_comp, &cq, &ctx) == -1 && errno == EINVAL,
		      "during exit, the exiting thread: ibv_get_cq_event(destroyed channel) -> -1/EINVAL");
	/* A call that returned at once fails the first check; one that waits for the exit
	 * is still waiting a second later, and fails after its bounded wait (2 s), so that
	 * this handler, which waits for the thread as a destructor joining it would, goes
	 * on. */
	for (int i = 0; i < 2; i++) {
		void *(*fn)(void *) = i == 0 ? cm_getter : comp_getter;
		const char *call = i == 0 ? "rdma_get_cm_event" : "ibv_get_cq_event";
		pthread_t t;

		returned = 0;
		CHECK_AT_EXIT(pthread_create(&t, NULL, fn, NULL) == 0, "pthread_create");
		CHECK_AT_EXIT(!ends_within(t, 1),
			      "during exit, another thread: %s(destroyed channel) waits for the exit", call);
		CHECK_AT_EXIT(ends_within(t, 20) && returned == EINVAL,
			      "during exit, an exit that waits for that thread goes on: its %s fails with -1/EINVAL after the bounded wait", call);
	}
	printf("# cm_exit_race: all checks passed\n");
	fflush(stdout);
}

int main(void)
{
	struct ibv_device *dev;
	struct ibv_context *vctx;

	REQUIRE(atexit(during_exit) == 0, "atexit");
	dev = find_rverbs0();
	vctx = ibv_open_device(dev);
	REQUIRE(vctx != NULL, "ibv_open_device");
	dead_cm = rdma_create_event_channel();
	REQUIRE(dead_cm != NULL, "rdma_create_event_channel");
	rdma_destroy_event_channel(dead_cm);
	dead_comp = ibv_create_comp_channel(vctx);
	REQUIRE(dead_comp != NULL, "ibv_create_comp_channel");
	REQUIRE(ibv_destroy_comp_channel(dead_comp) == 0, "ibv_destroy_comp_channel");

	CHECK(returns_within(cm_getter, 10) == 1 && returned == EINVAL,
	      "before exit, another thread: rdma_get_cm_event(destroyed channel) -> -1/EINVAL");
	CHECK(returns_within(comp_getter, 10) == 1 && returned == EINVAL,
	      "before exit, another thread: ibv_get_cq_event(destroyed channel) -> -1/EINVAL");
	/* The device stays open: its handlers run at exit whatever the program closed. */
	return 0;
}
