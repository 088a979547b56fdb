//! The 71 `IBVERBS_PRIVATE_34` symbols: rdma-core's private provider ABI.
//!
//! Why they exist (`readelf -d`/`-V` of Debian's perftest): perftest `NEEDED`s the real
//! `libmlx5.so.1` and `libefa.so.1`; they are linked `-z now` and import 62 of these, so
//! without them perftest dies at load time (`undefined symbol: ibv_cmd_destroy_cq, version
//! IBVERBS_PRIVATE_34`). Their ELF constructors call [`verbs_register_driver_34`], which
//! must therefore be a harmless no-op. Nothing else is reached on the default paths: the
//! `ibv_cmd_*` helpers are only called from provider code, which never gets one of our
//! contexts. So: `int` functions return `EOPNOTSUPP`, pointer functions NULL with
//! `errno = EOPNOTSUPP`, `void` functions do nothing — except where the real function's
//! convention makes a positive value mean success (noted on the function).
//!
//! [`ibv_query_gid_type`] is different: `ibv_devinfo` (an application) and pyverbs import
//! it; it is real (the GID types of the soft device's table).
//!
//! Argument types follow rdma-core 44's `driver.h`/`cmd_ioctl.h`; pointers to kernel
//! command structs the stubs never read are `*mut c_void`.

use core::ffi::{c_char, c_int, c_uint, c_void};
use core::sync::atomic::AtomicBool;

use crate::abi::*;
use crate::ffi::{
    not_supported_errno, not_supported_minus_one, not_supported_null, not_supported_void,
};

/// `bool verbs_allow_disassociate_destroy` (a 1-byte data object in `.bss`): libmlx5
/// reads it through its GOT. rverbs has no device disassociation; it stays `false`.
/// `AtomicBool` has the layout of `bool` and lives in writable memory.
#[export_name = "__rv_verbs_allow_disassociate_destroy"]
pub static VERBS_ALLOW_DISASSOCIATE_DESTROY: AtomicBool = AtomicBool::new(false);
core::arch::global_asm!(concat!(
    ".symver __rv_verbs_allow_disassociate_destroy, ",
    "verbs_allow_disassociate_destroy@@IBVERBS_PRIVATE_34"
));

export! {
    /// Called by every provider's ELF constructor (`PROVIDER_DRIVER()`) with its ops
    /// table. A no-op: rverbs never loads or uses providers.
    #[export("IBVERBS_PRIVATE_34", void)]
    pub unsafe fn verbs_register_driver_34(_ops: *const verbs_device_ops) {}
}

export! {
    /// Provider logging: `void __verbs_log(struct verbs_context *, uint32_t level,
    /// const char *fmt, ...)`. Defined with fixed arity (stable Rust cannot define
    /// C-variadic functions); ABI-safe on x86_64 SysV and aarch64 because the callee never
    /// touches the variadic part. Logs nothing.
    #[export("IBVERBS_PRIVATE_34", void)]
    pub unsafe fn __verbs_log(_ctx: *mut verbs_context, _level: u32, _fmt: *const c_char) {}
}

export! {
    /// Returns the number of ioctl attributes a command buffer chain needs. Nothing to
    /// fail: returns `num_attrs` unchanged (no chained buffers exist without a kernel).
    #[export("IBVERBS_PRIVATE_34", value(num_attrs))]
    pub unsafe fn __ioctl_final_num_attrs(
        num_attrs: c_uint,
        _link: *mut ibv_command_buffer,
    ) -> c_uint {
        num_attrs
    }
}

export! {
    /// Allocates a provider context. Stub: NULL, `errno = EOPNOTSUPP`.
    #[export("IBVERBS_PRIVATE_34", null)]
    pub unsafe fn _verbs_init_and_alloc_context(
        _device: *mut ibv_device,
        _cmd_fd: c_int,
        _alloc_size: usize,
        _context_offset: *mut verbs_context,
        _driver_id: u32,
    ) -> *mut c_void {
        not_supported_null()
    }
}

export! {
    /// Opens a device through its provider. Stub: NULL, `errno = EOPNOTSUPP`.
    #[export("IBVERBS_PRIVATE_34", null)]
    pub unsafe fn verbs_open_device(
        _device: *mut ibv_device,
        _private_data: *mut c_void,
    ) -> *mut ibv_context {
        not_supported_null()
    }
}

export! {
    /// Installs a provider's ops table. Stub: no-op.
    #[export("IBVERBS_PRIVATE_34", void)]
    pub unsafe fn verbs_set_ops(_vctx: *mut verbs_context, _ops: *const verbs_context_ops) {
        not_supported_void()
    }
}

export! {
    /// Tears down a provider context. Stub: no-op.
    #[export("IBVERBS_PRIVATE_34", void)]
    pub unsafe fn verbs_uninit_context(_context: *mut verbs_context) {
        not_supported_void()
    }
}

export! {
    /// Initialises the generic fields of a provider CQ. Stub: no-op.
    #[export("IBVERBS_PRIVATE_34", void)]
    pub unsafe fn verbs_init_cq(
        _cq: *mut ibv_cq,
        _context: *mut ibv_context,
        _channel: *mut ibv_comp_channel,
        _cq_context: *mut c_void,
    ) {
        not_supported_void()
    }
}

export! {
    /// Sends an ioctl command to the kernel. Stub: `EOPNOTSUPP`.
    #[export("IBVERBS_PRIVATE_34", errno)]
    pub unsafe fn execute_ioctl(
        _context: *mut ibv_context,
        _cmd: *mut ibv_command_buffer,
    ) -> c_int {
        not_supported_errno()
    }
}

export! {
    /// Reads the sysfs type of a GID (`IBV_GID_TYPE_SYSFS_IB_ROCE_V1` / `_ROCE_V2`).
    /// Returns 0, or -1 with `errno` (`ibv_devinfo` then prints no type; not fatal).
    #[export("IBVERBS_PRIVATE_34", minus_one)]
    pub unsafe fn ibv_query_gid_type(
        context: *mut ibv_context,
        port_num: u8,
        index: c_uint,
        type_: *mut ibv_gid_type_sysfs,
    ) -> c_int {
        if type_.is_null() {
            return crate::ffi::minus_one_errno(libc::EINVAL);
        }
        match crate::context::gid_type_sysfs(context, port_num, index) {
            Ok(t) => {
                // SAFETY: type_ is writable (caller contract, checked non-NULL).
                unsafe { type_.write(t) };
                0
            }
            Err(e) => crate::ffi::minus_one_errno(e),
        }
    }
}

export! {
    /// `int ibv_read_ibdev_sysfs_file(char *buf, size_t size, struct verbs_sysfs_dev *,
    /// const char *fmt, ...)`, fixed arity (see [`__verbs_log`]). Stub: -1 with
    /// `errno = EOPNOTSUPP` — its convention is "length or -1", so a positive `EOPNOTSUPP`
    /// would read as a 95-byte success.
    #[export("IBVERBS_PRIVATE_34", minus_one)]
    pub unsafe fn ibv_read_ibdev_sysfs_file(
        _buf: *mut c_char,
        _size: usize,
        _sysfs_dev: *mut verbs_sysfs_dev,
        _fnfmt: *const c_char,
    ) -> c_int {
        not_supported_minus_one()
    }
}

/// Defines `int`-returning `ibv_cmd_*` stubs: `EOPNOTSUPP`, arguments unused.
macro_rules! cmd_stubs {
    ($($(#[doc = $doc:literal])* fn $name:ident($($arg:ident: $ty:ty),* $(,)?);)*) => {
        $(
            export! {
                $(#[doc = $doc])*
                #[export("IBVERBS_PRIVATE_34", errno)]
                pub unsafe fn $name($($arg: $ty),*) -> c_int {
                    not_supported_errno()
                }
            }
        )*
    };
}

cmd_stubs! {
    /// Stub: `EOPNOTSUPP`.
    fn ibv_cmd_advise_mr(
        _pd: *mut ibv_pd, _advice: ibv_advise_mr_advice, _flags: u32, _sg_list: *mut ibv_sge,
        _num_sge: u32,
    );
    /// Stub: `EOPNOTSUPP`.
    fn ibv_cmd_alloc_dm(
        _ctx: *mut ibv_context, _dm_attr: *const ibv_alloc_dm_attr, _dm: *mut c_void,
        _link: *mut ibv_command_buffer,
    );
    /// Stub: `EOPNOTSUPP`.
    fn ibv_cmd_alloc_mw(
        _pd: *mut ibv_pd, _type: ibv_mw_type, _mw: *mut ibv_mw, _cmd: *mut c_void,
        _cmd_size: usize, _resp: *mut c_void, _resp_size: usize,
    );
    /// Stub: `EOPNOTSUPP`.
    fn ibv_cmd_alloc_pd(
        _context: *mut ibv_context, _pd: *mut ibv_pd, _cmd: *mut c_void, _cmd_size: usize,
        _resp: *mut c_void, _resp_size: usize,
    );
    /// Stub: `EOPNOTSUPP`.
    fn ibv_cmd_attach_mcast(_qp: *mut ibv_qp, _gid: *const ibv_gid, _lid: u16);
    /// Stub: `EOPNOTSUPP`.
    fn ibv_cmd_close_xrcd(_xrcd: *mut c_void);
    /// Stub: `EOPNOTSUPP`.
    fn ibv_cmd_create_ah(
        _pd: *mut ibv_pd, _ah: *mut ibv_ah, _attr: *mut ibv_ah_attr, _resp: *mut c_void,
        _resp_size: usize,
    );
    /// Stub: `EOPNOTSUPP`.
    fn ibv_cmd_create_counters(
        _context: *mut ibv_context, _init_attr: *mut ibv_counters_init_attr,
        _vcounters: *mut c_void, _link: *mut ibv_command_buffer,
    );
    /// Stub: `EOPNOTSUPP`.
    fn ibv_cmd_create_cq(
        _context: *mut ibv_context, _cqe: c_int, _channel: *mut ibv_comp_channel,
        _comp_vector: c_int, _cq: *mut ibv_cq, _cmd: *mut c_void, _cmd_size: usize,
        _resp: *mut c_void, _resp_size: usize,
    );
    /// Stub: `EOPNOTSUPP`.
    fn ibv_cmd_create_cq_ex(
        _context: *mut ibv_context, _cq_attr: *const ibv_cq_init_attr_ex, _cq: *mut c_void,
        _cmd: *mut c_void, _cmd_size: usize, _resp: *mut c_void, _resp_size: usize,
        _cmd_flags: u32,
    );
    /// Stub: `EOPNOTSUPP`.
    fn ibv_cmd_create_flow(
        _qp: *mut ibv_qp, _flow_id: *mut ibv_flow, _flow_attr: *mut ibv_flow_attr,
        _ucmd: *mut c_void, _ucmd_size: usize,
    );
    /// Stub: `EOPNOTSUPP`.
    fn ibv_cmd_create_flow_action_esp(
        _ctx: *mut ibv_context, _attr: *mut ibv_flow_action_esp_attr, _flow_action: *mut c_void,
        _driver: *mut ibv_command_buffer,
    );
    /// Stub: `EOPNOTSUPP`.
    fn ibv_cmd_create_qp(
        _pd: *mut ibv_pd, _qp: *mut ibv_qp, _attr: *mut ibv_qp_init_attr, _cmd: *mut c_void,
        _cmd_size: usize, _resp: *mut c_void, _resp_size: usize,
    );
    /// Stub: `EOPNOTSUPP`.
    fn ibv_cmd_create_qp_ex(
        _context: *mut ibv_context, _qp: *mut c_void, _attr_ex: *mut ibv_qp_init_attr_ex,
        _cmd: *mut c_void, _cmd_size: usize, _resp: *mut c_void, _resp_size: usize,
    );
    /// Stub: `EOPNOTSUPP`.
    fn ibv_cmd_create_qp_ex2(
        _context: *mut ibv_context, _qp: *mut c_void, _qp_attr: *mut ibv_qp_init_attr_ex,
        _cmd: *mut c_void, _cmd_size: usize, _resp: *mut c_void, _resp_size: usize,
    );
    /// Stub: `EOPNOTSUPP`.
    fn ibv_cmd_create_rwq_ind_table(
        _context: *mut ibv_context, _init_attr: *mut ibv_rwq_ind_table_init_attr,
        _rwq_ind_table: *mut ibv_rwq_ind_table, _resp: *mut c_void, _resp_size: usize,
    );
    /// Stub: `EOPNOTSUPP`.
    fn ibv_cmd_create_srq(
        _pd: *mut ibv_pd, _srq: *mut ibv_srq, _attr: *mut ibv_srq_init_attr, _cmd: *mut c_void,
        _cmd_size: usize, _resp: *mut c_void, _resp_size: usize,
    );
    /// Stub: `EOPNOTSUPP`.
    fn ibv_cmd_create_srq_ex(
        _context: *mut ibv_context, _srq: *mut c_void, _attr_ex: *mut ibv_srq_init_attr_ex,
        _cmd: *mut c_void, _cmd_size: usize, _resp: *mut c_void, _resp_size: usize,
    );
    /// Stub: `EOPNOTSUPP`.
    fn ibv_cmd_create_wq(
        _context: *mut ibv_context, _wq_init_attr: *mut ibv_wq_init_attr, _wq: *mut ibv_wq,
        _cmd: *mut c_void, _cmd_size: usize, _resp: *mut c_void, _resp_size: usize,
    );
    /// Stub: `EOPNOTSUPP`.
    fn ibv_cmd_dealloc_mw(_mw: *mut ibv_mw);
    /// Stub: `EOPNOTSUPP`.
    fn ibv_cmd_dealloc_pd(_pd: *mut ibv_pd);
    /// Stub: `EOPNOTSUPP`.
    fn ibv_cmd_dereg_mr(_vmr: *mut c_void);
    /// Stub: `EOPNOTSUPP`.
    fn ibv_cmd_destroy_ah(_ah: *mut ibv_ah);
    /// Stub: `EOPNOTSUPP`.
    fn ibv_cmd_destroy_counters(_vcounters: *mut c_void);
    /// Stub: `EOPNOTSUPP`.
    fn ibv_cmd_destroy_cq(_cq: *mut ibv_cq);
    /// Stub: `EOPNOTSUPP`.
    fn ibv_cmd_destroy_flow(_flow_id: *mut ibv_flow);
    /// Stub: `EOPNOTSUPP`.
    fn ibv_cmd_destroy_flow_action(_action: *mut c_void);
    /// Stub: `EOPNOTSUPP`.
    fn ibv_cmd_destroy_qp(_qp: *mut ibv_qp);
    /// Stub: `EOPNOTSUPP`.
    fn ibv_cmd_destroy_rwq_ind_table(_rwq_ind_table: *mut ibv_rwq_ind_table);
    /// Stub: `EOPNOTSUPP`.
    fn ibv_cmd_destroy_srq(_srq: *mut ibv_srq);
    /// Stub: `EOPNOTSUPP`.
    fn ibv_cmd_destroy_wq(_wq: *mut ibv_wq);
    /// Stub: `EOPNOTSUPP`.
    fn ibv_cmd_detach_mcast(_qp: *mut ibv_qp, _gid: *const ibv_gid, _lid: u16);
    /// Stub: `EOPNOTSUPP`.
    fn ibv_cmd_free_dm(_dm: *mut c_void);
    /// Stub: `EOPNOTSUPP`.
    fn ibv_cmd_get_context(
        _context: *mut verbs_context, _cmd: *mut c_void, _cmd_size: usize, _resp: *mut c_void,
        _resp_size: usize,
    );
    /// Stub: `EOPNOTSUPP`.
    fn ibv_cmd_modify_cq(
        _cq: *mut ibv_cq, _attr: *mut ibv_modify_cq_attr, _cmd: *mut c_void, _cmd_size: usize,
    );
    /// Stub: `EOPNOTSUPP`.
    fn ibv_cmd_modify_flow_action_esp(
        _flow_action: *mut c_void, _attr: *mut ibv_flow_action_esp_attr,
        _driver: *mut ibv_command_buffer,
    );
    /// Stub: `EOPNOTSUPP`.
    fn ibv_cmd_modify_qp(
        _qp: *mut ibv_qp, _attr: *mut ibv_qp_attr, _attr_mask: c_int, _cmd: *mut c_void,
        _cmd_size: usize,
    );
    /// Stub: `EOPNOTSUPP`.
    fn ibv_cmd_modify_qp_ex(
        _qp: *mut ibv_qp, _attr: *mut ibv_qp_attr, _attr_mask: c_int, _cmd: *mut c_void,
        _cmd_size: usize, _resp: *mut c_void, _resp_size: usize,
    );
    /// Stub: `EOPNOTSUPP`.
    fn ibv_cmd_modify_srq(
        _srq: *mut ibv_srq, _srq_attr: *mut ibv_srq_attr, _srq_attr_mask: c_int, _cmd: *mut c_void,
        _cmd_size: usize,
    );
    /// Stub: `EOPNOTSUPP`.
    fn ibv_cmd_modify_wq(
        _wq: *mut ibv_wq, _attr: *mut ibv_wq_attr, _cmd: *mut c_void, _cmd_size: usize,
    );
    /// Stub: `EOPNOTSUPP`.
    fn ibv_cmd_open_qp(
        _context: *mut ibv_context, _qp: *mut c_void, _vqp_sz: c_int, _attr: *mut ibv_qp_open_attr,
        _cmd: *mut c_void, _cmd_size: usize, _resp: *mut c_void, _resp_size: usize,
    );
    /// Stub: `EOPNOTSUPP`.
    fn ibv_cmd_open_xrcd(
        _context: *mut ibv_context, _xrcd: *mut c_void, _vxrcd_size: c_int,
        _attr: *mut ibv_xrcd_init_attr, _cmd: *mut c_void, _cmd_size: usize, _resp: *mut c_void,
        _resp_size: usize,
    );
    /// Stub: `EOPNOTSUPP`.
    fn ibv_cmd_query_context(_ctx: *mut ibv_context, _driver: *mut ibv_command_buffer);
    /// Stub: `EOPNOTSUPP`.
    fn ibv_cmd_query_device_any(
        _context: *mut ibv_context, _input: *const ibv_query_device_ex_input,
        _attr: *mut ibv_device_attr_ex, _attr_size: usize, _resp: *mut c_void,
        _resp_size: *mut usize,
    );
    /// Stub: `EOPNOTSUPP`.
    fn ibv_cmd_query_mr(_pd: *mut ibv_pd, _vmr: *mut c_void, _mr_handle: u32);
    /// Stub: `EOPNOTSUPP`.
    fn ibv_cmd_query_port(
        _context: *mut ibv_context, _port_num: u8, _port_attr: *mut ibv_port_attr,
        _cmd: *mut c_void, _cmd_size: usize,
    );
    /// Stub: `EOPNOTSUPP`.
    fn ibv_cmd_query_qp(
        _qp: *mut ibv_qp, _qp_attr: *mut ibv_qp_attr, _attr_mask: c_int,
        _qp_init_attr: *mut ibv_qp_init_attr, _cmd: *mut c_void, _cmd_size: usize,
    );
    /// Stub: `EOPNOTSUPP`.
    fn ibv_cmd_query_srq(
        _srq: *mut ibv_srq, _srq_attr: *mut ibv_srq_attr, _cmd: *mut c_void, _cmd_size: usize,
    );
    /// Stub: `EOPNOTSUPP`.
    fn ibv_cmd_read_counters(
        _vcounters: *mut c_void, _counters_value: *mut u64, _ncounters: u32, _flags: u32,
        _link: *mut ibv_command_buffer,
    );
    /// Stub: `EOPNOTSUPP`.
    fn ibv_cmd_reg_dm_mr(
        _pd: *mut ibv_pd, _dm: *mut c_void, _offset: u64, _length: usize, _access: c_uint,
        _vmr: *mut c_void, _link: *mut ibv_command_buffer,
    );
    /// Stub: `EOPNOTSUPP`.
    fn ibv_cmd_reg_dmabuf_mr(
        _pd: *mut ibv_pd, _offset: u64, _length: usize, _iova: u64, _fd: c_int, _access: c_int,
        _vmr: *mut c_void,
    );
    /// Stub: `EOPNOTSUPP`.
    fn ibv_cmd_reg_mr(
        _pd: *mut ibv_pd, _addr: *mut c_void, _length: usize, _hca_va: u64, _access: c_int,
        _vmr: *mut c_void, _cmd: *mut c_void, _cmd_size: usize, _resp: *mut c_void,
        _resp_size: usize,
    );
    /// Stub: `EOPNOTSUPP`.
    fn ibv_cmd_req_notify_cq(_cq: *mut ibv_cq, _solicited_only: c_int);
    /// Stub: `EOPNOTSUPP`.
    fn ibv_cmd_rereg_mr(
        _vmr: *mut c_void, _flags: u32, _addr: *mut c_void, _length: usize, _hca_va: u64,
        _access: c_int, _pd: *mut ibv_pd, _cmd: *mut c_void, _cmd_sz: usize, _resp: *mut c_void,
        _resp_sz: usize,
    );
    /// Stub: `EOPNOTSUPP`.
    fn ibv_cmd_resize_cq(
        _cq: *mut ibv_cq, _cqe: c_int, _cmd: *mut c_void, _cmd_size: usize, _resp: *mut c_void,
        _resp_size: usize,
    );
}

export! {
    /// Kernel `POLL_CQ` command. Stub: -1 with `errno = EOPNOTSUPP` — a poll returns a
    /// completion count, so a positive `EOPNOTSUPP` would read as 95 completions.
    #[export("IBVERBS_PRIVATE_34", minus_one)]
    pub unsafe fn ibv_cmd_poll_cq(_cq: *mut ibv_cq, _ne: c_int, _wc: *mut ibv_wc) -> c_int {
        not_supported_minus_one()
    }
}

/// Defines the `ibv_cmd_post_*` stubs: `EOPNOTSUPP` with `*bad_wr = wr` (the first WR
/// is the first rejected one, as every post verb reports it).
macro_rules! post_stubs {
    ($(
        $(#[doc = $doc:literal])*
        fn $name:ident($q:ident: $qty:ty, $wr:ident: $wrty:ty, $bad:ident: $badty:ty $(,)?);
    )*) => {
        $(
            export! {
                $(#[doc = $doc])*
                #[export("IBVERBS_PRIVATE_34", errno)]
                pub unsafe fn $name($q: $qty, $wr: $wrty, $bad: $badty) -> c_int {
                    if !$bad.is_null() {
                        // SAFETY: a non-NULL bad_wr points to a writable WR pointer
                        // (post verb contract).
                        unsafe { *$bad = $wr };
                    }
                    not_supported_errno()
                }
            }
        )*
    };
}

post_stubs! {
    /// Kernel `POST_SEND` command. Stub: `EOPNOTSUPP`, `*bad_wr = wr`.
    fn ibv_cmd_post_send(_ibqp: *mut ibv_qp, wr: *mut ibv_send_wr, bad_wr: *mut *mut ibv_send_wr);
    /// Kernel `POST_RECV` command. Stub: `EOPNOTSUPP`, `*bad_wr = wr`.
    fn ibv_cmd_post_recv(_ibqp: *mut ibv_qp, wr: *mut ibv_recv_wr, bad_wr: *mut *mut ibv_recv_wr);
    /// Kernel `POST_SRQ_RECV` command. Stub: `EOPNOTSUPP`, `*bad_wr = wr`.
    fn ibv_cmd_post_srq_recv(
        _srq: *mut ibv_srq, wr: *mut ibv_recv_wr, bad_wr: *mut *mut ibv_recv_wr,
    );
}
