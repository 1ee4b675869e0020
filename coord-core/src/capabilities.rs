//! What a backend can promise beyond the common contract.

/// Properties that differ between backends. The conformance suite reads these to choose
/// which cases a backend must pass; a case needing a missing capability is reported
/// as ignored, never as passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    /// Config and registry watches deliver every change, not just the latest state
    /// (etcd and mem: yes; ZooKeeper coalesces changes between a watch firing and its
    /// re-arming read).
    pub every_watch_event: bool,
    /// `observe` reports every leader, even one that came and went quickly.
    pub every_leader_change: bool,
}

impl Capabilities {
    /// Everything promised (the in-memory backend).
    pub const ALL: Capabilities = Capabilities {
        every_watch_event: true,
        every_leader_change: true,
    };
}
