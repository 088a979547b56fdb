/* Registration cost: ibv_reg_mr + ibv_dereg_mr of a fresh anonymous mapping of SIZE MiB (never
 * touched, as freshly malloc'd memory is), N times; prints the mean time of ibv_reg_mr.
 *
 *   scripts/build-dropin.sh >/dev/null
 *   gcc -O2 -o /tmp/reg_mr scripts/bench/reg_mr.c -L target/dropin -libverbs
 *   LD_LIBRARY_PATH=target/dropin /tmp/reg_mr 64 20
 */
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }
int main(int argc, char **argv) {
    size_t size = (size_t)atol(argv[1]) << 20; int n = atoi(argv[2]);
    int nd; struct ibv_device **l = ibv_get_device_list(&nd);
    struct ibv_context *c = ibv_open_device(l[0]); struct ibv_pd *pd = ibv_alloc_pd(c);
    double total = 0;
    for (int i = 0; i < n; i++) {
        void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        double t0 = now();
        struct ibv_mr *mr = ibv_reg_mr(pd, p, size, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
        total += now() - t0;
        if (!mr) { perror("reg_mr"); return 1; }
        ibv_dereg_mr(mr); munmap(p, size);
    }
    printf("reg_mr %zu MiB: %.1f us\n", size >> 20, total / n * 1e6);
    return 0;
}
