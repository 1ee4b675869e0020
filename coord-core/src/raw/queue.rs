//! The contender queue every backend implements once, in its native layout; every
//! queue-based recipe (locks, elections, read/write locks, semaphores, the queue's takers,
//! barriers, two-phase commit) is written over it, knowing no backend, and every backend
//! implements it knowing no recipe: a recipe declares its queue in a [`QueueSpec`].
//!
//! A queue is a directory of session-bound entries ordered by creation: ZooKeeper
//! ephemeral sequential znodes ordered by sequence (token: `czxid`), etcd keys under the
//! client's lease ordered by create revision (token: `create_revision`), mem keys ordered
//! by creation revision. The first entry holds the grant; every other contender waits
//! for the entry immediately ahead of it to go (no herd).
//!
//! What the backend does, and what it leaves to the recipes:
//!
//! | backend (this trait) | recipes (`coord-core`) |
//! |---|---|
//! | pick an entry's identity before any request ([`ContenderQueue::ticket`]) | local FIFO per client and name |
//! | create it idempotently, recovering an ambiguous create ([`ContenderQueue::join`]) | the wait loop: position, wait, grant |
//! | read the entries ahead ([`ContenderQueue::ahead`]) | where an entry stands ([`QueueSpec::admit`]), and retries while the session lives |
//! | wait until one entry is gone ([`ContenderQueue::wait_gone`]) | the hold state of a grant, and its loss |
//! | one removal attempt ([`ContenderQueue::leave`]) | removal retried until confirmed or the session ended, on drop too |
//! | the first entry and its changes ([`ContenderQueue::head`], [`ContenderQueue::watch_head`]) | leader observation: no duplicates, tokens never going back |
//! | every entry and its changes ([`ContenderQueue::watch_entries`]) | a double barrier's members |
//! | another's entry's value ([`ContenderQueue::mark`]) | revocation requests and who watches for them |
//! | every session-bound entry under a directory ([`ContenderQueue::survey`]) | what each recipe's entries mean (`coord inspect`) |

use async_trait::async_trait;
use futures::stream::BoxStream;

use crate::error::Result;
use crate::fencing::FencingToken;
use crate::types::Head;

/// One class of entries in a queue, as the backends' native layouts mark it. Most queues
/// have one class; a read/write lock has two (readers and writers), so that a reader can
/// wait only for the writers ahead of it.
///
/// The class says how an entry is named in either kind of layout, and nothing about the
/// recipe: a backend that names entries by session (etcd, mem) makes the class's entries
/// in [`EntryClass::subdir`]; one that names entries by a sequence the server appends
/// (ZooKeeper) recognises them by [`EntryClass::markers`] and writes the first of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EntryClass {
    /// The subdirectory of the queue's directory this class's entries are made in, in
    /// layouts that name entries by session (Go's `recipes.RWMutex`: `read`, `write`);
    /// empty for entries directly in the queue's directory.
    pub subdir: &'static str,
    /// The markers that name this class's entries in layouts that name them by sequence
    /// (`<marker><seq>`; Curator's `lock-`, `latch-`, `__READ__`, `__WRIT__`, `lease-`;
    /// kazoo's `__lock__`, `__rlock__`): entries with any of them count as this class.
    /// coord writes the first, in Curator's protected form `_c_<guid>-<marker><seq>`.
    pub markers: &'static [&'static str],
    /// The marker coord writes instead when the client asks for kazoo's layout
    /// (`<guid hex><marker><seq>`), where kazoo has the recipe; `None`: Curator's form
    /// whatever the layout.
    pub kazoo_marker: Option<&'static str>,
}

/// When an entry holds the grant, given the entries ahead of it in its queue: which
/// classes of entries ahead count against it, and how many counted entries may be ahead
/// of one that holds. The backends never evaluate it: they read the entries a spec asks
/// for ([`QueueSpec::counts`], [`QueueSpec::nearest`]) and return them as [`Ahead`];
/// [`QueueSpec::admit`] decides, once, for every recipe and backend.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Admission {
    /// Once no entry is ahead of it; until then it waits for the one right ahead (a
    /// lock, an election, a writer).
    Exclusive,
    /// Once no entry of another class is ahead of it; until then it waits for the
    /// nearest such entry (a reader: readers share, and wait only for writers).
    SharedWithinClass,
    /// While fewer than this many entries are ahead of it; otherwise it waits for any of
    /// them to go ([`Position::Among`]) (a semaphore's leases).
    Permits(u32),
    /// At once, whatever is ahead (a barrier's members, a transaction's votes): its
    /// recipe watches the entries ([`ContenderQueue::watch_entries`]) instead.
    Immediate,
    /// A rule of the recipe's own, written outside `coord-core` as well as in it. Two
    /// are the same rule when they are the same object.
    Rule(std::sync::Arc<dyn AdmissionRule>),
}

/// An admission rule a recipe brings: which classes of the entries ahead of one of class
/// `own` count against it, and how many counted entries may be ahead of one that holds.
/// With one permit a contender waits for the nearest counted entry; with more, for any
/// of them.
pub trait AdmissionRule: Send + Sync + std::fmt::Debug {
    /// Whether an entry of class `own` counts an entry of class `ahead` queued before it.
    fn counts(&self, own: usize, ahead: usize) -> bool;
    /// How many counted entries may be ahead of an entry of class `own` that holds (at
    /// least 1).
    fn permits(&self, own: usize) -> u32;
}

impl Admission {
    /// Whether an entry of class `own` counts an entry of class `ahead` queued before it.
    pub fn counts(&self, own: usize, ahead: usize) -> bool {
        match self {
            Admission::Exclusive | Admission::Permits(_) => true,
            Admission::SharedWithinClass => ahead != own,
            Admission::Immediate => false,
            Admission::Rule(rule) => rule.counts(own, ahead),
        }
    }

    /// How many counted entries may be ahead of an entry of class `own` that holds.
    pub fn permits(&self, own: usize) -> u32 {
        match self {
            Admission::Exclusive | Admission::SharedWithinClass | Admission::Immediate => 1,
            Admission::Permits(n) => *n,
            Admission::Rule(rule) => rule.permits(own),
        }
        .max(1)
    }

    fn id(&self) -> (u8, usize) {
        match self {
            Admission::Exclusive => (0, 0),
            Admission::SharedWithinClass => (1, 0),
            Admission::Permits(n) => (2, *n as usize),
            Admission::Immediate => (3, 0),
            Admission::Rule(rule) => (4, std::sync::Arc::as_ptr(rule).cast::<()>() as usize),
        }
    }
}

impl PartialEq for Admission {
    fn eq(&self, other: &Self) -> bool {
        self.id() == other.id()
    }
}

impl Eq for Admission {}

impl std::hash::Hash for Admission {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.id().hash(state);
    }
}

/// What a backend read of the entries ahead of a contender's own: those of the classes
/// its spec counts ([`QueueSpec::counts`]), in queue order (nearest last) — all of them,
/// or, where the spec asks for only the nearest ([`QueueSpec::nearest`]), exactly that
/// many of the nearest (fewer only when fewer are ahead: one entry means nothing else is
/// ahead, [`Position::Next`]). [`QueueSpec::admit`] decides from it where the contender
/// stands.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Ahead {
    /// The counted entries ahead, nearest last.
    pub entries: Vec<QueueEntry>,
    /// The read's cursor (as [`QueueEntry::seen_at`]).
    pub seen_at: u64,
    /// With [`QueueSpec::lock_delay`]: the queue's [`ReleaseMark`], read in the same
    /// request (`None`: there is none, or the queue has no lock-delay, or the read was
    /// the join's).
    pub mark: Option<ReleaseMark>,
}

/// A queue as its recipe declares it: where it lives, how its entries are marked, and
/// when an entry holds the grant. Backends read nothing else about the recipe, so a
/// recipe (in `coord-core` or outside it) brings a new queue without a backend changed.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct QueueSpec {
    /// What the queue serves, for metrics and traces (`lock`, `read_lock`, …).
    pub label: &'static str,
    /// The queue's directory relative to the namespace (`locks/<name>`; a semaphore's
    /// `semaphores/<name>/leases`).
    pub dir: String,
    /// Every class of entries the queue holds.
    pub classes: &'static [EntryClass],
    /// The class of the entries this contender makes (an index into `classes`).
    pub class: usize,
    /// When one of its entries holds the grant.
    pub admission: Admission,
    /// Lock-delay: how long a contender holds off after the entry it waited for went
    /// without a release (its session ended, or someone else deleted it). `None` (the
    /// default): no delay, and the backends neither write nor read a [`ReleaseMark`].
    /// With a delay, a holder's removal writes [`ReleaseMark::Released`] in the same
    /// request ([`ContenderQueue::release`]), and the read that finds a contender first returns
    /// the queue's mark with it ([`Position::First`]).
    pub lock_delay: Option<std::time::Duration>,
}

impl QueueSpec {
    /// A queue at `dir` (relative to the namespace) whose contender makes entries of the
    /// first of `classes`.
    pub fn new(
        label: &'static str,
        dir: impl Into<String>,
        classes: &'static [EntryClass],
        admission: Admission,
    ) -> Self {
        QueueSpec {
            label,
            dir: dir.into(),
            classes,
            class: 0,
            admission,
            lock_delay: None,
        }
    }

    /// The same queue with lock-delay `delay` (see [`QueueSpec::lock_delay`]); a zero
    /// delay is none.
    pub fn with_lock_delay(mut self, delay: Option<std::time::Duration>) -> Self {
        self.lock_delay = delay.filter(|d| !d.is_zero());
        self
    }

    /// The same queue, for a contender whose entries are of class `class` (an index into
    /// [`QueueSpec::classes`]).
    pub fn as_class(mut self, class: usize) -> Self {
        self.class = class;
        self
    }

    /// This contender's class (the last one if `class` is out of range; a queue without
    /// classes has a plain one).
    pub fn own_class(&self) -> EntryClass {
        const PLAIN: EntryClass = EntryClass {
            subdir: "",
            markers: &["entry-"],
            kazoo_marker: None,
        };
        self.classes
            .get(self.class)
            .or(self.classes.last())
            .copied()
            .unwrap_or(PLAIN)
    }

    /// Whether a contender of this spec counts an entry of class `ahead` queued before
    /// it (its [`Admission::counts`]): the classes a backend reads for [`Ahead`].
    pub fn counts(&self, ahead: usize) -> bool {
        self.admission.counts(self.class, ahead)
    }

    /// Whether a contender of this spec counts any class at all (none: it holds at
    /// once, and a backend need not read).
    pub fn counts_any(&self) -> bool {
        (0..self.classes.len().max(1)).any(|c| self.counts(c))
    }

    /// How many of the nearest counted entries ahead [`QueueSpec::admit`] needs: two
    /// with one permit (the one to wait for, and whether any is ahead of it), `None`
    /// (all of them) with more. A backend may read only these.
    pub fn nearest(&self) -> Option<usize> {
        if crate::mutants::active(crate::mutants::Mutant::HerdWake) {
            return None;
        }
        (self.admission.permits(self.class) == 1).then_some(2)
    }

    /// Of the entries ahead of a contender's own, in queue order with their classes,
    /// those an [`Ahead`] holds: the counted ones, at most [`QueueSpec::nearest`] of the
    /// nearest. For backends that read the whole queue.
    pub fn pick(&self, ahead: impl IntoIterator<Item = (QueueEntry, usize)>) -> Vec<QueueEntry> {
        let mut counted: Vec<QueueEntry> = ahead
            .into_iter()
            .filter(|(_, class)| self.counts(*class))
            .map(|(entry, _)| entry)
            .collect();
        if let Some(n) = self.nearest() {
            counted.drain(..counted.len().saturating_sub(n));
        }
        counted
    }

    /// Where a contender of this spec stands, given what its backend read: the one
    /// admission decision for every recipe and backend. First while fewer counted
    /// entries than its permits are ahead; otherwise, with one permit, behind the nearest
    /// ([`Position::Next`] when it is the only one: entries are ordered by creation, so
    /// nothing made later comes between), with more, among them.
    pub fn admit(&self, ahead: Ahead) -> Position {
        let Ahead {
            mut entries,
            seen_at,
            mark,
        } = ahead;
        let permits = self.admission.permits(self.class) as usize;
        if entries.len() < permits {
            return Position::First { seen_at, mark };
        }
        if permits > 1 || crate::mutants::active(crate::mutants::Mutant::HerdWake) {
            return Position::Among(entries);
        }
        let only = entries.len() == 1;
        match entries.pop() {
            Some(nearest) if only => Position::Next(nearest),
            Some(nearest) => Position::Behind(nearest),
            None => Position::First { seen_at, mark },
        }
    }

    /// Whether the client's contenders for this queue take turns locally first (an
    /// exclusive grant: one entry per client at a time), rather than each holding a
    /// place of its own.
    pub fn takes_turns(&self) -> bool {
        matches!(self.admission, Admission::Exclusive)
    }

    /// In a layout that names entries by session: the directory class `class`'s entries
    /// are made in, under the queue's absolute directory `dir`.
    pub fn class_dir(&self, dir: &str, class: usize) -> String {
        match self.classes.get(class).map(|c| c.subdir) {
            None | Some("") => dir.to_owned(),
            Some(sub) => format!("{dir}/{sub}"),
        }
    }

    /// In a layout that names entries by session: the class of `key` if it is an entry
    /// of this queue (whose absolute directory is `dir`), one segment below its class's
    /// directory; keys of queues with longer names are not.
    pub fn class_of_key(&self, dir: &str, key: &str) -> Option<usize> {
        let rest = key.strip_prefix(dir)?.strip_prefix('/')?;
        self.classes.iter().position(|c| {
            let name = match c.subdir {
                "" => Some(rest),
                sub => rest.strip_prefix(sub).and_then(|r| r.strip_prefix('/')),
            };
            name.is_some_and(|n| !n.is_empty() && !n.contains('/'))
        })
    }

    /// In a layout that names entries by session: whether `key` is an entry this
    /// contender counts (see [`QueueSpec::counts`]).
    pub fn key_counts(&self, dir: &str, key: &str) -> bool {
        self.class_of_key(dir, key).is_some_and(|c| self.counts(c))
    }

    /// In a layout that names entries by session: the narrowest prefix (with its
    /// trailing `/`) under which every entry this contender counts lies — its one
    /// counted class's directory, or the queue's.
    pub fn counted_prefix(&self, dir: &str) -> String {
        let blocking: Vec<usize> = (0..self.classes.len()).filter(|&c| self.counts(c)).collect();
        match blocking.as_slice() {
            [only] => format!("{}/", self.class_dir(dir, *only)),
            _ => format!("{dir}/"),
        }
    }

    /// In a layout that names entries by sequence: the sequence number and class of an
    /// entry's name, if it is an entry of this queue — `[<anything>-]<marker><seq>` for
    /// plain markers, `<anything><marker><seq>` for kazoo's `__…__` ones.
    pub fn sequence_of_name(&self, name: &str) -> Option<(u64, usize)> {
        self.classes.iter().enumerate().find_map(|(class, c)| {
            c.markers.iter().find_map(|marker| {
                let (before, seq) = name.rsplit_once(marker)?;
                if !(marker.starts_with("__") || before.is_empty() || before.ends_with('-')) {
                    return None;
                }
                if seq.is_empty() || !seq.bytes().all(|b| b.is_ascii_digit()) {
                    return None;
                }
                Some((seq.parse().ok()?, class))
            })
        })
    }
}

/// A claim on a place in a queue, made before any request: it fixes the session the
/// entry will be bound to and how the backend finds the entry again, so that an entry
/// whose create had an unknown outcome (or whose `join` was dropped) can still be found
/// and removed, and a retried create never makes a second entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ticket {
    /// The queue.
    pub queue: QueueSpec,
    /// The client's session generation the entry is bound to.
    pub generation: u64,
    /// The server's id of that session (ZooKeeper session id, etcd lease id, mem session).
    pub session_id: i64,
    /// How the backend finds the entry: ZooKeeper the protected name prefix
    /// `<dir>/_c_<guid>-lock-`, etcd and mem the key itself (`<dir>/<lease hex>`).
    pub locator: String,
}

/// Which of a client's places in one queue a ticket is for. Exclusive kinds queue a
/// client's contenders locally and use slot 0 only; a client's readers hold at once,
/// each in a slot of its own, so backends that name an entry by its session (etcd, mem)
/// give each slot its own key.
pub type Slot = u32;

/// An entry of a queue on the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueEntry {
    /// The backend path (znode path, etcd key, mem key): the entry's identity and what a
    /// fence checks.
    pub path: String,
    /// Its creation order and the fencing token of its grant (`czxid`, create revision).
    /// `FencingToken(0)` when the read that found it does not say (a ZooKeeper listing
    /// has names only; its sequential names are never reused).
    pub token: FencingToken,
    /// The backend's cursor of the read that returned it (etcd: that read's header
    /// revision, so a watch starts right after it); 0 where unused.
    pub seen_at: u64,
}

/// Where an entry stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Position {
    /// First in the queue: the grant is its. `seen_at` is the read's cursor.
    First {
        /// As [`QueueEntry::seen_at`].
        seen_at: u64,
        /// With [`QueueSpec::lock_delay`]: the queue's [`ReleaseMark`], read in the same
        /// request (`None`: there is none, or the queue has no lock-delay, or the read
        /// was the join's).
        mark: Option<ReleaseMark>,
    },
    /// Behind this entry, the one immediately ahead.
    Behind(QueueEntry),
    /// Behind this entry, which is first: once it is gone this contender is first (every
    /// entry made later queues behind it), with no read to confirm it — the hand-over's
    /// round trip saved. A backend that cannot tell says [`Position::Behind`].
    Next(QueueEntry),
    /// With [`Admission::Permits`], `permits` or more entries ahead, these: once any of
    /// them is gone, read again.
    Among(Vec<QueueEntry>),
}

/// What a queue with lock-delay ([`QueueSpec::lock_delay`]) keeps about its last
/// holder, in one place per queue (ZooKeeper: the directory node's data; etcd and mem:
/// the key `<dir>~lock-delay`, outside every queue's range, as `~` is in no name). Its
/// bytes are one line of text, so `zkCli get` and `etcdctl get` show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReleaseMark {
    /// The holder `entry` (a backend path) released: written in the same request as
    /// the entry's removal, so a waiter that finds this mark naming the entry it waited
    /// for knows the entry went by a release.
    Released {
        /// The released entry's backend path.
        entry: String,
        /// Its token (creation order): etcd and mem name a session's entries alike on
        /// every acquisition, so the path alone would pass an earlier release off as
        /// this one's.
        token: FencingToken,
    },
    /// The entry `entry` went without a release, and the contender `waiter` holds off
    /// until `until_ms` (milliseconds since the Unix epoch, the waiter's clock): written
    /// by the waiter, for inspectors (`coord inspect`).
    Vanished {
        /// The vanished entry's backend path.
        entry: String,
        /// The waiting contender's backend path.
        waiter: String,
        /// When the waiter takes the grant, in milliseconds since the Unix epoch.
        until_ms: u64,
    },
}

impl ReleaseMark {
    const TAG: &'static str = "coord-lock-delay/1";

    /// The mark's bytes: `coord-lock-delay/1 released <entry> <token>` or
    /// `coord-lock-delay/1 vanished <entry> <waiter> <until_ms>`.
    pub fn encode(&self) -> Vec<u8> {
        match self {
            ReleaseMark::Released { entry, token } => format!("{} released {entry} {token}", Self::TAG),
            ReleaseMark::Vanished {
                entry,
                waiter,
                until_ms,
            } => format!("{} vanished {entry} {waiter} {until_ms}", Self::TAG),
        }
        .into_bytes()
    }

    /// The mark in `bytes`, if they are one (anything else — an empty directory node,
    /// another client's data — is none).
    pub fn decode(bytes: &[u8]) -> Option<ReleaseMark> {
        let text = std::str::from_utf8(bytes).ok()?;
        let mut words = text.split(' ');
        if words.next()? != Self::TAG {
            return None;
        }
        let mark = match (words.next()?, words.next(), words.next(), words.next()) {
            ("released", Some(entry), Some(token), None) => ReleaseMark::Released {
                entry: entry.to_owned(),
                token: FencingToken(token.parse().ok()?),
            },
            ("vanished", Some(entry), Some(waiter), Some(until)) => ReleaseMark::Vanished {
                entry: entry.to_owned(),
                waiter: waiter.to_owned(),
                until_ms: until.parse().ok()?,
            },
            _ => return None,
        };
        words.next().is_none().then_some(mark)
    }

    /// Whether this mark says `entry` went by a release: its path, and its token where
    /// the read that found `entry` gave one (a ZooKeeper listing does not; its
    /// sequential names are never reused).
    pub fn released(&self, entry: &QueueEntry) -> bool {
        matches!(self, ReleaseMark::Released { entry: path, token }
            if *path == entry.path && (entry.token.get() == 0 || *token == entry.token))
    }
}

/// Where a queue's [`ReleaseMark`] is kept in layouts that name entries by key (etcd,
/// mem): `<dir>~lock-delay`, for the queue's absolute directory `dir`.
pub fn release_mark_key(dir: &str) -> String {
    format!("{dir}~lock-delay")
}

/// What [`ContenderQueue::join`] returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Joined {
    /// This contender's entry.
    pub own: QueueEntry,
    /// The entries ahead of it, when the join read them (etcd and mem in the same
    /// request, ZooKeeper in a listing sent right behind the create); `None` otherwise
    /// (the position is read next).
    pub ahead: Option<Ahead>,
}

/// An entry of a queue as a watcher sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// The backend path of the entry.
    pub path: String,
    /// Its creation order (`czxid`, create revision).
    pub token: FencingToken,
    /// Its value.
    pub value: Vec<u8>,
}

/// What [`ContenderQueue::watch_entries`] yields.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum EntriesEvent {
    /// Every entry of the queue now, in queue order. Backends may repeat an unchanged
    /// list.
    Entries(Vec<Member>),
    /// Changes may have been missed (history compacted, session lost); `Entries` follow.
    Gap,
}

/// A session-bound entry found by [`ContenderQueue::survey`], in whatever layout made it (coord's,
/// Curator's, kazoo's, Go's `concurrency`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Surveyed {
    /// Its directory, relative to the namespace (`locks/a`, `rwlocks/b/read`).
    pub dir: String,
    /// Its name in that directory (`_c_<guid>-lock-0000000003`, `694d7a1b2c3d4e5f`).
    pub name: String,
    /// Its creation order and fencing token (`czxid`, create revision).
    pub token: FencingToken,
    /// Its value.
    pub value: Vec<u8>,
    /// The session it is bound to: ZooKeeper's ephemeral owner, etcd's lease, mem's
    /// session.
    pub owner: u64,
    /// When the server created it, in milliseconds since the Unix epoch, where the
    /// server keeps it (ZooKeeper's `ctime`); `None` on etcd, which keeps no times.
    pub created_ms: Option<u64>,
}

/// A change of the first entry of a queue, for leader observation.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum HeadEvent {
    /// The first entry and its value now (`None`: the queue is empty). Backends may
    /// repeat an unchanged head; the recipe filters duplicates.
    Head(Option<Head>),
    /// Changes may have been missed (history compacted, session lost); a `Head` follows.
    Gap,
}

/// A backend's contender queue. Every method works on the client's current session
/// unless it takes a [`Ticket`], which pins the session the entry belongs to.
///
/// Requests are counted in the backend's stats like any other.
#[async_trait]
pub trait ContenderQueue: Send + Sync {
    /// A ticket for a new entry in `queue`, in this client's place `slot`, bound to the
    /// current session. No request.
    ///
    /// # Errors
    ///
    /// `SessionLost` when there is no live session (retry on the next one); `Closed`.
    fn ticket(&self, queue: &QueueSpec, slot: Slot) -> Result<Ticket>;

    /// Creates the ticket's entry holding `value`, on the ticket's session only. Retried
    /// or repeated for one ticket, it never makes a second entry: an entry already made
    /// for the ticket is returned instead.
    ///
    /// # Errors
    ///
    /// `SessionLost` if the ticket's session is gone; `PermissionDenied`; `Unavailable`,
    /// `Timeout` (the entry may exist: [`ContenderQueue::leave`] with the ticket finds it).
    ///
    /// # Cancel safety
    ///
    /// Not cancel-safe by itself: a dropped join may leave an entry, which the recipe
    /// removes with [`ContenderQueue::leave`].
    async fn join(&self, ticket: &Ticket, value: Vec<u8>) -> Result<Joined>;

    /// The entries ahead of `own` now that its spec counts, as [`Ahead`] says; where it
    /// stands is [`QueueSpec::admit`]'s to decide.
    ///
    /// # Errors
    ///
    /// `SessionLost` when `own` is gone (its session ended or it was deleted);
    /// `Unavailable`, `Timeout`.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe (a read).
    async fn ahead(&self, ticket: &Ticket, own: &QueueEntry) -> Result<Ahead>;

    /// A granted entry of `ticket` was seen gone without this client removing it (an
    /// operator deleted it, a fenced write was refused): called before the client's next
    /// contender for the queue may join. A backend whose removal names the key alone
    /// (etcd's plain delete) moves this client's later contenders to another key here,
    /// so the lost guard's release can never remove one of them. The default does
    /// nothing (entries named per contender, or removed by incarnation).
    fn entry_lost(&self, _ticket: &Ticket) {}

    /// After the one counted entry ahead of `own` went ([`Position::Next`]): confirms
    /// `own` is still there, with the queue's [`ReleaseMark`] when its spec has a
    /// lock-delay, and nothing else. Nothing can be ahead any more (entries are ordered
    /// by creation, so anything made later is behind), so a backend reads `own` alone —
    /// O(1), where [`ContenderQueue::ahead`] reads the queue. The default reads the
    /// queue.
    ///
    /// # Errors
    ///
    /// `SessionLost` when `own` is gone (its session ended or it was deleted): a grant
    /// without its entry is no grant. `Unavailable`, `Timeout`.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe (a read).
    async fn confirm(&self, ticket: &Ticket, own: &QueueEntry) -> Result<Ahead> {
        self.ahead(ticket, own).await
    }

    /// Resolves once `entry` is gone from the server (deleted, or replaced by another
    /// incarnation under the same path). Broken watches, reconnects and compacted
    /// history are handled inside: a deletion during an outage is still seen.
    ///
    /// # Errors
    ///
    /// `SessionLost` when the watch ended with this client's session (the caller decides
    /// what that means for `entry`); `Closed`; permanent errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: nothing is left on the server.
    async fn wait_gone(&self, entry: &QueueEntry) -> Result<()>;

    /// Replaces the value of the ticket's entry `own`.
    ///
    /// # Errors
    ///
    /// `Fenced` when `own` is gone; `Unavailable`, `Timeout` (outcome unknown).
    ///
    /// # Cancel safety
    ///
    /// If dropped, the value may or may not have been written.
    async fn update(&self, ticket: &Ticket, own: &QueueEntry, value: Vec<u8>) -> Result<()>;

    /// One attempt to remove the ticket's entry (`own` when known; otherwise found by
    /// the ticket). `Ok` once the server confirms it is gone, including when it already
    /// was. The recipes retry it until that, or until the ticket's session has ended.
    ///
    /// # Errors
    ///
    /// `Unavailable`, `Timeout` (retry); `Closed`; permanent errors.
    ///
    /// # Cancel safety
    ///
    /// If dropped, the removal may or may not have happened.
    async fn leave(&self, ticket: &Ticket, own: Option<&QueueEntry>) -> Result<()>;

    /// One attempt to remove a holder's entry `own`, as [`ContenderQueue::leave`]; with
    /// [`QueueSpec::lock_delay`], the same request also writes
    /// [`ReleaseMark::Released`] naming `own` (lock-delay: a waiter that finds it holds
    /// no delay). Without a lock-delay, or by default, it is [`ContenderQueue::leave`].
    ///
    /// # Errors
    ///
    /// As [`ContenderQueue::leave`].
    ///
    /// # Cancel safety
    ///
    /// As [`ContenderQueue::leave`].
    async fn release(&self, ticket: &Ticket, own: &QueueEntry) -> Result<()> {
        self.leave(ticket, Some(own)).await
    }

    /// Writes `mark` as `queue`'s [`ReleaseMark`] (a waiter holding off records why, for
    /// inspectors). Nothing is written when the queue's directory is gone. By default,
    /// nothing is written.
    ///
    /// # Errors
    ///
    /// `PermissionDenied`; `Unavailable`, `Timeout` (outcome unknown).
    ///
    /// # Cancel safety
    ///
    /// If dropped, the mark may or may not have been written.
    async fn write_release_mark(&self, queue: &QueueSpec, mark: &ReleaseMark) -> Result<()> {
        let _ = (queue, mark);
        Ok(())
    }

    /// `queue`'s [`ReleaseMark`], if it has one. By default, none.
    ///
    /// # Errors
    ///
    /// `Unavailable`, `Timeout`, `Closed`.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe (a read).
    async fn release_mark(&self, queue: &QueueSpec) -> Result<Option<ReleaseMark>> {
        let _ = queue;
        Ok(None)
    }

    /// Replaces the value of `entry` — anyone's, not only this client's — if that
    /// incarnation of it (its token) still exists, keeping it bound to its own session
    /// (etcd: `ignore_lease`). `false` when it is gone. A revocation request is written
    /// this way (Curator's `Revoker`). Optional: by default `Unsupported`, and
    /// [`Capabilities::mark`](crate::Capabilities::mark) says whether a backend has it.
    ///
    /// # Errors
    ///
    /// `Unsupported` where the backend has no such write; `PermissionDenied`;
    /// `Unavailable`, `Timeout` (outcome unknown).
    ///
    /// # Cancel safety
    ///
    /// If dropped, the value may or may not have been written.
    async fn mark(&self, entry: &QueueEntry, value: Vec<u8>) -> Result<bool> {
        let _ = (entry, value);
        Err(crate::Error::new(
            crate::ErrorKind::Unsupported,
            "this backend cannot write another client's entry (no revocation); see Capabilities::mark",
        ))
    }

    /// The first entry of `queue` and its value.
    ///
    /// # Errors
    ///
    /// `Unavailable`, `Timeout`, `Closed`.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe (a read).
    async fn head(&self, queue: &QueueSpec) -> Result<Option<Head>>;

    /// The first entry of `queue` now, then whenever it may have changed; a
    /// [`HeadEvent::Gap`] where changes may have been missed. The stream ends after an
    /// error item (`Closed` when the client is closed).
    ///
    /// By default, the first of [`ContenderQueue::watch_entries`]'s entries each time; a backend
    /// overrides it where it can watch the head alone (all three do).
    ///
    /// # Errors
    ///
    /// As [`ContenderQueue::head`], for the first read.
    ///
    /// # Cancel safety
    ///
    /// Dropping the stream stops watching.
    async fn watch_head(&self, queue: &QueueSpec) -> Result<BoxStream<'static, Result<HeadEvent>>> {
        use futures::StreamExt as _;
        let entries = self.watch_entries(queue).await?;
        Ok(Box::pin(entries.map(|event| {
            event.map(|e| match e {
                EntriesEvent::Entries(members) => HeadEvent::Head(members.into_iter().next().map(|m| Head {
                    token: m.token,
                    value: m.value,
                })),
                EntriesEvent::Gap => HeadEvent::Gap,
            })
        })))
    }

    /// Every entry of `queue` with its value now, then again whenever the entries may
    /// have changed (an entry joined, left, or changed its value); an
    /// [`EntriesEvent::Gap`] where changes may have been missed. The stream ends after an
    /// error item (`Closed` when the client is closed).
    ///
    /// # Errors
    ///
    /// `Unavailable`, `Timeout`, `Closed`, for the first read.
    ///
    /// # Cancel safety
    ///
    /// Dropping the stream stops watching.
    async fn watch_entries(&self, queue: &QueueSpec) -> Result<BoxStream<'static, Result<EntriesEvent>>>;

    /// Every session-bound entry at or below `root` (a directory relative to the
    /// namespace), in any queue and any layout, sorted by directory and then token. One
    /// consistent read where the server has one (etcd, mem); on ZooKeeper a walk of the
    /// tree, level by level, so an entry that comes or goes meanwhile may be missed or
    /// seen. For inspection, not for decisions: the recipes never call it. Optional: by
    /// default `Unsupported`, and [`Capabilities::survey`](crate::Capabilities::survey)
    /// says whether a backend has it.
    ///
    /// # Errors
    ///
    /// `Unsupported` where the backend cannot list them; `Unavailable`, `Timeout`,
    /// `Closed`, `PermissionDenied`.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe (reads).
    async fn survey(&self, root: &str) -> Result<Vec<Surveyed>> {
        let _ = root;
        Err(crate::Error::new(
            crate::ErrorKind::Unsupported,
            "this backend cannot list session-bound entries (no inspection); see Capabilities::survey",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::{QueueEntry, ReleaseMark};
    use crate::fencing::FencingToken;

    #[test]
    fn release_marks_round_trip() {
        for mark in [
            ReleaseMark::Released {
                entry: "/ns/locks/a/_c_0-lock-0000000003".to_owned(),
                token: FencingToken(4_294_967_302),
            },
            ReleaseMark::Vanished {
                entry: "ns/locks/a/694d7a1b2c3d4e5f".to_owned(),
                waiter: "ns/locks/a/694d7a1b2c3d4e60".to_owned(),
                until_ms: 1_795_000_000_123,
            },
        ] {
            assert_eq!(ReleaseMark::decode(&mark.encode()), Some(mark));
        }
    }

    #[test]
    fn anything_else_is_no_mark() {
        for bytes in [
            &b""[..],
            b"127.0.0.1",
            b"coord-lock-delay/1",
            b"coord-lock-delay/1 released",
            b"coord-lock-delay/1 released a",
            b"coord-lock-delay/1 released a b",
            b"coord-lock-delay/1 released a 1 2",
            b"coord-lock-delay/1 vanished a b",
            b"coord-lock-delay/1 vanished a b soon",
            b"coord-lock-delay/2 released a",
            b"\xff\xfe",
        ] {
            assert_eq!(ReleaseMark::decode(bytes), None, "{bytes:?}");
        }
    }

    #[test]
    fn a_mark_names_one_released_entry() {
        let entry = |path: &str, token: u64| QueueEntry {
            path: path.to_owned(),
            token: FencingToken(token),
            seen_at: 0,
        };
        let mark = ReleaseMark::Released {
            entry: "a".to_owned(),
            token: FencingToken(7),
        };
        assert!(mark.released(&entry("a", 7)));
        assert!(
            mark.released(&entry("a", 0)),
            "a listing without tokens: the path"
        );
        assert!(
            !mark.released(&entry("a", 9)),
            "the same key, a later incarnation: not this release"
        );
        assert!(!mark.released(&entry("b", 7)));
        let vanished = ReleaseMark::Vanished {
            entry: "a".to_owned(),
            waiter: "b".to_owned(),
            until_ms: 1,
        };
        assert!(!vanished.released(&entry("a", 7)));
    }
}
