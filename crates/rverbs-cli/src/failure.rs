//! Why a command failed: the one error type of the CLI.

use std::time::Duration;

use rverbs::{WcOpcode, WcStatus};

/// A failed verb, completion or data check. Any of these makes the command exit non-zero.
#[derive(Debug, thiserror::Error)]
pub enum Failure {
    /// A verb refused (API misuse or a resource limit).
    #[error("{0}")]
    Verbs(#[from] rverbs::Error),
    /// `post_send` / `post_recv` refused a work request.
    #[error("{0}")]
    Post(#[from] rverbs::PostError),
    /// A work completion with a status other than success.
    #[error("{what}: wr_id {wr_id} completed with '{status}' (vendor_err {vendor_err:#x})")]
    Completion {
        /// The step that polled it.
        what: &'static str,
        /// The completion's `wr_id`.
        wr_id: u64,
        /// Its status.
        status: WcStatus,
        /// Its vendor syndrome.
        vendor_err: u32,
    },
    /// A successful completion that is not the one the step waited for.
    #[error("{what}: expected a {expected:?} completion, got {got:?} (wr_id {wr_id})")]
    WrongCompletion {
        /// The step that polled it.
        what: &'static str,
        /// The opcode expected.
        expected: WcOpcode,
        /// The opcode found (`None` if unknown).
        got: Option<WcOpcode>,
        /// The completion's `wr_id`.
        wr_id: u64,
    },
    /// A value (byte count, atomic result, stamp) differs from the expected one.
    #[error("{what}: expected {expected:#x}, got {got:#x}")]
    Value {
        /// What was checked.
        what: &'static str,
        /// The value expected.
        expected: u64,
        /// The value found.
        got: u64,
    },
    /// A byte of a transferred buffer differs from the pattern.
    #[error("{what}: byte {offset} is {got:#04x}, expected {expected:#04x}")]
    Data {
        /// What was checked.
        what: &'static str,
        /// Offset of the first differing byte.
        offset: usize,
        /// The byte expected.
        expected: u8,
        /// The byte found.
        got: u8,
    },
    /// No completion arrived in time.
    #[error("{what}: no completion within {timeout:?}")]
    Timeout {
        /// The step that polled.
        what: &'static str,
        /// How long it waited.
        timeout: Duration,
    },
    /// A command-line argument is unusable.
    #[error("{0}")]
    Usage(String),
}
