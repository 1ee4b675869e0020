//! Opaque versions for compare-and-set, and values that carry one.

use std::fmt;

/// An opaque version of a config key, returned by reads and writes and passed back to
/// compare-and-set.
///
/// Versions are only compared for equality: a key's version changes on every write and
/// never returns to an earlier value (etcd: `mod_revision`; ZooKeeper: `czxid` and the
/// data version together, so a deleted and recreated key does not reuse a version; mem:
/// the cluster revision). Versions of different backends are not interchangeable.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Version {
    major: u64,
    minor: u64,
}

impl Version {
    /// For backends: a version made of two numbers (e.g. ZooKeeper's `czxid` and data
    /// version; etcd and mem use `minor = 0`).
    pub fn from_parts(major: u64, minor: u64) -> Self {
        Version { major, minor }
    }

    /// For backends: the two numbers given to [`Version::from_parts`].
    pub fn parts(self) -> (u64, u64) {
        (self.major, self.minor)
    }
}

impl fmt::Debug for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Version({self})")
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// A value read together with its version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Versioned<T> {
    /// The value.
    pub value: T,
    /// The version to pass to compare-and-set.
    pub version: Version,
}

impl<T> Versioned<T> {
    /// Pairs a value with its version.
    pub fn new(value: T, version: Version) -> Self {
        Versioned { value, version }
    }

    /// Maps the value, keeping the version.
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Versioned<U> {
        Versioned {
            value: f(self.value),
            version: self.version,
        }
    }
}
