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
use std::sync::{Arc, OnceLock};

use crate::abi::*;
use crate::conv;
use crate::ffi::{ToErrno, minus_one_errno, null_errno, set_errno};
use crate::cmd_file::CmdFile;
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
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    if let Ok(value) = std::env::var("RVERBS_LOG") {
        let filter = log_filter(&value);
        for (directive, why) in &filter.ignored {
            eprintln!("rverbs: RVERBS_LOG: ignoring directive {directive:?}: {why}");
        }
        let _ = tracing_subscriber::registry()
            .with(tracing_subscriber::fmt::layer().with_writer(std::io::stderr))
            .with(filter.targets)
            .try_init();
    }
}

/// A parsed `RVERBS_LOG` value: the filter, and the directives ignored with the reason.
#[derive(Debug)]
pub(crate) struct LogFilter {
    pub(crate) targets: tracing_subscriber::filter::Targets,
    pub(crate) ignored: Vec<(String, &'static str)>,
}

/// The level names of `RVERBS_LOG`, most quiet first.
const LOG_LEVELS: [(&str, tracing_subscriber::filter::LevelFilter); 6] = {
    use tracing_subscriber::filter::LevelFilter as L;
    [("off", L::OFF), ("error", L::ERROR), ("warn", L::WARN), ("info", L::INFO), ("debug", L::DEBUG), ("trace", L::TRACE)]
};

/// A level name of `RVERBS_LOG` (ASCII case-insensitive).
fn log_level(name: &str) -> Option<tracing_subscriber::filter::LevelFilter> {
    LOG_LEVELS.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|&(_, l)| l)
}

/// The diagnostics filter of a `RVERBS_LOG` value, parsed by rverbs itself.
///
/// Grammar: the value is a list of directives separated by commas; whitespace around a
/// directive is trimmed and an empty directive is skipped. A directive is one of
/// - `level`: the level of every target no other directive names;
/// - `target`: every level of that target (as `target=trace`);
/// - `target=level`: that level for that target.
///
/// `level` is `off`, `error`, `warn`, `info`, `debug` or `trace`, in any case. `target`
/// is a non-empty prefix of a `tracing` target (a module path such as
/// `rverbs::transport::net`) without whitespace, `=`, `[`, `]`, `{` or `}`. An event is
/// enabled by the directive with the longest target that prefixes its own, else by the
/// `level` directive, else not at all (`tracing_subscriber::filter::Targets`); of two
/// directives for the same target (or two `level` directives) the later one counts.
///
/// A directive that does not parse — span and field directives such as
/// `target[span{field=value}]=level` among them — is ignored and returned in
/// [`LogFilter::ignored`] with the reason (the library prints one line on stderr for
/// each), as tracing-subscriber's lossy parser did: a mistyped variable never keeps the
/// library from starting.
///
/// Why not tracing-subscriber's `EnvFilter`: its parser panicked on whitespace before a
/// multi-byte character (`RVERBS_LOG=" é=info"`), spent minutes compiling some span field
/// values as regular expressions, and fails its own consistency assertion in debug builds
/// for equal literal field values (`w[{F=}],w[{F=}]`) — all found by the `log_filter`
/// fuzz target (tests/conformance/README.md, "Fuzzing").
pub(crate) fn log_filter(value: &str) -> LogFilter {
    let mut targets = tracing_subscriber::filter::Targets::new();
    let mut ignored = Vec::new();
    for directive in value.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        match log_directive(directive) {
            Ok((None, level)) => targets = targets.with_default(level),
            Ok((Some(target), level)) => targets = targets.with_target(target, level),
            Err(why) => ignored.push((directive.to_owned(), why)),
        }
    }
    LogFilter { targets, ignored }
}

/// One trimmed, non-empty directive of [`log_filter`]'s grammar: (target, level).
fn log_directive(d: &str) -> Result<(Option<&str>, tracing_subscriber::filter::LevelFilter), &'static str> {
    let (target, level) = match d.split_once('=') {
        Some((t, l)) => (t, Some(l)),
        None => (d, None),
    };
    if target.contains(['[', ']', '{', '}']) {
        return Err("span and field directives are not supported");
    }
    if target.is_empty() {
        return Err("no target before '='");
    }
    if target.contains(char::is_whitespace) || level.is_some_and(|l| l.contains('=')) {
        return Err("not a directive: whitespace or a second '='");
    }
    match level {
        Some(l) => log_level(l).map(|l| (Some(target), l)).ok_or("unknown level"),
        None => Ok(match log_level(target) {
            Some(l) => (None, l),
            None => (Some(target), tracing_subscriber::filter::LevelFilter::TRACE),
        }),
    }
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
/// NULL: the inline wrappers turn that into `EOPNOTSUPP` (flows, WQs, counters,
/// CQ moderation, rate limits, open_qp). `close_xrcd` is set with
/// `open_xrcd` (the inline `ibv_close_xrcd` calls it unchecked).
fn fill_verbs_context(v: &mut verbs_context) {
    v.alloc_parent_domain = Some(crate::pd::rverbs_alloc_parent_domain);
    v.advise_mr = Some(crate::mr::rverbs_advise_mr);
    v.free_dm = Some(crate::dm::rverbs_free_dm);
    v.alloc_dm = Some(crate::dm::rverbs_alloc_dm);
    v.reg_dm_mr = Some(crate::dm::rverbs_reg_dm_mr);
    v.dealloc_td = Some(crate::pd::rverbs_dealloc_td);
    v.alloc_td = Some(crate::pd::rverbs_alloc_td);
    v.query_rt_values = Some(rverbs_query_rt_values);
    v.create_cq_ex = Some(crate::cq::rverbs_create_cq_ex);
    v.query_device_ex = Some(rverbs_query_device_ex);
    v.create_qp_ex = Some(crate::qp::rverbs_create_qp_ex);
    v.get_srq_num = Some(crate::srq::rverbs_get_srq_num);
    v.create_srq_ex = Some(crate::srq::rverbs_create_srq_ex);
    v.post_srq_ops = Some(crate::srq::rverbs_post_srq_ops);
    v.open_xrcd = Some(crate::xrcd::rverbs_open_xrcd);
    v.close_xrcd = Some(crate::xrcd::rverbs_close_xrcd);
    v.query_port = Some(rverbs_query_port);
    v.sz = size_of::<verbs_context>();
}

/// Hands C a new context of `dev` over `core`, one of the command file `file`, owning
/// `cmd_fd` (a descriptor of that file).
fn publish_context(dev: &DeviceObj, core: rverbs::Context, file: Arc<CmdFile>, cmd_fd: OwnedFd) -> *mut ibv_context {
    let mut vctx = verbs_context::zeroed();
    fill_verbs_context(&mut vctx);
    vctx.context.device = dev.as_ptr();
    vctx.context.ops = context_ops();
    vctx.context.cmd_fd = cmd_fd.as_raw_fd();
    vctx.context.async_fd = core.async_fd().as_raw_fd();
    vctx.context.num_comp_vectors = rverbs::limits::NUM_COMP_VECTORS as c_int;
    vctx.context.abi_compat = VERBS_ABI_IS_EXTENDED as *mut c_void;
    file.attach(cmd_fd.as_raw_fd());
    let obj = Box::new(ContextObj { vctx: UnsafeCell::new(vctx), core, file, cmd_fd });
    let ctx: *mut ibv_context = Box::into_raw(obj).cast::<u8>().wrapping_add(CONTEXT_OFFSET).cast();
    live::insert(Kind::Context, ctx);
    ctx
}

export! {
    /// Opens a device context (`ibv_open_device(3)`). Errors: NULL with `errno`.
    ///
    /// Rule: `cmd_fd` names the context's command file, which `ibv_import_device` shares
    /// (docs/device.md, "Sharing a context through its command fd").
    #[export("IBVERBS_1.1", null)]
    pub unsafe fn ibv_open_device(device: *mut ibv_device) -> *mut ibv_context {
        let Some(dev) = DeviceObj::from_raw(device) else {
            return null_errno(libc::EINVAL);
        };
        let core = match dev.core.open() {
            Ok(c) => c,
            Err(e) => return null_errno(e.c_errno()),
        };
        let (file, cmd_fd) = match CmdFile::create(core.clone()) {
            Ok(f) => f,
            Err(e) => return null_errno(e),
        };
        publish_context(dev, core, file, cmd_fd)
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
    /// Opens another context over the command file of a context of this process
    /// (`ibv_import_device(3)`): it shares the original's core context, so the PDs and MRs
    /// of either are importable in both by handle, and objects of the two may be mixed as
    /// objects of one context. Errors: NULL with `errno`.
    ///
    /// Rule: ibv_import_device(3): `cmd_fd` is a duplicate of a context's `cmd_fd` (`dup`,
    /// `SCM_RIGHTS`); the new context owns it and `ibv_close_device` closes it. On failure
    /// the caller keeps it.
    /// Errors: `EINVAL` for a descriptor that is not open or not a command fd of rverbs
    /// (rdma-core: `fstat` fails or it is no character device), or for a context's own
    /// `cmd_fd` (not duplicated: two contexts would close it); `ENODEV` for a character
    /// device (rdma-core: no verbs device has its number).
    /// Deviation: `EOPNOTSUPP` for the command fd of a context of another process (passed
    /// with `SCM_RIGHTS` or inherited over `fork`), whose objects live in that process,
    /// and for a file of which no context, PD or MR is left (the kernel keeps the file's
    /// objects while any descriptor of it is open, which a library cannot observe).
    #[export("IBVERBS_1.10", null)]
    pub unsafe fn ibv_import_device(cmd_fd: c_int) -> *mut ibv_context {
        let file = match CmdFile::find(cmd_fd) {
            Ok(f) => f,
            Err(e) => return null_errno(e),
        };
        let dev = match list() {
            Ok(devs) => match devs.iter().find(|d| d.core.name() == file.core().device_name()) {
                Some(d) => d,
                None => return null_errno(libc::ENODEV),
            },
            Err(e) => return null_errno(e.c_errno()),
        };
        // SAFETY: CmdFile::find checked that `cmd_fd` is open; ibv_import_device(3) hands it
        // over to the new context.
        let fd = unsafe { OwnedFd::from_raw_fd(cmd_fd) };
        publish_context(dev, file.core().clone(), file, fd)
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

    use tracing::Level;
    use tracing_subscriber::filter::LevelFilter;

    /// The filter's directives as (target, level), sorted, and the ignored directives.
    fn parsed(value: &str) -> (Vec<(String, LevelFilter)>, Option<LevelFilter>, Vec<String>) {
        let f = log_filter(value);
        let mut d: Vec<(String, LevelFilter)> = f.targets.iter().map(|(t, l)| (t.to_owned(), l)).collect();
        d.sort_by(|a, b| a.0.cmp(&b.0));
        (d, f.targets.default_level(), f.ignored.into_iter().map(|(d, _)| d).collect())
    }

    #[test]
    fn rverbs_log_with_whitespace_before_a_non_ascii_directive_does_not_panic() {
        // tracing-subscriber sliced " é=info" at the offsets of "é=info": inside 'é'.
        let (d, _, ignored) = parsed(" é=info, rverbs=debug");
        assert_eq!(d, vec![("rverbs".into(), LevelFilter::DEBUG), ("é".into(), LevelFilter::INFO)]);
        assert!(ignored.is_empty());
    }

    #[test]
    fn rverbs_log_span_and_field_directives_are_ignored_quickly() {
        // Took 106 s with field values compiled as regular expressions; now refused.
        let value = "wa<[{evqp=\u{16}7?........?......ve!\u{f}~+|\u{1}\u{6}|Z}]=)ba`c";
        let t = std::time::Instant::now();
        let (d, def, ignored) = parsed(value);
        assert!(t.elapsed() < std::time::Duration::from_secs(1), "{:?}", t.elapsed());
        assert_eq!((d, def, ignored), (vec![], None, vec![value.to_owned()]));
        // Failed tracing-subscriber's debug assertion; two ignored directives here.
        assert_eq!(parsed("w[{F=}],w[{F=}]").2, vec!["w[{F=}]", "w[{F=}]"]);
        assert_eq!(parsed("rverbs[recv]=debug").2, vec!["rverbs[recv]=debug"]);
    }

    #[test]
    fn rverbs_log_a_bare_level_is_the_default_and_any_case_is_accepted() {
        for (v, want) in [("info", LevelFilter::INFO), ("DEBUG", LevelFilter::DEBUG), ("Off", LevelFilter::OFF), ("tRaCe", LevelFilter::TRACE), ("error", LevelFilter::ERROR), ("WARN", LevelFilter::WARN)] {
            assert_eq!(parsed(v), (vec![], Some(want), vec![]), "{v}");
        }
        // The later of two defaults counts.
        assert_eq!(parsed("info,warn").1, Some(LevelFilter::WARN));
    }

    #[test]
    fn rverbs_log_a_bare_target_enables_all_its_levels() {
        let f = log_filter("rverbs_cm");
        assert!(f.targets.would_enable("rverbs_cm::conn", &Level::TRACE));
        assert!(!f.targets.would_enable("rverbs", &Level::ERROR), "no default: other targets off");
        assert_eq!(parsed("rverbs_cm").0, vec![("rverbs_cm".into(), LevelFilter::TRACE)]);
    }

    #[test]
    fn rverbs_log_target_levels_take_the_longest_matching_target() {
        let f = log_filter(" warn , rverbs=info,\trverbs::transport::net=Debug ,,");
        assert!(f.ignored.is_empty(), "{:?}", f.ignored);
        assert!(f.targets.would_enable("rverbs::transport::net", &Level::DEBUG));
        assert!(!f.targets.would_enable("rverbs::transport::net", &Level::TRACE));
        assert!(f.targets.would_enable("rverbs::qp", &Level::INFO));
        assert!(!f.targets.would_enable("rverbs::qp", &Level::DEBUG));
        assert!(f.targets.would_enable("ibverbs", &Level::WARN));
        assert!(!f.targets.would_enable("ibverbs", &Level::INFO));
        // The later directive for one target counts.
        assert_eq!(parsed("a=info,a=error").0, vec![("a".into(), LevelFilter::ERROR)]);
    }

    #[test]
    fn rverbs_log_malformed_directives_are_ignored_and_named() {
        let (d, def, ignored) = parsed("=info,a=loud,a b=info,a==info,a=info=debug,ok=warn,a=,1");
        assert_eq!(d, vec![("1".into(), LevelFilter::TRACE), ("ok".into(), LevelFilter::WARN)]);
        assert_eq!(def, None);
        assert_eq!(ignored, vec!["=info", "a=loud", "a b=info", "a==info", "a=info=debug", "a="]);
        let f = log_filter("a=loud");
        assert_eq!(f.ignored[0].1, "unknown level");
        assert_eq!(parsed(""), (vec![], None, vec![]));
    }
}
