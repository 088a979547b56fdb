//! How a program's device is chosen (docs/rdma-core-backend.md, "Choosing the device"):
//! the soft device of this crate, or (feature `rdma-core`) a device of the libibverbs
//! loaded at run time ([`crate::rdma_core`]), listed by [`devices`], [`devices_of`] and
//! [`device_by_name`].

use crate::device::{Backend, Device};
use crate::error::{Error, Result};
use crate::rule::Rule;

/// Lists the RDMA devices (ibv_get_device_list(3)): the built-in soft device, with the
/// settings of the `RVERBS_*` variables ([`crate::DeviceConfig::from_env`]). Devices a
/// program configures itself are not listed: [`crate::DeviceConfig::open`] returns them.
///
/// With the feature `rdma-core` and `RVERBS_BACKEND=rdma-core`, the list is instead
/// libibverbs' devices (mlx5, rxe, …, or the drop-in's `rverbs0`; [`Device::backend`] is
/// [`Backend::RdmaCore`]), and a libibverbs that cannot be loaded is `EOPNOTSUPP`; the
/// soft device is not started then. Without the feature the
/// variable is ignored (docs/rdma-core-backend.md, "Choosing the device").
pub fn devices() -> Result<Vec<Device>> {
    #[cfg(feature = "rdma-core")]
    if wants_rdma_core()? {
        return devices_of(Backend::RdmaCore);
    }
    devices_of(Backend::Soft)
}

/// The backend [`devices`] lists: [`Backend::RdmaCore`] under `RVERBS_BACKEND=rdma-core`
/// (feature `rdma-core`), else [`Backend::Soft`]. Starts no device and loads no library,
/// so a layer above (rverbs-cm's `EventChannel::new`) can follow the same choice.
///
/// Errors: `EOPNOTSUPP` when `RVERBS_BACKEND` names no backend of this build.
pub fn listed_backend() -> Result<Backend> {
    #[cfg(feature = "rdma-core")]
    if wants_rdma_core()? {
        return Ok(Backend::RdmaCore);
    }
    Ok(Backend::Soft)
}

/// The devices of one backend, whatever `RVERBS_BACKEND` says: [`Backend::Soft`]'s is
/// the listed soft device (as [`devices`] without the variable); [`Backend::RdmaCore`]'s
/// are libibverbs' (ibv_get_device_list(3), listed once per process), `EOPNOTSUPP`
/// without the feature `rdma-core` or when libibverbs cannot be loaded.
pub fn devices_of(backend: Backend) -> Result<Vec<Device>> {
    match backend {
        Backend::Soft => Ok(vec![Device::listed()?]),
        #[cfg(feature = "rdma-core")]
        Backend::RdmaCore => Ok(native_devices()?.iter().map(|d| Device::from_native(d)).collect()),
        #[cfg(not(feature = "rdma-core"))]
        Backend::RdmaCore => Err(Error::unsupported("devices", "the rdma-core backend (built without the feature `rdma-core`)")),
    }
}

/// The device called `name`, if there is one, among [`devices`]. With the feature
/// `rdma-core`, a name the list lacks is also looked up among libibverbs' devices (so
/// that `device_by_name("mlx5_0")` opens the NIC whichever list `RVERBS_BACKEND` picks);
/// a libibverbs that cannot be loaded then counts as one without that device.
pub fn device_by_name(name: &str) -> Result<Device> {
    let found = devices()?.into_iter().find(|d| d.name() == name);
    #[cfg(feature = "rdma-core")]
    let found = found.or_else(|| {
        let native = native_devices().ok()?;
        native.iter().find(|d| d.name() == name).map(|d| Device::from_native(d))
    });
    found.ok_or(Error::invalid("device_by_name", Rule::NoSuchDevice))
}

/// The variable that makes [`devices`] list libibverbs' devices instead of the soft
/// device: `rdma-core` (feature `rdma-core`; ignored without it).
#[cfg(feature = "rdma-core")]
const BACKEND_VAR: &str = "RVERBS_BACKEND";

/// Whether `RVERBS_BACKEND` asks for libibverbs' devices: `rdma-core` yes; unset, empty
/// or `soft` no; any other value names no backend this build has: `EOPNOTSUPP`.
#[cfg(feature = "rdma-core")]
fn wants_rdma_core() -> Result<bool> {
    match std::env::var(BACKEND_VAR).as_deref() {
        Ok("rdma-core") => Ok(true),
        Ok("" | "soft") | Err(std::env::VarError::NotPresent) => Ok(false),
        Ok(_) | Err(std::env::VarError::NotUnicode(_)) => {
            Err(Error::unsupported("devices", "RVERBS_BACKEND names no backend (`soft` or `rdma-core`)"))
        }
    }
}

/// libibverbs' devices, listed once per process (ibv_get_device_list(3)) and kept for
/// its lifetime, as a soft [`Device`] is: a [`Device`] is `Copy` and names one of them.
/// Devices a provider adds later are not seen.
#[cfg(feature = "rdma-core")]
fn native_devices() -> Result<&'static [crate::rdma_core::Device]> {
    static LISTED: std::sync::OnceLock<Vec<crate::rdma_core::Device>> = std::sync::OnceLock::new();
    if let Some(l) = LISTED.get() {
        return Ok(l);
    }
    let l = crate::rdma_core::devices()?;
    Ok(LISTED.get_or_init(|| l))
}
