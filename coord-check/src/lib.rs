//! History checkers for coord: record what clients did, then judge it against each
//! recipe's specification.
//!
//! # Histories
//!
//! A *history* is a list of operations ([`Op`]), each with the process that issued it,
//! its invocation and completion timestamps (one monotonic clock for all processes, e.g.
//! from a shared [`Recorder`]), its input, and its [`Outcome`]:
//!
//! - [`Outcome::Ok`]: it returned an output, and took effect exactly once, at some
//!   instant between invocation and completion;
//! - [`Outcome::Failed`]: it definitely had no effect;
//! - [`Outcome::Unknown`]: it may or may not have taken effect, at any time after its
//!   invocation (lost reply, timeout, dropped future, crashed client). Its completion is
//!   treated as +infinity.
//!
//! Two operations are ordered in real time only when one finished strictly before the
//! other was invoked; otherwise they are concurrent.
//!
//! # Checkers
//!
//! - [`linearizable`]: whether a history of a single object (or of independent keys, with
//!   [`check_per_key`]) is linearizable with respect to a sequential [`Model`], by the
//!   Wing–Gong–Lowe search with memoisation. Models: [`Register`] (a config key with
//!   versions, compare-and-set, delete) and [`Counter`].
//! - [`beliefs`]: what holders *say*: no more handles of one name say `Held` at once
//!   than it admits, beyond a bound (the loss margin).
//! - [`sections`]: mutual exclusion by ground truth: the log of fenced writes a resource
//!   accepted shows no more concurrent holders than the lock, semaphore or read/write
//!   lock admits, and exclusive fencing tokens increase.
//! - [`queue`]: a FIFO work queue loses no acknowledged item, delivers none twice,
//!   invents none, and keeps each producer's order.
//! - [`barrier`]: a double barrier lets no one in before all arrive nor out before all
//!   leave; a simple barrier lets no waiter pass while it stays raised.
//! - [`two_phase`]: two-phase commit decides once, tells everyone the same, persists
//!   what it reports, and commits only with all commit votes.
//! - [`watch`]: a watch stream is valid, ordered, unique, atomic and reliable against the
//!   committed writes, and converges to the store.
//!
//! Each checker except the linearizability search returns a [`Report`]: a summary and
//! the violations found. Each has been shown to reject known-bad histories in its tests.
//!
//! # Examples
//!
//! A register history: a write whose reply was lost, seen by a later read; then a read
//! that goes back to the old value after that, which no linearization explains.
//!
//! ```
//! use coord_check::{Op, Register, RegisterOp, RegisterRet, Verdict, check};
//!
//! let mut history = vec![
//!     Op::ok(1, 0, 1, RegisterOp::Put("a"), RegisterRet::Put(10)),
//!     Op::unknown(1, 2, RegisterOp::Put("b")),
//!     Op::ok(2, 5, 6, RegisterOp::Get, RegisterRet::Get(Some(("b", 12)))),
//! ];
//! assert!(check(&Register::new(), &history).is_linearizable());
//!
//! history.push(Op::ok(2, 7, 8, RegisterOp::Get, RegisterRet::Get(Some(("a", 10)))));
//! let Verdict::NotLinearizable(violation) = check(&Register::new(), &history) else {
//!     panic!("a stale read was accepted");
//! };
//! assert_eq!(violation.blocked, Some(3));
//! println!("{}", violation.describe(&history));
//! ```

pub mod barrier;
pub mod beliefs;
pub mod history;
pub mod linearizable;
pub mod models;
pub mod queue;
pub mod report;
pub mod sections;
pub mod two_phase;
pub mod watch;

pub use history::{Op, Outcome, Pending, Recorder};
pub use linearizable::{Checker, Model, PerKey, Verdict, Violation, check, check_per_key};
pub use models::{Counter, CounterOp, CounterRet, Mismatch, Register, RegisterOp, RegisterRet};
pub use report::Report;
