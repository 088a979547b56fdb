//! Field-by-field translation between the C structs of `<infiniband/verbs.h>` and the
//! core's types: the crate's own (`rverbs::c_abi`, shared with the rdma-core backend).

pub use rverbs::c_abi::*;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::*;
    use rverbs::{Gid, QpAttr, QpAttrMask as M};

    #[test]
    fn ah_attr_round_trips_and_is_global_means_grh() {
        let mut c = ibv_ah_attr::zeroed();
        c.is_global = 1;
        c.grh.dgid = ibv_gid { raw: [7; 16] };
        c.grh.flow_label = 0x12345;
        c.grh.sgid_index = 2;
        c.grh.hop_limit = 64;
        c.grh.traffic_class = 3;
        c.dlid = 9;
        c.sl = 1;
        c.port_num = 1;
        let r = ah_attr_from_c(&c);
        assert_eq!(r.grh.unwrap().dgid, Gid([7; 16]));
        let back = ah_attr_to_c(&r);
        // SAFETY: ibv_ah_attr is plain data; compare the named fields.
        assert_eq!(unsafe { back.grh.dgid.raw }, [7; 16]);
        assert_eq!(
            (
                back.is_global,
                back.grh.flow_label,
                back.grh.sgid_index,
                back.dlid,
                back.port_num
            ),
            (1, 0x12345, 2, 9, 1)
        );
        c.is_global = 0;
        assert!(ah_attr_from_c(&c).grh.is_none());
    }

    #[test]
    fn enum_fields_are_only_decoded_when_masked() {
        let mut c = qp_attr_to_c(&QpAttr::default());
        c.qp_state = 42;
        c.path_mtu = 9;
        assert!(
            qp_attr_from_c(&c, M::QKEY).is_ok(),
            "unmasked garbage is ignored"
        );
        assert_eq!(qp_attr_from_c(&c, M::STATE).err(), Some(libc::EINVAL));
        assert_eq!(qp_attr_from_c(&c, M::PATH_MTU).err(), Some(libc::EINVAL));
        c.qp_state = IBV_QPS_RTS;
        c.path_mtu = IBV_MTU_1024;
        c.sq_psn = 77;
        let q = qp_attr_from_c(&c, M::STATE | M::PATH_MTU | M::SQ_PSN).unwrap();
        assert_eq!(q.qp_state, rverbs::QpState::Rts);
        assert_eq!(q.path_mtu, rverbs::Mtu::Mtu1024);
        assert_eq!(qp_attr_to_c(&q).sq_psn, 77);
    }
}
