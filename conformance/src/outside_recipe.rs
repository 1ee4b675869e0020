//! A recipe written outside `coord-core`, over `coord_core::raw` alone: the proof that
//! the backend contract knows no recipe. A backend that runs this runs it without a
//! line of its own changed — it has never heard of a turnstile.
//!
//! A **turnstile** lets `permits` holders through at once, in arrival order, and holds
//! the rest. Its holders queue in `turnstiles/<name>` as `pass-` entries (in layouts
//! that name entries by sequence; under `passes/` in layouts that name them by session);
//! its attendant, who waits for every pass ahead to leave (say, to count the day's
//! passes), queues in the same directory as an `attendant-` entry of another class
//! (under `attendant/`), with [`Admission::Exclusive`]. A pass counts only the passes
//! ahead of it, never the attendant: an admission rule of this file's own
//! ([`PassesOnly`], which no recipe of `coord-core` has), decided by
//! [`QueueSpec::admit`] like every other. So it uses a directory, markers, classes and
//! an admission rule `coord-core` does not know.
//!
//! The wait loop is this file's own (ticket, join, read ahead, admit, wait, leave), as a
//! recipe outside the crate would write it; it is deliberately simple: no local turns,
//! and a dropped `pass` may leave its entry until the session ends.

use std::sync::Arc;
use std::time::Duration;

use coord_core::raw::{
    Admission, AdmissionRule, Backend, EntryClass, Position, QueueEntry, QueueSpec, Ticket,
};
use coord_core::{Client, ErrorKind, FencingToken, Result};

/// The turnstile's classes: passes, and the attendant.
const CLASSES: &[EntryClass] = &[
    EntryClass {
        subdir: "passes",
        markers: &["pass-"],
        kazoo_marker: None,
    },
    EntryClass {
        subdir: "attendant",
        markers: &["attendant-"],
        kazoo_marker: None,
    },
];

/// The passes' admission rule: a pass holds while fewer than `permits` passes are ahead
/// of it, whatever attendant is; the attendant (class 1) counts every entry ahead.
#[derive(Debug)]
pub struct PassesOnly {
    /// How many passes hold at once.
    pub permits: u32,
}

impl AdmissionRule for PassesOnly {
    fn counts(&self, own: usize, ahead: usize) -> bool {
        own == 1 || ahead == 0
    }

    fn permits(&self, own: usize) -> u32 {
        if own == 0 { self.permits } else { 1 }
    }
}

/// A turnstile on one client.
pub struct Turnstile {
    backend: Arc<dyn Backend>,
    name: String,
    permits: u32,
}

/// A place through the turnstile, held until [`Passage::leave`].
pub struct Passage {
    backend: Arc<dyn Backend>,
    ticket: Ticket,
    own: QueueEntry,
}

impl Turnstile {
    /// Turnstile `name` letting `permits` through at once.
    pub fn new(client: &Client, name: &str, permits: u32) -> Turnstile {
        Turnstile {
            backend: client.backend().clone(),
            name: name.to_owned(),
            permits,
        }
    }

    fn pass_queue(&self) -> QueueSpec {
        QueueSpec::new(
            "turnstile",
            format!("turnstiles/{}", self.name),
            CLASSES,
            Admission::Rule(Arc::new(PassesOnly {
                permits: self.permits,
            })),
        )
    }

    fn attendant_queue(&self) -> QueueSpec {
        QueueSpec::new(
            "turnstile_attendant",
            format!("turnstiles/{}", self.name),
            CLASSES,
            Admission::Exclusive,
        )
        .as_class(1)
    }

    /// Waits until fewer than `permits` passes are ahead (an attendant ahead does not
    /// count), and holds a place. `slot` tells one client's concurrent passes apart.
    pub async fn pass(&self, slot: u32, value: &[u8]) -> Result<Passage> {
        self.enter(self.pass_queue(), slot, value).await
    }

    /// Waits until no entry is ahead (every pass queued before has left) and holds a
    /// place; passes queued later do not count it (they go past a waiting attendant).
    pub async fn attend(&self, value: &[u8]) -> Result<Passage> {
        self.enter(self.attendant_queue(), 0, value).await
    }

    async fn enter(&self, spec: QueueSpec, slot: u32, value: &[u8]) -> Result<Passage> {
        let ticket = self.backend.ticket(&spec, slot)?;
        let joined = self.backend.join(&ticket, value.to_vec()).await?;
        let own = joined.own;
        let mut read = joined.ahead;
        loop {
            let ahead = match read.take() {
                Some(a) => a,
                None => self.backend.ahead(&ticket, &own).await?,
            };
            let now = spec.admit(ahead);
            match now {
                Position::First { .. } => {
                    return Ok(Passage {
                        backend: self.backend.clone(),
                        ticket,
                        own,
                    });
                }
                Position::Behind(ahead) | Position::Next(ahead) => self.backend.wait_gone(&ahead).await?,
                Position::Among(ahead) => {
                    let gone = ahead.iter().map(|e| Box::pin(self.backend.wait_gone(e)));
                    futures::future::select_all(gone).await.0?;
                }
            }
        }
    }
}

impl Passage {
    /// The entry's fencing token.
    pub fn token(&self) -> FencingToken {
        self.own.token
    }

    /// The entry's path on the server.
    pub fn path(&self) -> &str {
        &self.own.path
    }

    /// Gives the place up, retrying while the server does not answer.
    pub async fn leave(self) -> Result<()> {
        let mut delay = Duration::from_millis(50);
        loop {
            match self.backend.leave(&self.ticket, Some(&self.own)).await {
                Ok(()) => return Ok(()),
                Err(e) if e.is_retryable() && e.kind() != ErrorKind::SessionLost => {
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(1));
                }
                Err(e) => return Err(e),
            }
        }
    }
}
