//! etcd adapter for coord.
//!
//! Not yet implemented: this crate only reserves the name and the workspace slot.
//! Connecting with `etcd://` through the `coord` facade reports
//! [`ErrorKind::Unsupported`](coord_core::ErrorKind::Unsupported).
