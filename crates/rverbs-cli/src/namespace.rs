//! The private mount namespace of `rverbs run` (docs/environment.md, "The launcher:
//! rverbs run"): the paths a kernel RDMA device has and programs look for, given to one
//! program and nothing else.
//!
//! - `/dev/infiniband/uverbs<N>`: UCX stats it and wants a character device before it uses
//!   the device (it never opens it). As root a node with `/dev/null`'s numbers (1:3);
//!   where `mknod` is refused (a user namespace) a symbolic link to the host's
//!   `/dev/null`, which `stat(2)` reports as that same character device.
//! - `/sys/class/infiniband/<dev>/ports/<port>/gid_attrs/{types,ndevs}/<index>`: the RoCE
//!   version and network interface of each GID (UCX reads them), from the device's own
//!   GID table, and `/sys/class/infiniband/<dev>/device/net/<ifname>`: the network
//!   interfaces the device's GIDs live on (pyverbs lists it to find the device's IP
//!   address). `/sys/class/infiniband_verbs/uverbs<N>/ibdev` names the device of the
//!   `dev_path` the drop-in library reports.
//! - `device` itself is a link to a PCI function under `/sys/devices`, with the
//!   `/sys/class/pci_bus` links that reach it: NCCL and RCCL read it to place the NIC in
//!   their topology ([`crate::pci`]); `/sys/devices` is mirrored as `/sys/class` is.
//!
//! How: `unshare(CLONE_NEWNS)` (root), else `unshare(CLONE_NEWUSER | CLONE_NEWNS)` with the
//! caller's own uid and gid mapped (unshare(2), user_namespaces(7)); every mount made
//! private first (mount_namespaces(7): nothing propagates back to the host); then `/dev`
//! and `/sys/class` are each covered by a tmpfs that mirrors the host directory one level
//! deep: its directories are recursive bind mounts of the host's (so `/dev/pts`,
//! `/dev/shm` and every class of `/sys/class` are the host's own), its symbolic links are
//! copied, and its other entries (device nodes, sockets, files) become symbolic links into
//! a recursive bind mount of the whole host directory at `<dir>/.rverbs-host` (a bind
//! mount of a device node onto a file of a tmpfs made in a user namespace cannot be
//! opened with `O_CREAT`, which every shell's `> /dev/null` uses; through the link it
//! can). Only the new entries are added; an entry the host already has is left alone.
//!
//! This is the test harness's set-up (tests/conformance/lib/ucx.bash, pyverbs_rdmacm.sh)
//! moved into the launcher, not behaviour of the library: the drop-in library never reads
//! these paths.
//!
//! The process must be single-threaded when it calls [`enter`] (`CLONE_NEWUSER` requires
//! it, unshare(2)): `rverbs run` learns the GID table in a child process for that reason.
#![allow(unsafe_code)]

use std::ffi::OsString;
use std::fs;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};

use rustix::mount::{self, MountFlags, MountPropagationFlags};
use rustix::thread::UnshareFlags;

/// The name of the bind mount of the whole host directory inside a mirrored one.
const HOST: &str = ".rverbs-host";

/// A device as the sysfs entries describe it (from the device's own GID table).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SysfsDevice {
    /// Its index in the device list: the `N` of `uverbsN` (the drop-in's `dev_name`).
    pub index: usize,
    /// Its name (`rverbs0`).
    pub name: String,
    /// Its non-empty GID table entries.
    pub gids: Vec<SysfsGid>,
}

/// One GID table entry as `gid_attrs` shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SysfsGid {
    /// The port.
    pub port: u32,
    /// The index in the table.
    pub index: u32,
    /// The GID.
    pub gid: std::net::Ipv6Addr,
    /// `RoCE v2` or `IB/RoCE v1`, as the kernel's `gid_attrs/types/<index>` reads.
    pub gid_type: String,
    /// The network interface the GID belongs to, if it has a name.
    pub ndev: Option<String>,
}

/// How the namespace was entered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// A mount namespace of the caller's user namespace (the caller has CAP_SYS_ADMIN).
    Mounts,
    /// A user namespace (the caller's uid and gid mapped to themselves) and its mount
    /// namespace.
    User,
}

/// What [`enter`] achieved.
#[derive(Debug)]
pub struct Outcome {
    /// The paths that could not be provided, each with why.
    pub missing: Vec<String>,
}

/// Enters a private mount namespace and provides the paths of the module doc for
/// `devices` (when `devices` is an error, only `/dev`'s, and the error is reported as
/// missing `/sys` entries). Nothing outside the calling process (and what it executes)
/// sees the result.
///
/// Errors: only when the process is left in a state the program must not run in (a user
/// namespace whose id maps could not be written); any other failure is an entry of
/// [`Outcome::missing`].
pub fn enter(devices: &Result<Vec<SysfsDevice>, String>) -> Result<Outcome, String> {
    let uid = rustix::process::geteuid().as_raw();
    let gid = rustix::process::getegid().as_raw();
    let all_paths = || {
        let names: Vec<&str> = match devices {
            Ok(d) => d.iter().map(|d| d.name.as_str()).collect(),
            Err(_) => vec!["rverbs0"],
        };
        format!("/dev/infiniband/uverbs*, /sys/class/infiniband/{{{}}}", names.join(","))
    };
    // SAFETY: unshare(2) with CLONE_NEWNS (which implies CLONE_FS) only gives this thread
    // its own mount namespace and fs_struct (root, cwd, umask: copied unchanged); no file
    // descriptor table is unshared (no CLONE_FILES), so no thread can observe a
    // descriptor from another table, which is the hazard `unshare_unsafe` documents.
    let mode = match unsafe { rustix::thread::unshare_unsafe(UnshareFlags::NEWNS) } {
        Ok(()) => Mode::Mounts,
        Err(e_ns) => {
            // SAFETY: as above; CLONE_NEWUSER additionally requires a single-threaded
            // caller, which the kernel checks (EINVAL otherwise).
            match unsafe { rustix::thread::unshare_unsafe(UnshareFlags::NEWUSER | UnshareFlags::NEWNS) } {
                Ok(()) => {
                    map_ids(uid, gid).map_err(|e| {
                        format!("entered a user namespace but could not map uid {uid} / gid {gid} into it: {e}")
                    })?;
                    Mode::User
                }
                Err(e_user) => {
                    return Ok(Outcome {
                        missing: vec![format!(
                            "{}: no private mount namespace (unshare(CLONE_NEWNS): {e_ns}; with a user namespace: {e_user})",
                            all_paths()
                        )],
                    })
                }
            }
        }
    };
    // Nothing mounted below may propagate to the host's mounts.
    if let Err(e) = mount::mount_change("/", MountPropagationFlags::PRIVATE | MountPropagationFlags::REC) {
        return Ok(Outcome {
            missing: vec![format!("{}: cannot make the mounts private: {e}", all_paths())],
        });
    }
    let mut missing = Vec::new();
    let dev_names: Vec<usize> = match devices {
        Ok(d) => d.iter().map(|d| d.index).collect(),
        Err(_) => vec![0],
    };
    if let Err(e) = provide_dev(&dev_names, mode) {
        missing.push(format!("/dev/infiniband/uverbs*: {e}"));
    }
    match devices {
        Ok(devices) => {
            match provide_sys(devices) {
                Ok(m) => missing.extend(m),
                Err(e) => missing.push(format!("/sys/class/infiniband/*: {e}")),
            }
        }
        Err(e) => missing.push(format!("/sys/class/infiniband/*: the GID table could not be read: {e}")),
    }
    Ok(Outcome { missing })
}

/// Maps `uid` and `gid` to themselves in the user namespace just entered
/// (user_namespaces(7): one line mapping the writer's own effective id needs no
/// privilege; `setgroups` must be denied before `gid_map` is written).
fn map_ids(uid: u32, gid: u32) -> io::Result<()> {
    fs::write("/proc/self/setgroups", "deny")?;
    fs::write("/proc/self/uid_map", format!("{uid} {uid} 1\n"))?;
    fs::write("/proc/self/gid_map", format!("{gid} {gid} 1\n"))
}

/// Why a step failed, naming the step.
fn step<T, E: std::fmt::Display>(what: impl FnOnce() -> String, r: Result<T, E>) -> Result<T, String> {
    r.map_err(|e| format!("{}: {e}", what()))
}

/// One entry of a directory, as read before it is covered.
struct Entry {
    name: OsString,
    kind: Kind,
}

enum Kind {
    Dir(OwnedFd),
    Symlink(PathBuf),
    Other,
}

/// A copy of the mount tree at `path` (its submounts included), not attached anywhere
/// yet (open_tree(2) with `OPEN_TREE_CLONE | AT_RECURSIVE`).
fn clone_tree(path: &Path) -> Result<OwnedFd, String> {
    use rustix::mount::OpenTreeFlags as F;
    step(
        || format!("copy the mounts of {}", path.display()),
        mount::open_tree(rustix::fs::CWD, path, F::OPEN_TREE_CLONE | F::OPEN_TREE_CLOEXEC | F::AT_RECURSIVE),
    )
}

/// Attaches a tree from [`clone_tree`] at `at`, a new directory (move_mount(2)).
fn attach(tree: &OwnedFd, at: &Path) -> Result<(), String> {
    step(|| format!("mkdir {}", at.display()), fs::create_dir(at))?;
    step(
        || format!("mount at {}", at.display()),
        mount::move_mount(tree, c"", rustix::fs::CWD, at, mount::MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH)
    )
}

/// Covers `dir` with a tmpfs that mirrors it (module doc). Every copy of the host's mounts
/// is made before the tmpfs covers `dir` (a recursive copy made after would contain it).
fn mirror(dir: &Path, flags: MountFlags) -> Result<(), String> {
    let mut entries = Vec::new();
    for e in step(|| format!("read {}", dir.display()), fs::read_dir(dir))? {
        let e = step(|| format!("read {}", dir.display()), e)?;
        let ft = step(|| format!("stat {}", e.path().display()), e.file_type())?;
        let kind = if ft.is_dir() {
            Kind::Dir(clone_tree(&e.path())?)
        } else if ft.is_symlink() {
            Kind::Symlink(step(|| format!("readlink {}", e.path().display()), fs::read_link(e.path()))?)
        } else {
            Kind::Other
        };
        entries.push(Entry { name: e.file_name(), kind });
    }
    let whole = match entries.iter().any(|e| matches!(e.kind, Kind::Other)) {
        true => Some(clone_tree(dir)?),
        false => None,
    };
    step(
        || format!("mount a tmpfs on {}", dir.display()),
        mount::mount("rverbs-run", dir, "tmpfs", flags | MountFlags::NOSUID, c"mode=755"),
    )?;
    let populate = || -> Result<(), String> {
        if let Some(whole) = &whole {
            attach(whole, &dir.join(HOST))?;
        }
        for e in &entries {
            let at = dir.join(&e.name);
            match &e.kind {
                Kind::Dir(tree) => attach(tree, &at)?,
                Kind::Symlink(target) => step(|| format!("symlink {}", at.display()), symlink(target, &at))?,
                Kind::Other => {
                    step(|| format!("symlink {}", at.display()), symlink(Path::new(HOST).join(&e.name), &at))?
                }
            }
        }
        Ok(())
    };
    // A mirror missing some of the host's entries is worse than none: the program gets
    // the host's directory back.
    populate().map_err(|e| match mount::unmount(dir, mount::UnmountFlags::DETACH) {
        Ok(()) => e,
        Err(u) => format!("{e}; and {} stays a partial copy (umount: {u})", dir.display()),
    })
}

/// Makes `dir` (in a mirrored parent) writable: mirrors it when the host has it, else
/// creates it.
fn writable_dir(dir: &Path, flags: MountFlags) -> Result<(), String> {
    if dir.symlink_metadata().is_ok() {
        mirror(dir, flags)
    } else {
        step(|| format!("mkdir {}", dir.display()), fs::create_dir(dir))
    }
}

/// `/dev/infiniband/uverbs<N>` for each index the host does not have.
fn provide_dev(indices: &[usize], mode: Mode) -> Result<(), String> {
    let dev = Path::new("/dev");
    mirror(dev, MountFlags::empty())?;
    let ib = dev.join("infiniband");
    writable_dir(&ib, MountFlags::empty())?;
    for i in indices {
        let node = ib.join(format!("uverbs{i}"));
        if node.symlink_metadata().is_ok() {
            continue;
        }
        // A character device with /dev/null's numbers, as the kernel's uverbs node is one;
        // where mknod is refused (in a user namespace it always is), a link to the
        // host's /dev/null, which stat(2) follows to the same character device.
        let made = mode == Mode::Mounts
            && rustix::fs::mknodat(
                rustix::fs::CWD,
                &node,
                rustix::fs::FileType::CharacterDevice,
                rustix::fs::Mode::from_raw_mode(0o666),
                rustix::fs::makedev(1, 3),
            )
            .is_ok();
        if made {
            // mknod(2) applies the umask; the kernel's node is rw for everyone.
            step(
                || format!("chmod {}", node.display()),
                fs::set_permissions(&node, fs::Permissions::from_mode(0o666)),
            )?;
        } else {
            step(|| format!("symlink {}", node.display()), symlink(Path::new("..").join(HOST).join("null"), &node))?;
        }
    }
    Ok(())
}

/// `/sys/class/infiniband/<dev>/…` and `/sys/class/infiniband_verbs/uverbs<N>/ibdev` for
/// each device the host does not have; `device` is a link to a PCI function under
/// `/sys/devices` ([`crate::pci`]), or, if that cannot be made (a miss, returned), a
/// directory holding `net/` only.
fn provide_sys(devices: &[SysfsDevice]) -> Result<Vec<String>, String> {
    let class = Path::new("/sys/class");
    let flags = MountFlags::NODEV | MountFlags::NOEXEC;
    mirror(class, flags)?;
    let ib = class.join("infiniband");
    writable_dir(&ib, flags)?;
    let verbs = class.join("infiniband_verbs");
    writable_dir(&verbs, flags)?;
    let mut missing = Vec::new();
    let pci = match pci_space(flags) {
        Ok(domain) => Some(domain),
        Err(e) => {
            missing.push(format!("/sys/class/infiniband/*/device as a PCI function: {e}"));
            None
        }
    };
    let numa = if Path::new("/sys/devices/system/node/node0").is_dir() { 0 } else { -1 };
    for d in devices {
        let root = ib.join(&d.name);
        if root.symlink_metadata().is_err() {
            for g in &d.gids {
                let attrs = root.join(format!("ports/{}/gid_attrs", g.port));
                write(&attrs.join(format!("types/{}", g.index)), &format!("{}\n", g.gid_type))?;
                if let Some(ndev) = &g.ndev {
                    write(&attrs.join(format!("ndevs/{}", g.index)), &format!("{ndev}\n"))?;
                }
            }
            // The network interfaces of the device (a kernel RoCE device's netdev): those
            // holding an address GID (not the link-local GID 0, which rverbs builds from
            // the first MAC it finds), the loopback not counted: on a host a device's
            // netdev is a NIC, and pyverbs takes the first entry's first address for the
            // device's. With none there is no such directory, as for a device without a
            // netdev.
            let mut nets: Vec<&str> = d
                .gids
                .iter()
                .filter(|g| !g.gid.is_unicast_link_local())
                .filter_map(|g| g.ndev.as_deref())
                .filter(|n| *n != "lo")
                .collect();
            nets.sort_unstable();
            nets.dedup();
            step(|| format!("mkdir {}", root.display()), fs::create_dir_all(&root))?;
            let entries = pci.and_then(|domain| crate::pci::entries(domain, d.index, &d.name, &nets, numa));
            match entries {
                Some(entries) => make(&entries)?,
                None => {
                    if pci.is_some() {
                        missing.push(format!("/sys/class/infiniband/{}/device as a PCI function: index {} has no bus number", d.name, d.index));
                    }
                    for n in nets {
                        let p = root.join("device/net").join(n);
                        step(|| format!("mkdir {}", p.display()), fs::create_dir_all(&p))?;
                    }
                }
            }
        }
        let uverbs = verbs.join(format!("uverbs{}", d.index));
        if uverbs.symlink_metadata().is_err() {
            write(&uverbs.join("ibdev"), &format!("{}\n", d.name))?;
        }
    }
    Ok(missing)
}

/// Writes `text` to `path`, making its parent directories.
fn write(path: &Path, text: &str) -> Result<(), String> {
    if let Some(parent) = path.parent() {
        step(|| format!("mkdir {}", parent.display()), fs::create_dir_all(parent))?;
    }
    step(|| format!("write {}", path.display()), fs::write(path, text))
}

/// Makes `/sys/devices` and `/sys/class/pci_bus` writable and returns a PCI domain the
/// host does not use.
fn pci_space(flags: MountFlags) -> Result<u16, String> {
    let buses = Path::new("/sys/class/pci_bus");
    let taken: Vec<String> = match fs::read_dir(buses) {
        Ok(dir) => dir.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect(),
        Err(_) => Vec::new(),
    };
    let domain = crate::pci::free_domain(&taken).ok_or("every PCI domain is in use")?;
    mirror(Path::new("/sys/devices"), flags)?;
    writable_dir(buses, flags)?;
    Ok(domain)
}

/// Makes the entries of [`crate::pci::entries`] (paths relative to `/sys`).
fn make(entries: &[crate::pci::SysEntry]) -> Result<(), String> {
    use crate::pci::SysEntry;
    let sys = Path::new("/sys");
    for e in entries {
        match e {
            SysEntry::Dir(p) => {
                let p = sys.join(p);
                step(|| format!("mkdir {}", p.display()), fs::create_dir_all(&p))?;
            }
            SysEntry::File(p, text) => write(&sys.join(p), text)?,
            SysEntry::Link(at, target) => {
                let at = sys.join(at);
                step(|| format!("symlink {}", at.display()), symlink(target, &at))?;
            }
        }
    }
    Ok(())
}
