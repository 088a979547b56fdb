//! The rdma_cm objects as the application holds them: [`CmId`], [`EventChannel`] and
//! [`Event`], each a private representation, the soft connection manager's object
//! (`crate::handle`, `crate::channel`, `crate::event`) or, with the feature `rdma-core`,
//! librdmacm's (`crate::rdma_core`), as `rverbs`' public types hold a soft or a native
//! object.
//!
//! Which one is chosen where the objects start, at the channel: [`EventChannel::new`]
//! follows the device list (`rverbs::listed_backend`: librdmacm under
//! `RVERBS_BACKEND=rdma-core`), [`EventChannel::on`] the device given; an id is made on
//! its channel's connection manager, an event comes from it. Mixing them (migrating an
//! id to a channel of the other) is `EINVAL`. What librdmacm cannot do that the soft
//! engine does is `EOPNOTSUPP`, listed in docs/rdma-core-backend.md ("rverbs-cm over
//! librdmacm").

mod channel;
mod event;
mod id;

pub use channel::EventChannel;
pub use event::Event;
#[cfg(any(feature = "tokio", feature = "async-io"))]
pub(crate) use event::Held;
pub use id::CmId;

/// `EOPNOTSUPP` of a call the soft connection manager makes and librdmacm cannot
/// (docs/rdma-core-backend.md, "rverbs-cm over librdmacm").
#[cfg(feature = "rdma-core")]
pub(crate) fn over_librdmacm(what: &'static str) -> crate::error::Error {
    crate::error::Error::Verbs(rverbs::Error::Unsupported { verb: "rverbs_cm over librdmacm", what })
}

/// `EINVAL` of a call that mixes objects of the two connection managers.
#[cfg(feature = "rdma-core")]
pub(crate) fn mixed() -> crate::error::Error {
    crate::error::Error::Os(std::io::Error::from_raw_os_error(libc::EINVAL))
}
