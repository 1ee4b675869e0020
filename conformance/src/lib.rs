//! The coord conformance suite: cases written once as plain `async fn`s over
//! a backend [`Factory`], run against every backend.
//!
//! # Running it for a backend
//!
//! A backend adds one test file with `harness = false`:
//!
//! ```no_run
//! use std::sync::Arc;
//! # struct MyFactory;
//! # fn my_factory_from_env() -> Option<Arc<dyn coord_conformance::Factory>> { None }
//! fn main() {
//!     // `None` when the backend's endpoint variable is unset: cases are ignored,
//!     // or failed if COORD_TEST_REQUIRE names the backend.
//!     coord_conformance::run_main("zk", my_factory_from_env(), "set COORD_TEST_ZK=host:port");
//! }
//! ```
//!
//! Each case runs in a fresh namespace with its own clients and a deadline
//! ([`harness::CASE_DEADLINE`], or its own `Needs::deadline` where it needs several
//! bounded observations), so a liveness bug fails instead of hanging. Cases that
//! need a fault or capability the backend lacks (see [`Faults`],
//! [`coord_core::Capabilities`]) are reported *ignored*, never passed.
//!
//! Server-side faults — the server process paused with SIGSTOP, or killed with SIGKILL
//! and started again on its data — are in [`cases::server`]. A backend whose factory can
//! inject them ([`Faults::server_pause`], [`Faults::server_restart`], typically through
//! a `coord_testkit::Cluster` started by coord's scripts) adds them to its extras;
//! `COORD_TEST_REQUIRE=…,server-faults` makes their absence a failure.
//!
//! Set `COORD_TEST_LOG=debug` to see the backend's tracing output.

pub mod cases;
pub mod factory;
pub mod harness;
pub mod log_capture;
pub mod outside_recipe;
pub mod real_server;
pub mod util;

pub use coord_testkit::{Cluster, FaultProxy, Links, ProxyMap};
pub use factory::{Factory, Faults, ForeignWriter, RecordedWrite, Recording};
pub use harness::{Case, CaseResult, Ctx, Group, Needs, ServerSettings, run_groups, run_main, run_main_with};
pub use real_server::{RealServer, UrlFactory};
