/* Sharing a context through its command fd (docs/device.md, "Sharing a context through
 * its command fd"): ibv_import_device(3), ibv_import_pd(3), ibv_import_mr(3), their
 * unimport calls, and ECE (ibv_query_ece(3), ibv_set_ece(3)), which the device does not
 * offer.
 *  - pd->handle and mr->handle are filled at creation and differ between live objects;
 *  - a dup of cmd_fd imports a new context of the same device that owns the dup; a PD
 *    and an MR import into it by handle (the MR with addr NULL, its length and keys);
 *  - RDMA WRITE traffic both ways through a QP created on the imported context and PD,
 *    using the imported MR's lkey and rkey (pyverbs' test_shared_pd does this), and a QP
 *    on the imported PD accepts a CQ of the original context (one command file);
 *  - unimport releases an import without destroying: the original keeps working and
 *    the handle imports again; dealloc/dereg through an import destroys: the handle
 *    names nothing any more (ENOENT), the original is refused and may be unimported;
 *  - the imported context outlives the original; closing it closes the dup;
 *  - refused: the context's own cmd_fd, fds that are not command fds, unknown handles,
 *    handles of destroyed objects and of another context, rereg of an imported MR,
 *    unimport of a parent domain; a command fd passed to another process (inherited
 *    over fork, or across exec) is EOPNOTSUPP there;
 *  - ECE: EOPNOTSUPP, the ibv_ece untouched.
 * Run as `import child <fd>` it is the other process of the last case.
 */
#define _GNU_SOURCE
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"

static int child_import(int fd)
{
	struct ibv_context *ctx;

	errno = 0;
	ctx = ibv_import_device(fd);
	CHECK(ctx == NULL && errno == EOPNOTSUPP,
	      "another process: ibv_import_device(an inherited command fd) -> NULL/EOPNOTSUPP");
	printf("# import child: all checks passed\n");
	return 0;
}

/* An RC QP on `pd` with `cq` for both queues, in RESET. */
static struct ibv_qp *rc_qp(struct ibv_pd *pd, struct ibv_cq *cq)
{
	struct ibv_qp_init_attr init = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = {.max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1},
	};
	struct ibv_qp *qp = ibv_create_qp(pd, &init);

	REQUIRE(qp != NULL, "ibv_create_qp(RC)");
	return qp;
}

static void write_and_check(struct ibv_qp *qp, struct ibv_cq *cq, void *src, uint32_t lkey,
			    void *dst, uint32_t rkey, const char *what)
{
	struct ibv_sge sge = {.addr = (uintptr_t)src, .length = 64, .lkey = lkey};
	struct ibv_send_wr wr = {.wr_id = 7, .sg_list = &sge, .num_sge = 1,
				 .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED};
	struct ibv_send_wr *bad = NULL;
	struct ibv_wc wc;

	memset(dst, 0, 64);
	wr.wr.rdma.remote_addr = (uintptr_t)dst;
	wr.wr.rdma.rkey = rkey;
	REQUIRE(ibv_post_send(qp, &wr, &bad) == 0, "ibv_post_send(%s)", what);
	wc = poll_one(cq);
	CHECK(wc.status == IBV_WC_SUCCESS && !memcmp(src, dst, 64),
	      "%s: RDMA WRITE completes (status %d) and the bytes arrive", what, wc.status);
}

static int pd_handle_importable(struct ibv_context *ctx, uint32_t handle)
{
	struct ibv_pd *pd = ibv_import_pd(ctx, handle);

	if (!pd)
		return errno;
	ibv_unimport_pd(pd);
	return 0;
}

static int mr_handle_importable(struct ibv_pd *pd, uint32_t handle)
{
	struct ibv_mr *mr = ibv_import_mr(pd, handle);

	if (!mr)
		return errno;
	ibv_unimport_mr(mr);
	return 0;
}

int main(int argc, char **argv)
{
	struct side a, b;
	struct ibv_context *ictx, *ictx2;
	struct ibv_pd *ipd, *ipd_orig, *pd2, *pd3, *ipd3, *parent;
	struct ibv_mr *imr, *mr2, *mr3, *imr3;
	struct ibv_cq *icq;
	struct ibv_qp *iqp, *mixed, *bqp;
	struct ibv_qp_init_attr mixed_init;
	struct ibv_parent_domain_init_attr pattr;
	struct ibv_ece ece;
	char *src = aligned_alloc(4096, 4096);
	int fd, fd2, gid, pipefd[2], mfd, status;
	uint32_t dead_pd_handle, dead_mr_handle;
	pid_t pid;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc == 3 && !strcmp(argv[1], "child"))
		return child_import(atoi(argv[2]));

	/* a: the original context, with a PD, CQs, an MR and a QP; b: the peer. */
	make_side(&a, IBV_QPT_RC, 16, 8);
	make_side(&b, IBV_QPT_RC, 16, 8);
	REQUIRE(src != NULL, "a source buffer");
	memset(src, 0x3c, 4096);
	gid = loopback_gid_index(a.ctx);

	printf("# handles\n");
	pd2 = ibv_alloc_pd(a.ctx);
	mr2 = ibv_reg_mr(a.pd, src, 4096, IBV_ACCESS_LOCAL_WRITE);
	REQUIRE(pd2 && mr2, "a second PD and MR");
	CHECK(a.pd->handle != pd2->handle && a.pd->handle != b.pd->handle,
	      "pd->handle filled, different for live PDs (%u, %u, %u)", a.pd->handle,
	      pd2->handle, b.pd->handle);
	CHECK(a.mr->handle != mr2->handle && a.mr->handle != b.mr->handle,
	      "mr->handle filled, different for live MRs (%#x, %#x, %#x)", a.mr->handle,
	      mr2->handle, b.mr->handle);

	printf("# ibv_import_device\n");
	CHECK(a.ctx->cmd_fd >= 0 && fcntl(a.ctx->cmd_fd, F_GETFD) != -1,
	      "cmd_fd is an open descriptor (%d)", a.ctx->cmd_fd);
	errno = 0;
	CHECK(ibv_import_device(a.ctx->cmd_fd) == NULL && errno == EINVAL,
	      "ibv_import_device(the context's own cmd_fd, not dup'd) -> NULL/EINVAL");
	CHECK(fcntl(a.ctx->cmd_fd, F_GETFD) != -1, "... and cmd_fd stays open");
	fd = dup(a.ctx->cmd_fd);
	REQUIRE(fd >= 0, "dup(cmd_fd)");
	ictx = ibv_import_device(fd);
	CHECK(ictx != NULL && ictx != a.ctx && ictx->cmd_fd == fd && ictx->device == a.ctx->device,
	      "ibv_import_device(dup(cmd_fd)): a new context of the same device owning the dup");
	CHECK(ictx->async_fd >= 0, "the imported context has an async_fd");
	errno = 0;
	CHECK(ibv_import_device(-1) == NULL && errno == EINVAL, "ibv_import_device(-1) -> NULL/EINVAL");
	REQUIRE(pipe(pipefd) == 0, "pipe");
	errno = 0;
	CHECK(ibv_import_device(pipefd[0]) == NULL && errno == EINVAL,
	      "ibv_import_device(a pipe) -> NULL/EINVAL");
	mfd = memfd_create("not-rverbs", MFD_ALLOW_SEALING);
	REQUIRE(mfd >= 0 && write(mfd, "rverbs cmd_fd v0xxxx", 20) == 20 &&
			fcntl(mfd, F_ADD_SEALS, F_SEAL_WRITE) == 0,
		"a sealed memfd of other bytes");
	errno = 0;
	CHECK(ibv_import_device(mfd) == NULL && errno == EINVAL,
	      "ibv_import_device(a sealed memfd that is no command fd) -> NULL/EINVAL");
	CHECK(fcntl(pipefd[0], F_GETFD) != -1 && fcntl(mfd, F_GETFD) != -1,
	      "refused descriptors stay open (the caller keeps them)");
	close(pipefd[0]);
	close(pipefd[1]);
	close(mfd);

	printf("# ibv_import_pd, ibv_import_mr\n");
	ipd = ibv_import_pd(ictx, a.pd->handle);
	CHECK(ipd != NULL && ipd != a.pd && ipd->handle == a.pd->handle && ipd->context == ictx,
	      "ibv_import_pd(imported ctx, pd->handle): a new ibv_pd, same handle, in ictx");
	imr = ibv_import_mr(ipd, a.mr->handle);
	CHECK(imr != NULL && imr != a.mr && imr->addr == NULL && imr->length == BUF_LEN &&
		      imr->lkey == a.mr->lkey && imr->rkey == a.mr->rkey &&
		      imr->handle == a.mr->handle && imr->pd == ipd && imr->context == ictx,
	      "ibv_import_mr(imported PD, mr->handle): addr NULL, length, keys, handle, pd, context");
	ipd_orig = ibv_import_pd(a.ctx, a.pd->handle);
	CHECK(ipd_orig != NULL && ipd_orig->context == a.ctx,
	      "ibv_import_pd in the original context too");
	ibv_unimport_pd(ipd_orig);
	errno = 0;
	CHECK(ibv_import_pd(ictx, 0x7fffff) == NULL && errno == ENOENT,
	      "ibv_import_pd(unknown handle) -> NULL/ENOENT");
	errno = 0;
	CHECK(ibv_import_pd(ictx, b.pd->handle) == NULL && errno == ENOENT,
	      "ibv_import_pd(handle of another context's PD) -> NULL/ENOENT");
	errno = 0;
	CHECK(ibv_import_mr(ipd, 0x7fffffff) == NULL && errno == ENOENT,
	      "ibv_import_mr(unknown handle) -> NULL/ENOENT");
	errno = 0;
	CHECK(ibv_import_mr(ipd, b.mr->handle) == NULL && errno == ENOENT,
	      "ibv_import_mr(handle of another context's MR) -> NULL/ENOENT");
	errno = 0;
	CHECK(ibv_rereg_mr(imr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
			   IBV_ACCESS_LOCAL_WRITE) == IBV_REREG_MR_ERR_INPUT && errno == EINVAL,
	      "ibv_rereg_mr(imported MR) -> IBV_REREG_MR_ERR_INPUT/EINVAL");

	printf("# traffic through the imported context\n");
	icq = ibv_create_cq(ictx, 16, NULL, NULL, 0);
	REQUIRE(icq != NULL, "ibv_create_cq(imported ctx)");
	iqp = rc_qp(ipd, icq);
	CHECK(iqp->context == ictx && iqp->pd == ipd, "a QP on the imported PD, in ictx");
	bqp = rc_qp(b.pd, b.send_cq);
	to_rts(iqp, bqp->qp_num, gid, ALL_ACCESS);
	to_rts(bqp, iqp->qp_num, gid, ALL_ACCESS);
	memset(b.buf, 0x5b, 64);
	write_and_check(bqp, b.send_cq, b.buf, b.mr->lkey, a.buf, imr->rkey,
			"peer -> original buffer by the imported MR's rkey");
	memcpy(a.buf, "imported lkey", 14);
	write_and_check(iqp, icq, a.buf, imr->lkey, b.buf, b.mr->rkey,
			"imported QP -> peer, from the original buffer by the imported lkey");
	mixed_init = (struct ibv_qp_init_attr){.send_cq = a.send_cq, .recv_cq = icq,
					       .qp_type = IBV_QPT_RC,
					       .cap = {.max_send_wr = 1, .max_recv_wr = 1,
						       .max_send_sge = 1, .max_recv_sge = 1}};
	mixed = ibv_create_qp(ipd, &mixed_init);
	CHECK(mixed != NULL, "a QP on the imported PD with a CQ of the original context");
	REQUIRE(ibv_destroy_qp(mixed) == 0, "destroy it");

	printf("# unimport\n");
	ibv_unimport_mr(imr);
	write_and_check(bqp, b.send_cq, b.buf, b.mr->lkey, a.buf, a.mr->rkey,
			"after ibv_unimport_mr the original MR still takes writes");
	CHECK(mr_handle_importable(ipd, a.mr->handle) == 0, "... and its handle imports again");
	REQUIRE(ibv_destroy_qp(iqp) == 0, "destroy the imported QP");
	errno = 0;
	ibv_unimport_pd(ipd);
	CHECK(errno == 0, "ibv_unimport_pd leaves errno alone");
	CHECK(ibv_dealloc_pd(a.pd) == EBUSY,
	      "after ibv_unimport_pd the original PD lives (dealloc: EBUSY, its MR and QP)");
	CHECK(pd_handle_importable(ictx, a.pd->handle) == 0, "... and its handle imports again");

	printf("# destroy through an import\n");
	pd3 = ibv_alloc_pd(a.ctx);
	REQUIRE(pd3 != NULL, "a third PD");
	ipd3 = ibv_import_pd(ictx, pd3->handle);
	REQUIRE(ipd3 != NULL, "import it");
	mr3 = ibv_reg_mr(pd3, src, 4096, IBV_ACCESS_LOCAL_WRITE);
	REQUIRE(mr3 != NULL, "an MR on it");
	imr3 = ibv_import_mr(ipd3, mr3->handle);
	REQUIRE(imr3 != NULL, "import the MR");
	dead_mr_handle = mr3->handle;
	CHECK(ibv_dereg_mr(imr3) == 0, "ibv_dereg_mr(imported MR) deregisters");
	CHECK(mr_handle_importable(ipd3, dead_mr_handle) == ENOENT,
	      "the handle of the deregistered MR -> ENOENT");
	CHECK(ibv_dereg_mr(mr3) == EINVAL, "ibv_dereg_mr(the original) -> EINVAL: already gone");
	errno = 0;
	ibv_unimport_mr(mr3);
	CHECK(errno == 0, "ibv_unimport_mr releases the original's ibv_mr");
	dead_pd_handle = pd3->handle;
	CHECK(ibv_dealloc_pd(ipd3) == 0, "ibv_dealloc_pd(imported PD) deallocates");
	CHECK(pd_handle_importable(ictx, dead_pd_handle) == ENOENT &&
		      pd_handle_importable(a.ctx, dead_pd_handle) == ENOENT,
	      "the handle of the deallocated PD -> ENOENT in both contexts");
	CHECK(ibv_dealloc_pd(pd3) == EINVAL, "ibv_dealloc_pd(the original) -> EINVAL: already gone");
	errno = 0;
	ibv_unimport_pd(pd3);
	CHECK(errno == 0, "ibv_unimport_pd releases the original's ibv_pd");
	memset(&pattr, 0, sizeof(pattr));
	pattr.pd = pd2;
	parent = ibv_alloc_parent_domain(a.ctx, &pattr);
	REQUIRE(parent != NULL, "a parent domain");
	errno = 0;
	ibv_unimport_pd(parent);
	CHECK(errno == EINVAL, "ibv_unimport_pd(parent domain) -> errno EINVAL, nothing released");
	REQUIRE(ibv_dealloc_pd(parent) == 0, "the parent domain deallocates");

	printf("# ECE (not offered)\n");
	ece = (struct ibv_ece){.vendor_id = 0x11, .options = 0x22, .comp_mask = 0x33};
	CHECK(ibv_query_ece(a.qp, &ece) == EOPNOTSUPP && ece.vendor_id == 0x11 &&
		      ece.options == 0x22 && ece.comp_mask == 0x33,
	      "ibv_query_ece -> EOPNOTSUPP, ibv_ece untouched");
	ece = (struct ibv_ece){0};
	errno = 0;
	CHECK(ibv_set_ece(a.qp, &ece) == EOPNOTSUPP && errno == EOPNOTSUPP,
	      "ibv_set_ece(vendor_id 0) -> EOPNOTSUPP, errno set");
	ece = (struct ibv_ece){.vendor_id = 0x02c9, .options = 1};
	CHECK(ibv_set_ece(a.qp, &ece) == EOPNOTSUPP && ece.vendor_id == 0x02c9 && ece.options == 1,
	      "ibv_set_ece(vendor_id 0x02c9) -> EOPNOTSUPP, ibv_ece untouched");

	printf("# other processes\n");
	fd2 = dup(a.ctx->cmd_fd);
	REQUIRE(fd2 >= 0, "another dup");
	pid = fork();
	REQUIRE(pid >= 0, "fork");
	if (pid == 0) {
		struct ibv_context *c;

		errno = 0;
		c = ibv_import_device(fd2);
		if (c != NULL || errno != EOPNOTSUPP) {
			printf("FAIL - forked child: ibv_import_device -> %p errno %d\n", (void *)c,
			       errno);
			_exit(1);
		}
		_exit(0);
	}
	REQUIRE(waitpid(pid, &status, 0) == pid, "waitpid");
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0,
	      "forked child: ibv_import_device(inherited dup) -> NULL/EOPNOTSUPP");
	pid = fork();
	REQUIRE(pid >= 0, "fork");
	if (pid == 0) {
		char arg[16];

		snprintf(arg, sizeof(arg), "%d", fd2);
		execl("/proc/self/exe", argv[0], "child", arg, (char *)NULL);
		_exit(127);
	}
	REQUIRE(waitpid(pid, &status, 0) == pid, "waitpid");
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0,
	      "a new program given the dup: ibv_import_device -> NULL/EOPNOTSUPP (status %d)",
	      status);

	printf("# the imported context outlives the original\n");
	REQUIRE(ibv_destroy_qp(bqp) == 0 && ibv_destroy_cq(icq) == 0, "traffic teardown");
	REQUIRE(ibv_dereg_mr(mr2) == 0 && ibv_dealloc_pd(pd2) == 0, "second PD and MR teardown");
	destroy_side(&a);
	ictx2 = ibv_import_device(fd2);
	CHECK(ictx2 != NULL, "ibv_import_device(a dup) after the original was closed");
	pd3 = ibv_alloc_pd(ictx);
	CHECK(pd3 != NULL && pd_handle_importable(ictx2, pd3->handle) == 0,
	      "a PD allocated in one imported context imports into the other");
	REQUIRE(ibv_dealloc_pd(pd3) == 0, "dealloc it");
	REQUIRE(ibv_close_device(ictx2) == 0, "close the second import");
	CHECK(fcntl(fd2, F_GETFD) == -1 && errno == EBADF, "ibv_close_device closed its cmd_fd");
	REQUIRE(ibv_close_device(ictx) == 0, "close the first import");
	CHECK(fcntl(fd, F_GETFD) == -1 && errno == EBADF, "... and the first import's");
	destroy_side(&b);
	free(src);
	printf("# import: all checks passed\n");
	return 0;
}
