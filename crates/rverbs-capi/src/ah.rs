//! Address handles.
//!
//! Skeleton: answers "not supported" until the core is wired in at the `TODO(core)`s.

use core::ffi::c_int;

use crate::abi::*;
use crate::ffi::{not_supported_errno, not_supported_minus_one, not_supported_null, set_errno};

export! {
    /// Creates an address handle (`ibv_create_ah(3)`). Errors: NULL with `errno`.
    ///
    /// Rule: verbs.c: the library sets `ah->context` and `ah->pd`.
    #[export("IBVERBS_1.1", null)]
    pub unsafe fn ibv_create_ah(_pd: *mut ibv_pd, _attr: *mut ibv_ah_attr) -> *mut ibv_ah {
        // TODO(core): resolve the address vector in the core and return `{ ibv_ah, private }`.
        not_supported_null()
    }
}

export! {
    /// Destroys an address handle (`ibv_destroy_ah(3)`). Returns 0 or an errno.
    #[export("IBVERBS_1.1", errno)]
    pub unsafe fn ibv_destroy_ah(_ah: *mut ibv_ah) -> c_int {
        // TODO(core): free the core AH.
        not_supported_errno()
    }
}

export! {
    /// Builds an AH attribute from a received completion and its GRH
    /// (`ibv_init_ah_from_wc(3)`). Returns 0, or -1 with `errno`.
    ///
    /// Rule: verbs.c: `is_global` iff `wc_flags & IBV_WC_GRH`; the GRH is read as IPv4
    /// (RoCE v2) or IPv6 and the local `sgid_index` found in the GID table.
    #[export("IBVERBS_1.1", minus_one)]
    pub unsafe fn ibv_init_ah_from_wc(
        _context: *mut ibv_context,
        _port_num: u8,
        _wc: *mut ibv_wc,
        _grh: *mut ibv_grh,
        _ah_attr: *mut ibv_ah_attr,
    ) -> c_int {
        // TODO(core): fill ah_attr from wc/grh, looking up sgid_index in the core's GID table.
        not_supported_minus_one()
    }
}

export! {
    /// Creates an AH towards the sender of a received completion
    /// (`ibv_create_ah_from_wc(3)`). Errors: NULL with `errno`.
    #[export("IBVERBS_1.1", null)]
    pub unsafe fn ibv_create_ah_from_wc(
        _pd: *mut ibv_pd,
        _wc: *mut ibv_wc,
        _grh: *mut ibv_grh,
        _port_num: u8,
    ) -> *mut ibv_ah {
        // TODO(core): ibv_init_ah_from_wc(pd->context, ...) then ibv_create_ah(pd, &attr).
        not_supported_null()
    }
}

export! {
    /// Resolves the Ethernet MAC (and VLAN) of a RoCE address vector
    /// (`ibv_resolve_eth_l2_from_gid`, used by libmlx4/5). Returns 0 or a negative errno.
    #[export("IBVERBS_1.1", value(-libc::EIO))]
    pub unsafe fn ibv_resolve_eth_l2_from_gid(
        _context: *mut ibv_context,
        _attr: *mut ibv_ah_attr,
        _eth_mac: *mut u8,
        _vid: *mut u16,
    ) -> c_int {
        // TODO(core): resolve dgid -> MAC through the core (neighbour table) or keep -EOPNOTSUPP.
        set_errno(libc::EOPNOTSUPP);
        -libc::EOPNOTSUPP
    }
}
