/*
 * Raw UDP on the same link as the RoCEv2 measurements: the floor a UDP transport stands on.
 *
 *   udp_probe server PORT [poll]          echo 8-byte datagrams; count bulk datagrams
 *                                         (poll: busy-poll the socket instead of sleeping)
 *   udp_probe lat HOST PORT N             N ping-pongs of 8 bytes; prints the typical
 *                                         (median) and average one-way latency in us
 *   udp_probe latpoll HOST PORT N         the same, busy-polling for the answer (run it
 *                                         against a polling server: both sides spin, as
 *                                         perftest's latency tests and UCX do)
 *   udp_probe bw HOST PORT N SIZE         N datagrams of SIZE bytes sent with sendmmsg in
 *                                         batches of 64; the server answers the last one
 *                                         with the count it received; prints MB/s
 *   udp_probe gso HOST PORT N SIZE        the same N datagrams sent as UDP GSO trains
 *                                         (UDP_SEGMENT; as many as one UDP datagram holds,
 *                                         at most 64), 64 trains per sendmmsg; the server
 *                                         takes trains whole (UDP_GRO) and counts segments
 *
 * Not a test: scripts/bench/net_side_by_side.sh runs it between two network namespaces.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define BATCH 64
#define MAXSZ 65536

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif

static double now_us(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static int udp_socket(void)
{
	int s = socket(AF_INET, SOCK_DGRAM, 0);
	int buf = 4 << 20;
	if (s < 0) {
		perror("socket");
		exit(1);
	}
	setsockopt(s, SOL_SOCKET, SO_RCVBUF, &buf, sizeof(buf));
	setsockopt(s, SOL_SOCKET, SO_SNDBUF, &buf, sizeof(buf));
	return s;
}

static int server(int port, int poll)
{
	int s = udp_socket();
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };
	static char bufs[BATCH][MAXSZ];
	static char ctl[BATCH][CMSG_SPACE(sizeof(int))];
	struct mmsghdr m[BATCH];
	struct iovec iov[BATCH];
	struct sockaddr_in from[BATCH];
	uint64_t count = 0;
	int one = 1;

	/* Trains arrive whole; their segment size comes as a UDP_GRO control message. */
	setsockopt(s, IPPROTO_UDP, UDP_GRO, &one, sizeof(one));

	if (bind(s, (struct sockaddr *)&a, sizeof(a))) {
		perror("bind");
		return 1;
	}
	for (;;) {
		for (int i = 0; i < BATCH; i++) {
			iov[i] = (struct iovec){ bufs[i], MAXSZ };
			m[i].msg_hdr = (struct msghdr){ .msg_name = &from[i], .msg_namelen = sizeof(from[i]),
							.msg_iov = &iov[i], .msg_iovlen = 1,
							.msg_control = ctl[i], .msg_controllen = sizeof(ctl[i]) };
		}
		int n = recvmmsg(s, m, BATCH, poll ? MSG_DONTWAIT : MSG_WAITFORONE, NULL);
		if (n < 0 && poll && errno == EAGAIN)
			continue;
		if (n < 0) {
			perror("recvmmsg");
			return 1;
		}
		for (int i = 0; i < n; i++) {
			unsigned len = m[i].msg_len;
			if (len == 8) {
				/* a ping: echo it */
				sendto(s, bufs[i], 8, 0, (struct sockaddr *)&from[i], m[i].msg_hdr.msg_namelen);
			} else if (len == 16) {
				/* end of a bulk run: answer with the count, then reset */
				memcpy(bufs[i] + 8, &count, 8);
				sendto(s, bufs[i], 16, 0, (struct sockaddr *)&from[i], m[i].msg_hdr.msg_namelen);
				count = 0;
			} else {
				int seg = 0;
				for (struct cmsghdr *c = CMSG_FIRSTHDR(&m[i].msg_hdr); c; c = CMSG_NXTHDR(&m[i].msg_hdr, c))
					if (c->cmsg_level == IPPROTO_UDP && c->cmsg_type == UDP_GRO)
						memcpy(&seg, CMSG_DATA(c), sizeof(seg));
				count += seg > 0 ? (len + seg - 1) / seg : 1;
			}
		}
	}
}

int main(int argc, char **argv)
{
	if (argc >= 3 && !strcmp(argv[1], "server"))
		return server(atoi(argv[2]), argc > 3 && !strcmp(argv[3], "poll"));
	if (argc < 5) {
		fprintf(stderr, "usage: %s server PORT | lat HOST PORT N | bw|gso HOST PORT N SIZE\n", argv[0]);
		return 2;
	}
	int s = udp_socket();
	struct sockaddr_in to = { .sin_family = AF_INET, .sin_port = htons(atoi(argv[3])) };
	inet_pton(AF_INET, argv[2], &to.sin_addr);
	if (connect(s, (struct sockaddr *)&to, sizeof(to))) {
		perror("connect");
		return 1;
	}
	long n = atol(argv[4]);
	if (!strcmp(argv[1], "lat") || !strcmp(argv[1], "latpoll")) {
		int poll = !strcmp(argv[1], "latpoll");
		double *rt = calloc(n, sizeof(double)), sum = 0;
		char b[8] = { 0 };
		struct timeval tmo = { .tv_sec = 1 };
		setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tmo, sizeof(tmo));
		for (long i = 0; i < n; i++) {
			double t0 = now_us();
			ssize_t got = -1;
			if (send(s, b, 8, 0) == 8) {
				if (poll) {
					double until = t0 + 1e6;
					do
						got = recv(s, b, 8, MSG_DONTWAIT);
					while (got < 0 && errno == EAGAIN && now_us() < until);
				} else {
					got = recv(s, b, 8, 0);
				}
			}
			if (got != 8) {
				fprintf(stderr, "lost ping %ld\n", i);
				return 1;
			}
			rt[i] = (now_us() - t0) / 2;
			sum += rt[i];
		}
		qsort(rt, n, sizeof(double), cmp_double);
		printf("udp %s 8 B: typical %.2f us, average %.2f us (one way, %ld ping-pongs)\n", argv[1], rt[n / 2], sum / n, n);
		return 0;
	}
	long size = argc > 5 ? atol(argv[5]) : 1052;
	int gso = !strcmp(argv[1], "gso");
	/* gso: each message is a train of as many SIZE-byte datagrams as one UDP datagram
	 * holds, at most BATCH (the kernel cuts it into datagrams). */
	long per = gso ? (65507 / size < BATCH ? 65507 / size : BATCH) : 1;
	static char buf[MAXSZ];
	static char ctl[CMSG_SPACE(sizeof(uint16_t))];
	struct mmsghdr m[BATCH];
	struct iovec iov = { buf, (size_t)(size * per) };
	if (size * per > MAXSZ - 8) {
		fprintf(stderr, "a train of %ld x %ld B does not fit a datagram\n", per, size);
		return 2;
	}
	for (int i = 0; i < BATCH; i++) {
		m[i].msg_hdr = (struct msghdr){ .msg_iov = &iov, .msg_iovlen = 1 };
		if (gso) {
			m[i].msg_hdr.msg_control = ctl;
			m[i].msg_hdr.msg_controllen = sizeof(ctl);
		}
	}
	if (gso) {
		struct cmsghdr *c = CMSG_FIRSTHDR(&m[0].msg_hdr);
		uint16_t seg = (uint16_t)size;
		c->cmsg_level = IPPROTO_UDP;
		c->cmsg_type = UDP_SEGMENT;
		c->cmsg_len = CMSG_LEN(sizeof(seg));
		memcpy(CMSG_DATA(c), &seg, sizeof(seg));
	}
	double t0 = now_us();
	for (long sent = 0; sent < n;) {
		long left = (n - sent) / per;
		int k = left < BATCH ? (int)left : BATCH;
		if (k == 0)
			break;
		int r = sendmmsg(s, m, k, 0);
		if (r > 0)
			sent += r * per;
		else if (r < 0) {
			perror("sendmmsg");
			return 1;
		}
	}
	char end[16] = { 0 };
	struct timeval tmo = { .tv_sec = 2 };
	setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tmo, sizeof(tmo));
	send(s, end, 16, 0);
	if (recv(s, end, 16, 0) != 16) {
		fprintf(stderr, "no count from the server\n");
		return 1;
	}
	double us = now_us() - t0;
	uint64_t got;
	memcpy(&got, end + 8, 8);
	printf("udp %s %ld B datagrams: %.1f MB/s received (%lu of %ld arrived)\n", gso ? "gso" : "bw", size,
	       got * (double)size / us, (unsigned long)got, n);
	return 0;
}
