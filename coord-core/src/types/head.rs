//! The first entry of a queue, as observers see it.

use crate::fencing::FencingToken;

/// The first entry of a queue and its value: an election's leader as others see it
/// ([`LeaderInfo`](crate::LeaderInfo)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    /// The entry's fencing token (an election's leader's: strictly greater than every
    /// earlier leader's).
    pub token: FencingToken,
    /// Its value (the value the leader campaigned with or last proclaimed).
    pub value: Vec<u8>,
}
