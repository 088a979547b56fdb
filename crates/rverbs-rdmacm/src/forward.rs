//! The 41 `rdma_*` functions of rdma-core 44's librdmacm, each forwarded to
//! `__rv_<name>` in the drop-in `libibverbs.so.1` (crate `rverbs-capi`, module `cm`).
//!
//! Signatures are those of `<rdma/rdma_cma.h>` and `<rdma/rdma_verbs.h>` with every
//! struct pointer as `void *` (enums as `unsigned int`, gcc's representation of enums
//! without negative values). When the target is missing each returns its convention's
//! error: -1, NULL or nothing with `errno = ENOSYS`; `rdma_get_src_port`/`_dst_port`
//! 0; `rdma_event_str` `"UNKNOWN EVENT"`; `rdma_getaddrinfo` -1 with `errno = ENODEV`
//! and `rdma_get_devices` NULL with `*num_devices = 0` and `errno = ENODEV` (what
//! rdma-core answers when there is no RDMA stack).

use core::ffi::{c_char, c_int, c_uint, c_void};

use crate::missing;

forward! {
    /// rdma_create_event_channel(3).
    #[forward("RDMACM_1.0", null)]
    fn rdma_create_event_channel() -> *mut c_void;

    /// rdma_destroy_event_channel(3).
    #[forward("RDMACM_1.0", void)]
    fn rdma_destroy_event_channel(channel: *mut c_void);

    /// rdma_create_id(3); `ps` is an `enum rdma_port_space`.
    #[forward("RDMACM_1.0", minus_one)]
    fn rdma_create_id(channel: *mut c_void, id: *mut *mut c_void, context: *mut c_void, ps: c_uint) -> c_int;

    /// rdma_create_ep(3).
    #[forward("RDMACM_1.0", minus_one)]
    fn rdma_create_ep(id: *mut *mut c_void, res: *mut c_void, pd: *mut c_void, qp_init_attr: *mut c_void) -> c_int;

    /// rdma_destroy_ep(3).
    #[forward("RDMACM_1.0", void)]
    fn rdma_destroy_ep(id: *mut c_void);

    /// rdma_destroy_id(3).
    #[forward("RDMACM_1.0", minus_one)]
    fn rdma_destroy_id(id: *mut c_void) -> c_int;

    /// rdma_bind_addr(3).
    #[forward("RDMACM_1.0", minus_one)]
    fn rdma_bind_addr(id: *mut c_void, addr: *mut c_void) -> c_int;

    /// rdma_resolve_addr(3).
    #[forward("RDMACM_1.0", minus_one)]
    fn rdma_resolve_addr(id: *mut c_void, src_addr: *mut c_void, dst_addr: *mut c_void, timeout_ms: c_int) -> c_int;

    /// rdma_resolve_route(3).
    #[forward("RDMACM_1.0", minus_one)]
    fn rdma_resolve_route(id: *mut c_void, timeout_ms: c_int) -> c_int;

    /// rdma_create_qp(3).
    #[forward("RDMACM_1.0", minus_one)]
    fn rdma_create_qp(id: *mut c_void, pd: *mut c_void, qp_init_attr: *mut c_void) -> c_int;

    /// rdma_create_qp_ex(3).
    #[forward("RDMACM_1.0", minus_one)]
    fn rdma_create_qp_ex(id: *mut c_void, qp_init_attr: *mut c_void) -> c_int;

    /// rdma_destroy_qp(3).
    #[forward("RDMACM_1.0", void)]
    fn rdma_destroy_qp(id: *mut c_void);

    /// rdma_connect(3).
    #[forward("RDMACM_1.0", minus_one)]
    fn rdma_connect(id: *mut c_void, conn_param: *mut c_void) -> c_int;

    /// rdma_listen(3).
    #[forward("RDMACM_1.0", minus_one)]
    fn rdma_listen(id: *mut c_void, backlog: c_int) -> c_int;

    /// rdma_get_request(3).
    #[forward("RDMACM_1.0", minus_one)]
    fn rdma_get_request(listen: *mut c_void, id: *mut *mut c_void) -> c_int;

    /// rdma_accept(3).
    #[forward("RDMACM_1.0", minus_one)]
    fn rdma_accept(id: *mut c_void, conn_param: *mut c_void) -> c_int;

    /// rdma_reject(3).
    #[forward("RDMACM_1.0", minus_one)]
    fn rdma_reject(id: *mut c_void, private_data: *const c_void, private_data_len: u8) -> c_int;

    /// rdma_notify(3); `event` is an `enum ibv_event_type`.
    #[forward("RDMACM_1.0", minus_one)]
    fn rdma_notify(id: *mut c_void, event: c_uint) -> c_int;

    /// rdma_disconnect(3).
    #[forward("RDMACM_1.0", minus_one)]
    fn rdma_disconnect(id: *mut c_void) -> c_int;

    /// rdma_join_multicast(3).
    #[forward("RDMACM_1.0", minus_one)]
    fn rdma_join_multicast(id: *mut c_void, addr: *mut c_void, context: *mut c_void) -> c_int;

    /// rdma_leave_multicast(3).
    #[forward("RDMACM_1.0", minus_one)]
    fn rdma_leave_multicast(id: *mut c_void, addr: *mut c_void) -> c_int;

    /// rdma_get_cm_event(3).
    #[forward("RDMACM_1.0", minus_one)]
    fn rdma_get_cm_event(channel: *mut c_void, event: *mut *mut c_void) -> c_int;

    /// rdma_ack_cm_event(3).
    #[forward("RDMACM_1.0", minus_one)]
    fn rdma_ack_cm_event(event: *mut c_void) -> c_int;

    /// rdma_get_src_port(3): `__be16`.
    #[forward("RDMACM_1.0", zero)]
    fn rdma_get_src_port(id: *mut c_void) -> u16;

    /// rdma_get_dst_port(3): `__be16`.
    #[forward("RDMACM_1.0", zero)]
    fn rdma_get_dst_port(id: *mut c_void) -> u16;

    /// rdma_get_devices(3): returns `struct ibv_context **`.
    #[forward("RDMACM_1.0", with {
        if !num_devices.is_null() {
            // SAFETY: non-NULL out-parameter (caller contract).
            unsafe { num_devices.write(0) };
        }
        missing(libc::ENODEV);
        ::core::ptr::null_mut()
    })]
    fn rdma_get_devices(num_devices: *mut c_int) -> *mut *mut c_void;

    /// rdma_free_devices(3).
    #[forward("RDMACM_1.0", void)]
    fn rdma_free_devices(list: *mut *mut c_void);

    /// rdma_event_str(3); `event` is an `enum rdma_cm_event_type`.
    #[forward("RDMACM_1.0", with {
        missing(libc::ENOSYS);
        c"UNKNOWN EVENT".as_ptr()
    })]
    fn rdma_event_str(event: c_uint) -> *const c_char;

    /// rdma_set_option(3).
    #[forward("RDMACM_1.0", minus_one)]
    fn rdma_set_option(id: *mut c_void, level: c_int, optname: c_int, optval: *mut c_void, optlen: usize) -> c_int;

    /// rdma_migrate_id(3).
    #[forward("RDMACM_1.0", minus_one)]
    fn rdma_migrate_id(id: *mut c_void, channel: *mut c_void) -> c_int;

    /// rdma_getaddrinfo(3): 0, a `getaddrinfo` `EAI_*` code, or -1 with `errno`.
    #[forward("RDMACM_1.0", with {
        missing(libc::ENODEV);
        -1
    })]
    fn rdma_getaddrinfo(node: *const c_char, service: *const c_char, hints: *const c_void, res: *mut *mut c_void) -> c_int;

    /// rdma_freeaddrinfo(3).
    #[forward("RDMACM_1.0", void)]
    fn rdma_freeaddrinfo(res: *mut c_void);

    /// rdma_create_srq (`<rdma/rdma_verbs.h>`).
    #[forward("RDMACM_1.0", minus_one)]
    fn rdma_create_srq(id: *mut c_void, pd: *mut c_void, attr: *mut c_void) -> c_int;

    /// rdma_create_srq_ex (`<rdma/rdma_verbs.h>`).
    #[forward("RDMACM_1.0", minus_one)]
    fn rdma_create_srq_ex(id: *mut c_void, attr: *mut c_void) -> c_int;

    /// rdma_destroy_srq (`<rdma/rdma_verbs.h>`).
    #[forward("RDMACM_1.0", void)]
    fn rdma_destroy_srq(id: *mut c_void);

    /// rdma_join_multicast_ex(3).
    #[forward("RDMACM_1.1", minus_one)]
    fn rdma_join_multicast_ex(id: *mut c_void, mc_join_attr: *mut c_void, context: *mut c_void) -> c_int;

    /// rdma_establish(3).
    #[forward("RDMACM_1.2", minus_one)]
    fn rdma_establish(id: *mut c_void) -> c_int;

    /// rdma_init_qp_attr(3).
    #[forward("RDMACM_1.2", minus_one)]
    fn rdma_init_qp_attr(id: *mut c_void, qp_attr: *mut c_void, qp_attr_mask: *mut c_int) -> c_int;

    /// rdma_get_remote_ece(3).
    #[forward("RDMACM_1.3", minus_one)]
    fn rdma_get_remote_ece(id: *mut c_void, ece: *mut c_void) -> c_int;

    /// rdma_reject_ece(3).
    #[forward("RDMACM_1.3", minus_one)]
    fn rdma_reject_ece(id: *mut c_void, private_data: *const c_void, private_data_len: u8) -> c_int;

    /// rdma_set_local_ece(3).
    #[forward("RDMACM_1.3", minus_one)]
    fn rdma_set_local_ece(id: *mut c_void, ece: *mut c_void) -> c_int;
}
