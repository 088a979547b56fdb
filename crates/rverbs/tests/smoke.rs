mod common;
use common::*;
use rverbs::*;

#[test]
fn rc_send_reaches_the_peer() {
    let (a, b) = pair(QpType::Rc);
    post_recv(&b, 7, 0, 64);
    a.mr.write(0, b"hello rverbs").unwrap();
    let sge = [a.mr.sge(0, 12).unwrap()];
    a.qp.post_send(&[SendWr::send(1, &sge).signaled()]).unwrap();
    let wc = poll_one(&a.cq);
    assert_eq!(wc.status(), WcStatus::Success);
    assert_eq!(wc.opcode(), Some(WcOpcode::Send));
    let wc = poll_one(&b.cq);
    assert_eq!(wc.status(), WcStatus::Success, "{wc:?}");
    assert_eq!(wc.wr_id(), 7);
    assert_eq!(wc.byte_len(), Some(12));
    let mut buf = [0u8; 12];
    b.mr.read(0, &mut buf).unwrap();
    assert_eq!(&buf, b"hello rverbs");
}
