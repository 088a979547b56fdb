/* Devices, contexts and object lifecycles through the ABI (verbs.h, libibverbs/driver.h):
 *  - the immortal ibv_device (name, types, big-endian GUID, index, ops word at 664);
 *  - the extended context: abi_compat, verbs_context at -320 with sz 648, real cmd_fd
 *    and async_fd, num_comp_vectors, the inline-dispatch ops;
 *  - ibv_query_port through the verbs_context op (52 bytes) and the exported compat
 *    symbol (48 bytes), ibv_query_device(_ex), GIDs (ex, table, type), P_Keys, rt values;
 *  - EBUSY rules, resize, SRQs, creation paths (XRC_SEND through the exported
 *    ibv_create_qp, ibv_qp_to_qp_ex, send_ops_flags checks), EOPNOTSUPP for what the
 *    device does not have;
 *  - NULL arguments give an errno, not a crash.
 */
#include <arpa/inet.h>

#include "common.h"

/* ibv_query_gid_type is IBVERBS_PRIVATE_34 (driver.h, not installed). */
enum { SYSFS_IB_ROCE_V1 = 0, SYSFS_ROCE_V2 = 1 };
int ibv_query_gid_type(struct ibv_context *context, uint8_t port_num, unsigned int index,
		       int *type);

static void device_and_context(void)
{
	struct ibv_device *dev = find_rverbs0();
	struct ibv_context *ctx;
	struct verbs_context *vctx;
	struct ibv_device_attr attr;

	printf("# device\n");
	CHECK(!strcmp(dev->name, "rverbs0") && dev->node_type == IBV_NODE_CA &&
		      dev->transport_type == IBV_TRANSPORT_IB && dev->ibdev_path[0] == '/',
	      "ibv_device: name, node_type CA, transport IB, ibdev_path");
	CHECK(ibv_get_device_index(dev) == 0, "ibv_get_device_index == 0");
	CHECK(*(void *const *)((const char *)dev + 664) != NULL,
	      "a private ops pointer follows the 664-byte ibv_device");
	ctx = ibv_open_device(dev);
	CHECK(ctx && ctx->device == dev, "ibv_open_device: ctx->device");
	CHECK(ibv_query_device(ctx, &attr) == 0 && attr.node_guid != 0 &&
		      attr.node_guid == ibv_get_device_guid(dev),
	      "ibv_get_device_guid == node_guid (both big-endian) 0x%016llx",
	      (unsigned long long)be64toh(attr.node_guid));
	CHECK(attr.vendor_id != 0 && attr.vendor_id != 0x02c9 && attr.vendor_id != 0x1d0f &&
		      attr.max_qp_wr >= 1000 && attr.max_cqe >= 2000 && attr.max_sge >= 2 &&
		      attr.phys_port_cnt == 1 && attr.atomic_cap == IBV_ATOMIC_HCA,
	      "device attributes usable by the target programs");

	printf("# context\n");
	CHECK(ctx->abi_compat == (void *)UINTPTR_MAX, "abi_compat = UINTPTR_MAX");
	vctx = verbs_get_ctx(ctx);
	CHECK(vctx && (char *)vctx == (char *)ctx - 320 &&
		      vctx->sz == sizeof(struct verbs_context) && vctx->sz == 648,
	      "verbs_get_ctx: verbs_context at -320, sz 648");
	CHECK(fcntl(ctx->cmd_fd, F_GETFD) >= 0 && fcntl(ctx->async_fd, F_GETFD) >= 0 &&
		      ctx->cmd_fd != ctx->async_fd,
	      "cmd_fd %d and async_fd %d are open fds", ctx->cmd_fd, ctx->async_fd);
	CHECK(ctx->num_comp_vectors == 1, "num_comp_vectors 1");
	CHECK(ctx->ops.poll_cq && ctx->ops.req_notify_cq && ctx->ops.post_send &&
		      ctx->ops.post_recv && ctx->ops.post_srq_recv,
	      "ops.poll_cq/req_notify_cq/post_send/post_recv/post_srq_recv set");
	CHECK(vctx->query_port && vctx->query_device_ex && vctx->create_cq_ex &&
		      vctx->create_qp_ex && vctx->create_srq_ex && vctx->query_rt_values,
	      "verbs_context ops query_port/query_device_ex/create_*_ex/query_rt_values set");
	/* ibv_import_device(3) wants a dup of cmd_fd (tests/c/import.c). */
	errno = 0;
	CHECK(!ibv_import_device(ctx->cmd_fd) && errno == EINVAL,
	      "ibv_import_device(cmd_fd itself, not a dup): NULL/EINVAL");
	CHECK(ibv_close_device(ctx) == 0, "ibv_close_device");
}

static void queries(struct ibv_context *ctx)
{
	struct {
		struct ibv_port_attr pa;
		unsigned char guard[8];
	} p;
	unsigned char compat[56];
	struct ibv_device_attr attr;
	struct ibv_device_attr_ex ax;
	struct ibv_query_device_ex_input in = {.comp_mask = 1};
	struct ibv_gid_entry entries[64], e;
	union ibv_gid gid;
	struct ibv_values_ex v1 = {.comp_mask = IBV_VALUES_MASK_RAW_CLOCK}, v2 = v1;
	uint16_t pkey;
	ssize_t n;
	int type;

	printf("# ports\n");
	memset(&p, 0xa5, sizeof(p));
	CHECK(ibv_query_port(ctx, 1, &p.pa) == 0, "ibv_query_port (verbs_context op)");
	CHECK(p.pa.state == IBV_PORT_ACTIVE && p.pa.link_layer == IBV_LINK_LAYER_ETHERNET &&
		      p.pa.gid_tbl_len >= 1 && p.pa.pkey_tbl_len >= 1 &&
		      p.pa.max_msg_sz > 4096 && p.pa.max_mtu == IBV_MTU_4096 &&
		      p.pa.active_mtu >= IBV_MTU_256 && p.pa.active_mtu <= p.pa.max_mtu,
	      "port 1: ACTIVE, Ethernet, GIDs, P_Keys, max_msg_sz, max_mtu 4096, active_mtu "
	      "(the host's smallest link's, as rxe's is its netdev's) within it");
	CHECK(p.guard[0] == 0xa5 && p.guard[7] == 0xa5, "no byte written past 52");
	memset(compat, 0xa5, sizeof(compat));
	/* The exported ibv_query_port@IBVERBS_1.1 (the macro is bypassed): 48 bytes. */
	CHECK((ibv_query_port)(ctx, 1, (struct _compat_ibv_port_attr *)compat) == 0,
	      "exported compat ibv_query_port");
	CHECK(!memcmp(compat, &p.pa, 48) && compat[48] == 0xa5 && compat[55] == 0xa5,
	      "the compat symbol writes exactly the first 48 bytes");
	CHECK(ibv_query_port(ctx, 2, &p.pa) == EINVAL && ibv_query_port(ctx, 0, &p.pa) == EINVAL,
	      "ports 0 and 2 do not exist: EINVAL");

	printf("# device_ex\n");
	CHECK(ibv_query_device(ctx, &attr) == 0 && ibv_query_device_ex(ctx, NULL, &ax) == 0,
	      "ibv_query_device, ibv_query_device_ex");
	CHECK(!memcmp(&attr, &ax.orig_attr, sizeof(attr)), "orig_attr == ibv_query_device");
	CHECK(ax.phys_port_cnt_ex == attr.phys_port_cnt && ax.hca_core_clock > 0 &&
		      ax.completion_timestamp_mask != 0 &&
		      ax.odp_caps.general_caps == (IBV_ODP_SUPPORT | IBV_ODP_SUPPORT_IMPLICIT) &&
		      ax.odp_caps.per_transport_caps.rc_odp_caps == 0x3f && ax.xrc_odp_caps == 0x3f &&
		      ax.max_dm_size == 256 * 1024,
	      "phys_port_cnt_ex, hca_core_clock, timestamp mask; ODP, implicit too, every RC/XRC operation; 256 KiB of device memory (dm.c)");
	CHECK(ibv_query_device_ex(ctx, &in, &ax) == EINVAL, "input comp_mask != 0: EINVAL");

	printf("# GIDs and P_Keys\n");
	for (int i = 0; i < p.pa.gid_tbl_len; i++) {
		REQUIRE(ibv_query_gid(ctx, 1, i, &gid) == 0, "ibv_query_gid(%d)", i);
		REQUIRE(ibv_query_gid_ex(ctx, 1, i, &e, 0) == 0, "ibv_query_gid_ex(%d)", i);
		REQUIRE(!memcmp(&e.gid, &gid, 16) && e.gid_index == (uint32_t)i && e.port_num == 1 &&
				e.gid_type == IBV_GID_TYPE_ROCE_V2,
			"entry %d: gid, index, port, RoCE v2", i);
		REQUIRE(ibv_query_gid_type(ctx, 1, i, &type) == 0 && type == SYSFS_ROCE_V2,
			"ibv_query_gid_type(%d) == ROCE_V2", i);
	}
	CHECK(1, "all %d GIDs: query_gid == query_gid_ex, RoCE v2, ibv_query_gid_type",
	      p.pa.gid_tbl_len);
	errno = 0;
	CHECK(ibv_query_gid(ctx, 1, p.pa.gid_tbl_len, &gid) == -1 && errno == EINVAL,
	      "index gid_tbl_len: -1/EINVAL");
	CHECK(ibv_query_gid_ex(ctx, 1, p.pa.gid_tbl_len, &e, 0) == EINVAL &&
		      ibv_query_gid_ex(ctx, 1, 0, &e, 1) == EINVAL,
	      "ibv_query_gid_ex: bad index or flags: EINVAL");
	n = ibv_query_gid_table(ctx, entries, 64, 0);
	CHECK(n == p.pa.gid_tbl_len && entries[0].gid_index == 0,
	      "ibv_query_gid_table returns the %zd entries", n);
	if (n > 1)
		CHECK(ibv_query_gid_table(ctx, entries, 1, 0) < 0,
		      "ibv_query_gid_table with too small a buffer fails");
	CHECK(ibv_query_pkey(ctx, 1, 0, &pkey) == 0 && pkey == htons(0xffff),
	      "ibv_query_pkey(0) == 0xffff");
	errno = 0;
	CHECK(ibv_query_pkey(ctx, 1, p.pa.pkey_tbl_len, &pkey) == -1 && errno == EINVAL,
	      "ibv_query_pkey past the table: -1/EINVAL");
	CHECK(ibv_get_pkey_index(ctx, 1, htons(0xffff)) == 0 &&
		      ibv_get_pkey_index(ctx, 1, htons(0x1234)) == -1,
	      "ibv_get_pkey_index: 0xffff at 0, 0x1234 absent (-1)");
	CHECK(ibv_query_rt_values_ex(ctx, &v1) == 0 && ibv_query_rt_values_ex(ctx, &v2) == 0 &&
		      v1.comp_mask == IBV_VALUES_MASK_RAW_CLOCK &&
		      (v2.raw_clock.tv_sec > v1.raw_clock.tv_sec ||
		       (v2.raw_clock.tv_sec == v1.raw_clock.tv_sec &&
			v2.raw_clock.tv_nsec >= v1.raw_clock.tv_nsec)),
	      "ibv_query_rt_values_ex: RAW_CLOCK, monotonic");
}

static void lifecycles(void)
{
	struct side a, b;
	struct ibv_srq *srq;
	struct ibv_srq_init_attr sattr = {.attr = {.max_wr = 16, .max_sge = 1}};
	struct ibv_srq_attr sq;
	struct ibv_qp *sqp;
	struct ibv_qp_init_attr qattr;
	struct ibv_qp_init_attr_ex xattr;
	struct ibv_qp_ex *qpx;
	struct ibv_recv_wr rwr, *rbad;
	struct ibv_sge sge;
	struct ibv_wc wc;
	int gid;

	make_side(&a, IBV_QPT_RC, 16, 16);
	make_side(&b, IBV_QPT_RC, 16, 16);
	gid = loopback_gid_index(a.ctx);

	printf("# EBUSY rules and resize\n");
	CHECK(ibv_dealloc_pd(a.pd) == EBUSY, "ibv_dealloc_pd with an MR and a QP: EBUSY");
	CHECK(ibv_destroy_cq(a.send_cq) == EBUSY, "ibv_destroy_cq used by a QP: EBUSY");
	CHECK(ibv_resize_cq(a.recv_cq, 100) == 0 && a.recv_cq->cqe >= 100,
	      "ibv_resize_cq updates cq->cqe (%d)", a.recv_cq->cqe);

	printf("# QP types and creation paths\n");
	memset(&qattr, 0, sizeof(qattr));
	qattr.send_cq = qattr.recv_cq = a.send_cq;
	qattr.cap = (struct ibv_qp_cap){.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1,
					.max_recv_sge = 1};
	qattr.qp_type = IBV_QPT_XRC_SEND;
	qattr.recv_cq = NULL;
	sqp = ibv_create_qp(a.pd, &qattr);
	CHECK(sqp && sqp->qp_type == IBV_QPT_XRC_SEND && qattr.cap.max_recv_wr == 0 &&
		      qattr.cap.max_send_wr >= 4,
	      "XRC_SEND through the exported ibv_create_qp (gotcha 9): receive caps forced to 0");
	CHECK(ibv_qp_to_qp_ex(sqp) == NULL,
	      "ibv_qp_to_qp_ex of a QP from ibv_create_qp: NULL (not VERBS_QP_EX)");
	CHECK(ibv_destroy_qp(sqp) == 0, "ibv_destroy_qp(XRC_SEND)");
	qattr.recv_cq = a.send_cq;
	qattr.qp_type = IBV_QPT_XRC_RECV;
	errno = 0;
	CHECK(!ibv_create_qp(a.pd, &qattr) && errno == EINVAL,
	      "XRC_RECV through ibv_create_qp (no XRC domain): NULL/EINVAL");
	qattr.qp_type = IBV_QPT_RAW_PACKET;
	errno = 0;
	CHECK(!ibv_create_qp(a.pd, &qattr) && errno == EOPNOTSUPP, "RAW_PACKET QP: NULL/EOPNOTSUPP");
	memset(&xattr, 0, sizeof(xattr));
	xattr.send_cq = xattr.recv_cq = a.send_cq;
	xattr.cap = qattr.cap;
	xattr.qp_type = IBV_QPT_RC;
	xattr.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
	xattr.pd = a.pd;
	xattr.send_ops_flags = IBV_QP_EX_WITH_SEND | (1 << 11);
	errno = 0;
	CHECK(!ibv_create_qp_ex(a.ctx, &xattr) && errno == EOPNOTSUPP,
	      "send_ops_flags bit 11 (FLUSH, not in rdma-core 44): NULL/EOPNOTSUPP");
	xattr.send_ops_flags = IBV_QP_EX_WITH_TSO;
	errno = 0;
	CHECK(!ibv_create_qp_ex(a.ctx, &xattr) && errno == EOPNOTSUPP,
	      "send_ops_flags TSO: NULL/EOPNOTSUPP");
	xattr.qp_type = IBV_QPT_UD;
	xattr.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE;
	errno = 0;
	CHECK(!ibv_create_qp_ex(a.ctx, &xattr) && errno == EOPNOTSUPP,
	      "UD QP with RDMA_WRITE in send_ops_flags: NULL/EOPNOTSUPP");
	xattr.qp_type = IBV_QPT_RC;
	xattr.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS;
	xattr.create_flags = 0;
	sqp = ibv_create_qp_ex(a.ctx, &xattr);
	CHECK(sqp && sqp->qp_type == IBV_QPT_RC && xattr.cap.max_send_wr >= 4,
	      "ibv_create_qp_ex through the verbs_context op; caps written back");
	qpx = ibv_qp_to_qp_ex(sqp);
	CHECK(qpx == (struct ibv_qp_ex *)sqp, "ibv_qp_to_qp_ex: the same object");
	CHECK(qpx->wr_send == NULL && qpx->wr_rdma_write == NULL && qpx->wr_start &&
		      qpx->wr_complete && qpx->wr_abort && qpx->wr_set_sge,
	      "no send_ops_flags: no opcode builder, start/complete/abort/setters set");
	ibv_wr_start(qpx);
	CHECK(ibv_wr_complete(qpx) == EINVAL,
	      "ibv_wr_complete on a QP created without send_ops_flags: EINVAL");
	CHECK(ibv_destroy_qp(sqp) == 0, "ibv_destroy_qp");

	printf("# SRQ\n");
	srq = ibv_create_srq(b.pd, &sattr);
	CHECK(srq && srq->pd == b.pd && srq->context == b.ctx && sattr.attr.max_wr >= 16,
	      "ibv_create_srq: pd, context, granted max_wr %u", sattr.attr.max_wr);
	CHECK(ibv_query_srq(srq, &sq) == 0 && sq.max_wr >= 16 && sq.srq_limit == 0,
	      "ibv_query_srq");
	sq.srq_limit = 2;
	CHECK(ibv_modify_srq(srq, &sq, IBV_SRQ_LIMIT) == 0 && ibv_query_srq(srq, &sq) == 0 &&
		      sq.srq_limit == 2,
	      "ibv_modify_srq arms the limit");
	{
		struct ibv_srq_init_attr_ex x = {.attr = {.max_wr = 4, .max_sge = 1},
						 .comp_mask = IBV_SRQ_INIT_ATTR_TYPE |
							      IBV_SRQ_INIT_ATTR_PD,
						 .srq_type = IBV_SRQT_XRC,
						 .pd = b.pd};

		errno = 0;
		CHECK(!ibv_create_srq_ex(b.ctx, &x) && errno == EINVAL,
		      "XRC SRQ without IBV_SRQ_INIT_ATTR_XRCD|CQ: NULL/EINVAL");
	}
	REQUIRE(ibv_destroy_qp(b.qp) == 0, "replace b's QP");
	memset(&qattr, 0, sizeof(qattr));
	qattr.send_cq = b.send_cq;
	qattr.recv_cq = b.recv_cq;
	qattr.srq = srq;
	qattr.cap = (struct ibv_qp_cap){.max_send_wr = 4, .max_send_sge = 1};
	qattr.qp_type = IBV_QPT_RC;
	b.qp = ibv_create_qp(b.pd, &qattr);
	CHECK(b.qp && b.qp->srq == srq, "RC QP on the SRQ");
	to_rts(a.qp, b.qp->qp_num, gid, ALL_ACCESS);
	to_rts(b.qp, a.qp->qp_num, gid, ALL_ACCESS);
	sge = (struct ibv_sge){.addr = (uintptr_t)b.buf + 64, .length = 64, .lkey = b.mr->lkey};
	rwr = (struct ibv_recv_wr){.wr_id = 42, .sg_list = &sge, .num_sge = 1};
	CHECK(ibv_post_srq_recv(srq, &rwr, &rbad) == 0, "ibv_post_srq_recv");
	rbad = NULL;
	CHECK(ibv_post_recv(b.qp, &rwr, &rbad) == EINVAL && rbad == &rwr,
	      "ibv_post_recv on a QP with an SRQ: EINVAL");
	memcpy(a.buf, "to the srq", 10);
	{
		struct ibv_sge s = {.addr = (uintptr_t)a.buf, .length = 10, .lkey = a.mr->lkey};
		struct ibv_send_wr wr = {.wr_id = 1, .sg_list = &s, .num_sge = 1,
					 .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED};
		struct ibv_send_wr *bad;

		CHECK(ibv_post_send(a.qp, &wr, &bad) == 0, "SEND posted");
	}
	REQUIRE(poll_one(a.send_cq).status == IBV_WC_SUCCESS, "send completes");
	wc = poll_one(b.recv_cq);
	CHECK(wc.wr_id == 42 && wc.byte_len == 10 && !memcmp(b.buf + 64, "to the srq", 10),
	      "the SEND landed in the SRQ receive");
	CHECK(ibv_destroy_srq(srq) == EBUSY, "ibv_destroy_srq with a QP attached: EBUSY");
	CHECK(ibv_destroy_qp(b.qp) == 0 && ibv_destroy_srq(srq) == 0,
	      "ibv_destroy_srq once no QP uses it");
	b.qp = make_qp(&b, IBV_QPT_RC, 4);

	printf("# argument checks of MW, XRC, rereg and multicast verbs\n");
	errno = 0;
	CHECK(!ibv_alloc_mw(a.pd, 3) && errno == EINVAL, "ibv_alloc_mw(type 3): NULL/EINVAL");
	{
		struct ibv_xrcd_init_attr xa = {.comp_mask = IBV_XRCD_INIT_ATTR_FD, .fd = -1};

		errno = 0;
		CHECK(!ibv_open_xrcd(a.ctx, &xa) && errno == EINVAL,
		      "ibv_open_xrcd without IBV_XRCD_INIT_ATTR_OFLAGS: NULL/EINVAL");
		xa.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
		xa.fd = 1 << 20;
		errno = 0;
		CHECK(!ibv_open_xrcd(a.ctx, &xa) && errno == EBADF,
		      "ibv_open_xrcd with a closed fd: NULL/EBADF");
		xa.comp_mask = IBV_XRCD_INIT_ATTR_RESERVED;
		errno = 0;
		CHECK(!ibv_open_xrcd(a.ctx, &xa) && errno == EOPNOTSUPP,
		      "ibv_open_xrcd with a reserved comp_mask bit: NULL/EOPNOTSUPP");
	}
	errno = 0;
	CHECK(ibv_rereg_mr(a.mr, 1 << 5, NULL, NULL, 0, 0) == IBV_REREG_MR_ERR_INPUT &&
		      errno == EINVAL,
	      "ibv_rereg_mr with unknown flags: IBV_REREG_MR_ERR_INPUT/EINVAL");
	{
		union ibv_gid g = {.raw = {0xff, 0x0e}};

		CHECK(ibv_attach_mcast(a.qp, &g, 0) == EINVAL,
		      "ibv_attach_mcast of an RC QP: EINVAL");
	}
	CHECK(ibv_fork_init() == 0 && ibv_is_fork_initialized() == IBV_FORK_UNNEEDED,
	      "ibv_fork_init 0, ibv_is_fork_initialized UNNEEDED");

	printf("# NULL arguments give an errno\n");
	errno = 0;
	CHECK(!ibv_alloc_pd(NULL) && errno == EINVAL, "ibv_alloc_pd(NULL): NULL/EINVAL");
	CHECK(ibv_dealloc_pd(NULL) == EINVAL, "ibv_dealloc_pd(NULL): EINVAL");
	errno = 0;
	CHECK(!ibv_create_cq(NULL, 4, NULL, NULL, 0) && errno == EINVAL,
	      "ibv_create_cq(NULL): NULL/EINVAL");
	CHECK(ibv_destroy_cq(NULL) == EINVAL && ibv_destroy_qp(NULL) == EINVAL &&
		      ibv_dereg_mr(NULL) == EINVAL && ibv_destroy_ah(NULL) == EINVAL &&
		      ibv_destroy_srq(NULL) == EINVAL && ibv_destroy_comp_channel(NULL) == EINVAL,
	      "ibv_destroy_*(NULL): EINVAL");
	errno = 0;
	CHECK(!ibv_reg_mr(NULL, a.buf, 8, 0) && errno == EINVAL, "ibv_reg_mr(NULL pd): NULL/EINVAL");
	errno = 0;
	CHECK(!ibv_reg_mr(a.pd, NULL, 8, IBV_ACCESS_LOCAL_WRITE) && errno == EFAULT,
	      "ibv_reg_mr(NULL addr): NULL/EFAULT (rxe: the kernel's ib_umem_get cannot pin page 0)");
	CHECK(ibv_modify_qp(a.qp, NULL, IBV_QP_STATE) == EINVAL, "ibv_modify_qp(attr NULL): EINVAL");
	errno = 0;
	CHECK(ibv_query_gid(NULL, 1, 0, NULL) == -1 && errno == EINVAL,
	      "ibv_query_gid(NULL): -1/EINVAL");
	errno = 0;
	CHECK(ibv_get_cq_event(NULL, NULL, NULL) == -1 && errno == EINVAL,
	      "ibv_get_cq_event(NULL): -1/EINVAL");
	errno = 0;
	CHECK(ibv_get_async_event(NULL, NULL) == -1 && errno == EINVAL,
	      "ibv_get_async_event(NULL): -1/EINVAL");
	CHECK(!ibv_get_device_name(NULL), "ibv_get_device_name(NULL): NULL");
	CHECK(ibv_query_qp_data_in_order(NULL, IBV_WR_SEND, 0) == 0, "data_in_order(NULL): 0");

	destroy_side(&a);
	destroy_side(&b);
}

int main(void)
{
	struct ibv_context *ctx;

	setvbuf(stdout, NULL, _IOLBF, 0);
	device_and_context();
	ctx = open_ctx();
	queries(ctx);
	REQUIRE(ibv_close_device(ctx) == 0, "close");
	lifecycles();
	printf("# objects: all checks passed\n");
	return 0;
}
