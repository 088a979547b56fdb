//! The devices libibverbs lists (ibv_get_device_list(3)), each with its name
//! (ibv_get_device_name(3)) and node GUID (ibv_get_device_guid(3)).

use core::ffi::c_int;
use std::sync::{Arc, OnceLock};

use rverbs_abi::ibv_device;

use super::conv;
use super::library::Verbs;
use crate::error::{Error, Result};
use crate::rule::Rule;

/// The array ibv_get_device_list(3) returned, freed with ibv_free_device_list(3) once no
/// [`Device`] of it is left ("the devices in the list are no longer valid" after that).
pub(super) struct DeviceList {
    pub(super) verbs: Arc<Verbs>,
    pub(super) list: *mut *mut ibv_device,
}

// SAFETY: the list is an immutable array owned by this value; libibverbs is thread-safe
// (verbs(7), thread safety), so it may be read and freed from any thread.
unsafe impl Send for DeviceList {}
// SAFETY: as for Send; nothing mutates the list.
unsafe impl Sync for DeviceList {}

impl Drop for DeviceList {
    fn drop(&mut self) {
        // SAFETY: `list` came from ibv_get_device_list and is freed once, here.
        unsafe { (self.verbs.sym.ibv_free_device_list)(self.list) }
    }
}

/// One device of libibverbs' list, not yet opened.
#[derive(Clone)]
pub struct Device {
    pub(super) list: Arc<DeviceList>,
    pub(super) dev: *mut ibv_device,
    pub(super) name: &'static str,
    guid: u64,
}

/// `name`, kept for the rest of the process: each distinct device name is stored once,
/// so that a context can give its device's name as the soft API does (`&'static str`).
pub(super) fn interned(name: String) -> &'static str {
    static NAMES: std::sync::Mutex<Vec<&'static str>> = std::sync::Mutex::new(Vec::new());
    let mut names = NAMES.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(n) = names.iter().find(|n| **n == name) {
        return n;
    }
    let n: &'static str = Box::leak(name.into_boxed_str());
    names.push(n);
    n
}

// SAFETY: `dev` points into the list this value keeps alive; libibverbs' verbs are
// thread-safe.
unsafe impl Send for Device {}
// SAFETY: as for Send; a Device is immutable.
unsafe impl Sync for Device {}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Device").field("name", &self.name).field("guid", &format_args!("{:#018x}", self.guid)).finish()
    }
}

/// The libibverbs of this process, loaded at the first call that needs it.
pub(super) fn verbs() -> Result<Arc<Verbs>> {
    static LOADED: OnceLock<Arc<Verbs>> = OnceLock::new();
    if let Some(v) = LOADED.get() {
        return Ok(v.clone());
    }
    let v = Verbs::load()?;
    Ok(LOADED.get_or_init(|| v).clone())
}

/// The address of `ibv_get_device_list` in the libibverbs the backend loaded (loading it
/// at the first call, as [`devices`] does): a library loaded after it that uses
/// libibverbs too (librdmacm, for `rverbs-cm`'s backend) checks with it that it shares
/// this copy, whose contexts its own objects then name.
pub fn ibv_get_device_list_address() -> Result<usize> {
    Ok(verbs()?.sym.ibv_get_device_list as usize)
}

/// The RDMA devices libibverbs finds (ibv_get_device_list(3)): every provider's device
/// (mlx5, rxe, siw, efa, …, or rverbs' own drop-in's `rverbs0`). Loads libibverbs on the
/// first call (`RVERBS_LIBIBVERBS`, else `libibverbs.so.1`); no libibverbs is
/// `EOPNOTSUPP`, and a libibverbs that lists nothing is an empty list (its `errno`, e.g.
/// `ENOSYS` when the kernel lacks RDMA support, is not an error here).
pub fn devices() -> Result<Vec<Device>> {
    let verbs = verbs()?;
    let mut n: c_int = 0;
    // SAFETY: `n` is a valid out-pointer.
    let list = unsafe { (verbs.sym.ibv_get_device_list)(&mut n) };
    if list.is_null() {
        return Ok(Vec::new());
    }
    let list = Arc::new(DeviceList { verbs, list });
    let mut out = Vec::with_capacity(usize::try_from(n).unwrap_or(0));
    for i in 0..usize::try_from(n).unwrap_or(0) {
        // SAFETY: the array holds `n` device pointers (then NULL).
        let dev = unsafe { *list.list.add(i) };
        if dev.is_null() {
            break;
        }
        // SAFETY: `dev` is a device of the live list; the name is NUL-terminated.
        let name = interned(unsafe { conv::c_string((list.verbs.sym.ibv_get_device_name)(dev)) });
        // SAFETY: as above; the GUID comes in network order.
        let guid = u64::from_be(unsafe { (list.verbs.sym.ibv_get_device_guid)(dev) });
        out.push(Device { list: list.clone(), dev, name, guid });
    }
    Ok(out)
}

/// The device libibverbs calls `name` (ibv_get_device_name(3)), e.g. `mlx5_0` or
/// `rverbs0`: how a program picks its device at run time. None of that name is `EINVAL`
/// (as the soft [`crate::device_by_name`]).
pub fn device_by_name(name: &str) -> Result<Device> {
    devices()?
        .into_iter()
        .find(|d| d.name() == name)
        .ok_or(Error::invalid("device_by_name", Rule::NoSuchDevice))
}

impl Device {
    /// The device's name (ibv_get_device_name(3)), e.g. `mlx5_0`, `rxe0`, `rverbs0`.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The device's node GUID in host order (ibv_get_device_guid(3) gives it in network
    /// order).
    pub fn guid(&self) -> u64 {
        self.guid
    }
}

impl crate::device::NativeDevice for Device {
    fn name(&self) -> &str {
        self.name
    }

    fn guid(&self) -> u64 {
        self.guid
    }

    fn open(&self) -> Result<Arc<dyn crate::mr::native::NativeContext>> {
        Ok(Arc::new(Device::open(self)?))
    }
}
