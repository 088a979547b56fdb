//! A child that fork(2) creates is a new process of the host-wide device: it gets an
//! endpoint of its own (its own QPN space, directory and progress thread), as a child
//! gets new resources from a kernel RDMA device; the parent's endpoint is untouched.
//! (rdma-core's pyverbs rdma_cm tests fork both sides from a parent that already opened
//! the device.)

use rverbs::capi_support::process_generation;
use rverbs::*;

fn qp_in(ctx: &Context) -> (Cq, Qp) {
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(&CqInit::new(8)).unwrap();
    let cap = QpCap { max_send_wr: 4, max_recv_wr: 4, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
    let qp = pd.create_qp(&QpInit::new(QpType::Rc, &cq, cap)).unwrap();
    (cq, qp)
}

#[test]
fn a_forked_child_gets_its_own_endpoint() {
    let ctx = devices().unwrap()[0].open().unwrap();
    let (_cq, parent_qp) = qp_in(&ctx);
    let parent_dir = endpoint_dir();
    assert_eq!(process_generation(), 0);
    // SAFETY: the child only uses this library (which re-initialises itself in a new
    // generation) and leaves with _exit; no lock of the test harness is taken.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let parent_qpn = parent_qp.qp_num();
        let parent_dir2 = parent_dir.clone();
        let code = std::panic::catch_unwind(move || {
            assert_eq!(process_generation(), 1);
            let ctx = devices().unwrap()[0].open().unwrap();
            let (_cq, qp) = qp_in(&ctx);
            assert_ne!(endpoint_dir(), parent_dir2, "the child has its own endpoint directory");
            assert_ne!(qp.qp_num() >> 16, parent_qpn >> 16, "QPNs carry the child's endpoint");
            assert!(endpoint_dir().exists());
        })
        .map_or(1, |()| 0);
        // SAFETY: ends the child without running the parent's atexit handlers twice.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: waits for the child just created.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "child failed: {status:#x}");
    assert!(parent_dir.exists(), "the parent's endpoint is untouched");
    assert_eq!(parent_qp.state(), QpState::Reset);
}
