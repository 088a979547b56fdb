//! The PCI function each device shows under `/sys` in `rverbs run`'s namespace
//! (docs/environment.md, "The launcher: rverbs run"): what NCCL and RCCL read to place a
//! NIC in their topology, laid out as the kernel lays out a NIC behind a PCIe root port.
//!
//! What those libraries read, in order (NVIDIA/nccl `src/transport/net_ib.cc` and
//! `src/graph/xml.cc`, read to learn the paths, nothing copied):
//!
//! 1. `realpath("/sys/class/infiniband/<dev>/device")`: a directory whose last component
//!    is a PCI address `DDDD:BB:DD.F` (they set the function digit to 0 to merge the
//!    ports of one NIC, so every device here is function 0 of its own bus);
//! 2. that address again through `/sys/class/pci_bus/DDDD:BB/../../DDDD:BB:DD.F`, which
//!    must resolve to the same directory;
//! 3. in it `class` (`0x02…`: a network controller), `vendor`, `device`,
//!    `subsystem_vendor`, `subsystem_device`, `max_link_speed` (`"%f GT/s"`),
//!    `max_link_width`, the same two of the parent (the port above), and `numa_node`;
//! 4. the parent directories up to the first whose name is not a PCI address (the root
//!    complex, `pciDDDD:00`): a CPU of NUMA node `numa_node`, whose
//!    `/sys/devices/system/node/node<N>/cpumap` is the host's own.
//!
//! The values: class 0x020000 (an Ethernet controller: the device is RoCE), vendor and
//! subsystem vendor 0xffff (the ID no vendor is assigned: nothing matches it against a
//! vendor table), device 0x0001 (the `vendor_part_id`), a PCIe 4.0 x16 link (16 GT/s, 16
//! lanes: the order of the same-host bandwidth, BENCHMARKS.md), the host's NUMA node 0 if
//! it has one, else -1 (as the kernel writes for a device without a node). The PCI domain
//! is one the host does not use, so no address clashes with a real device's.

use std::path::{Path, PathBuf};

/// One entry to make under `/sys` (paths relative to `/sys`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SysEntry {
    /// A directory (and its parents).
    Dir(PathBuf),
    /// A file and its contents.
    File(PathBuf, String),
    /// A symbolic link at the first path to the second (relative to the link's
    /// directory, as the kernel's links are).
    Link(PathBuf, PathBuf),
}

/// The link speed written to `max_link_speed` (the kernel's format).
pub const LINK_SPEED: &str = "16.0 GT/s PCIe";
/// The lanes written to `max_link_width`.
pub const LINK_WIDTH: &str = "16";

/// The PCI domain for the devices: the highest of 0xfffe downwards that the host's
/// `/sys/class/pci_bus/DDDD:BB` names (`taken`) do not use.
pub fn free_domain(taken: &[String]) -> Option<u16> {
    let used: Vec<u16> = taken
        .iter()
        .filter_map(|n| n.split(':').next())
        .filter_map(|d| u16::from_str_radix(d, 16).ok())
        .collect();
    (0x1000..=0xfffe_u16).rev().find(|d| !used.contains(d))
}

/// The PCI address of device `index` (its bus is `index + 1`, function 0).
pub fn address(domain: u16, index: usize) -> Option<String> {
    let bus = u8::try_from(index + 1).ok()?;
    Some(format!("{domain:04x}:{bus:02x}:00.0"))
}

/// The entries that give device `index` named `name` its PCI function: the root complex
/// and root port above it, the function's attributes, `net/<ifname>` for each network
/// interface in `nets` (pyverbs lists it), the `pci_bus` links and the device's
/// `class/infiniband/<name>/device` link. `numa` is the NUMA node to report (-1: none).
/// `None` if the index does not fit a bus number.
pub fn entries(domain: u16, index: usize, name: &str, nets: &[&str], numa: i32) -> Option<Vec<SysEntry>> {
    let bus = u8::try_from(index + 1).ok()?;
    let root = PathBuf::from(format!("devices/pci{domain:04x}:00"));
    let port_addr = format!("{domain:04x}:00:{bus:02x}.0");
    let port = root.join(&port_addr);
    let func_addr = address(domain, index)?;
    let func = port.join(&func_addr);
    let root_bus = format!("{domain:04x}:00");
    let sub_bus = format!("{domain:04x}:{bus:02x}");
    let file = |dir: &Path, f: &str, v: String| SysEntry::File(dir.join(f), format!("{v}\n"));
    let mut out = vec![
        SysEntry::Dir(root.join("pci_bus").join(&root_bus)),
        SysEntry::Dir(port.join("pci_bus").join(&sub_bus)),
        SysEntry::Dir(func.clone()),
    ];
    // The root port: a PCI-to-PCI bridge.
    for (f, v) in [("class", "0x060400"), ("vendor", "0xffff"), ("device", "0x0002")] {
        out.push(file(&port, f, v.into()));
    }
    // The function.
    for (f, v) in [("class", "0x020000"), ("vendor", "0xffff"), ("device", "0x0001"), ("subsystem_vendor", "0xffff"), ("subsystem_device", "0x0001")] {
        out.push(file(&func, f, v.into()));
    }
    for dir in [&port, &func] {
        for (f, v) in [("max_link_speed", LINK_SPEED), ("current_link_speed", LINK_SPEED), ("max_link_width", LINK_WIDTH), ("current_link_width", LINK_WIDTH)] {
            out.push(file(dir, f, v.into()));
        }
        out.push(file(dir, "numa_node", numa.to_string()));
    }
    for n in nets {
        out.push(SysEntry::Dir(func.join("net").join(n)));
    }
    // /sys/class/pci_bus/<bus> -> ../../devices/…/pci_bus/<bus>, as the kernel links them.
    let up = Path::new("../..");
    out.push(SysEntry::Link(PathBuf::from("class/pci_bus").join(&root_bus), up.join(&root).join("pci_bus").join(&root_bus)));
    out.push(SysEntry::Link(PathBuf::from("class/pci_bus").join(&sub_bus), up.join(&port).join("pci_bus").join(&sub_bus)));
    // /sys/class/infiniband/<name>/device -> ../../../devices/…/<function>.
    out.push(SysEntry::Link(PathBuf::from("class/infiniband").join(name).join("device"), Path::new("../../..").join(&func)));
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Component;

    /// `base/target` with `..` taken lexically (the layout has no other links on the way).
    fn resolve(link: &Path, target: &Path) -> PathBuf {
        let mut p: Vec<_> = link.parent().unwrap().components().collect();
        for c in target.components() {
            match c {
                Component::ParentDir => {
                    p.pop();
                }
                c => p.push(c),
            }
        }
        p.iter().collect()
    }

    fn links(e: &[SysEntry]) -> Vec<(PathBuf, PathBuf)> {
        e.iter().filter_map(|e| if let SysEntry::Link(a, b) = e { Some((a.clone(), resolve(a, b))) } else { None }).collect()
    }

    #[test]
    fn the_domain_is_one_the_host_does_not_use() {
        assert_eq!(free_domain(&["0000:00".into(), "0000:01".into()]), Some(0xfffe));
        assert_eq!(free_domain(&["fffe:00".into(), "0000:00".into()]), Some(0xfffd));
        assert_eq!(free_domain(&[]), Some(0xfffe));
    }

    #[test]
    fn the_device_link_and_the_pci_bus_path_reach_the_same_function_as_nccl_walks_them() {
        let e = entries(0xfffe, 0, "rverbs0", &["eth0"], 0).unwrap();
        let l = links(&e);
        let device = &l.iter().find(|(a, _)| a.ends_with("rverbs0/device")).unwrap().1;
        assert_eq!(device, Path::new("devices/pcifffe:00/fffe:00:01.0/fffe:01:00.0"));
        // The last component is an address of function 0 (NCCL sets that digit to 0).
        let busid = device.file_name().unwrap().to_str().unwrap();
        assert_eq!(busid, address(0xfffe, 0).unwrap());
        assert!(busid.ends_with(".0") && busid.len() == 12 && busid.as_bytes()[4] == b':' && busid.as_bytes()[7] == b':');
        // /sys/class/pci_bus/<DDDD:BB>/../../<busid> is the same directory.
        let bus = &l.iter().find(|(a, _)| a.ends_with(&busid[..7])).unwrap().1;
        assert_eq!(resolve(&bus.join("x"), Path::new("../..")).join(busid), *device);
        // Every attribute NCCL reads is in the function, the two it reads of the parent in
        // the port, and the function's net/ lists the interface.
        let files: Vec<&PathBuf> = e.iter().filter_map(|e| if let SysEntry::File(p, _) = e { Some(p) } else { None }).collect();
        for f in ["class", "vendor", "device", "subsystem_vendor", "subsystem_device", "max_link_speed", "max_link_width", "numa_node"] {
            assert!(files.contains(&&device.join(f)), "{f}");
        }
        for f in ["max_link_speed", "max_link_width"] {
            assert!(files.contains(&&device.parent().unwrap().join(f)), "../{f}");
        }
        assert!(e.contains(&SysEntry::Dir(device.join("net/eth0"))));
        // Two levels up is the root complex, whose name is no PCI address: NCCL's CPU.
        assert_eq!(device.parent().unwrap().parent().unwrap().file_name().unwrap(), "pcifffe:00");
    }

    #[test]
    fn devices_get_buses_of_their_own_and_the_class_says_network_controller() {
        let a = entries(0xfffe, 0, "a", &[], -1).unwrap();
        let b = entries(0xfffe, 1, "b", &[], -1).unwrap();
        let dev = |e: &[SysEntry]| links(e).into_iter().find(|(a, _)| a.ends_with("device")).unwrap().1;
        assert_ne!(dev(&a), dev(&b));
        assert!(a.contains(&SysEntry::File(dev(&a).join("class"), "0x020000\n".into())));
        assert!(a.contains(&SysEntry::File(dev(&a).join("numa_node"), "-1\n".into())));
        assert_eq!(address(0xfffe, 255), None, "bus numbers end at 0xff");
    }
}
