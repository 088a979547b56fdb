//! ibv_alloc_td(3), ibv_alloc_parent_domain(3), and the CQ on a parent domain of
//! ibv_create_cq_ex(3) (`IBV_CQ_INIT_ATTR_MASK_PD`).
mod common;
use common::*;
use rverbs::*;

#[track_caller]
fn assert_errno<T: std::fmt::Debug>(r: Result<T>, errno: i32) {
    match r {
        Err(e) => assert_eq!(e.errno(), errno, "{e}"),
        Ok(v) => panic!("expected errno {errno}, got Ok({v:?})"),
    }
}

/// One side whose CQ, QP and MR are all created on a parent domain over its PD.
fn parent_side(td: bool) -> (Side, ParentDomain) {
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let td = td.then(|| ctx.alloc_td().unwrap());
    let parent = ctx
        .alloc_parent_domain(&ParentDomainInit { td: td.as_ref(), pd_context: 0x5eed, ..ParentDomainInit::new(&pd) })
        .unwrap();
    let cq = parent.create_cq(&CqInit::new(256)).unwrap();
    let qp = parent.create_qp(&QpInit::new(QpType::Rc, &cq, CAP)).unwrap();
    let mr = parent.alloc_mr(MR_LEN, ALL_ACCESS).unwrap();
    (Side { ctx, pd, cq, qp, mr }, parent)
}

#[test]
fn objects_created_on_a_parent_domain_belong_to_its_pd() {
    let (s, parent) = parent_side(false);
    assert_eq!(parent.handle(), s.pd.handle());
    assert_eq!(s.qp.pd().handle(), s.pd.handle());
    assert_eq!(s.mr.pd().handle(), s.pd.handle());
    assert_eq!(parent.pd_context(), 0x5eed);
    assert!(parent.td().is_none());
    assert!(s.cq.parent_domain().is_some_and(|p| p.same(&parent)));
}

#[test]
fn rc_send_between_parent_domains_delivers_the_bytes() {
    for td in [false, true] {
        let (a, _pa) = parent_side(td);
        let (b, _pb) = parent_side(td);
        connect(&a, &b, &PATH);
        let msg = b"parent domain traffic";
        a.mr.write(0, msg).unwrap();
        post_recv(&b, 7, 128, 64);
        let sge = [a.mr.sge(0, msg.len() as u32).unwrap()];
        a.qp.post_send(&[SendWr::send(9, &sge).signaled()]).unwrap();
        let wc = poll_one(&a.cq);
        assert_eq!((wc.wr_id(), wc.status()), (9, WcStatus::Success));
        let wc = poll_one(&b.cq);
        assert_eq!((wc.wr_id(), wc.status(), wc.byte_len()), (7, WcStatus::Success, Some(msg.len() as u32)));
        let mut got = [0u8; 21];
        b.mr.read(128, &mut got).unwrap();
        assert_eq!(&got, msg, "td = {td}");
    }
}

#[test]
fn a_key_of_the_protection_domain_serves_a_qp_of_its_parent_domain() {
    let (a, _pa) = parent_side(false);
    let (b, _pb) = parent_side(false);
    connect(&a, &b, &PATH);
    // The target region is registered on b's plain PD, the QPs live on parent domains.
    let plain = b.pd.alloc_mr(4096, ALL_ACCESS).unwrap();
    a.mr.write(0, &[0xab; 16]).unwrap();
    let sge = [a.mr.sge(0, 16).unwrap()];
    a.qp.post_send(&[SendWr::write(3, &sge, plain.iova(), plain.rkey()).signaled()]).unwrap();
    let wc = poll_one(&a.cq);
    assert_eq!((wc.wr_id(), wc.status()), (3, WcStatus::Success));
    let mut got = [0u8; 16];
    plain.read(0, &mut got).unwrap();
    assert_eq!(got, [0xab; 16]);
}

#[test]
fn dealloc_pd_is_busy_while_a_parent_domain_uses_it() {
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let parent = ctx.alloc_parent_domain(&ParentDomainInit::new(&pd)).unwrap();
    assert_errno(pd.dealloc(), libc::EBUSY);
    parent.dealloc().unwrap();
    pd.dealloc().unwrap();
}

#[test]
fn dealloc_td_is_busy_while_a_parent_domain_uses_it() {
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let td = ctx.alloc_td().unwrap();
    let parent = ctx.alloc_parent_domain(&ParentDomainInit { td: Some(&td), ..ParentDomainInit::new(&pd) }).unwrap();
    assert_errno(td.dealloc(), libc::EBUSY);
    parent.dealloc().unwrap();
    td.dealloc().unwrap();
    assert_errno(td.dealloc(), libc::EINVAL);
    pd.dealloc().unwrap();
}

#[test]
fn dropping_a_parent_domain_never_deallocated_gives_its_domains_back() {
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let td = ctx.alloc_td().unwrap();
    drop(ctx.alloc_parent_domain(&ParentDomainInit { td: Some(&td), ..ParentDomainInit::new(&pd) }).unwrap());
    td.dealloc().unwrap();
    pd.dealloc().unwrap();
}

#[test]
fn dealloc_parent_domain_is_busy_while_its_cq_exists() {
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let parent = ctx.alloc_parent_domain(&ParentDomainInit::new(&pd)).unwrap();
    let cq = parent.create_cq(&CqInit::new(8)).unwrap();
    assert_errno(parent.dealloc(), libc::EBUSY);
    cq.destroy().unwrap();
    assert!(cq.parent_domain().is_none());
    parent.dealloc().unwrap();
    assert_errno(parent.dealloc(), libc::EINVAL);
}

#[test]
fn a_deallocated_parent_domain_creates_no_cq() {
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let parent = ctx.alloc_parent_domain(&ParentDomainInit::new(&pd)).unwrap();
    parent.dealloc().unwrap();
    assert_errno(parent.create_cq(&CqInit::new(8)), libc::EINVAL);
}

#[test]
fn a_deallocated_pd_or_td_makes_no_parent_domain() {
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let td = ctx.alloc_td().unwrap();
    td.dealloc().unwrap();
    assert_errno(ctx.alloc_parent_domain(&ParentDomainInit { td: Some(&td), ..ParentDomainInit::new(&pd) }), libc::EINVAL);
    // The failed allocation gave the PD back.
    pd.dealloc().unwrap();
    assert_errno(ctx.alloc_parent_domain(&ParentDomainInit::new(&pd)), libc::EINVAL);
}

#[test]
fn cq_on_a_parent_domain_with_a_td_is_single_threaded() {
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let td = ctx.alloc_td().unwrap();
    let plain = ctx.alloc_parent_domain(&ParentDomainInit::new(&pd)).unwrap();
    let with_td = ctx.alloc_parent_domain(&ParentDomainInit { td: Some(&td), ..ParentDomainInit::new(&pd) }).unwrap();
    let cq = plain.create_cq(&CqInit::new(8)).unwrap();
    assert!(!cq.create_flags().contains(CqCreateFlags::SINGLE_THREADED));
    let cq_td = with_td.create_cq(&CqInit::new(8)).unwrap();
    assert!(cq_td.create_flags().contains(CqCreateFlags::SINGLE_THREADED));
    // Polling and extended polling work as on any CQ.
    let mut wc = [Wc::default(); 2];
    assert_eq!(cq_td.poll(&mut wc).unwrap(), 0);
}

#[test]
fn domains_of_another_context_are_refused() {
    let a = open();
    let b = open();
    let pd_a = a.alloc_pd().unwrap();
    let pd_b = b.alloc_pd().unwrap();
    let td_a = a.alloc_td().unwrap();
    assert_errno(b.alloc_parent_domain(&ParentDomainInit::new(&pd_a)), libc::EINVAL);
    assert_errno(b.alloc_parent_domain(&ParentDomainInit { td: Some(&td_a), ..ParentDomainInit::new(&pd_b) }), libc::EINVAL);
    // Neither refusal kept a hold on the domains.
    td_a.dealloc().unwrap();
    pd_a.dealloc().unwrap();
    pd_b.dealloc().unwrap();
}

// ---- The parent domain's allocator (ibv_alloc_parent_domain(3), `alloc` / `free`):
// asked for the send queue's ring of each QP created on the parent domain
// (docs/memory.md, "Custom allocators").

use std::ptr::NonNull;
use std::sync::{Arc, Mutex};

/// What the arena answers next.
#[derive(Clone, Copy, PartialEq)]
enum Answer {
    Arena,
    UseDefault,
    Fail,
    Panic,
}

/// An allocator handing out pieces of its own arena and recording every call.
struct Arena {
    /// The arena's address (a number: the allocator is shared between threads).
    base: usize,
    len: usize,
    state: Mutex<ArenaState>,
}

struct ArenaState {
    answer: Answer,
    next: usize,
    allocs: Vec<(QueueBuffer, Option<usize>)>,
    frees: Vec<(usize, QueueBuffer)>,
}

const ARENA_LEN: usize = 4 << 20;

impl Arena {
    fn new() -> Arc<Arena> {
        let layout = std::alloc::Layout::from_size_align(ARENA_LEN, 4096).unwrap();
        // SAFETY: the size is not zero.
        let base = unsafe { std::alloc::alloc_zeroed(layout) } as usize;
        assert_ne!(base, 0);
        Arc::new(Arena {
            base,
            len: ARENA_LEN,
            state: Mutex::new(ArenaState { answer: Answer::Arena, next: 0, allocs: Vec::new(), frees: Vec::new() }),
        })
    }

    fn answer(&self, a: Answer) {
        self.state.lock().unwrap().answer = a;
    }

    fn allocs(&self) -> Vec<(QueueBuffer, Option<usize>)> {
        self.state.lock().unwrap().allocs.clone()
    }

    fn frees(&self) -> Vec<(usize, QueueBuffer)> {
        self.state.lock().unwrap().frees.clone()
    }

    /// The arena's bytes from `at` (an address it handed out) on, `len` of them.
    fn bytes(&self, at: usize, len: usize) -> Vec<u8> {
        assert!(at >= self.base && at + len <= self.base + self.len);
        // SAFETY: within the arena, which lives as long as `self`; a snapshot copy.
        unsafe { std::slice::from_raw_parts(at as *const u8, len) }.to_vec()
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        let layout = std::alloc::Layout::from_size_align(self.len, 4096).unwrap();
        // SAFETY: allocated in `new` with this layout.
        unsafe { std::alloc::dealloc(self.base as *mut u8, layout) };
    }
}

// SAFETY: each buffer is a fresh, aligned piece of the arena (bump allocation, never
// reused), valid for its size until the arena is dropped, which outlives the QPs.
unsafe impl QueueAllocator for Arena {
    fn alloc(&self, buf: &QueueBuffer) -> Allocation {
        let mut s = self.state.lock().unwrap();
        let a = match s.answer {
            Answer::Panic => {
                drop(s);
                panic!("this allocator panics on purpose");
            }
            Answer::UseDefault => Allocation::UseDefault,
            Answer::Fail => Allocation::Failed,
            Answer::Arena => {
                let start = s.next.next_multiple_of(buf.alignment);
                assert!(start + buf.size <= self.len, "arena exhausted");
                s.next = start + buf.size;
                Allocation::Buffer(NonNull::new((self.base + start) as *mut u8).unwrap())
            }
        };
        let p = match a {
            Allocation::Buffer(p) => Some(p.as_ptr() as usize),
            _ => None,
        };
        s.allocs.push((*buf, p));
        a
    }

    fn free(&self, ptr: NonNull<u8>, buf: &QueueBuffer) {
        self.state.lock().unwrap().frees.push((ptr.as_ptr() as usize, *buf));
    }
}

/// A side whose CQ, QP and MR are created on a parent domain with `arena` as allocator.
fn arena_side(arena: &Arc<Arena>, qp_type: QpType) -> (Side, ParentDomain) {
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let alloc: Arc<dyn QueueAllocator> = arena.clone();
    let parent = ctx.alloc_parent_domain(&ParentDomainInit { alloc: Some(alloc), ..ParentDomainInit::new(&pd) }).unwrap();
    let cq = parent.create_cq(&CqInit::new(256)).unwrap();
    let qp = parent.create_qp(&QpInit::new(qp_type, &cq, CAP)).unwrap();
    let mr = parent.alloc_mr(MR_LEN, ALL_ACCESS).unwrap();
    (Side { ctx, pd, cq, qp, mr }, parent)
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

#[test]
fn qp_on_parent_domain_takes_its_send_ring_from_the_allocator_and_frees_it_at_destroy() {
    let arena = Arena::new();
    let (a, pa) = arena_side(&arena, QpType::Rc);
    let (b, pb) = arena_side(&arena, QpType::Rc);
    // One buffer per QP, none for the CQs (shared segments).
    let allocs = arena.allocs();
    assert_eq!(allocs.len(), 2);
    for (buf, p) in &allocs {
        assert_eq!((buf.resource_type, buf.alignment), (QueueBuffer::SEND_QUEUE, QueueBuffer::ALIGNMENT));
        assert!(buf.size > 0);
        assert_eq!(p.unwrap() % buf.alignment, 0);
    }
    assert!(a.qp.parent_domain().is_some_and(|p| p.same(&pa)));
    connect(&a, &b, &PATH);
    // An RDMA READ is queued (never the express lane): its work request, with its wr_id,
    // is written into the ring, that is into the arena.
    const WR_ID: u64 = 0x5eed_f00d_cafe_0001;
    b.mr.write(0, b"read me back").unwrap();
    let sge = [a.mr.sge(0, 12).unwrap()];
    a.qp.post_send(&[SendWr::read(WR_ID, &sge, b.mr.iova(), b.mr.rkey()).signaled()]).unwrap();
    let wc = poll_one(&a.cq);
    assert_eq!((wc.wr_id(), wc.status()), (WR_ID, WcStatus::Success));
    let mut got = [0u8; 12];
    a.mr.read(0, &mut got).unwrap();
    assert_eq!(&got, b"read me back");
    let (buf_a, at_a) = allocs[0];
    assert!(contains(&arena.bytes(at_a.unwrap(), buf_a.size), &WR_ID.to_ne_bytes()), "the work request lives in the allocator's buffer");
    // The parent domain is busy while its QP exists (mlx5 counts QPs on it).
    assert_errno(pa.dealloc(), libc::EBUSY);
    assert!(arena.frees().is_empty());
    a.qp.destroy().unwrap();
    assert_eq!(arena.frees(), vec![(at_a.unwrap(), buf_a)], "freed once, in destroy, with the same pointer and request");
    assert!(a.qp.parent_domain().is_none());
    b.qp.destroy().unwrap();
    assert_eq!(arena.frees().len(), 2);
    drop((a, b));
    a_cq_and_then_the_parent_domain_go(&pa, &pb);
    assert_eq!(arena.frees().len(), 2, "nothing freed twice");
}

fn a_cq_and_then_the_parent_domain_go(pa: &ParentDomain, pb: &ParentDomain) {
    // The sides' CQs went with them (dropped): both parent domains can go now.
    pa.dealloc().unwrap();
    pb.dealloc().unwrap();
}

#[test]
fn ud_qp_on_parent_domain_sends_through_the_allocators_ring() {
    let arena = Arena::new();
    let (a, _pa) = arena_side(&arena, QpType::Ud);
    let b = side(QpType::Ud);
    connect(&a, &b, &PATH);
    let ah = Ah::new(&a.pd, &av(&a.ctx)).unwrap();
    post_recv(&b, 1, 0, 256);
    const WR_ID: u64 = 0x0dd0_0dd0_beef_0002;
    let msg = b"through the arena";
    let wr = SendWr::send(WR_ID, &[]).inline(msg).ud(&ah, b.qp.qp_num(), 0x1111_1111).signaled();
    a.qp.post_send(&[wr]).unwrap();
    assert_eq!(poll_one(&a.cq).status(), WcStatus::Success);
    assert_eq!(poll_one(&b.cq).status(), WcStatus::Success);
    let mut got = [0u8; 17];
    b.mr.read(40, &mut got).unwrap();
    assert_eq!(&got, msg, "after the 40-byte GRH");
    let (buf, at) = arena.allocs()[0];
    let bytes = arena.bytes(at.unwrap(), buf.size);
    assert!(contains(&bytes, msg), "the inline bytes were copied into the allocator's buffer");
    assert!(contains(&bytes, &WR_ID.to_ne_bytes()));
}

#[test]
fn allocator_answering_use_default_is_never_freed() {
    let arena = Arena::new();
    arena.answer(Answer::UseDefault);
    let (a, b) = (arena_side(&arena, QpType::Rc).0, arena_side(&arena, QpType::Rc).0);
    connect(&a, &b, &PATH);
    a.mr.write(0, &[0x77; 32]).unwrap();
    let sge = [a.mr.sge(0, 32).unwrap()];
    a.qp.post_send(&[SendWr::write(4, &sge, b.mr.iova(), b.mr.rkey()).signaled()]).unwrap();
    assert_eq!(poll_one(&a.cq).status(), WcStatus::Success);
    let mut got = [0u8; 32];
    b.mr.read(0, &mut got).unwrap();
    assert_eq!(got, [0x77; 32]);
    a.qp.destroy().unwrap();
    b.qp.destroy().unwrap();
    assert_eq!(arena.allocs().len(), 2);
    assert!(arena.allocs().iter().all(|(_, p)| p.is_none()));
    assert!(arena.frees().is_empty());
}

#[test]
fn allocator_failing_or_panicking_fails_create_qp_with_enomem() {
    for answer in [Answer::Fail, Answer::Panic] {
        let arena = Arena::new();
        let ctx = open();
        let pd = ctx.alloc_pd().unwrap();
        let alloc: Arc<dyn QueueAllocator> = arena.clone();
        let parent = ctx.alloc_parent_domain(&ParentDomainInit { alloc: Some(alloc), ..ParentDomainInit::new(&pd) }).unwrap();
        let cq = ctx.create_cq(&CqInit::new(16)).unwrap();
        arena.answer(answer);
        assert_errno(parent.create_qp(&QpInit::new(QpType::Rc, &cq, CAP)), libc::ENOMEM);
        assert!(arena.frees().is_empty());
        // Nothing of the failed QP holds the domains.
        parent.dealloc().unwrap();
        pd.dealloc().unwrap();
    }
}

#[test]
fn qp_dropped_without_destroy_gives_the_ring_back() {
    let arena = Arena::new();
    let (a, pa) = arena_side(&arena, QpType::Rc);
    let at = arena.allocs()[0].1.unwrap();
    drop(a);
    assert_eq!(arena.frees().len(), 1);
    assert_eq!(arena.frees()[0].0, at);
    pa.dealloc().unwrap();
}

#[test]
fn qp_on_a_plain_pd_or_a_parent_domain_without_allocator_asks_nothing() {
    let arena = Arena::new();
    let (s, _p) = arena_side(&arena, QpType::Rc);
    let before = arena.allocs().len();
    // Through the protection domain (the parent domain's Deref) and on a plain PD.
    let q1 = s.pd.create_qp(&QpInit::new(QpType::Rc, &s.cq, CAP)).unwrap();
    let q2 = side(QpType::Rc);
    q1.destroy().unwrap();
    q2.qp.destroy().unwrap();
    assert_eq!(arena.allocs().len(), before);
    // A parent domain without allocator: its QP holds it, and asks no allocator.
    let plain = s.ctx.alloc_parent_domain(&ParentDomainInit::new(&s.pd)).unwrap();
    let q3 = plain.create_qp(&QpInit::new(QpType::Ud, &s.cq, CAP)).unwrap();
    assert_errno(plain.dealloc(), libc::EBUSY);
    q3.destroy().unwrap();
    plain.dealloc().unwrap();
    assert_eq!(arena.allocs().len(), before);
}

#[test]
fn a_typed_qp_created_on_a_parent_domain_takes_its_ring_from_the_allocator() {
    use rverbs::typed::{Rc, TypedQp};
    let arena = Arena::new();
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let alloc: Arc<dyn QueueAllocator> = arena.clone();
    let parent = ctx.alloc_parent_domain(&ParentDomainInit { alloc: Some(alloc), ..ParentDomainInit::new(&pd) }).unwrap();
    let cq = parent.create_cq(&CqInit::new(16)).unwrap();
    // The parent domain itself, not the protection domain it dereferences to.
    let qp = TypedQp::<Rc>::create(&parent, &cq, CAP).unwrap();
    assert_eq!(arena.allocs().len(), 1, "the send ring came from the parent domain's allocator");
    assert!(qp.untyped().parent_domain().is_some_and(|p| p.same(&parent)));
    assert_errno(parent.dealloc(), libc::EBUSY);
    // On the plain PD: the default ring, no parent domain.
    let plain = TypedQp::<Rc>::create(&pd, &cq, CAP).unwrap();
    assert_eq!(arena.allocs().len(), 1);
    assert!(plain.untyped().parent_domain().is_none());
    qp.untyped().destroy().unwrap();
    assert_eq!(arena.frees().len(), 1);
}
