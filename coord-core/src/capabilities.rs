//! What a backend can promise beyond the common contract.

/// Properties that differ between backends. The conformance suite reads these to choose
/// which cases a backend must pass; a case needing a missing capability is reported
/// as ignored, never as passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Capabilities {
    /// Config and registry watches deliver every change, not just the latest state
    /// (etcd and mem: yes; ZooKeeper coalesces changes between a watch firing and its
    /// re-arming read).
    pub every_watch_event: bool,
    /// `observe` reports every leader, even one that came and went quickly.
    pub every_leader_change: bool,
    /// The backend lists every session-bound entry under a directory
    /// ([`ContenderQueue::survey`](crate::raw::ContenderQueue::survey)): `inspect` works.
    pub survey: bool,
    /// The backend writes another client's entry's value
    /// ([`ContenderQueue::mark`](crate::raw::ContenderQueue::mark)): revocation works.
    pub mark: bool,
}

impl Capabilities {
    /// Everything promised (the in-memory backend).
    pub const ALL: Capabilities = Capabilities {
        every_watch_event: true,
        every_leader_change: true,
        survey: true,
        mark: true,
    };

    /// Nothing beyond the common contract: what a backend promises until it says more
    /// (the default of [`ClientState`](crate::raw::ClientState)).
    pub const NONE: Capabilities = Capabilities {
        every_watch_event: false,
        every_leader_change: false,
        survey: false,
        mark: false,
    };

    /// The same, with [`Capabilities::every_watch_event`] set to `on`.
    pub const fn with_every_watch_event(mut self, on: bool) -> Capabilities {
        self.every_watch_event = on;
        self
    }

    /// The same, with [`Capabilities::every_leader_change`] set to `on`.
    pub const fn with_every_leader_change(mut self, on: bool) -> Capabilities {
        self.every_leader_change = on;
        self
    }

    /// The same, with [`Capabilities::survey`] set to `on`.
    pub const fn with_survey(mut self, on: bool) -> Capabilities {
        self.survey = on;
        self
    }

    /// The same, with [`Capabilities::mark`] set to `on`.
    pub const fn with_mark(mut self, on: bool) -> Capabilities {
        self.mark = on;
        self
    }
}
