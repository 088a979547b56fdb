//! rdma_cm service IDs: how an IP port space and port become the 64-bit Service ID of a REQ
//! or SIDR_REQ (IBTA Vol 1 Annex A11, "RDMA IP CM Service"; Linux `drivers/infiniband/core/
//! cma.c` `cma_get_service_id`, `rdma_ps_from_service_id`, `cma_port_from_service_id`;
//! `include/rdma/rdma_cm.h` `RDMA_PS_*`, `RDMA_IB_IP_PS_*`).
//!
//! Fact: `cma_get_service_id(ps, addr)` is `(ps << 16) + port`, so
//! ```text
//! service ID = 0x0000_0000_PPPP_pppp      PPPP = port space, pppp = port
//! RDMA_PS_TCP  0x0106  ->  0x0000_0000_0106_pppp   (RDMA_IB_IP_PS_TCP = 0x0000000001060000)
//! RDMA_PS_UDP  0x0111  ->  0x0000_0000_0111_pppp   (RDMA_IB_IP_PS_UDP = 0x0000000001110000)
//! RDMA_PS_IB   0x013F  ->  0x0000_0000_013F_pppp   (RDMA_IB_PS_IB     = 0x00000000013F0000)
//! RDMA_PS_IPOIB 0x0002 ->  0x0000_0000_0002_pppp
//! ```
//! The three IP port spaces fall in the range `IB_CMA_SERVICE_ID` 0x0000000001000000 with
//! mask 0xFFFFFFFFFF000000 (Linux `include/rdma/ib_cm.h`): byte 5 of the service ID is 0x01,
//! byte 6 the IP protocol number (6 TCP, 0x11 UDP, 0x3F "any"), bytes 7-8 the port.

/// Port space of RDMA_PS_TCP, connected (RC) service over IP addressing (Linux
/// `enum rdma_ucm_port_space`).
pub const RDMA_PS_TCP: u16 = 0x0106;
/// Port space of RDMA_PS_UDP, datagram (UD) service resolved by SIDR.
pub const RDMA_PS_UDP: u16 = 0x0111;
/// Port space of RDMA_PS_IB, any QP type.
pub const RDMA_PS_IB: u16 = 0x013F;
/// Port space of RDMA_PS_IPOIB.
pub const RDMA_PS_IPOIB: u16 = 0x0002;

/// Mask of the port space part of an rdma_cm service ID (Linux `RDMA_IB_IP_PS_MASK`).
pub const RDMA_IB_IP_PS_MASK: u64 = 0xFFFF_FFFF_FFFF_0000;
/// Mask of the port part of an rdma_cm service ID (Linux `RDMA_IB_IP_PORT_MASK`).
pub const RDMA_IB_IP_PORT_MASK: u64 = 0x0000_0000_0000_FFFF;

/// The service ID rdma_cm uses for port space `ps` and port `port`: `(ps << 16) | port`.
///
/// Rule: IBTA Vol 1 Annex A11; Linux cma.c `cma_get_service_id`:
/// `service_id(RDMA_PS_TCP, 4791) == 0x0000_0000_0106_12B7`.
pub const fn service_id(ps: u16, port: u16) -> u64 {
    ((ps as u64) << 16) | port as u64
}

/// The port space and port of an rdma_cm service ID: the inverse of [`service_id`].
///
/// Rule: Linux cma.c `rdma_ps_from_service_id` is bits 31-16 and `cma_port_from_service_id`
/// bits 15-0.
/// Deviation: the kernel ignores bits 63-32; this returns `None` when any of them is set, so
/// that `Some` is always an exact inverse.
pub const fn split_service_id(service_id: u64) -> Option<(u16, u16)> {
    if service_id >> 32 != 0 {
        return None;
    }
    Some(((service_id >> 16) as u16, service_id as u16))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_id_matches_rdma_ib_ip_ps_constants() {
        // include/rdma/rdma_cm.h (rdma-core librdmacm/rdma_cma.h): RDMA_IB_IP_PS_TCP etc.
        assert_eq!(service_id(RDMA_PS_TCP, 0), 0x0000_0000_0106_0000);
        assert_eq!(service_id(RDMA_PS_UDP, 0), 0x0000_0000_0111_0000);
        assert_eq!(service_id(RDMA_PS_IB, 0), 0x0000_0000_013F_0000);
        assert_eq!(service_id(RDMA_PS_IPOIB, 0), 0x0000_0000_0002_0000);
    }

    #[test]
    fn service_id_puts_port_in_low_16_bits() {
        assert_eq!(service_id(RDMA_PS_TCP, 4791), 0x0000_0000_0106_12B7);
        assert_eq!(service_id(RDMA_PS_TCP, 4791) & RDMA_IB_IP_PORT_MASK, 4791);
        assert_eq!(
            service_id(RDMA_PS_UDP, 0xFFFF) & RDMA_IB_IP_PS_MASK,
            0x0000_0000_0111_0000
        );
    }

    #[test]
    fn ip_port_spaces_are_in_the_ib_cma_service_id_range() {
        // include/rdma/ib_cm.h: IB_CMA_SERVICE_ID 0x0000000001000000, mask 0xFFFFFFFFFF000000.
        for ps in [RDMA_PS_TCP, RDMA_PS_UDP, RDMA_PS_IB] {
            assert_eq!(
                service_id(ps, 0xABCD) & 0xFFFF_FFFF_FF00_0000,
                0x0000_0000_0100_0000
            );
        }
    }

    #[test]
    fn split_service_id_inverts_service_id() {
        for (ps, port) in [(RDMA_PS_TCP, 1), (RDMA_PS_UDP, 65535), (RDMA_PS_IPOIB, 0)] {
            assert_eq!(split_service_id(service_id(ps, port)), Some((ps, port)));
        }
        assert_eq!(split_service_id(0x0000_0001_0106_0001), None);
        assert_eq!(split_service_id(0x0200_0000_0000_0000), None);
    }
}
