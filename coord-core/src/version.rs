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
    /// A version made of two numbers (backends make them with
    /// [`raw::version`](crate::raw::version)).
    pub(crate) fn from_parts(major: u64, minor: u64) -> Self {
        Version { major, minor }
    }

    /// The two numbers given to [`Version::from_parts`].
    pub(crate) fn parts(self) -> (u64, u64) {
        (self.major, self.minor)
    }
}

impl fmt::Debug for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Version({self})")
    }
}

/// Parses what [`Version`]'s `Display` writes (`<major>.<minor>`), e.g. a version a
/// script read from the command line's output.
impl std::str::FromStr for Version {
    type Err = crate::Error;

    fn from_str(s: &str) -> crate::Result<Version> {
        let number = |part: &str| {
            (!part.is_empty() && part.bytes().all(|b| b.is_ascii_digit()))
                .then(|| part.parse().ok())
                .flatten()
        };
        let parsed = s
            .split_once('.')
            .and_then(|(major, minor)| Some(Version::from_parts(number(major)?, number(minor)?)));
        parsed.ok_or_else(|| {
            crate::Error::invalid_argument(format!(
                "{s:?} is not a version: expected <major>.<minor> as printed by reads, e.g. 12.0"
            ))
        })
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
    ///
    /// # Examples
    ///
    /// ```
    /// use coord_core::{Version, Versioned};
    /// # fn main() -> coord_core::Result<()> {
    /// let v = Versioned::new(b"42".to_vec(), "7.0".parse::<Version>()?);
    /// assert_eq!(v.map(|b| b.len()).value, 2);
    /// # Ok(()) }
    /// ```
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Versioned<U> {
        Versioned {
            value: f(self.value),
            version: self.version,
        }
    }
}

impl Versioned<Vec<u8>> {
    /// The value decoded from JSON, keeping the version: a typed view of a config value.
    ///
    /// # Errors
    ///
    /// `Decode` when the value is not JSON of `T`.
    #[cfg(feature = "serde")]
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> crate::Result<Versioned<T>> {
        from_json("value", &self.value).map(|v| Versioned::new(v, self.version))
    }
}

#[cfg(feature = "serde")]
pub(crate) fn from_json<T: serde::de::DeserializeOwned>(what: &str, bytes: &[u8]) -> crate::Result<T> {
    serde_json::from_slice(bytes).map_err(|e| {
        crate::Error::new(
            crate::ErrorKind::Decode,
            format!(
                "{what} is not JSON of {}: {e}; read it as bytes to see what is stored",
                std::any::type_name::<T>()
            ),
        )
    })
}

#[cfg(feature = "serde")]
pub(crate) fn to_json<T: serde::Serialize + ?Sized>(value: &T) -> crate::Result<Vec<u8>> {
    serde_json::to_vec(value).map_err(|e| {
        crate::Error::invalid_argument(format!(
            "cannot encode {} as JSON: {e}",
            std::any::type_name::<T>()
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse_what_they_print() {
        let v = Version::from_parts(12, 3);
        assert_eq!(v.to_string().parse::<Version>().unwrap(), v);
        for bad in ["", "12", "12.", ".3", "a.b", "1.2.3", "-1.0", "+1.+2", " 1.2"] {
            let e = bad.parse::<Version>().unwrap_err();
            assert_eq!(e.kind(), crate::ErrorKind::InvalidArgument, "{bad}");
        }
    }

    #[cfg(feature = "serde")]
    #[test]
    fn json_views_decode_or_say_why_not() {
        #[derive(serde::Deserialize, Debug, PartialEq)]
        struct Limits {
            rps: u32,
        }
        let v = Versioned::new(br#"{"rps":5}"#.to_vec(), Version::from_parts(1, 0));
        assert_eq!(v.json::<Limits>().unwrap().value, Limits { rps: 5 });
        let bad = Versioned::new(b"five".to_vec(), Version::from_parts(1, 0));
        let e = bad.json::<Limits>().unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::Decode);
        assert!(e.to_string().contains("Limits"), "{e}");
    }
}
