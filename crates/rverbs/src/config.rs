//! The environment variables the device reads, as pure functions of their values (the
//! callers read the environment): so the rules are stated once and can be tested with
//! any value (the `config` fuzz target). `RVERBS_FAULTS` has its parser in
//! `rverbs_proto::fault`.

use std::ffi::OsStr;
use std::path::PathBuf;

/// The per-user runtime directory from `RVERBS_RUNTIME_DIR` (`rverbs`) and
/// `XDG_RUNTIME_DIR` (`xdg`): the first, else `<xdg>/rverbs`, else
/// `/dev/shm/rverbs-<uid>` where `/dev/shm` is a directory (`dev_shm`), else
/// `/tmp/rverbs-<uid>`. A variable set to the empty string counts as unset (as the XDG
/// base directory specification has it for `XDG_RUNTIME_DIR`, and as the shell mirror
/// `cm_runtime_dir` of tests/conformance/lib/cm.bash reads both): an empty path would
/// put the endpoints in the current directory of each process.
pub(crate) fn runtime_dir_from(rverbs: Option<&OsStr>, xdg: Option<&OsStr>, uid: u32, dev_shm: bool) -> PathBuf {
    if let Some(d) = rverbs.filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    if let Some(d) = xdg.filter(|d| !d.is_empty()) {
        return PathBuf::from(d).join("rverbs");
    }
    if dev_shm {
        PathBuf::from(format!("/dev/shm/rverbs-{uid}"))
    } else {
        PathBuf::from(format!("/tmp/rverbs-{uid}"))
    }
}

/// An `on`/`off` switch that is on unless set to exactly `off` (`RVERBS_NET`,
/// `RVERBS_CMA`): whether it is off.
pub(crate) fn is_off(value: Option<&OsStr>) -> bool {
    value.is_some_and(|v| v == "off")
}

/// A switch the device decides unless set: `1` on, `0` or `off` off, unset or anything
/// else `None` (`RVERBS_SHARED_MR`, docs/memory.md, "Shareable registrations";
/// `RVERBS_BUSY_POLL`, docs/progress-and-events.md, "Busy-polling applications").
pub(crate) fn switch(value: Option<&OsStr>) -> Option<bool> {
    match value {
        Some(v) if v == "1" => Some(true),
        Some(v) if v == "0" || v == "off" => Some(false),
        _ => None,
    }
}

/// `RVERBS_STATS` (docs/device.md, "Per-QP and per-CQ statistics"): `1` counts; unset or
/// anything else does not.
pub(crate) fn stats_from(value: Option<&OsStr>) -> bool {
    value.is_some_and(|v| v == "1")
}

/// What the verbs sanitizer does (`RVERBS_SANITIZE`, docs/sanitizer.md); the public
/// name is `rverbs::sanitize::Mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Sanitize {
    /// No checks, nothing tracked (the default).
    #[default]
    Off,
    /// Each finding is reported and recorded; the program continues.
    Report,
    /// The first finding is reported, then the process aborts (`SIGABRT`).
    Abort,
}

/// `RVERBS_SANITIZE`: `1` reports and continues, `abort` reports the first finding and
/// aborts; unset or any other value leaves the sanitizer off.
pub(crate) fn sanitize_from(value: Option<&OsStr>) -> Sanitize {
    match value {
        Some(v) if v == "1" => Sanitize::Report,
        Some(v) if v == "abort" => Sanitize::Abort,
        _ => Sanitize::Off,
    }
}

/// Name of the built-in device (ibv_get_device_name(3)), unless a [`DeviceConfig`] names it.
pub(crate) const DEVICE_NAME: &str = "rverbs0";

/// The settings of one soft device (issue 23's per-device configuration): what the
/// `RVERBS_*` variables set for the device every process lists
/// (docs/environment.md), as values, so that one process can run several devices with
/// different settings (a second endpoint of the host beside the first, one with network
/// faults beside one without, one per runtime directory).
///
/// [`DeviceConfig::new`] starts from the built-in defaults and reads no variable;
/// [`DeviceConfig::from_env`] starts from the variables, as the device of
/// [`crate::devices`] and the drop-in C library do. A device is opened with
/// [`DeviceConfig::open`] and lives as long as the process (ibv_get_device_list(3): a
/// device outlives its list), each on an endpoint of its own, with its own progress
/// thread (docs/device.md, "Several devices in one process").
///
/// The sanitizer is the process's: it watches the program, not one device
/// ([`DeviceConfig::sanitize`] switches it when the device opens). The verb
/// fault plan of `RVERBS_FAULTS` (or [`crate::fault_plan::install`]) is the process's,
/// for every device without a plan of its own ([`DeviceConfig::fault_plan`]).
#[derive(Clone, Debug, PartialEq)]
pub struct DeviceConfig {
    pub(crate) name: String,
    pub(crate) runtime_dir: PathBuf,
    pub(crate) net: bool,
    pub(crate) cma: bool,
    pub(crate) shared_mr: Option<bool>,
    pub(crate) busy_poll: Option<bool>,
    pub(crate) pcap: Option<PathBuf>,
    pub(crate) net_faults: Option<rverbs_proto::fault::FaultConfig>,
    pub(crate) addresses: Option<Vec<std::net::IpAddr>>,
    pub(crate) fault_plan: Option<rverbs_proto::verb_fault::VerbPlan>,
    pub(crate) sanitize: Option<Sanitize>,
    pub(crate) stats: bool,
}

impl Default for DeviceConfig {
    fn default() -> Self {
        DeviceConfig::new()
    }
}

impl DeviceConfig {
    /// The built-in defaults, as if no `RVERBS_*` variable were set: the device
    /// `rverbs0`, the default runtime directory (`$XDG_RUNTIME_DIR/rverbs`, else
    /// `/dev/shm/rverbs-<uid>`, else `/tmp/rverbs-<uid>`), the network transport on,
    /// cross-memory attach allowed, shareable registrations where the runtime directory
    /// is in memory, busy polling detected, no capture, no network faults.
    pub fn new() -> Self {
        DeviceConfig {
            name: DEVICE_NAME.to_owned(),
            runtime_dir: runtime_dir_from(None, std::env::var_os("XDG_RUNTIME_DIR").as_deref(), uid(), dev_shm()),
            net: true,
            cma: true,
            shared_mr: None,
            busy_poll: None,
            pcap: None,
            net_faults: None,
            addresses: None,
            fault_plan: None,
            sanitize: None,
            stats: false,
        }
    }

    /// The settings the `RVERBS_*` variables give (docs/environment.md): those of the
    /// device [`crate::devices`] lists. A `RVERBS_FAULTS` whose packet faults do not parse
    /// is logged and injects none, as the device has always done.
    pub fn from_env() -> Self {
        let var = std::env::var_os;
        DeviceConfig {
            runtime_dir: runtime_dir_from_env(),
            net: !is_off(var("RVERBS_NET").as_deref()),
            cma: !is_off(var("RVERBS_CMA").as_deref()),
            shared_mr: switch(var("RVERBS_SHARED_MR").as_deref()),
            busy_poll: switch(var("RVERBS_BUSY_POLL").as_deref()),
            pcap: var("RVERBS_PCAP").filter(|v| !v.is_empty()).map(PathBuf::from),
            net_faults: net_faults_from(std::env::var("RVERBS_FAULTS").ok().as_deref()),
            stats: stats_from(var("RVERBS_STATS").as_deref()),
            ..DeviceConfig::new()
        }
    }

    /// The device's name (ibv_get_device_name(3)); `rverbs0` by default.
    pub fn name(mut self, name: &str) -> Self {
        self.name = name.to_owned();
        self
    }

    /// The runtime directory (`RVERBS_RUNTIME_DIR`): devices of the host see each other
    /// only if they use the same one, in one process as across processes.
    pub fn runtime_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.runtime_dir = dir.into();
        self
    }

    /// Whether the network transport binds sockets (`RVERBS_NET=off` is `false`): without
    /// it only devices of the same runtime directory are reachable.
    pub fn net(mut self, on: bool) -> Self {
        self.net = on;
        self
    }

    /// Whether peers may use cross-memory attach on this device's memory
    /// (`RVERBS_CMA=off` is `false`): if not, they reach its private memory through its
    /// progress thread (docs/memory.md).
    pub fn cma(mut self, allowed: bool) -> Self {
        self.cma = allowed;
        self
    }

    /// Shareable registrations of caller memory (`RVERBS_SHARED_MR`): `Some(true)`
    /// anywhere, `Some(false)` never, `None` where the runtime directory is in memory
    /// (docs/memory.md, "Shareable registrations").
    pub fn shared_mr(mut self, share: Option<bool>) -> Self {
        self.shared_mr = share;
        self
    }

    /// Whether the application busy-polls this device's CQs (`RVERBS_BUSY_POLL`):
    /// `Some(true)` (`1`) it does, `Some(false)` (`0`, `off`) it does not, `None` (the
    /// default) the device finds out from its empty polls. While it does, its empty polls
    /// receive from the network and hold ACKs, and the progress thread leaves the sockets
    /// to them (docs/progress-and-events.md, "Busy-polling applications").
    pub fn busy_poll(mut self, on: Option<bool>) -> Self {
        self.busy_poll = on;
        self
    }

    /// Records every datagram the device's network transport sends and receives in a
    /// pcap file at `path` (`RVERBS_PCAP`, docs/network.md, "Capture and fault injection").
    pub fn pcap(mut self, path: Option<PathBuf>) -> Self {
        self.pcap = path;
        self
    }

    /// Packet faults on the device's RoCEv2 send path (the packet part of
    /// `RVERBS_FAULTS`, `rverbs_proto::fault`); `None` injects none.
    pub fn net_faults(mut self, faults: Option<rverbs_proto::fault::FaultConfig>) -> Self {
        self.net_faults = faults.filter(|f| !f.is_none());
        self
    }

    /// The addresses the device serves, as a host of its own (`None`, the default: every
    /// address of the host, docs/device.md, "GID table, port"). Its GID table is then
    /// GID 0 and one entry per address, in this order, and its network transport binds
    /// exactly these, loopback addresses included: two devices in runtime directories of
    /// their own on `127.0.1.1` and `127.0.1.2` are two hosts that talk RoCEv2 over the
    /// loopback interface, in one process, without privilege.
    ///
    /// [`DeviceConfig::open`] fails with `EADDRNOTAVAIL` for an address no interface holds
    /// that is not a loopback address (any of 127.0.0.0/8 and ::1 can be bound), and with
    /// `EINVAL` for an empty list.
    pub fn addresses(mut self, addresses: Option<Vec<std::net::IpAddr>>) -> Self {
        self.addresses = addresses;
        self
    }

    /// A verb fault plan for this device alone (`fail=`, `wc=`, `wc_delay=`, `event=`
    /// items, docs/fault-injection.md), in place of the process's (`RVERBS_FAULTS`,
    /// [`crate::fault_plan::install`]) for its verbs; injected events of the device
    /// (PORT_ERR, DEVICE_FATAL) change this device's port and state only. Its injections
    /// are logged through `tracing` and returned by [`crate::fault_plan::take_injected`]
    /// with the others. `None` (the default, and what [`DeviceConfig::from_env`] gives):
    /// the process's plan applies.
    pub fn fault_plan(mut self, plan: Option<rverbs_proto::verb_fault::VerbPlan>) -> Self {
        self.fault_plan = plan;
        self
    }

    /// Switches the verbs sanitizer (docs/sanitizer.md) for the whole process when the
    /// device is opened, as `RVERBS_SANITIZE` does (`rverbs::sanitize::set_mode`): it
    /// checks the program's use of every device. `None` (the default) leaves it as it
    /// is. Open the device before making the objects to be checked.
    pub fn sanitize(mut self, mode: Option<Sanitize>) -> Self {
        self.sanitize = mode;
        self
    }

    /// Per-QP and per-CQ statistics (`RVERBS_STATS=1`; docs/device.md, "Per-QP and per-CQ
    /// statistics"): the device counts what the owner of each QP posts and polls
    /// ([`crate::Qp::stats`], [`crate::Cq::stats`]) in a segment `rverbs stat --qp`
    /// reads. Off by default: then the post and poll paths test one field and count
    /// nothing.
    pub fn stats(mut self, on: bool) -> Self {
        self.stats = on;
        self
    }

    /// The runtime directory these settings name.
    pub fn runtime_dir_path(&self) -> &std::path::Path {
        &self.runtime_dir
    }

    /// The addresses the device serves alone ([`DeviceConfig::addresses`]): `None` for
    /// the host's.
    pub fn served_addresses(&self) -> Option<&[std::net::IpAddr]> {
        self.addresses.as_deref()
    }
}

/// The runtime directory the variables name (`RVERBS_RUNTIME_DIR`, `XDG_RUNTIME_DIR`,
/// [`runtime_dir_from`]).
pub(crate) fn runtime_dir_from_env() -> PathBuf {
    runtime_dir_from(
        std::env::var_os("RVERBS_RUNTIME_DIR").as_deref(),
        std::env::var_os("XDG_RUNTIME_DIR").as_deref(),
        uid(),
        dev_shm(),
    )
}

fn uid() -> u32 {
    rustix::process::getuid().as_raw()
}

fn dev_shm() -> bool {
    std::path::Path::new("/dev/shm").is_dir()
}

/// The packet faults of a `RVERBS_FAULTS` value (`None`: unset, injecting nothing, or not
/// parsing, which is logged: the verb plan of the same value reports its own errors).
pub(crate) fn net_faults_from(spec: Option<&str>) -> Option<rverbs_proto::fault::FaultConfig> {
    match rverbs_proto::fault::FaultConfig::parse(spec?) {
        Ok(cfg) if cfg.is_none() => None,
        Ok(cfg) => {
            tracing::info!(?cfg, "RVERBS_FAULTS: injecting faults on the RoCEv2 send path");
            Some(cfg)
        }
        Err(err) => {
            tracing::warn!(%err, "RVERBS_FAULTS ignored");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_runtime_dir_variable_counts_as_unset() {
        // Found writing the `config` fuzz target: `RVERBS_RUNTIME_DIR=` put the
        // endpoints in each process's current directory (the path ""), where the shell
        // mirror in tests/conformance/lib/cm.bash looked under XDG_RUNTIME_DIR.
        let e = Some(OsStr::new(""));
        assert_eq!(runtime_dir_from(e, Some(OsStr::new("/run/user/7")), 7, true), PathBuf::from("/run/user/7/rverbs"));
        assert_eq!(runtime_dir_from(e, e, 7, true), PathBuf::from("/dev/shm/rverbs-7"));
        assert_eq!(runtime_dir_from(None, e, 7, false), PathBuf::from("/tmp/rverbs-7"));
        assert_eq!(runtime_dir_from(Some(OsStr::new("/r")), e, 7, true), PathBuf::from("/r"));
    }

    #[test]
    fn switches_take_exactly_their_word() {
        assert!(is_off(Some(OsStr::new("off"))) && !is_off(Some(OsStr::new("OFF"))) && !is_off(None));
        assert_eq!(switch(Some(OsStr::new("1"))), Some(true));
        assert_eq!((switch(Some(OsStr::new("0"))), switch(Some(OsStr::new("off")))), (Some(false), Some(false)));
        for other in [None, Some(""), Some("yes"), Some("1 "), Some("OFF")] {
            assert_eq!(switch(other.map(OsStr::new)), None, "{other:?}");
        }
    }

    #[test]
    fn statistics_are_on_only_with_one() {
        assert!(stats_from(Some(OsStr::new("1"))));
        for other in [None, Some(""), Some("0"), Some("on"), Some("1 ")] {
            assert!(!stats_from(other.map(OsStr::new)), "{other:?}");
        }
    }

    #[test]
    fn the_sanitizer_switch_takes_one_or_abort_and_nothing_else() {
        assert_eq!(sanitize_from(None), Sanitize::Off);
        assert_eq!(sanitize_from(Some(OsStr::new("1"))), Sanitize::Report);
        assert_eq!(sanitize_from(Some(OsStr::new("abort"))), Sanitize::Abort);
        for other in ["", "0", "yes", "ABORT", "1 ", "true"] {
            assert_eq!(sanitize_from(Some(OsStr::new(other))), Sanitize::Off, "{other:?}");
        }
    }
}
