/* What the two-host test programs of tests/conformance share (xrc_net.c, rc_rules.c): the
 * device they open, the byte pattern they write and check, whole reads and writes on the
 * TCP socket they exchange numbers and verdicts over, its two ends, and a monotonic clock
 * for their bounded waits. Header-only: each program is one `cc` invocation (see the scripts). */
#ifndef RVERBS_CONFORMANCE_PEER_IO_H
#define RVERBS_CONFORMANCE_PEER_IO_H

#include <arpa/inet.h>
#include <netdb.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/socket.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>

/* Byte i of the pattern seeded `seed`. */
static inline uint8_t pattern(uint32_t seed, uint32_t i)
{
	return (uint8_t)(i * 13u + seed * 7u + (i >> 8));
}

static inline void fill(uint8_t *p, uint32_t len, uint32_t seed)
{
	for (uint32_t i = 0; i < len; i++)
		p[i] = pattern(seed, i);
}

/* Whether p holds the first len bytes of the pattern seeded `seed`. */
static inline int same(const uint8_t *p, uint32_t len, uint32_t seed)
{
	for (uint32_t i = 0; i < len; i++)
		if (p[i] != pattern(seed, i))
			return 0;
	return 1;
}

/* Writes (out) or reads exactly n bytes; -1 when the socket fails or closes. */
static inline int io_all(int fd, void *p, size_t n, int out)
{
	uint8_t *b = p;

	while (n > 0) {
		ssize_t r = out ? write(fd, b, n) : read(fd, b, n);

		if (r <= 0)
			return -1;
		b += r;
		n -= (size_t)r;
	}
	return 0;
}

static inline double now_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* The client's end: a TCP connection to host:port (IPv4), or -1. */
static inline int tcp_connect(const char *host, int port)
{
	struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res;
	char service[16];
	int fd;

	snprintf(service, sizeof(service), "%d", port);
	if (getaddrinfo(host, service, &hints, &res))
		return -1;
	fd = socket(res->ai_family, res->ai_socktype, 0);
	if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen)) {
		close(fd);
		fd = -1;
	}
	freeaddrinfo(res);
	return fd;
}

/* The server's end: the one connection accepted on port, or -1. */
static inline int tcp_accept(int port)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	int one = 1, l = socket(AF_INET, SOCK_STREAM, 0), fd;

	if (l < 0)
		return -1;
	setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(l, (struct sockaddr *)&sa, sizeof(sa)) || listen(l, 1)) {
		close(l);
		return -1;
	}
	fd = accept(l, NULL, NULL);
	close(l);
	return fd;
}

/* Opens the device named `dev` (NULL: the last one listed); NULL if there is none or it
 * cannot be opened. */
static inline struct ibv_context *open_named_device(const char *dev)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_device *d = NULL;
	struct ibv_context *ctx;

	if (!list)
		return NULL;
	for (int i = 0; list[i]; i++)
		if (!dev || !strcmp(ibv_get_device_name(list[i]), dev))
			d = list[i];
	ctx = d ? ibv_open_device(d) : NULL;
	ibv_free_device_list(list);
	return ctx;
}

#endif
