//! Shared types below the backend contract: what the contract's reads and watches
//! return and the user API hands on unchanged (config entries and their changes, service
//! instances and their changes, a queue's head). They import nothing above them.

pub(crate) mod config;
pub(crate) mod head;
pub(crate) mod registry;

pub use config::{ConfigEvent, Entry};
pub use head::Head;
pub use registry::{RegistrationState, RegistryEvent, ServiceInstance};
