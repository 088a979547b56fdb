/* A plain TCP program (POSIX sockets only; it knows nothing of RDMA) for
 * tests/conformance/rsockets.sh, which runs it under rdma-core's librspreload.so:
 *
 *   tcpcopy server PORT OUTFILE      accept one connection on 127.0.0.1:PORT (or the
 *                                    address in $TCPCOPY_ADDR), write every byte
 *                                    received until EOF to OUTFILE, answer "got N\n"
 *   tcpcopy client HOST PORT INFILE  send INFILE, shut the write side down, print
 *                                    the server's answer
 *
 * Uses accept(2) (not accept4, which the preload library of rdma-core 44 does not
 * intercept), read(2)/write(2), send/recv, shutdown(2) and close(2). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static void die(const char *what)
{
	fprintf(stderr, "tcpcopy: %s: %s\n", what, strerror(errno));
	exit(1);
}

static void write_all(int fd, const char *p, size_t n)
{
	while (n) {
		ssize_t w = write(fd, p, n);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			die("write");
		}
		p += w;
		n -= (size_t)w;
	}
}

int main(int argc, char **argv)
{
	static char buf[1 << 16];
	struct sockaddr_in sin;
	memset(&sin, 0, sizeof(sin));
	sin.sin_family = AF_INET;

	if (argc == 4 && !strcmp(argv[1], "server")) {
		const char *a = getenv("TCPCOPY_ADDR");
		int one = 1, l = socket(AF_INET, SOCK_STREAM, 0);
		if (l < 0)
			die("socket");
		setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		sin.sin_port = htons((unsigned short)atoi(argv[2]));
		inet_pton(AF_INET, a ? a : "127.0.0.1", &sin.sin_addr);
		if (bind(l, (struct sockaddr *)&sin, sizeof(sin)) || listen(l, 1))
			die("bind/listen");
		int c = accept(l, NULL, NULL);
		if (c < 0)
			die("accept");
		int out = open(argv[3], O_WRONLY | O_CREAT | O_TRUNC, 0600);
		if (out < 0)
			die("open");
		long long n = 0;
		for (;;) {
			ssize_t r = recv(c, buf, sizeof(buf), 0);
			if (r < 0) {
				if (errno == EINTR)
					continue;
				die("recv");
			}
			if (r == 0)
				break;
			write_all(out, buf, (size_t)r);
			n += r;
		}
		close(out);
		int len = snprintf(buf, sizeof(buf), "got %lld\n", n);
		write_all(c, buf, (size_t)len);
		close(c);
		close(l);
		printf("server: received %lld bytes\n", n);
		return 0;
	}
	if (argc == 5 && !strcmp(argv[1], "client")) {
		int s = socket(AF_INET, SOCK_STREAM, 0);
		if (s < 0)
			die("socket");
		sin.sin_port = htons((unsigned short)atoi(argv[3]));
		if (inet_pton(AF_INET, argv[2], &sin.sin_addr) != 1)
			die("address");
		if (connect(s, (struct sockaddr *)&sin, sizeof(sin)))
			die("connect");
		int in = open(argv[4], O_RDONLY);
		if (in < 0)
			die("open");
		long long n = 0;
		for (;;) {
			ssize_t r = read(in, buf, sizeof(buf));
			if (r < 0)
				die("read");
			if (r == 0)
				break;
			write_all(s, buf, (size_t)r);
			n += r;
		}
		close(in);
		if (shutdown(s, SHUT_WR))
			die("shutdown");
		size_t got = 0;
		for (;;) {
			ssize_t r = read(s, buf + got, sizeof(buf) - 1 - got);
			if (r < 0)
				die("read reply");
			if (r == 0)
				break;
			got += (size_t)r;
		}
		buf[got] = 0;
		close(s);
		printf("client: sent %lld bytes, server said: %s", n, buf);
		return 0;
	}
	fprintf(stderr, "usage: tcpcopy server PORT OUTFILE | client HOST PORT INFILE\n");
	return 2;
}
