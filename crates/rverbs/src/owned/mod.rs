//! Owned buffers: zero copy without `unsafe` (docs/rust-api.md, "Owned buffers").
//!
//! [`Pd::reg_owned`](crate::Pd::reg_owned) registers a `Vec<u8>`, a `Box<[u8]>` or (feature
//! `bytes`) a `bytes::BytesMut` and keeps it until [`OwnedMr::into_inner`] gives it back.
//! The region's bytes are the device's while it is open and the program's while it is
//! closed, never both: the keys of a closed region grant nothing, and every access to an
//! owned region, this process's own included, is counted while bytes move, so closing
//! waits for the last one. A work request posted from the region ([`OwnedMr::post_send`],
//! [`OwnedMr::post_write`], [`OwnedMr::post_read`], [`OwnedMr::post_recv`]) returns a
//! [`Lease`] that borrows the region mutably; [`Lease::complete`] with the request's
//! completion ends it and lends the region back, closed.
//!
//! ```
//! use rverbs::typed::{Rc, TypedQp};
//! use rverbs::{Access, CqInit, QpCap, RemotePath};
//! let ctx = rverbs::devices()?[0].open()?;
//! let pd = ctx.alloc_pd()?;
//! let cq = ctx.create_cq(&CqInit::new(16))?;
//! let cap = QpCap { max_send_wr: 8, max_recv_wr: 8, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
//! let a = TypedQp::<Rc>::create(&pd, &cq, cap)?;
//! let b = TypedQp::<Rc>::create(&pd, &cq, cap)?;
//! let gid = ctx.gid_entry_of([127, 0, 0, 1].into()).expect("loopback GID");
//! for (qp, peer) in [(&a, &b), (&b, &a)] {
//!     let path = RemotePath { access: Access::REMOTE_WRITE, ..RemotePath::new(gid.gid, gid.index as u8, peer.qp_num()) };
//!     qp.connect(&path)?;
//! }
//! // The target: a Vec a peer writes into through its rkey (open from registration).
//! let target = pd.reg_owned(vec![0u8; 4096], Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
//! // The source: filled by the program, then leased to a WRITE.
//! let mut source = pd.reg_owned(vec![0u8; 4096], Access::empty())?;
//! source.close()?;
//! source.as_mut_slice()?[..5].copy_from_slice(b"hello");
//! let lease = source.post_write(&a, 1, 0..5, target.remote(0))?;
//! let mut wc = [rverbs::Wc::default()];
//! while cq.poll(&mut wc)? == 0 {}
//! let source = lease.complete(&wc[0]).expect("the WRITE's completion");
//! assert_eq!(&source.as_slice()?[..5], b"hello"); // closed again: the program's
//! let bytes: Vec<u8> = target.into_inner()?; // deregistered, the Vec given back
//! assert_eq!(&bytes[..5], b"hello");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! What does not compile (each next to the line that does, below):
//!
//! Writing the buffer while a posted request borrows it:
//! ```compile_fail,E0499
//! # use rverbs::typed::{Rc, Remote, TypedQp};
//! # fn f(qp: &TypedQp<Rc>, mr: &mut rverbs::owned::OwnedMr<Vec<u8>>, to: Remote) -> rverbs::Result<()> {
//! let lease = mr.post_write(qp, 1, .., to)?;
//! mr.as_mut_slice()?[0] = 1;
//! # drop(lease); Ok(())
//! # }
//! ```
//! Reading it while a receive may still fill it:
//! ```compile_fail,E0502
//! # use rverbs::typed::{Rc, TypedQp};
//! # fn f(qp: &TypedQp<Rc>, mr: &mut rverbs::owned::OwnedMr<Vec<u8>>) -> rverbs::Result<()> {
//! let lease = mr.post_recv(qp, 1, ..)?;
//! let first = mr.as_slice()?[0];
//! # drop(lease); Ok(())
//! # }
//! ```
//! Dropping the region, or taking its buffer back, while leased:
//! ```compile_fail,E0505
//! # use rverbs::typed::{Rc, TypedQp};
//! # fn f(qp: &TypedQp<Rc>, mut mr: rverbs::owned::OwnedMr<Vec<u8>>) -> rverbs::Result<()> {
//! let lease = mr.post_send(qp, 1, ..)?;
//! drop(mr);
//! # drop(lease); Ok(())
//! # }
//! ```
//! ```compile_fail,E0505
//! # use rverbs::typed::{Rc, TypedQp};
//! # fn f(qp: &TypedQp<Rc>, mut mr: rverbs::owned::OwnedMr<Vec<u8>>) -> rverbs::Result<()> {
//! let lease = mr.post_send(qp, 1, ..)?;
//! let v: Vec<u8> = mr.into_inner()?;
//! # drop(lease); Ok(())
//! # }
//! ```
//! Posting a second request from a leased region:
//! ```compile_fail,E0499
//! # use rverbs::typed::{Rc, TypedQp};
//! # fn f(qp: &TypedQp<Rc>, mr: &mut rverbs::owned::OwnedMr<Vec<u8>>) -> rverbs::Result<()> {
//! let lease = mr.post_send(qp, 1, ..)?;
//! let again = mr.post_send(qp, 2, ..)?;
//! # drop(lease); drop(again); Ok(())
//! # }
//! ```
//! Using a lease after its completion ended it:
//! ```compile_fail,E0382
//! # use rverbs::typed::{Rc, TypedQp};
//! # fn f(qp: &TypedQp<Rc>, mr: &mut rverbs::owned::OwnedMr<Vec<u8>>, wc: &rverbs::Wc) -> rverbs::Result<()> {
//! let lease = mr.post_send(qp, 1, ..)?;
//! let _ = lease.complete(wc);
//! let id = lease.wr_id();
//! # Ok(())
//! # }
//! ```
//! Each of these compiles once the completion has ended the lease:
//! ```
//! # use rverbs::typed::{Rc, Remote, TypedQp};
//! # #[allow(dead_code)]
//! # fn f(qp: &TypedQp<Rc>, mut mr: rverbs::owned::OwnedMr<Vec<u8>>, to: Remote, wc: &rverbs::Wc) -> rverbs::Result<()> {
//! let lease = mr.post_write(qp, 1, .., to)?;
//! if let Ok(mr) = lease.complete(wc) {
//!     mr.as_mut_slice()?[0] = 1;
//!     let first = mr.as_slice()?[0];
//!     let again = mr.post_send(qp, 2, ..)?;
//! #   let _ = (first, again);
//! }
//! let v: Vec<u8> = mr.into_inner()?;
//! # let _ = v; Ok(())
//! # }
//! ```
//!
//! Forgetting a lease (`std::mem::forget`) is safe: the region stays leased, refusing
//! its bytes, until [`OwnedMr::end_lease`] sees the request's completion or
//! [`OwnedMr::into_inner`] ends the registration (the request, if it has not run, then
//! completes in error). Forgetting the region leaks the buffer with its registration.

mod buf;
mod lease;
mod region;

pub use self::buf::StableBuf;
pub use self::lease::Lease;
pub use self::region::OwnedMr;
