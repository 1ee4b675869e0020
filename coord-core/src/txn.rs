//! Atomic multi-key commits with version checks and fences.

use crate::error::{Error, Result};
use crate::fencing::Fence;
use crate::name::{validate_name, validate_value};
use crate::version::Version;

/// A condition of a [`Txn`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Check {
    /// `key` is at `version`; `None` means the key must not exist.
    Version {
        /// The config key.
        key: String,
        /// The expected version, or `None` for "absent".
        version: Option<Version>,
    },
    /// The guard behind `fence` is still held.
    Fence(Fence),
}

/// A write of a [`Txn`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// Create or replace `key`.
    Put {
        /// The config key.
        key: String,
        /// The new value.
        value: Vec<u8>,
    },
    /// Remove `key` if present.
    Delete {
        /// The config key.
        key: String,
    },
}

/// An atomic multi-key commit: if every check holds, every op is applied; otherwise
/// nothing is.
///
/// # Fencing
///
/// [`Txn::fenced_by`] makes the whole commit conditional on a lock or leadership still
/// being held; a stale holder's commit fails with `Fenced` and changes nothing.
///
/// # Examples
///
/// ```
/// use coord_core::Txn;
/// let txn = Txn::new()
///     .check_absent("jobs/owner")
///     .put("jobs/owner", b"me".to_vec())
///     .delete("jobs/stale");
/// assert_eq!(txn.ops().len(), 2);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Txn {
    checks: Vec<Check>,
    ops: Vec<Op>,
}

/// The largest number of ops plus checks in one [`Txn`] (etcd's default limit is 128).
pub const MAX_TXN_OPS: usize = 128;

/// The largest total size in bytes of the keys and values one [`Txn`] writes (one value
/// of [`MAX_VALUE_LEN`](crate::MAX_VALUE_LEN) and its key fit): the servers refuse larger
/// requests (ZooKeeper's `jute.maxbuffer` is 1 MiB by default and it drops the
/// connection; etcd's request limit is 1.5 MiB), so coord refuses them first.
pub const MAX_TXN_BYTES: usize = 1_040_000;

impl Txn {
    /// An empty transaction.
    pub fn new() -> Self {
        Txn::default()
    }

    /// Requires `key` to be at `version`.
    pub fn check_version(mut self, key: impl Into<String>, version: Version) -> Self {
        self.checks.push(Check::Version {
            key: key.into(),
            version: Some(version),
        });
        self
    }

    /// Requires `key` not to exist.
    pub fn check_absent(mut self, key: impl Into<String>) -> Self {
        self.checks.push(Check::Version {
            key: key.into(),
            version: None,
        });
        self
    }

    /// Requires the guard behind `fence` to be held.
    pub fn fenced_by(mut self, fence: Fence) -> Self {
        self.checks.push(Check::Fence(fence));
        self
    }

    /// Creates or replaces `key`.
    pub fn put(mut self, key: impl Into<String>, value: impl Into<Vec<u8>>) -> Self {
        self.ops.push(Op::Put {
            key: key.into(),
            value: value.into(),
        });
        self
    }

    /// Removes `key` if present.
    pub fn delete(mut self, key: impl Into<String>) -> Self {
        self.ops.push(Op::Delete { key: key.into() });
        self
    }

    /// The fences this transaction is conditional on.
    pub(crate) fn fences(&self) -> Vec<Fence> {
        self.checks
            .iter()
            .filter_map(|c| match c {
                Check::Fence(f) => Some(f.clone()),
                _ => None,
            })
            .collect()
    }

    /// The checks, in order.
    pub fn checks(&self) -> &[Check] {
        &self.checks
    }

    /// The ops, in order.
    pub fn ops(&self) -> &[Op] {
        &self.ops
    }

    /// Checks every key and value, the size, and that no key is written twice.
    ///
    /// # Errors
    ///
    /// `InvalidArgument` naming the offending key.
    pub fn validate(&self) -> Result<()> {
        if self.ops.is_empty() {
            return Err(Error::invalid_argument("transaction has no ops"));
        }
        if self.ops.len() + self.checks.len() > MAX_TXN_OPS {
            return Err(Error::invalid_argument(format!(
                "transaction has {} ops and checks; the limit is {MAX_TXN_OPS}",
                self.ops.len() + self.checks.len()
            )));
        }
        for check in &self.checks {
            if let Check::Version { key, .. } = check {
                validate_name("config key", key)?;
            }
        }
        let mut seen = std::collections::HashSet::new();
        for op in &self.ops {
            let key = match op {
                Op::Put { key, value } => {
                    validate_value("config value", value)?;
                    key
                }
                Op::Delete { key } => key,
            };
            validate_name("config key", key)?;
            if !seen.insert(key.as_str()) {
                return Err(Error::invalid_argument(format!(
                    "transaction writes config key {key:?} twice; combine the ops"
                )));
            }
        }
        // After each op's own checks: one value over its limit is named as such (a plain
        // put is a transaction of one op, and is not told to split itself).
        let total: usize = self
            .ops
            .iter()
            .map(|op| match op {
                Op::Put { key, value } => key.len() + value.len(),
                Op::Delete { key } => key.len(),
            })
            .sum();
        if total > MAX_TXN_BYTES {
            return Err(Error::invalid_argument(format!(
                "transaction writes {total} bytes of keys and values; the limit is {MAX_TXN_BYTES}: split it"
            )));
        }
        Ok(())
    }
}

/// The result of one op of a committed [`Txn`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpResult {
    /// The key's new version.
    Put(Version),
    /// Whether the key existed.
    Delete(bool),
}
