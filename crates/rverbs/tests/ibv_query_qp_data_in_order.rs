//! ibv_query_qp_data_in_order(3) answers truthfully, and placement honours it.
mod common;
use common::*;
use rverbs::*;

const RETURN_CAPS: u32 = 1;
const WHOLE_MSG: u32 = 1;
const ALIGNED_128: u32 = 2;

#[test]
fn answers_per_opcode() {
    let (a, _b) = pair(QpType::Rc);
    for op in [WrOpcode::RdmaWrite, WrOpcode::RdmaWriteWithImm, WrOpcode::Send, WrOpcode::SendWithImm, WrOpcode::RdmaRead] {
        assert_eq!(a.qp.data_in_order(op, 0), 1, "{op:?}");
        assert_eq!(a.qp.data_in_order(op, RETURN_CAPS), WHOLE_MSG | ALIGNED_128, "{op:?}");
    }
    for op in [WrOpcode::AtomicFetchAndAdd, WrOpcode::AtomicCmpAndSwp, WrOpcode::LocalInv] {
        assert_eq!(a.qp.data_in_order(op, 0), 0, "{op:?} is not answered");
        assert_eq!(a.qp.data_in_order(op, RETURN_CAPS), 0);
    }
    assert_eq!(a.qp.data_in_order(WrOpcode::RdmaWrite, 0x10), 0, "unknown flags give 0");
}

#[test]
fn answers_per_qp_type() {
    let (u, _v) = pair(QpType::Ud);
    assert_eq!(u.qp.data_in_order(WrOpcode::Send, RETURN_CAPS), WHOLE_MSG | ALIGNED_128);
    assert_eq!(u.qp.data_in_order(WrOpcode::RdmaWrite, 0), 0, "UD carries no RDMA WRITE");
    let (c, _d) = pair(QpType::Uc);
    assert_eq!(c.qp.data_in_order(WrOpcode::RdmaWrite, 0), 1);
    assert_eq!(c.qp.data_in_order(WrOpcode::RdmaRead, 0), 0, "UC carries no RDMA READ");
}

/// A reader polling the last byte of a large RDMA WRITE sees the whole message once the
/// last byte changes: the guarantee WHOLE_MSG promises.
#[test]
fn a_reader_polling_the_last_byte_always_sees_the_whole_message() {
    const LEN: usize = 4 << 20;
    let a = side(QpType::Rc);
    let b = side(QpType::Rc);
    let src = a.pd.alloc_mr(LEN, ALL_ACCESS).unwrap();
    let dst = b.pd.alloc_mr(LEN, ALL_ACCESS).unwrap();
    connect(&a, &b, &PATH);
    assert_eq!(b.qp.data_in_order(WrOpcode::RdmaWrite, 0), 1);
    let rounds = 12u8;
    // The reader tells the writer which round it has checked, so the writer never
    // overtakes it.
    let checked = std::sync::atomic::AtomicU8::new(0);
    std::thread::scope(|s| {
        let reader = s.spawn(|| {
            let mut whole = vec![0u8; LEN];
            let mut last = [0u8; 1];
            for round in 1..=rounds {
                let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
                loop {
                    dst.read(LEN - 1, &mut last).unwrap();
                    if last[0] == round {
                        break;
                    }
                    assert!(std::time::Instant::now() < deadline, "round {round} never arrived");
                    std::hint::spin_loop();
                }
                dst.read(0, &mut whole).unwrap();
                let bad = whole.iter().position(|&x| x != round);
                assert_eq!(bad, None, "round {round}: byte {bad:?} not yet written");
                checked.store(round, std::sync::atomic::Ordering::Release);
            }
        });
        for round in 1..=rounds {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
            while checked.load(std::sync::atomic::Ordering::Acquire) != round - 1 {
                assert!(std::time::Instant::now() < deadline && !reader.is_finished());
                std::hint::spin_loop();
            }
            src.fill(0, LEN, round).unwrap();
            let sge = [src.sge(0, LEN as u32).unwrap()];
            a.qp.post_send(&[SendWr::write(round.into(), &sge, dst.iova(), dst.rkey()).signaled()]).unwrap();
            assert_eq!(poll_one(&a.cq).status(), WcStatus::Success);
        }
        reader.join().unwrap();
    });
}
