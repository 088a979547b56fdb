/* Resize cost and the mappings it leaves: ibv_resize_cq of one CQ N times, alternately to
 * 32 and 64 entries; prints the mean time of a resize and the process's mappings after
 * (/proc/self/maps lines). Stops at the first failing resize and prints its errno.
 *
 *   scripts/build-dropin.sh >/dev/null
 *   gcc -O2 -o /tmp/resize_cq scripts/bench/resize_cq.c -L target/dropin -libverbs
 *   LD_LIBRARY_PATH=target/dropin /tmp/resize_cq 20000
 */
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }
int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 20000;
    int nd; struct ibv_device **l = ibv_get_device_list(&nd);
    if (!l || !nd) { fprintf(stderr, "no device\n"); return 1; }
    struct ibv_context *c = ibv_open_device(l[0]);
    struct ibv_cq *cq = ibv_create_cq(c, 16, NULL, NULL, 0);
    if (!cq) { perror("ibv_create_cq"); return 1; }
    double t0 = now();
    for (int i = 0; i < n; i++) {
        int r = ibv_resize_cq(cq, (i & 1) ? 64 : 32);
        if (r) { fprintf(stderr, "resize %d failed: errno %d\n", i, r); return 1; }
    }
    double us = (now() - t0) * 1e6 / n;
    FILE *f = fopen("/proc/self/maps", "r"); int lines = 0, ch;
    while ((ch = fgetc(f)) != EOF) lines += ch == '\n';
    fclose(f);
    printf("ibv_resize_cq: %.2f us each over %d; %d mappings after\n", us, n, lines);
    ibv_destroy_cq(cq); ibv_close_device(c); ibv_free_device_list(l);
    return 0;
}
