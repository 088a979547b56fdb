/* Foreign and freed rdma_cm object pointers (docs/capi.md: they are refused, not
 * dereferenced): 4 bytes that end where a PROT_NONE page begins (a read past them
 * faults, so the test fails if the library reads through the pointer), a malloc(4) and
 * a stack byte, cast to rdma_event_channel / rdma_cm_id / rdma_cm_event:
 *  - rdma_get_cm_event, rdma_create_id (channel), rdma_migrate_id (channel),
 *    rdma_destroy_id, rdma_bind_addr, rdma_ack_cm_event: -1 with errno EINVAL;
 *    rdma_destroy_event_channel (void) returns;
 *  - a destroyed channel, a destroyed id: refused the same way.
 */
#include <arpa/inet.h>
#include <sys/mman.h>
#include <unistd.h>
#include <rdma/rdma_cma.h>

#include "common.h"

/* `n` bytes ending where a PROT_NONE page begins. */
static void *end_of_page(size_t n)
{
	long pg = sysconf(_SC_PAGESIZE);
	char *p = mmap(NULL, 2 * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	REQUIRE(p != MAP_FAILED && mprotect(p + pg, pg, PROT_NONE) == 0, "guard page");
	memset(p + pg - n, 0x5a, n);
	return p + pg - n;
}

static void refuse_all(const char *what, void *f, struct rdma_cm_id *live_id)
{
	struct rdma_cm_event *ev = NULL;
	struct rdma_cm_id *id = NULL;
	struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};

	printf("# %s\n", what);
	errno = 0;
	CHECK(rdma_get_cm_event(f, &ev) == -1 && errno == EINVAL && ev == NULL,
	      "%s: rdma_get_cm_event(channel) -> -1/EINVAL", what);
	errno = 0;
	CHECK(rdma_create_id(f, &id, NULL, RDMA_PS_TCP) == -1 && errno == EINVAL && id == NULL,
	      "%s: rdma_create_id(channel) -> -1/EINVAL", what);
	errno = 0;
	CHECK(rdma_migrate_id(live_id, f) == -1 && errno == EINVAL,
	      "%s: rdma_migrate_id(live id, channel) -> -1/EINVAL", what);
	errno = 0;
	CHECK(rdma_bind_addr(f, (struct sockaddr *)&sin) == -1 && errno == EINVAL,
	      "%s: rdma_bind_addr(id) -> -1/EINVAL", what);
	errno = 0;
	CHECK(rdma_destroy_id(f) == -1 && errno == EINVAL, "%s: rdma_destroy_id -> -1/EINVAL", what);
	errno = 0;
	CHECK(rdma_ack_cm_event(f) == -1 && errno == EINVAL,
	      "%s: rdma_ack_cm_event -> -1/EINVAL", what);
	rdma_destroy_event_channel(f);
	CHECK(1, "%s: rdma_destroy_event_channel returns", what);
}

int main(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_event_channel *dead_ch;
	struct rdma_cm_id *id = NULL, *dead_id = NULL;
	struct rdma_cm_event *ev = NULL;
	char stack_byte = 0x5a;
	void *small = malloc(4);

	REQUIRE(ch && small, "setup: channel, malloc(4)");
	REQUIRE(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0, "rdma_create_id");
	memset(small, 0x5a, 4);
	refuse_all("4 bytes before a PROT_NONE page", end_of_page(4), id);
	refuse_all("malloc(4)", small, id);
	refuse_all("a stack byte", &stack_byte, id);

	printf("# destroyed objects\n");
	REQUIRE(rdma_create_id(ch, &dead_id, NULL, RDMA_PS_TCP) == 0 &&
		      rdma_destroy_id(dead_id) == 0,
	      "create + destroy an id");
	errno = 0;
	CHECK(rdma_destroy_id(dead_id) == -1 && errno == EINVAL,
	      "rdma_destroy_id of a destroyed id -> -1/EINVAL");
	dead_ch = rdma_create_event_channel();
	REQUIRE(dead_ch != NULL, "a second channel");
	rdma_destroy_event_channel(dead_ch);
	errno = 0;
	CHECK(rdma_get_cm_event(dead_ch, &ev) == -1 && errno == EINVAL,
	      "rdma_get_cm_event on a destroyed channel -> -1/EINVAL");
	errno = 0;
	CHECK(rdma_migrate_id(id, dead_ch) == -1 && errno == EINVAL,
	      "rdma_migrate_id to a destroyed channel -> -1/EINVAL");
	rdma_destroy_event_channel(dead_ch);
	CHECK(1, "rdma_destroy_event_channel of a destroyed channel returns");

	REQUIRE(rdma_destroy_id(id) == 0, "teardown: id");
	rdma_destroy_event_channel(ch);
	free(small);
	printf("# cm_foreign_ptr: all checks passed\n");
	return 0;
}
