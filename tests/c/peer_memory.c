/* Device memory and implicit on-demand paging reached by a peer process (issue 25):
 * the parent allocates device memory with a zero-based region over it and registers its
 * whole address space on demand (NULL, SIZE_MAX, IBV_ACCESS_ON_DEMAND), then allocates a
 * buffer after that registration; a forked child (a process of its own on the device,
 * with its own context) connects an RC QP to the parent's and WRITEs into the device
 * memory and into the buffer through the implicit region's rkey, then READs the device
 * memory back. The parent checks the bytes with ibv_memcpy_from_dm and in the buffer
 * (docs/memory.md, "Device memory", "On-demand paging"). */
#include "common.h"

#include <sys/wait.h>
#include <unistd.h>

struct offer {
	uint32_t qpn, dm_rkey, odp_rkey;
	uint64_t later;
};

static int child(int rd, int wr)
{
	struct side c;
	struct offer o;
	struct ibv_wc wc;
	int gid;

	make_side(&c, IBV_QPT_RC, 16, 8);
	gid = loopback_gid_index(c.ctx);
	get(rd, &o, sizeof(o));
	put(wr, &c.qp->qp_num, sizeof(c.qp->qp_num));
	to_rts(c.qp, o.qpn, gid, ALL_ACCESS);
	get(rd, &wc, 1); /* the parent's QP is in RTS */

	strcpy(c.buf, "child -> device memory");
	post_write(&c, 1, 24, 16, o.dm_rkey, IBV_SEND_SIGNALED);
	wc = poll_one(c.send_cq);
	CHECK(wc.status == IBV_WC_SUCCESS, "child: WRITE into the parent's device memory");
	strcpy(c.buf, "child -> implicit ODP!!");
	post_write(&c, 2, 24, o.later + 8, o.odp_rkey, IBV_SEND_SIGNALED);
	wc = poll_one(c.send_cq);
	CHECK(wc.status == IBV_WC_SUCCESS, "child: WRITE into a buffer the parent allocated after its implicit registration");
	{
		struct ibv_sge sge = {.addr = (uintptr_t)c.buf + 1024, .length = 24, .lkey = c.mr->lkey};
		struct ibv_send_wr r = {.wr_id = 3, .sg_list = &sge, .num_sge = 1,
					.opcode = IBV_WR_RDMA_READ, .send_flags = IBV_SEND_SIGNALED};
		struct ibv_send_wr *bad = NULL;

		r.wr.rdma.remote_addr = 16;
		r.wr.rdma.rkey = o.dm_rkey;
		REQUIRE(ibv_post_send(c.qp, &r, &bad) == 0, "child: post READ");
		wc = poll_one(c.send_cq);
		CHECK(wc.status == IBV_WC_SUCCESS && !memcmp(c.buf + 1024, "child -> device memory", 22),
		      "child: READ of the device memory returns what it wrote");
	}
	put(wr, "d", 1);
	destroy_side(&c);
	return 0;
}

int main(void)
{
	struct side p;
	struct ibv_alloc_dm_attr da = {.length = 4096};
	struct ibv_dm *dm;
	struct ibv_mr *dm_mr, *odp;
	struct offer o;
	int to_child[2], to_parent[2], status, gid;
	char buf[32], *later;
	pid_t pid;

	setvbuf(stdout, NULL, _IOLBF, 0);
	REQUIRE(pipe(to_child) == 0 && pipe(to_parent) == 0, "pipes");
	pid = fork();
	REQUIRE(pid >= 0, "fork");
	if (pid == 0) {
		close(to_child[1]);
		close(to_parent[0]);
		exit(child(to_child[0], to_parent[1]));
	}
	close(to_child[0]);
	close(to_parent[1]);

	make_side(&p, IBV_QPT_RC, 16, 8);
	gid = loopback_gid_index(p.ctx);
	dm = ibv_alloc_dm(p.ctx, &da);
	REQUIRE(dm != NULL, "ibv_alloc_dm");
	dm_mr = ibv_reg_dm_mr(p.pd, dm, 0, 4096, IBV_ACCESS_ZERO_BASED | ALL_ACCESS);
	REQUIRE(dm_mr != NULL, "ibv_reg_dm_mr");
	odp = ibv_reg_mr(p.pd, NULL, SIZE_MAX, IBV_ACCESS_ON_DEMAND | IBV_ACCESS_LOCAL_WRITE |
						IBV_ACCESS_REMOTE_WRITE);
	CHECK(odp != NULL, "implicit on-demand registration (NULL, SIZE_MAX, ON_DEMAND)");
	later = malloc(256 * 1024); /* after the registration, and large enough to be a fresh mapping */
	REQUIRE(later != NULL, "malloc");
	memset(later, 0, 256 * 1024);

	o.qpn = p.qp->qp_num;
	o.dm_rkey = dm_mr->rkey;
	o.odp_rkey = odp->rkey;
	o.later = (uintptr_t)later;
	put(to_child[1], &o, sizeof(o));
	{
		uint32_t cqpn;

		get(to_parent[0], &cqpn, sizeof(cqpn));
		to_rts(p.qp, cqpn, gid, ALL_ACCESS);
	}
	put(to_child[1], "r", 1);
	get(to_parent[0], buf, 1);
	REQUIRE(waitpid(pid, &status, 0) == pid, "waitpid");
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child passed its checks");
	CHECK(ibv_memcpy_from_dm(buf, dm, 16, 24) == 0 && !memcmp(buf, "child -> device memory", 22),
	      "parent: the child's bytes are in its device memory");
	CHECK(!memcmp(later + 8, "child -> implicit ODP!!", 23), "parent: and in the buffer allocated after the implicit registration");

	REQUIRE(ibv_dereg_mr(odp) == 0 && ibv_dereg_mr(dm_mr) == 0 && ibv_free_dm(dm) == 0, "cleanup");
	free(later);
	destroy_side(&p);
	printf("# peer_memory: all checks passed\n");
	return 0;
}
