//! The result of a checker: a summary of what was seen and the violations found.

use std::fmt;

/// What a checker found: a summary of the history and every violation (none when the
/// history satisfies the property).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report<S, V> {
    /// Counts of what the history held.
    pub summary: S,
    /// The violations, in the order found.
    pub violations: Vec<V>,
}

impl<S, V> Report<S, V> {
    /// Whether no violation was found.
    pub fn is_ok(&self) -> bool {
        self.violations.is_empty()
    }

    /// The summary when no violation was found, otherwise the violations.
    ///
    /// # Errors
    ///
    /// The violations, when there is at least one.
    pub fn into_result(self) -> Result<S, Vec<V>> {
        if self.violations.is_empty() {
            Ok(self.summary)
        } else {
            Err(self.violations)
        }
    }
}

impl<S: fmt::Debug, V: fmt::Display> fmt::Display for Report<S, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.violations.is_empty() {
            return write!(f, "ok: {:?}", self.summary);
        }
        writeln!(f, "{} violation(s) ({:?}):", self.violations.len(), self.summary)?;
        for v in &self.violations {
            writeln!(f, "  - {v}")?;
        }
        Ok(())
    }
}
