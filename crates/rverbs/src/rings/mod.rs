//! The rings layer (ARCHITECTURE.md, "Layers"): completion and receive rings in shared
//! segments, and the data they carry, below the engine that runs them.
//!
//! One concept per file:
//! - [`wc`]: work completions, the public `Wc` (`struct ibv_wc`) and the CQE a ring
//!   carries;
//! - [`completion_ring`]: a CQ's ring of CQEs, many producers and one consumer
//!   (docs/completion-queues.md);
//! - [`producer_gate`]: who is inside a CQ's publish, so that a dead producer is skipped
//!   and a resize waits only for the living;
//! - [`cq_segment`]: a CQ's shared segment (its state, its gate, its ring) and the one
//!   protocol by which every process publishes into it;
//! - [`deferred_notify`]: the completion event a responder's CQ raises, held back until
//!   the requester's own completion is published;
//! - [`staging`]: the sanitizer's staging of a receive, placed late so that a read of
//!   its buffer before the completion is seen (docs/sanitizer.md, read-before-completion);
//! - [`recv_ring`]: a receive queue's ring (a QP's own, or an SRQ's) in its shared
//!   segment (ibv_post_recv(3));
//! - [`recv_count`]: a receive queue's consumed count, carried back to its owner in the
//!   receive completion it polls, so a post to a queue kept full reads no line of a taker;
//! - [`kept`]: what a queue's pinned receives keep registered, let go when the
//!   receive's completion is polled (docs/memory.md, "Buffer lifetime");
//! - [`bounce`]: receives into private memory placed by their owner's poll, from a slot
//!   a peer process fills with plain stores (docs/memory.md, "Receives placed by their
//!   owner");
//! - [`tag_list`]: a tag-matching SRQ's list of tagged buffers in its shared segment,
//!   and the rule that matches a message to one (docs/tag-matching.md);
//! - [`tm_recv`]: how a message reaching a tag-matching SRQ is delivered, which the
//!   receive it takes carries to its completion, and the TMH / RVH lengths;
//! - [`wr`]: work requests as the Rust API takes them (`struct ibv_send_wr`,
//!   `struct ibv_recv_wr`);
//! - [`qp_attr`]: QP attributes, capabilities and address vectors (`struct ibv_qp_attr`;
//!   a UD work request carries an address vector).
//!
//! Nothing here imports the engine (`cq`, `qp`) or any layer above it
//! (`crates/rverbs/tests/architecture.rs`).

pub(crate) mod bounce;
pub(crate) mod completion_ring;
pub(crate) mod cq_segment;
pub(crate) mod deferred_notify;
pub(crate) mod kept;
pub(crate) mod producer_gate;
pub mod qp_attr;
pub(crate) mod recv_count;
pub(crate) mod recv_ring;
pub(crate) mod staging;
pub(crate) mod tag_list;
pub(crate) mod tm_recv;
pub(crate) mod wc;
pub mod wr;
