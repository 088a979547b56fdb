//! Device list, device contexts, device/port/GID/P_Key queries.
//!
//! Skeleton: everything here needs the soft device and answers "not supported" in the
//! verb's errno convention until the core is wired in at the `TODO(core)` markers.

use core::ffi::{c_char, c_int};

use crate::abi::*;
use crate::ffi::{
    not_supported_errno, not_supported_minus_one, not_supported_null, not_supported_void, set_errno,
};

export! {
    /// Returns a NULL-terminated array of the available devices (`ibv_get_device_list(3)`).
    ///
    /// Rule: the array is `calloc`'d, non-NULL even when empty, freed only by
    /// `ibv_free_device_list`; `*num_devices` (if non-NULL) gets the count.
    /// Errors: NULL with `errno`.
    #[export("IBVERBS_1.1", null)]
    pub unsafe fn ibv_get_device_list(_num_devices: *mut c_int) -> *mut *mut ibv_device {
        // TODO(core): calloc a NULL-terminated array of the core's (immortal) devices.
        not_supported_null()
    }
}

export! {
    /// Frees an array returned by [`ibv_get_device_list`] (not the devices).
    #[export("IBVERBS_1.1", void)]
    pub unsafe fn ibv_free_device_list(_list: *mut *mut ibv_device) {
        // TODO(core): libc::free(list) once ibv_get_device_list allocates with calloc.
        not_supported_void()
    }
}

export! {
    /// Returns the kernel-style device name (`ibv_get_device_name(3)`), i.e. `device->name`.
    /// Errors: NULL with `errno`.
    #[export("IBVERBS_1.1", null)]
    pub unsafe fn ibv_get_device_name(_device: *mut ibv_device) -> *const c_char {
        // TODO(core): return (*device).name.as_ptr() for devices created by the core.
        not_supported_null()
    }
}

export! {
    /// Returns the node GUID in network byte order (`ibv_get_device_guid(3)`); 0 on error.
    #[export("IBVERBS_1.1", value(0))]
    pub unsafe fn ibv_get_device_guid(_device: *mut ibv_device) -> u64 {
        // TODO(core): return the device's node GUID, big-endian (`__be64`).
        set_errno(libc::EOPNOTSUPP);
        0
    }
}

export! {
    /// Returns the kernel index of the device (`ibv_get_device_index(3)`), or -1.
    #[export("IBVERBS_1.9", minus_one)]
    pub unsafe fn ibv_get_device_index(_device: *mut ibv_device) -> c_int {
        // TODO(core): return the device's stable index (>= 0).
        not_supported_minus_one()
    }
}

export! {
    /// Opens a device context (`ibv_open_device(3)`). Errors: NULL with `errno`.
    #[export("IBVERBS_1.1", null)]
    pub unsafe fn ibv_open_device(_device: *mut ibv_device) -> *mut ibv_context {
        // TODO(core): open a core context as `{ verbs_context, private }`; return &vctx.context.
        not_supported_null()
    }
}

export! {
    /// Closes a device context (`ibv_close_device(3)`). Returns 0 or an errno.
    #[export("IBVERBS_1.1", errno)]
    pub unsafe fn ibv_close_device(_context: *mut ibv_context) -> c_int {
        // TODO(core): release the context allocated by ibv_open_device.
        not_supported_errno()
    }
}

export! {
    /// Imports a context shared through a command fd (`ibv_import_device(3)`).
    /// Errors: NULL with `errno`.
    #[export("IBVERBS_1.10", null)]
    pub unsafe fn ibv_import_device(_cmd_fd: c_int) -> *mut ibv_context {
        // TODO(core): no kernel cmd fd; EOPNOTSUPP unless the core shares contexts.
        not_supported_null()
    }
}

export! {
    /// Queries device attributes (`ibv_query_device(3)`). Returns 0 or an errno.
    #[export("IBVERBS_1.1", errno)]
    pub unsafe fn ibv_query_device(
        _context: *mut ibv_context,
        _device_attr: *mut ibv_device_attr,
    ) -> c_int {
        // TODO(core): call the context's query_device_ex op with attr_size = 232.
        not_supported_errno()
    }
}

export! {
    /// The exported `ibv_query_port@@IBVERBS_1.1`: the compat ABI writing 48 bytes
    /// (reference §4.5). v44-compiled apps call `verbs_context.query_port` instead.
    /// Returns 0 or an errno.
    #[export("IBVERBS_1.1", errno)]
    pub unsafe fn ibv_query_port(
        _context: *mut ibv_context,
        _port_num: u8,
        _port_attr: *mut _compat_ibv_port_attr,
    ) -> c_int {
        // TODO(core): call the context's query_port op with len = 48 (compat size).
        not_supported_errno()
    }
}

export! {
    /// Reads a GID table entry (`ibv_query_gid(3)`). Returns 0, or -1 with `errno`.
    ///
    /// Rule: verbs.c: an empty entry (ENODATA) yields an all-zero GID and 0.
    #[export("IBVERBS_1.1", minus_one)]
    pub unsafe fn ibv_query_gid(
        _context: *mut ibv_context,
        _port_num: u8,
        _index: c_int,
        _gid: *mut ibv_gid,
    ) -> c_int {
        // TODO(core): look up the port's GID table (zero GID for empty entries).
        not_supported_minus_one()
    }
}

export! {
    /// Reads a GID table entry with type and netdev (`ibv_query_gid_ex(3)`, the out-of-line
    /// half of the inline). Returns 0 or an errno (`ENODATA` for an empty entry).
    #[export("IBVERBS_1.11", errno)]
    pub unsafe fn _ibv_query_gid_ex(
        _context: *mut ibv_context,
        _port_num: u32,
        _gid_index: u32,
        _entry: *mut ibv_gid_entry,
        _flags: u32,
        _entry_size: usize,
    ) -> c_int {
        // TODO(core): fill `entry` (<= entry_size bytes) from the core's GID table.
        not_supported_errno()
    }
}

export! {
    /// Reads the whole GID table (`ibv_query_gid_table(3)`). Returns the number of entries
    /// or a negative errno.
    #[export("IBVERBS_1.11", value(-(libc::EIO as isize)))]
    pub unsafe fn _ibv_query_gid_table(
        _context: *mut ibv_context,
        _entries: *mut ibv_gid_entry,
        _max_entries: usize,
        _flags: u32,
        _entry_size: usize,
    ) -> isize {
        // TODO(core): copy the core's valid GID entries of all ports, entry_size apart.
        set_errno(libc::EOPNOTSUPP);
        -(libc::EOPNOTSUPP as isize)
    }
}

export! {
    /// Reads a P_Key table entry (`ibv_query_pkey(3)`), network byte order.
    /// Returns 0, or -1 with `errno`.
    #[export("IBVERBS_1.1", minus_one)]
    pub unsafe fn ibv_query_pkey(
        _context: *mut ibv_context,
        _port_num: u8,
        _index: c_int,
        _pkey: *mut u16,
    ) -> c_int {
        // TODO(core): return the port's P_Key table entry (0xffff at index 0), big-endian.
        not_supported_minus_one()
    }
}

export! {
    /// Finds the index of a P_Key (`ibv_get_pkey_index(3)`). Returns it, or -1 with `errno`.
    #[export("IBVERBS_1.5", minus_one)]
    pub unsafe fn ibv_get_pkey_index(
        _context: *mut ibv_context,
        _port_num: u8,
        _pkey: u16,
    ) -> c_int {
        // TODO(core): scan the P_Key table via ibv_query_pkey until found or it fails.
        not_supported_minus_one()
    }
}
