//! Sequential models of coord's objects for the linearizability checker.

use std::fmt::Debug;
use std::hash::Hash;

use crate::linearizable::Model;

/// One config key with versions, as a compare-and-set register.
///
/// # Semantics
///
/// The key is absent or holds a value written by a `Put` or a successful
/// `CompareAndSet`, each of which gives it a *version* chosen by the store. The model
/// only assumes what coord promises of versions: every write of the key gets a version
/// strictly greater than every earlier write of that key, including writes before a
/// `Delete` (a version is never reused). The numbers themselves may jump (etcd's
/// revisions are shared by all keys), so the model does not predict them: it *learns*
/// them from outputs.
///
/// - `Get` returns the current value and its version, or `None` when absent.
/// - `Put(v)` always succeeds and returns the new version.
/// - `CompareAndSet { expected, value }` writes when the key is at version `expected`
///   (`None`: when the key is absent) and returns the new version, otherwise
///   `Err(Mismatch)` without effect.
/// - `Delete` removes the key and returns whether it existed.
///
/// A write whose outcome is unknown (lost reply) writes its value with a version the
/// model has not seen: only a lower bound is kept (one more than the previous write's
/// version or bound). A later `Get` or a successful `CompareAndSet` naming a version
/// at least that bound pins it down. Once the version of the current value is known,
/// outputs must match it exactly.
///
/// Imprecision (which only ever accepts more): a mismatched `CompareAndSet` against a
/// value of unknown version is accepted for any `expected` version, and is not
/// remembered as "the version is not `expected`".
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Register<V> {
    value: Option<V>,
    /// The exact version of `value`, when known.
    version: Option<u64>,
    /// A lower bound on the version of the latest write; `None` before any write.
    latest: Option<u64>,
}

/// An operation on a [`Register`].
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum RegisterOp<V> {
    /// Reads the value and its version.
    Get,
    /// Writes unconditionally.
    Put(V),
    /// Writes if the key is at `expected` (`None`: if the key is absent).
    CompareAndSet {
        /// The version the key must be at; `None` for "must be absent".
        expected: Option<u64>,
        /// The value to write.
        value: V,
    },
    /// Removes the key.
    Delete,
}

/// A compare-and-set's precondition did not hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Mismatch;

/// The output of a [`RegisterOp`].
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum RegisterRet<V> {
    /// `Get`: the value and its version, or `None` when absent.
    Get(Option<(V, u64)>),
    /// `Put`: the new version.
    Put(u64),
    /// `CompareAndSet`: the new version, or the precondition failed.
    CompareAndSet(Result<u64, Mismatch>),
    /// `Delete`: whether the key existed.
    Delete(bool),
}

impl<V> Default for Register<V> {
    fn default() -> Self {
        Self::new()
    }
}

impl<V> Register<V> {
    /// An absent key never written: its first write may get any version.
    pub fn new() -> Self {
        Register {
            value: None,
            version: None,
            latest: None,
        }
    }

    /// A key that holds `value` at `version` when the history starts.
    pub fn with_value(value: V, version: u64) -> Self {
        Register {
            value: Some(value),
            version: Some(version),
            latest: Some(version),
        }
    }

    /// An absent key whose writes so far had versions up to `version`.
    pub fn absent_after(version: u64) -> Self {
        Register {
            value: None,
            version: None,
            latest: Some(version),
        }
    }

    /// The current value.
    pub fn value(&self) -> Option<&V> {
        self.value.as_ref()
    }

    /// The current value's version, when known.
    pub fn version(&self) -> Option<u64> {
        self.version
    }

    /// Whether a new write may get version `v`.
    fn fresh(&self, v: u64) -> bool {
        self.latest.is_none_or(|latest| v > latest)
    }

    /// The current value's version may be `v`: the state with it pinned down.
    fn at_version(&self, v: u64) -> Option<Self>
    where
        V: Clone,
    {
        self.value.as_ref()?;
        match self.version {
            Some(known) => (known == v).then(|| self.clone()),
            // Written by an unknown write, whose version is at least `latest`.
            None => self.latest.is_none_or(|bound| v >= bound).then(|| Register {
                value: self.value.clone(),
                version: Some(v),
                latest: Some(v),
            }),
        }
    }

    fn written(&self, value: &V, version: Option<u64>) -> Self
    where
        V: Clone,
    {
        Register {
            value: Some(value.clone()),
            version,
            latest: version.or(Some(self.latest.map_or(0, |l| l.saturating_add(1)))),
        }
    }
}

impl<V: Clone + Debug + Eq + Hash> Model for Register<V> {
    type Input = RegisterOp<V>;
    type Output = RegisterRet<V>;

    fn step(&self, input: &RegisterOp<V>, output: Option<&RegisterRet<V>>) -> Option<Self> {
        use RegisterOp as Op;
        use RegisterRet as Ret;
        match (input, output) {
            (Op::Get, None) => Some(self.clone()),
            (Op::Get, Some(Ret::Get(None))) => self.value.is_none().then(|| self.clone()),
            (Op::Get, Some(Ret::Get(Some((value, version))))) => {
                if self.value.as_ref() != Some(value) {
                    return None;
                }
                self.at_version(*version)
            }
            (Op::Put(value), None) => Some(self.written(value, None)),
            (Op::Put(value), Some(Ret::Put(version))) => {
                self.fresh(*version).then(|| self.written(value, Some(*version)))
            }
            (Op::CompareAndSet { expected, value }, None | Some(Ret::CompareAndSet(Ok(_)))) => {
                let new_version = match output {
                    Some(Ret::CompareAndSet(Ok(v))) => Some(*v),
                    _ => None,
                };
                let before = match expected {
                    None => self.value.is_none().then(|| self.clone())?,
                    Some(e) => self.at_version(*e)?,
                };
                match new_version {
                    Some(v) => before.fresh(v).then(|| before.written(value, Some(v))),
                    None => Some(before.written(value, None)),
                }
            }
            (Op::CompareAndSet { expected, .. }, Some(Ret::CompareAndSet(Err(Mismatch)))) => {
                let holds = match (expected, &self.value, self.version) {
                    (None, None, _) => true,
                    (Some(e), Some(_), Some(known)) => known == *e,
                    // Present at an unknown version: it may differ from `e` (see above).
                    (Some(_), Some(_), None) => false,
                    (None, Some(_), _) | (Some(_), None, _) => false,
                };
                (!holds).then(|| self.clone())
            }
            (Op::Delete, None) => Some(Register {
                value: None,
                version: None,
                latest: self.latest,
            }),
            (Op::Delete, Some(Ret::Delete(existed))) => {
                (*existed == self.value.is_some()).then_some(Register {
                    value: None,
                    version: None,
                    latest: self.latest,
                })
            }
            _ => None,
        }
    }
}

/// A shared 64-bit counter.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Counter(pub i64);

/// An operation on a [`Counter`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CounterOp {
    /// Reads the value.
    Get,
    /// Adds (wrapping) and returns the new value.
    Add(i64),
    /// Sets the value.
    Set(i64),
}

/// The output of a [`CounterOp`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CounterRet {
    /// `Get`: the value; `Add`: the new value.
    Value(i64),
    /// `Set` succeeded.
    Done,
}

impl Model for Counter {
    type Input = CounterOp;
    type Output = CounterRet;

    fn step(&self, input: &CounterOp, output: Option<&CounterRet>) -> Option<Self> {
        match (input, output) {
            (CounterOp::Get, None) => Some(*self),
            (CounterOp::Get, Some(CounterRet::Value(v))) => (*v == self.0).then_some(*self),
            (CounterOp::Add(d), None) => Some(Counter(self.0.wrapping_add(*d))),
            (CounterOp::Add(d), Some(CounterRet::Value(v))) => {
                let next = self.0.wrapping_add(*d);
                (*v == next).then_some(Counter(next))
            }
            (CounterOp::Set(v), None | Some(CounterRet::Done)) => Some(Counter(*v)),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::Op;
    use crate::linearizable::{Verdict, check};

    type R = Register<&'static str>;
    type Ret = RegisterRet<&'static str>;
    type H = Vec<Op<RegisterOp<&'static str>, Ret>>;

    fn get(p: u64, i: u64, c: u64, seen: Option<(&'static str, u64)>) -> Op<RegisterOp<&'static str>, Ret> {
        Op::ok(p, i, c, RegisterOp::Get, Ret::Get(seen))
    }
    fn put(p: u64, i: u64, c: u64, v: &'static str, ver: u64) -> Op<RegisterOp<&'static str>, Ret> {
        Op::ok(p, i, c, RegisterOp::Put(v), Ret::Put(ver))
    }
    fn cas(
        p: u64,
        i: u64,
        c: u64,
        expected: Option<u64>,
        v: &'static str,
        r: Result<u64, Mismatch>,
    ) -> Op<RegisterOp<&'static str>, Ret> {
        Op::ok(
            p,
            i,
            c,
            RegisterOp::CompareAndSet { expected, value: v },
            Ret::CompareAndSet(r),
        )
    }

    fn accepts(h: &H) {
        let verdict = check(&R::new(), h);
        assert!(verdict.is_linearizable(), "{verdict}");
    }
    fn rejects(h: &H) {
        let verdict = check(&R::new(), h);
        assert!(verdict.is_violation(), "accepted a bad history: {verdict}");
    }

    #[test]
    fn register_accepts_ordinary_histories() {
        accepts(&vec![
            get(1, 0, 1, None),
            put(1, 2, 3, "a", 10),
            cas(2, 4, 5, Some(10), "b", Ok(17)),
            get(1, 6, 7, Some(("b", 17))),
            Op::ok(2, 8, 9, RegisterOp::Delete, Ret::Delete(true)),
            cas(1, 10, 11, None, "c", Ok(20)),
            cas(2, 12, 13, Some(17), "d", Err(Mismatch)),
            get(2, 14, 15, Some(("c", 20))),
        ]);
    }

    #[test]
    fn register_rejects_stale_read_after_completed_write() {
        rejects(&vec![
            put(1, 0, 1, "a", 1),
            put(1, 2, 3, "b", 2),
            get(2, 4, 5, Some(("a", 1))),
        ]);
    }

    #[test]
    fn register_rejects_two_successful_cas_from_one_version() {
        rejects(&vec![
            put(1, 0, 1, "a", 1),
            cas(1, 2, 10, Some(1), "b", Ok(2)),
            cas(2, 3, 11, Some(1), "c", Ok(3)),
        ]);
    }

    #[test]
    fn register_rejects_read_of_value_never_written() {
        rejects(&vec![put(1, 0, 1, "a", 1), get(2, 2, 3, Some(("z", 1)))]);
        rejects(&vec![get(2, 2, 3, Some(("z", 4)))]);
    }

    #[test]
    fn register_rejects_reused_or_wrong_versions() {
        // A write after a delete must get a new, larger version.
        rejects(&vec![
            put(1, 0, 1, "a", 5),
            Op::ok(1, 2, 3, RegisterOp::Delete, Ret::Delete(true)),
            put(1, 4, 5, "b", 5),
        ]);
        // A read must show the version the write returned.
        rejects(&vec![put(1, 0, 1, "a", 5), get(1, 2, 3, Some(("a", 6)))]);
        // A mismatch while the key is at the expected version.
        rejects(&vec![
            put(1, 0, 1, "a", 5),
            cas(1, 2, 3, Some(5), "b", Err(Mismatch)),
        ]);
        // A delete reporting a missing key that exists.
        rejects(&vec![
            put(1, 0, 1, "a", 5),
            Op::ok(1, 2, 3, RegisterOp::Delete, Ret::Delete(false)),
        ]);
    }

    #[test]
    fn register_accepts_unknown_write_seen_later() {
        // The write's reply was lost; a later read shows its value at a version never
        // returned to anyone, and a CAS continues from it.
        accepts(&vec![
            put(1, 0, 1, "a", 3),
            Op::unknown(1, 2, RegisterOp::Put("b")),
            get(2, 10, 11, Some(("a", 3))),
            get(2, 12, 13, Some(("b", 9))),
            cas(2, 14, 15, Some(9), "c", Ok(12)),
        ]);
        // An unknown CAS whose version is learned by a later CAS.
        accepts(&vec![
            put(1, 0, 1, "a", 3),
            Op::unknown(
                1,
                2,
                RegisterOp::CompareAndSet {
                    expected: Some(3),
                    value: "b",
                },
            ),
            cas(2, 10, 11, Some(4), "c", Ok(5)),
            get(2, 12, 13, Some(("c", 5))),
        ]);
    }

    #[test]
    fn register_accepts_unknown_write_never_seen() {
        accepts(&vec![
            put(1, 0, 1, "a", 3),
            Op::unknown(1, 2, RegisterOp::Put("b")),
            get(2, 10, 11, Some(("a", 3))),
            put(2, 12, 13, "c", 4),
            get(2, 14, 15, Some(("c", 4))),
        ]);
    }

    #[test]
    fn register_bounds_unknown_versions() {
        // The unknown write's version must exceed 3, and exceed nothing written after it.
        rejects(&vec![
            put(1, 0, 1, "a", 3),
            Op::unknown(1, 2, RegisterOp::Put("b")),
            get(2, 10, 11, Some(("b", 3))),
        ]);
        // Two unknown writes after version 3: the later one's version is at least 5.
        rejects(&vec![
            put(1, 0, 1, "a", 3),
            Op::unknown(1, 2, RegisterOp::Put("b")),
            Op::unknown(2, 3, RegisterOp::Put("c")),
            get(3, 10, 11, Some(("b", 4))),
            get(3, 12, 13, Some(("c", 4))),
        ]);
    }

    #[test]
    fn register_initial_states() {
        let h: H = vec![get(1, 0, 1, Some(("x", 7))), put(1, 2, 3, "y", 8)];
        assert!(check(&Register::with_value("x", 7), &h).is_linearizable());
        let h: H = vec![put(1, 2, 3, "y", 7)];
        assert!(check(&Register::absent_after(7), &h).is_violation());
    }

    #[test]
    fn counter_rejects_a_lost_add() {
        let h = vec![
            Op::ok(1, 0, 5, CounterOp::Add(1), CounterRet::Value(1)),
            Op::ok(2, 1, 6, CounterOp::Add(1), CounterRet::Value(1)),
        ];
        assert!(check(&Counter(0), &h).is_violation());
        let h = vec![
            Op::ok(1, 0, 5, CounterOp::Add(1), CounterRet::Value(1)),
            Op::ok(2, 1, 6, CounterOp::Add(1), CounterRet::Value(2)),
            Op::ok(3, 7, 8, CounterOp::Get, CounterRet::Value(1)),
        ];
        assert!(check(&Counter(0), &h).is_violation());
    }

    #[test]
    fn counter_accepts_sets_and_unknown_adds() {
        let h = vec![
            Op::ok(1, 0, 1, CounterOp::Set(10), CounterRet::Done),
            Op::unknown(2, 2, CounterOp::Add(5)),
            Op::ok(1, 3, 4, CounterOp::Add(1), CounterRet::Value(11)),
            Op::ok(1, 5, 6, CounterOp::Get, CounterRet::Value(16)),
        ];
        assert_eq!(
            check(&Counter(0), &h),
            Verdict::Linearizable {
                order: vec![0, 2, 1, 3]
            }
        );
    }
}
