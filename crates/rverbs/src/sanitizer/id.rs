//! The key of every table of the sanitizer: an object's number with its device.
//!
//! The numbers the verbs give objects are unique on one device only: CQ, completion
//! channel and context numbers, PD handles and memory keys come from each device's own
//! counters, so the devices of a process (`DeviceConfig`) repeat them, and QPNs and SRQ
//! numbers repeat across devices in runtime directories of their own (both endpoint 0).
//! Keyed by (device slot, number), two devices' objects never mix (docs/sanitizer.md,
//! "Switching it on").

use std::fmt;

/// An object's number on the device in slot `slot` of this process (`sys::MAX_DEVICES`,
/// `Device::slot_index`). Printed, it is the number alone, as the verbs show it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Id {
    /// The device's slot.
    pub(crate) slot: usize,
    /// The number on that device: a CQ number, QPN, SRQ number, lkey, PD handle, ...
    pub(crate) num: u32,
}

impl Id {
    /// Number `num` of the device in slot `slot`.
    pub(crate) const fn new(slot: usize, num: u32) -> Id {
        Id { slot, num }
    }

    /// Another number of the same device (a QP's lkeys, a CQ's QPs).
    pub(crate) const fn with(self, num: u32) -> Id {
        Id { slot: self.slot, num }
    }
}

impl fmt::Display for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.num, f)
    }
}

impl fmt::LowerHex for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::LowerHex::fmt(&self.num, f)
    }
}

#[cfg(test)]
mod tests {
    use super::Id;

    #[test]
    fn an_id_prints_its_number_alone_and_orders_by_device_first() {
        let a = Id::new(9, 0x11);
        assert_eq!((format!("{a}"), format!("{a:#x}"), format!("{a:x}")), ("17".to_string(), "0x11".to_string(), "11".to_string()));
        assert_ne!(a, Id::new(0, 0x11));
        assert!(Id::new(0, u32::MAX) < Id::new(1, 0));
        assert_eq!(a.with(3), Id::new(9, 3));
    }
}
