//! Name and value rules, the same on every backend so that switching
//! backends never changes which inputs are valid.

use crate::error::{Error, Result};

/// The longest name accepted, in bytes.
pub const MAX_NAME_LEN: usize = 512;

/// The largest value accepted, in bytes (below ZooKeeper's ~1 MiB packet limit and
/// etcd's 1.5 MiB request limit).
pub const MAX_VALUE_LEN: usize = 1_000_000;

/// Checks a name: `/`-separated segments of `[A-Za-z0-9._-]`, no empty segment, no `.`
/// or `..` segment, at most [`MAX_NAME_LEN`] bytes. A leading or trailing `/` is an
/// empty segment and therefore rejected.
///
/// `what` names the argument in the error ("lock name", "config key", …).
///
/// # Errors
///
/// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument), naming the
/// offending segment or character.
///
/// # Examples
///
/// ```
/// use coord_core::validate_name;
/// assert!(validate_name("lock name", "jobs/nightly-report").is_ok());
/// let err = validate_name("lock name", "jobs//x").unwrap_err();
/// assert!(err.to_string().contains("empty segment"));
/// ```
pub fn validate_name(what: &str, name: &str) -> Result<()> {
    if name.is_empty() {
        return Err(Error::invalid_argument(format!("{what} is empty")));
    }
    if name.len() > MAX_NAME_LEN {
        return Err(Error::invalid_argument(format!(
            "{what} is {} bytes long; the limit is {MAX_NAME_LEN}",
            name.len()
        )));
    }
    for (index, segment) in name.split('/').enumerate() {
        validate_segment(what, name, index, segment)?;
    }
    Ok(())
}

fn validate_segment(what: &str, name: &str, index: usize, segment: &str) -> Result<()> {
    if segment.is_empty() {
        return Err(Error::invalid_argument(format!(
            "{what} {name:?} has an empty segment at position {index}; \
             segments are separated by a single '/' with none at either end"
        )));
    }
    if segment == "." || segment == ".." {
        return Err(Error::invalid_argument(format!(
            "{what} {name:?} has a {segment:?} segment; relative segments are not allowed"
        )));
    }
    if let Some(bad) = segment
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(Error::invalid_argument(format!(
            "{what} {name:?} contains {bad:?}; allowed are A-Z a-z 0-9 '.' '_' '-' and '/' between segments"
        )));
    }
    Ok(())
}

/// Checks a single segment (an instance id, say): the rules of [`validate_name`]
/// without `/`.
///
/// # Errors
///
/// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument).
pub fn validate_segment_name(what: &str, segment: &str) -> Result<()> {
    if segment.contains('/') {
        return Err(Error::invalid_argument(format!(
            "{what} {segment:?} contains '/'; it must be a single segment"
        )));
    }
    validate_name(what, segment)
}

/// Checks a value's size against [`MAX_VALUE_LEN`].
///
/// # Errors
///
/// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) with the size and
/// the limit.
pub fn validate_value(what: &str, value: &[u8]) -> Result<()> {
    if value.len() > MAX_VALUE_LEN {
        return Err(Error::invalid_argument(format!(
            "{what} is {} bytes; the limit is {MAX_VALUE_LEN} bytes on every backend — \
             store large data elsewhere and keep a reference here",
            value.len()
        )));
    }
    Ok(())
}

/// Checks a prefix for `list`/`watch`: either empty (everything in the namespace) or a
/// valid name. A prefix matches a key equal to it or below it (`a/b` matches `a/b` and
/// `a/b/c`, not `a/bc`).
///
/// # Errors
///
/// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument).
pub fn validate_prefix(what: &str, prefix: &str) -> Result<()> {
    if prefix.is_empty() {
        Ok(())
    } else {
        validate_name(what, prefix)
    }
}

/// Whether `key` is `prefix` or lies below it (segment-wise).
pub fn key_matches_prefix(key: &str, prefix: &str) -> bool {
    prefix.is_empty()
        || key == prefix
        || (key.len() > prefix.len() && key.starts_with(prefix) && key.as_bytes()[prefix.len()] == b'/')
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;
    use proptest::prelude::*;

    #[test]
    fn accepts_valid_names() {
        for n in [
            "a",
            "a/b",
            "A-Z_0.9",
            "x/y/z/.hidden",
            "...",
            &"a".repeat(MAX_NAME_LEN),
        ] {
            assert!(validate_name("name", n).is_ok(), "{n}");
        }
    }

    #[test]
    fn rejects_invalid_names_with_reason() {
        let cases = [
            ("", "empty"),
            ("/a", "empty segment"),
            ("a/", "empty segment"),
            ("a//b", "empty segment"),
            ("a/./b", "relative"),
            ("..", "relative"),
            ("a b", "contains ' '"),
            ("ä", "contains 'ä'"),
            ("a\0b", "contains '\\0'"),
            ("a:b", "contains ':'"),
        ];
        for (n, why) in cases {
            let e = validate_name("lock name", n).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidArgument);
            assert!(e.to_string().contains(why), "{n:?}: {e}");
        }
        let long = "a".repeat(MAX_NAME_LEN + 1);
        assert!(
            validate_name("x", &long)
                .unwrap_err()
                .to_string()
                .contains("513 bytes")
        );
    }

    #[test]
    fn value_limit() {
        assert!(validate_value("v", &vec![0; MAX_VALUE_LEN]).is_ok());
        let e = validate_value("v", &vec![0; MAX_VALUE_LEN + 1]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    }

    #[test]
    fn prefix_matching_is_segment_wise() {
        assert!(key_matches_prefix("a/b", "a"));
        assert!(key_matches_prefix("a", "a"));
        assert!(!key_matches_prefix("ab", "a"));
        assert!(key_matches_prefix("anything", ""));
    }

    proptest! {
        #[test]
        fn never_panics_and_accepted_names_obey_the_rules(s in "\\PC{0,40}|[a-z./_-]{0,20}") {
            if validate_name("n", &s).is_ok() {
                prop_assert!(!s.is_empty() && s.len() <= MAX_NAME_LEN);
                for seg in s.split('/') {
                    prop_assert!(!seg.is_empty() && seg != "." && seg != "..");
                    prop_assert!(seg.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b)));
                }
            }
        }
    }
}
