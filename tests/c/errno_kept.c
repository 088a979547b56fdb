/* A verb that succeeds leaves the caller's errno alone, even when internal work failed
 * on the way: here UDP port 4791 is taken by a socket of this program before the device
 * starts, so the device's bind of <address>:4791 fails (EADDRINUSE) and it falls back to
 * an ephemeral port (docs/network.md). The application must not find that
 * EADDRINUSE in errno after ibv_get_device_list / ibv_open_device succeeded (it would
 * print it as its own error, as ibv_rc_pingpong does on a later failure).
 *
 * The harness runs this with RVERBS_LOG=rverbs=debug and checks that the device did
 * report the failed bind, so the test cannot pass without the failure it is about.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common.h"

int main(void)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(4791),
				 .sin_addr = {.s_addr = htonl(INADDR_ANY)}};
	int s = socket(AF_INET, SOCK_DGRAM, 0), n = -1, found = 0;
	struct ibv_device **list;
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;

	setvbuf(stdout, NULL, _IOLBF, 0);
	REQUIRE(s >= 0, "socket");
	/* Taken by us, or already by another process: either way the device's bind fails. */
	if (bind(s, (struct sockaddr *)&sa, sizeof(sa)) == 0)
		printf("# 0.0.0.0:4791 bound by this program\n");
	else
		CHECK(errno == EADDRINUSE, "0.0.0.0:4791 is already taken by another process");

	errno = 0;
	list = ibv_get_device_list(&n);
	CHECK(list != NULL && n >= 1 && errno == 0,
	      "ibv_get_device_list succeeds and leaves errno 0 (got %d)", errno);
	for (int i = 0; i < n; i++) {
		if (strcmp(ibv_get_device_name(list[i]), "rverbs0"))
			continue;
		found = 1;
		errno = 0;
		ctx = ibv_open_device(list[i]);
		CHECK(ctx != NULL && errno == 0,
		      "ibv_open_device succeeds with port 4791 taken and leaves errno 0 (got %d)",
		      errno);
		errno = 0;
		pd = ibv_alloc_pd(ctx);
		cq = ibv_create_cq(ctx, 4, NULL, NULL, 0);
		CHECK(pd && cq && errno == 0, "ibv_alloc_pd, ibv_create_cq leave errno 0");
		errno = EPIPE;
		CHECK(ibv_destroy_cq(cq) == 0 && ibv_dealloc_pd(pd) == 0 &&
			      ibv_close_device(ctx) == 0 && errno == EPIPE,
		      "destroy/dealloc/close leave the caller's errno (EPIPE) as it was");
	}
	CHECK(found, "rverbs0 is listed");
	ibv_free_device_list(list);
	close(s);
	printf("# errno_kept: all checks passed\n");
	return 0;
}
