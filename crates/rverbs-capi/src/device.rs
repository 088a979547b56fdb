//! Device list, device contexts, device/port/GID/P_Key queries.
//!
//! Objects (laid out as rdma-core's libibverbs/driver.h):
//! * [`DeviceObj`]: an immortal `struct ibv_device` followed by the private `ops` pointer
//!   at offset 664 that libmlx5/libefa's `is_*_dev()` checks read (`verbs_device.ops`).
//! * contexts ([`crate::context::ContextObj`]), created and closed here, their ops tables
//!   filled with the op modules' functions.

use core::ffi::{c_char, c_int, c_void};
use core::mem::offset_of;
use std::cell::UnsafeCell;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::OnceLock;

use crate::abi::*;
use crate::conv;
use crate::ffi::{ToErrno, minus_one_errno, null_errno, set_errno};
use crate::context::{gid_entry, ContextObj, CONTEXT_OFFSET};
use crate::live::{self, Kind};

// ---------------------------------------------------------------------------------------
// Devices
// ---------------------------------------------------------------------------------------

/// What the private `ops` pointer at offset 664 of every device points at: a private
/// static, never a provider's `verbs_device_ops`, so `is_mlx5_dev()`/`is_efa_dev()` say
/// no (rdma-core `providers/mlx5/mlx5.c` `is_mlx5_dev`).
static RVERBS_DEVICE_OPS: [u8; 8] = *b"rverbs\0\0";

/// A device handed to C: `struct ibv_device` (664 bytes), then `ops` at offset 664.
/// Immortal (ibv_get_device_list(3)): devices stay valid after `ibv_free_device_list`.
#[repr(C)]
pub struct DeviceObj {
    dev: UnsafeCell<ibv_device>,
    ops: *const c_void,
    core: rverbs::Device,
    index: c_int,
}

const _: () = assert!(offset_of!(DeviceObj, ops) == 664);

// SAFETY: the public struct is written once before the object is published and only
// read afterwards; `ops` points at an immutable static; `rverbs::Device` is a handle to
// the process-wide device.
unsafe impl Sync for DeviceObj {}
// SAFETY: as above.
unsafe impl Send for DeviceObj {}

/// Copies `s` into a fixed C string buffer (truncating, always NUL-terminated).
fn set_cstr(dst: &mut [c_char], s: &str) {
    let n = s.len().min(dst.len() - 1);
    for (d, b) in dst.iter_mut().zip(&s.as_bytes()[..n]) {
        *d = *b as c_char;
    }
    dst[n] = 0;
}

impl DeviceObj {
    fn new(core: rverbs::Device, index: c_int) -> Self {
        let mut dev = ibv_device::zeroed();
        dev.node_type = IBV_NODE_CA;
        dev.transport_type = IBV_TRANSPORT_IB;
        set_cstr(&mut dev.name, core.name());
        set_cstr(&mut dev.dev_name, &format!("uverbs{index}"));
        set_cstr(
            &mut dev.dev_path,
            &format!("/sys/class/infiniband_verbs/uverbs{index}"),
        );
        set_cstr(
            &mut dev.ibdev_path,
            &format!("/sys/class/infiniband/{}", core.name()),
        );
        DeviceObj {
            dev: UnsafeCell::new(dev),
            ops: RVERBS_DEVICE_OPS.as_ptr().cast(),
            core,
            index,
        }
    }

    /// The `struct ibv_device *` handed to C.
    pub fn as_ptr(&self) -> *mut ibv_device {
        self.dev.get()
    }

    /// The device behind a `struct ibv_device *`, if it is one of ours (checked against
    /// the device list, so a foreign or garbage pointer is refused, never dereferenced).
    pub fn from_raw(device: *mut ibv_device) -> Option<&'static DeviceObj> {
        if device.is_null() {
            return None;
        }
        list().ok()?.iter().find(|d| d.as_ptr() == device)
    }
}

/// The process's devices, built once from the core's list (immortal).
/// `RVERBS_LOG=<filter>` (e.g. `info`, `rverbs=debug`) prints the library's diagnostics
/// to stderr, the way rdma-core's providers honour their verbose variables.
fn init_logging() {
    if let Ok(filter) = std::env::var("RVERBS_LOG") {
        let _ = tracing_subscriber::fmt()
            .with_writer(std::io::stderr)
            .with_env_filter(log_filter(&filter))
            .try_init();
    }
}

/// The diagnostics filter of a `RVERBS_LOG` value (tracing-subscriber's directive
/// syntax; directives that do not parse are ignored). Field values in span directives
/// (`[span{field=value}]`) match literally, not as regular expressions: building the
/// automaton of some patterns took minutes (`{f=7?........?......ve}`; found by the
/// `log_filter` fuzz target), inside the first verb of the process.
///
/// Each comma-separated directive is trimmed first: tracing-subscriber 0.3 trims a
/// directive but slices the untrimmed one at the trimmed one's offsets, which panics
/// when whitespace before a directive shifts an offset into a multi-byte character
/// (`RVERBS_LOG=" é=info"`; found by the `log_filter` fuzz target).
pub(crate) fn log_filter(value: &str) -> tracing_subscriber::EnvFilter {
    let trimmed: Vec<&str> = value.split(',').map(str::trim).collect();
    tracing_subscriber::EnvFilter::builder().with_regex(false).parse_lossy(trimmed.join(","))
}

fn list() -> Result<&'static [DeviceObj], rverbs::Error> {
    static LIST: OnceLock<Box<[DeviceObj]>> = OnceLock::new();
    if let Some(l) = LIST.get() {
        return Ok(l);
    }
    init_logging();
    let devs = rverbs::devices()?;
    let built: Box<[DeviceObj]> = devs
        .into_iter()
        .enumerate()
        .map(|(i, d)| DeviceObj::new(d, i as c_int))
        .collect();
    Ok(LIST.get_or_init(|| built))
}

export! {
    /// Returns a NULL-terminated array of the available devices (`ibv_get_device_list(3)`).
    ///
    /// Rule: the array is `calloc`'d, non-NULL even when empty, freed only by
    /// `ibv_free_device_list`; `*num_devices` (if non-NULL) gets the count.
    /// Errors: NULL with `errno`.
    #[export("IBVERBS_1.1", null)]
    pub unsafe fn ibv_get_device_list(num_devices: *mut c_int) -> *mut *mut ibv_device {
        let devs = match list() {
            Ok(d) => d,
            Err(e) => return null_errno(e.c_errno()),
        };
        // SAFETY: calloc has no preconditions; the result is checked for NULL.
        let arr = unsafe { libc::calloc(devs.len() + 1, size_of::<*mut ibv_device>()) }
            .cast::<*mut ibv_device>();
        if arr.is_null() {
            return null_errno(libc::ENOMEM);
        }
        for (i, d) in devs.iter().enumerate() {
            // SAFETY: arr holds devs.len() + 1 pointers (the last stays NULL).
            unsafe { arr.add(i).write(d.as_ptr()) };
        }
        if !num_devices.is_null() {
            // SAFETY: non-NULL out-parameter (caller contract).
            unsafe { num_devices.write(devs.len() as c_int) };
        }
        arr
    }
}

export! {
    /// Frees an array returned by [`ibv_get_device_list`] (not the devices).
    #[export("IBVERBS_1.1", void)]
    pub unsafe fn ibv_free_device_list(list: *mut *mut ibv_device) {
        // SAFETY: `list` came from calloc in ibv_get_device_list (or is NULL).
        unsafe { libc::free(list.cast()) };
    }
}

export! {
    /// Returns the kernel-style device name (`ibv_get_device_name(3)`), i.e. `device->name`.
    /// Errors: NULL with `errno` (`EINVAL` for a pointer that is not one of our devices).
    #[export("IBVERBS_1.1", null)]
    pub unsafe fn ibv_get_device_name(device: *mut ibv_device) -> *const c_char {
        match DeviceObj::from_raw(device) {
            // SAFETY: the device is immortal; `name` is NUL-terminated.
            Some(d) => unsafe { (&raw const (*d.as_ptr()).name).cast() },
            None => null_errno(libc::EINVAL),
        }
    }
}

export! {
    /// Returns the node GUID in network byte order (`ibv_get_device_guid(3)`); 0 on error.
    #[export("IBVERBS_1.1", value(0))]
    pub unsafe fn ibv_get_device_guid(device: *mut ibv_device) -> u64 {
        match DeviceObj::from_raw(device) {
            Some(d) => d.core.guid().to_be(),
            None => {
                set_errno(libc::EINVAL);
                0
            }
        }
    }
}

export! {
    /// Returns the index of the device (`ibv_get_device_index(3)`), or -1.
    #[export("IBVERBS_1.9", minus_one)]
    pub unsafe fn ibv_get_device_index(device: *mut ibv_device) -> c_int {
        match DeviceObj::from_raw(device) {
            Some(d) => d.index,
            None => minus_one_errno(libc::EINVAL),
        }
    }
}

// ---------------------------------------------------------------------------------------
// Contexts
// ---------------------------------------------------------------------------------------

/// The `ibv_context.ops` table: the five data-path ops inline code calls, the three
/// memory-window ops (the inline `ibv_bind_mw`/`ibv_dealloc_mw` call theirs unchecked, so
/// they are set together with `alloc_mw`), plus the two `_compat_` query slots rdma-core
/// fills with the exported functions.
fn context_ops() -> ibv_context_ops {
    let mut ops = ibv_context_ops::zeroed();
    ops._compat_query_device = Some(ibv_query_device);
    ops._compat_query_port = Some(ibv_query_port);
    ops.alloc_mw = Some(crate::mw::rverbs_alloc_mw);
    ops.bind_mw = Some(crate::qp::rverbs_bind_mw);
    ops.dealloc_mw = Some(crate::mw::rverbs_dealloc_mw);
    ops.poll_cq = Some(crate::cq::rverbs_poll_cq);
    ops.req_notify_cq = Some(crate::cq::rverbs_req_notify_cq);
    ops.post_send = Some(crate::qp::rverbs_post_send);
    ops.post_recv = Some(crate::qp::rverbs_post_recv);
    ops.post_srq_recv = Some(crate::srq::rverbs_post_srq_recv);
    ops
}

/// The `verbs_context` extended ops (sorted as in the struct). Every op not set stays
/// NULL: the inline wrappers turn that into `EOPNOTSUPP` (DM, flows, WQs, counters,
/// parent/thread domains, CQ moderation, rate limits, advise_mr, open_qp). `close_xrcd`
/// is set with `open_xrcd` (the inline `ibv_close_xrcd` calls it unchecked).
fn fill_verbs_context(v: &mut verbs_context) {
    v.query_rt_values = Some(rverbs_query_rt_values);
    v.create_cq_ex = Some(crate::cq::rverbs_create_cq_ex);
    v.query_device_ex = Some(rverbs_query_device_ex);
    v.create_qp_ex = Some(crate::qp::rverbs_create_qp_ex);
    v.get_srq_num = Some(crate::srq::rverbs_get_srq_num);
    v.create_srq_ex = Some(crate::srq::rverbs_create_srq_ex);
    v.open_xrcd = Some(crate::xrcd::rverbs_open_xrcd);
    v.close_xrcd = Some(crate::xrcd::rverbs_close_xrcd);
    v.query_port = Some(rverbs_query_port);
    v.sz = size_of::<verbs_context>();
}

export! {
    /// Opens a device context (`ibv_open_device(3)`). Errors: NULL with `errno`.
    #[export("IBVERBS_1.1", null)]
    pub unsafe fn ibv_open_device(device: *mut ibv_device) -> *mut ibv_context {
        let Some(dev) = DeviceObj::from_raw(device) else {
            return null_errno(libc::EINVAL);
        };
        let core = match dev.core.open() {
            Ok(c) => c,
            Err(e) => return null_errno(e.c_errno()),
        };
        // SAFETY: eventfd has no memory preconditions; the result is checked.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        if fd < 0 {
            return core::ptr::null_mut(); // errno from eventfd
        }
        // SAFETY: fd is a freshly created fd we own.
        let cmd_fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let mut vctx = verbs_context::zeroed();
        fill_verbs_context(&mut vctx);
        vctx.context.device = dev.as_ptr();
        vctx.context.ops = context_ops();
        vctx.context.cmd_fd = cmd_fd.as_raw_fd();
        vctx.context.async_fd = core.async_fd().as_raw_fd();
        vctx.context.num_comp_vectors = rverbs::device::limits::NUM_COMP_VECTORS as c_int;
        vctx.context.abi_compat = VERBS_ABI_IS_EXTENDED as *mut c_void;
        let obj = Box::new(ContextObj {
            vctx: UnsafeCell::new(vctx),
            core,
            _cmd_fd: cmd_fd,
        });
        let ctx: *mut ibv_context =
            Box::into_raw(obj).cast::<u8>().wrapping_add(CONTEXT_OFFSET).cast();
        live::insert(Kind::Context, ctx);
        ctx
    }
}

export! {
    /// Closes a device context (`ibv_close_device(3)`). Returns 0 or an errno.
    ///
    /// Rule: the context's fds (`async_fd`, `cmd_fd`) are closed once nothing of the
    /// context is left; objects the application did not destroy keep the core context
    /// alive, as the kernel keeps a ucontext alive while objects reference it.
    #[export("IBVERBS_1.1", errno)]
    pub unsafe fn ibv_close_device(context: *mut ibv_context) -> c_int {
        // Out of the registry before it is freed: refuses NULL, foreign and closed
        // pointers, and no later from_raw reaches it.
        if !live::remove(Kind::Context, context) {
            return libc::EINVAL;
        }
        let ptr = context.cast::<u8>().wrapping_sub(CONTEXT_OFFSET).cast::<ContextObj>();
        // SAFETY: a live context (it was in the registry) allocated by Box in
        // ibv_open_device, the ibv_context CONTEXT_OFFSET bytes in; the caller gives it up.
        drop(unsafe { Box::from_raw(ptr) });
        0
    }
}

export! {
    /// Imports a context shared through a command fd (`ibv_import_device(3)`).
    /// Errors: NULL with `errno = EOPNOTSUPP`: rverbs contexts cannot be shared between
    /// processes (the `cmd_fd` is a private eventfd).
    #[export("IBVERBS_1.10", null)]
    pub unsafe fn ibv_import_device(_cmd_fd: c_int) -> *mut ibv_context {
        null_errno(libc::EOPNOTSUPP)
    }
}

// ---------------------------------------------------------------------------------------
// Queries
// ---------------------------------------------------------------------------------------

/// `verbs_context.query_device_ex`: fills at most `attr_size` bytes of `attr`.
///
/// Rule: verbs.h `ibv_query_device_ex`: write at most `attr_size` bytes, zero what we do not know
/// beyond our struct; `input->comp_mask` must be 0; an `attr_size` smaller than the
/// legacy `ibv_device_attr` is `EINVAL`.
unsafe extern "C" fn rverbs_query_device_ex(
    context: *mut ibv_context,
    input: *const ibv_query_device_ex_input,
    attr: *mut ibv_device_attr_ex,
    attr_size: usize,
) -> c_int {
    ffi_guard!(errno, {
        // SAFETY: caller contract.
        let Some(ctx) = (unsafe { ContextObj::from_raw(context) }) else {
            return libc::EINVAL;
        };
        // SAFETY: input is NULL or valid (caller contract).
        if let Some(i) = unsafe { input.as_ref() } {
            if i.comp_mask != 0 {
                return libc::EINVAL;
            }
        }
        if attr.is_null() || attr_size < size_of::<ibv_device_attr>() {
            return libc::EINVAL;
        }
        let full = conv::device_attr_ex(&ctx.core.query_device());
        let n = attr_size.min(size_of::<ibv_device_attr_ex>());
        // SAFETY: attr is writable for attr_size bytes (caller contract); `full` is a
        // local of at least n bytes; the tail beyond our struct is zeroed.
        unsafe {
            core::ptr::copy_nonoverlapping((&raw const full).cast::<u8>(), attr.cast::<u8>(), n);
            core::ptr::write_bytes(attr.cast::<u8>().add(n), 0, attr_size - n);
        }
        0
    })
}

export! {
    /// Queries device attributes (`ibv_query_device(3)`). Returns 0 or an errno.
    ///
    /// Rule: rdma-core implements it as `query_device_ex(ctx, NULL, attr, 232)`.
    #[export("IBVERBS_1.1", errno)]
    pub unsafe fn ibv_query_device(
        context: *mut ibv_context,
        device_attr: *mut ibv_device_attr,
    ) -> c_int {
        // SAFETY: forwarded caller contract; ibv_device_attr is the prefix of _ex.
        unsafe {
            rverbs_query_device_ex(
                context,
                core::ptr::null(),
                device_attr.cast(),
                size_of::<ibv_device_attr>(),
            )
        }
    }
}

/// `verbs_context.query_port`: `len` is the application's `sizeof(struct ibv_port_attr)`.
///
/// Rule: rdma-core `__lib_query_port`: `len` below ours → copy the first `len` bytes of a
/// full answer; otherwise zero `len` bytes and fill ours.
unsafe extern "C" fn rverbs_query_port(
    context: *mut ibv_context,
    port_num: u8,
    port_attr: *mut ibv_port_attr,
    len: usize,
) -> c_int {
    ffi_guard!(errno, {
        // SAFETY: caller contract.
        let Some(ctx) = (unsafe { ContextObj::from_raw(context) }) else {
            return libc::EINVAL;
        };
        if port_attr.is_null() {
            return libc::EINVAL;
        }
        let full = match ctx.core.query_port(port_num) {
            Ok(p) => conv::port_attr(&p),
            Err(e) => return e.c_errno(),
        };
        let ours = size_of::<ibv_port_attr>();
        // SAFETY: port_attr is writable for len bytes (caller contract).
        unsafe {
            if len >= ours {
                core::ptr::write_bytes(port_attr.cast::<u8>(), 0, len);
            }
            core::ptr::copy_nonoverlapping(
                (&raw const full).cast::<u8>(),
                port_attr.cast::<u8>(),
                len.min(ours),
            );
        }
        0
    })
}

export! {
    /// The exported `ibv_query_port@@IBVERBS_1.1`: the compat ABI writing 48 bytes
    /// (libibverbs/verbs.c). v44-compiled apps call `verbs_context.query_port` instead.
    /// Returns 0 or an errno.
    #[export("IBVERBS_1.1", errno)]
    pub unsafe fn ibv_query_port(
        context: *mut ibv_context,
        port_num: u8,
        port_attr: *mut _compat_ibv_port_attr,
    ) -> c_int {
        // SAFETY: forwarded caller contract; the compat struct is the 48-byte prefix.
        unsafe {
            rverbs_query_port(
                context,
                port_num,
                port_attr.cast(),
                size_of::<_compat_ibv_port_attr>(),
            )
        }
    }
}

/// `verbs_context.query_rt_values` (`ibv_query_rt_values_ex(3)`).
///
/// Rule: `IBV_VALUES_MASK_RAW_CLOCK` reads the device clock in HCA clock units (ns,
/// `hca_core_clock` = 1 000 000 kHz) as a timespec; the output `comp_mask` says which
/// values were filled; unknown request bits are ignored.
unsafe extern "C" fn rverbs_query_rt_values(
    context: *mut ibv_context,
    values: *mut ibv_values_ex,
) -> c_int {
    ffi_guard!(errno, {
        // SAFETY: caller contract.
        let Some(ctx) = (unsafe { ContextObj::from_raw(context) }) else {
            return libc::EINVAL;
        };
        // SAFETY: values is NULL or valid (caller contract).
        let Some(values) = (unsafe { values.as_mut() }) else {
            return libc::EINVAL;
        };
        let mut done = 0;
        if values.comp_mask & IBV_VALUES_MASK_RAW_CLOCK != 0 {
            let ns = ctx.core.query_rt_values().raw_clock_ns;
            values.raw_clock.tv_sec = (ns / 1_000_000_000) as libc::time_t;
            values.raw_clock.tv_nsec = (ns % 1_000_000_000) as libc::c_long;
            done |= IBV_VALUES_MASK_RAW_CLOCK;
        }
        values.comp_mask = done;
        0
    })
}

export! {
    /// Reads a GID table entry (`ibv_query_gid(3)`). Returns 0, or -1 with `errno`.
    ///
    /// Rule: verbs.c: an empty entry (ENODATA) yields an all-zero GID and 0.
    #[export("IBVERBS_1.1", minus_one)]
    pub unsafe fn ibv_query_gid(
        context: *mut ibv_context,
        port_num: u8,
        index: c_int,
        gid: *mut ibv_gid,
    ) -> c_int {
        // SAFETY: caller contract.
        let Some(ctx) = (unsafe { ContextObj::from_raw(context) }) else {
            return minus_one_errno(libc::EINVAL);
        };
        let Ok(index) = u32::try_from(index) else {
            return minus_one_errno(libc::EINVAL);
        };
        if gid.is_null() {
            return minus_one_errno(libc::EINVAL);
        }
        let value = match gid_entry(ctx, port_num.into(), index) {
            Ok(e) => conv::gid(e.gid),
            Err(libc::ENODATA) => ibv_gid { raw: [0; 16] },
            Err(e) => return minus_one_errno(e),
        };
        // SAFETY: gid is writable (caller contract, checked non-NULL).
        unsafe { gid.write(value) };
        0
    }
}

export! {
    /// Reads a GID table entry with type and netdev (`ibv_query_gid_ex(3)`, the out-of-line
    /// half of the inline). Returns 0 or an errno (`ENODATA` for an empty entry).
    ///
    /// Rule: verbs.c: `flags` must be 0 (`EINVAL`); `entry_size` is the application's
    /// `sizeof(struct ibv_gid_entry)` and must cover ours.
    #[export("IBVERBS_1.11", errno)]
    pub unsafe fn _ibv_query_gid_ex(
        context: *mut ibv_context,
        port_num: u32,
        gid_index: u32,
        entry: *mut ibv_gid_entry,
        flags: u32,
        entry_size: usize,
    ) -> c_int {
        // SAFETY: caller contract.
        let Some(ctx) = (unsafe { ContextObj::from_raw(context) }) else {
            return libc::EINVAL;
        };
        if flags != 0 || entry.is_null() || entry_size < size_of::<ibv_gid_entry>() {
            return libc::EINVAL;
        }
        match gid_entry(ctx, port_num, gid_index) {
            Ok(e) => {
                // SAFETY: entry is writable for entry_size >= our size (checked).
                unsafe { entry.write(conv::gid_entry(&e)) };
                0
            }
            Err(e) => e,
        }
    }
}

export! {
    /// Reads the whole GID table (`ibv_query_gid_table(3)`). Returns the number of entries
    /// or a negative errno.
    ///
    /// Rule: only valid (non-empty) entries are returned, `entry_size` bytes apart;
    /// `flags` must be 0 and `max_entries` must hold them all (`-EINVAL`).
    #[export("IBVERBS_1.11", value(-(libc::EIO as isize)))]
    pub unsafe fn _ibv_query_gid_table(
        context: *mut ibv_context,
        entries: *mut ibv_gid_entry,
        max_entries: usize,
        flags: u32,
        entry_size: usize,
    ) -> isize {
        let einval = -(libc::EINVAL as isize);
        // SAFETY: caller contract.
        let Some(ctx) = (unsafe { ContextObj::from_raw(context) }) else {
            return einval;
        };
        if flags != 0 || entry_size < size_of::<ibv_gid_entry>() {
            return einval;
        }
        let table: Vec<_> =
            ctx.core.query_gid_table().into_iter().filter(|e| !e.gid.is_zero()).collect();
        if table.len() > max_entries || (entries.is_null() && !table.is_empty()) {
            return einval;
        }
        for (i, e) in table.iter().enumerate() {
            // SAFETY: entries holds max_entries elements of entry_size bytes (caller
            // contract); i < table.len() <= max_entries; writes are unaligned-safe.
            unsafe {
                entries
                    .cast::<u8>()
                    .add(i * entry_size)
                    .cast::<ibv_gid_entry>()
                    .write_unaligned(conv::gid_entry(e));
            }
        }
        table.len() as isize
    }
}

export! {
    /// Reads a P_Key table entry (`ibv_query_pkey(3)`), network byte order.
    /// Returns 0, or -1 with `errno`.
    #[export("IBVERBS_1.1", minus_one)]
    pub unsafe fn ibv_query_pkey(
        context: *mut ibv_context,
        port_num: u8,
        index: c_int,
        pkey: *mut u16,
    ) -> c_int {
        // SAFETY: caller contract.
        let Some(ctx) = (unsafe { ContextObj::from_raw(context) }) else {
            return minus_one_errno(libc::EINVAL);
        };
        let Ok(index) = u16::try_from(index) else {
            return minus_one_errno(libc::EINVAL);
        };
        if pkey.is_null() {
            return minus_one_errno(libc::EINVAL);
        }
        match ctx.core.query_pkey(port_num, index) {
            Ok(p) => {
                // SAFETY: pkey is writable (caller contract, checked non-NULL).
                unsafe { pkey.write(p.to_be()) };
                0
            }
            Err(e) => minus_one_errno(e.c_errno()),
        }
    }
}

export! {
    /// Finds the index of a P_Key (`ibv_get_pkey_index(3)`). Returns it, or -1 with `errno`.
    ///
    /// Rule: verbs.c: scans with `ibv_query_pkey` until a match or the first failure.
    #[export("IBVERBS_1.5", minus_one)]
    pub unsafe fn ibv_get_pkey_index(context: *mut ibv_context, port_num: u8, pkey: u16) -> c_int {
        let mut index: c_int = 0;
        loop {
            let mut found = 0u16;
            // SAFETY: forwarded caller contract; `found` is a local.
            if unsafe { ibv_query_pkey(context, port_num, index, &mut found) } < 0 {
                return -1;
            }
            if found == pkey {
                return index;
            }
            index += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rverbs_log_with_whitespace_before_a_non_ascii_directive_does_not_panic() {
        // tracing-subscriber sliced " é=info" at the offsets of "é=info": inside 'é'.
        let f = log_filter(" é=info, rverbs=debug");
        assert_eq!(f.to_string(), log_filter("é=info,rverbs=debug").to_string());
    }

    #[test]
    fn rverbs_log_field_values_are_literal_and_never_a_costly_regex() {
        // Took 106 s with field values compiled as regular expressions.
        let value = "wa<[{evqp=\u{16}7?........?......ve!\u{f}~+|\u{1}\u{6}|Z}]=)ba`c";
        let t = std::time::Instant::now();
        let _ = log_filter(value);
        assert!(t.elapsed() < std::time::Duration::from_secs(5), "{:?}", t.elapsed());
    }
}
