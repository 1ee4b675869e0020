//! Queue histories, and what they found, pinned down.

use super::*;

// ---------------------------------------------------------------------------------------
// Queue

pub(crate) type QueueRecorder = Recorder<QueueOp<String>, QueueRet<String>>;
pub(crate) type QueueOpRecord = Op<QueueOp<String>, QueueRet<String>>;

/// A queue history being recorded, with why each unknown operation is unknown.
#[derive(Clone, Default)]
pub(crate) struct QueueLog {
    pub(crate) rec: QueueRecorder,
    pub(crate) reasons: Arc<Mutex<BTreeMap<usize, &'static str>>>,
}

impl QueueLog {
    fn invoke(&self, process: u64, op: QueueOp<String>) -> Pending {
        self.rec.invoke(process, op)
    }

    /// Completes `t` with what `result` (`Err`: the time limit ran out) says.
    fn finish<T>(
        &self,
        t: Pending,
        result: Result<coord_core::Result<T>, tokio::time::error::Elapsed>,
        ok: impl FnOnce(T) -> Outcome<QueueRet<String>>,
    ) {
        let (outcome, reason) = match result {
            Ok(Ok(value)) => (ok(value), None),
            Ok(Err(e)) => {
                let reason = if e.kind() == ErrorKind::Closed {
                    "closed"
                } else {
                    "returned outcome unknown"
                };
                (write_failure(&e), Some(reason))
            }
            Err(_) => (Outcome::Unknown, Some("dropped")),
        };
        if outcome == Outcome::Unknown
            && let Some(reason) = reason
        {
            lock(&self.reasons).insert(t.index(), reason);
        }
        self.rec.complete(t, outcome);
    }
}

pub(crate) fn took(taken: Option<Vec<u8>>) -> Outcome<QueueRet<String>> {
    match taken {
        Some(item) => Outcome::Ok(QueueRet::Took(text(&item))),
        // Also the answer while another consumer holds the taker lock: not a sighting of
        // an empty queue, and nothing was taken.
        None => Outcome::Failed,
    }
}

pub(crate) async fn queue_worker(
    world: Arc<World>,
    node: Arc<Node>,
    process: u64,
    producer: bool,
    mut rng: StdRng,
    rec: QueueLog,
) {
    let Ok(queue) = node.client.queue(QUEUE, QUEUE_MAX) else {
        return;
    };
    let mut n = 0;
    while world.running(&node) {
        let limit = if rng.random_bool(0.3) {
            ms(rng.random_range(0..5))
        } else {
            ms(rng.random_range(20..300))
        };
        if producer {
            let value = format!("p{process}n{n}");
            n += 1;
            let t = rec.invoke(process, QueueOp::Push(value.clone()));
            let pushed = timeout(limit, queue.push(value.into_bytes())).await;
            rec.finish(t, pushed, |_| Outcome::Ok(QueueRet::Pushed));
            sleep(ms(rng.random_range(2..20))).await;
        } else {
            let t = rec.invoke(process, QueueOp::Take);
            let taken = if rng.random_bool(0.6) {
                timeout(limit, queue.take()).await.map(|r| r.map(Some))
            } else {
                timeout(limit, queue.try_take()).await
            };
            rec.finish(t, taken, took);
            sleep(ms(rng.random_range(0..10))).await;
        }
    }
}

/// What is left, head first: drained by a fresh client, then (what its `try_take` left
/// while the taker lock was busy) read from the store.
pub(crate) async fn drain(world: &World) -> Result<Vec<String>, String> {
    let drainer = connect(&world.cluster, world.ttl)?;
    let queue = drainer.queue(QUEUE, QUEUE_MAX).map_err(|e| e.to_string())?;
    let mut remaining = Vec::new();
    while let Some(item) = queue.try_take().await.map_err(|e| format!("draining: {e}"))? {
        remaining.push(text(&item));
    }
    // What a take left in a receipt (its client gone before the drainer got the taker
    // lock) is the head of the queue: the next take puts it back there.
    let taken = format!("{QUEUE}/taken/");
    let receipts = drainer
        .list(&format!("{QUEUE}/taken"))
        .await
        .map_err(|e| format!("listing the receipts: {e}"))?;
    for entry in receipts {
        if entry.key.strip_prefix(&taken).is_some_and(|r| r.len() == 41) {
            remaining.push(text(&entry.value));
        }
    }
    let prefix = format!("{QUEUE}/items/");
    let left = drainer
        .list(&format!("{QUEUE}/items"))
        .await
        .map_err(|e| format!("listing the queue: {e}"))?;
    for entry in left {
        let seq = entry.key.strip_prefix(&prefix).unwrap_or_default();
        if seq.len() == 20 && seq.bytes().all(|b| b.is_ascii_digit()) {
            remaining.push(text(&entry.value));
        }
    }
    let _ = drainer.close().await;
    Ok(remaining)
}

/// Marks the `Ok` takes whose item may be delivered again: their client was faulted
/// (crashed, its session expired, suspended, its replies lost or delayed — or an
/// operator deleted some taker lock entry) after the take returned and before the
/// client's next take completed (that take waits for the receipt's deletion: the taker
/// lock is released only after it), so the receipt may have outlived the taker lock and
/// been put back. Nothing else may be delivered twice, and nothing may be lost, crashes
/// included.
pub(crate) fn may_be_redelivered(
    history: &mut QueueHistory<String>,
    crashes: &BTreeMap<u64, u64>,
    faults: &[(u64, u64)],
) -> usize {
    let mut marked = 0;
    for (i, op) in history.ops.iter().enumerate() {
        let (Outcome::Ok(QueueRet::Took(_)), Some(done)) = (&op.outcome, op.complete) else {
            continue;
        };
        let client = client_of(op.process);
        let settled_by = history
            .ops
            .iter()
            .filter(|o| o.input == QueueOp::Take && client_of(o.process) == client)
            .filter_map(|o| o.complete)
            .filter(|&c| c > done)
            .min()
            .unwrap_or(u64::MAX);
        // From the take's invocation: a fault during the take may leave its client
        // believing it holds the taker lock a little after the server gave it up.
        let within = |at: u64| at >= op.invoke && at <= settled_by;
        let faulted = faults
            .iter()
            .any(|&(c, at)| (c == client || c == u64::MAX) && within(at))
            || crashes.get(&client).is_some_and(|&at| within(at));
        if faulted {
            history.crashed.insert(i);
            marked += 1;
        }
    }
    marked
}

/// The values a violation names.
pub(crate) fn named_values(v: &QueueViolation<String>) -> Vec<&String> {
    match v {
        QueueViolation::Malformed { .. } => Vec::new(),
        QueueViolation::TakenTwice { value, .. }
        | QueueViolation::NotPushed { value, .. }
        | QueueViolation::Lost { value, .. }
        | QueueViolation::TakenAndRemaining { value, .. }
        | QueueViolation::RemainingTwice { value }
        | QueueViolation::EmptyWhileHolding { value, .. } => vec![value],
        QueueViolation::Fifo { first, second } => vec![first, second],
    }
}

/// Every operation that pushed or took a value the violations name (as recorded, and as
/// judged after folding and attribution), and where the value remained.
pub(crate) fn queue_context(
    recorded: &[QueueOpRecord],
    judged: &QueueHistory<String>,
    violations: &[QueueViolation<String>],
    reasons: &BTreeMap<usize, &'static str>,
) -> String {
    let values: BTreeSet<&String> = violations.iter().flat_map(named_values).collect();
    let show = |op: &QueueOpRecord| {
        format!(
            "p{} [{}..{}] {:?} -> {:?}",
            op.process,
            op.invoke,
            op.complete.map_or_else(|| "?".to_owned(), |c| c.to_string()),
            op.input,
            op.outcome
        )
    };
    let names = |op: &QueueOpRecord| match (&op.input, &op.outcome) {
        (QueueOp::Push(v), _) | (_, Outcome::Ok(QueueRet::Took(v))) => values.contains(v),
        _ => false,
    };
    let mut out = String::new();
    for (i, (before, after)) in recorded.iter().zip(&judged.ops).enumerate() {
        if names(before) || names(after) {
            out.push_str(&format!("\n    #{i} {}", show(before)));
            if before != after {
                out.push_str(&format!("\n       judged as {}", show(after)));
            }
        }
    }
    for (position, value) in judged.remaining.iter().enumerate() {
        if values.contains(value) {
            out.push_str(&format!("\n    {value:?} remained at position {position}"));
        }
    }
    // A lost value: the takes that may have removed it are the unknown ones invoked after
    // its push (folded or not: one that lost its item leaves the next take to fold into).
    for violation in violations {
        let QueueViolation::Lost { value, push } = violation else {
            continue;
        };
        out.push_str(&format!(
            "\n    the first unknown takes after {value:?} was pushed:"
        ));
        let suspects = recorded.iter().enumerate().filter(|(_, op)| {
            op.input == QueueOp::Take && op.outcome == Outcome::Unknown && op.invoke > recorded[*push].invoke
        });
        for (i, op) in suspects.take(6) {
            let why = reasons.get(&i).copied().unwrap_or("?");
            let folded = if judged.ops[i].outcome == Outcome::Unknown {
                ""
            } else {
                ", folded"
            };
            out.push_str(&format!("\n      #{i} {} ({why}{folded})", show(op)));
        }
    }
    out
}

pub(crate) struct QueueRun {
    pub(crate) ops: usize,
    pub(crate) unknown: usize,
    pub(crate) pushed: usize,
    pub(crate) taken: usize,
    pub(crate) remaining: usize,
    /// Values delivered again after a take whose client was faulted before it settled.
    pub(crate) redelivered: usize,
    pub(crate) attributed: usize,
    pub(crate) violations: Vec<String>,
    /// The operations behind the violations.
    pub(crate) context: String,
    pub(crate) mutant_caught: bool,
    pub(crate) nemesis: String,
}

pub(crate) async fn queue_history(seed: u64) -> Result<QueueRun, String> {
    let mut rng = StdRng::seed_from_u64(seed);
    let world = World::new(&mut rng)?;
    let nemesis_rng = StdRng::from_rng(&mut rng);
    let rec = QueueLog::default();
    let crashes: Arc<Mutex<BTreeMap<u64, u64>>> = Arc::default();
    // When each client was faulted (`u64::MAX`: every client, an operator's delete).
    let faults: Arc<Mutex<Vec<(u64, u64)>>> = Arc::default();
    let mut workers = Vec::new();
    for node in &world.nodes {
        for w in 0..rng.random_range(2..=3) {
            let producer = match w {
                0 => true,
                1 => false,
                _ => rng.random_bool(0.5),
            };
            workers.push(tokio::spawn(queue_worker(
                world.clone(),
                node.clone(),
                pid(node.id, w),
                producer,
                StdRng::from_rng(&mut rng),
                rec.clone(),
            )));
        }
    }
    let nemesis = Nemesis {
        profile: Profile::Full,
        operator: delete_entry_under(format!("{NS}/queues/{QUEUE}/takers/")),
        on_crash: {
            let (rec, crashes) = (rec.rec.clone(), crashes.clone());
            Box::new(move |c| {
                lock(&crashes).insert(c as u64, rec.now());
            })
        },
        on_fault: {
            let (rec, faults) = (rec.rec.clone(), faults.clone());
            Box::new(move |c| {
                let c = if c == usize::MAX { u64::MAX } else { c as u64 };
                lock(&faults).push((c, rec.now()));
            })
        },
    };
    tokio::spawn(run_nemesis(world.clone(), nemesis_rng, nemesis))
        .await
        .map_err(|e| format!("the nemesis failed: {e}"))?;
    // The clients close the way users close them: now, mid-operation (their workers
    // may be inside a take or a push), with no drain first. Whatever a take had removed
    // without returning it must still be found by the fresh client below.
    let closing: Vec<_> = world
        .live()
        .into_iter()
        .map(|node| tokio::spawn(async move { node.client.close().await }))
        .collect();
    world.settle().await;
    for close in closing {
        let _ = close.await;
    }
    world.join(workers).await?;
    let remaining = drain(&world).await?;

    let recorded = rec.rec.history();
    let unknown = recorded
        .iter()
        .filter(|op| op.outcome == Outcome::Unknown)
        .count();
    let mut history = QueueHistory {
        ops: recorded.clone(),
        remaining,
        crashed: BTreeSet::new(),
    };
    let attributed = may_be_redelivered(&mut history, &lock(&crashes), &lock(&faults));
    let report = queue::check(&history);

    // Negative control: one take duplicated — one whose second delivery nothing excuses
    // (its consumer was not faulted before settling it; on a busy machine more takes
    // are, and the first take may be one of them).
    let mut mutant = history.clone();
    if let Some(take) = mutant
        .ops
        .iter()
        .enumerate()
        .find(|(i, op)| matches!(op.outcome, Outcome::Ok(QueueRet::Took(_))) && !history.crashed.contains(i))
        .map(|(_, op)| op.clone())
    {
        let at = mutant.ops.iter().filter_map(|op| op.complete).max().unwrap_or(0) + 1;
        mutant.ops.push(Op {
            process: OPERATOR,
            invoke: at,
            complete: Some(at + 1),
            ..take
        });
    }
    let mutant_caught = !queue::check(&mutant).is_ok();

    Ok(QueueRun {
        ops: history.ops.len(),
        unknown,
        pushed: report.summary.pushes_acknowledged,
        taken: report.summary.takes,
        remaining: report.summary.remaining,
        redelivered: report.summary.redelivered,
        attributed,
        violations: report.violations.iter().map(ToString::to_string).collect(),
        context: if report.is_ok() {
            String::new()
        } else {
            let context = queue_context(&recorded, &history, &report.violations, &lock(&rec.reasons));
            let written = dump(&format!("queue-seed{seed}.txt"), || {
                let mut out = format!("nemesis: {}\n\nrecorded and judged:\n", world.nemesis_log());
                for (i, (before, after)) in recorded.iter().zip(&history.ops).enumerate() {
                    out.push_str(&format!("#{i} {before:?}\n"));
                    if before != after {
                        out.push_str(&format!("   judged as {after:?}\n"));
                    }
                }
                out.push_str(&format!(
                    "\nremaining: {:?}\ncrashes: {:?}\n",
                    history.remaining,
                    lock(&crashes)
                ));
                out
            });
            format!("{context}{written}")
        },
        mutant_caught,
        nemesis: world.nemesis_log(),
    })
}

#[test]
pub(crate) fn queue_histories() {
    let _one = one_at_a_time();
    let plan = plan();
    let started = std::time::Instant::now();
    let mut failures = Vec::new();
    let (mut ops, mut unknown, mut pushed, mut taken, mut remaining) = (0, 0, 0, 0, 0);
    let (mut redelivered, mut attributed, mut violating, mut caught, mut runs) = (0, 0, 0, 0, 0);
    let results = block_on(run_all(&plan.seeds, queue_history));
    for (seed, run) in results {
        let run = match run {
            Ok(run) => run,
            Err(e) => {
                failures.push(format!(
                    "seed {seed}: queue: {e}\n  {}",
                    replay_hint(seed, "queue_histories")
                ));
                continue;
            }
        };
        runs += 1;
        ops += run.ops;
        unknown += run.unknown;
        pushed += run.pushed;
        taken += run.taken;
        remaining += run.remaining;
        redelivered += run.redelivered;
        attributed += run.attributed;
        caught += usize::from(run.mutant_caught);
        if !run.mutant_caught {
            failures.push(format!("seed {seed}: queue: a duplicated take was not rejected"));
        }
        if !run.violations.is_empty() {
            violating += 1;
            failures.push(format!(
                "seed {seed}: the queue's delivery is broken:\n    {}\n  operations:{}\n  nemesis: {}\n  {}",
                run.violations.join("\n    "),
                run.context,
                run.nemesis,
                replay_hint(seed, "queue_histories")
            ));
        }
    }
    println!(
        "histories queue: {} seeds, {ops} ops, {unknown} unknown, {violating} violations; {pushed} pushes \
         acknowledged, {taken} taken, {remaining} remaining, nothing lost; {attributed} takes whose client \
         was faulted before settling, {redelivered} values delivered again; mutant duplicate-take rejected \
         in {caught}/{runs}; {:.1}s",
        plan.seeds.len(),
        started.elapsed().as_secs_f64()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

// ---------------------------------------------------------------------------------------
// What the queue histories found, pinned down

/// A take dropped once its remove was applied, whose reply is lost as the session ends,
/// must still hand the item to the client's next take ("a dropped take loses no item";
/// "an item is lost only with a consumer that crashes after `take` returned it"). The
/// queue histories lost items this way (LOST, e.g. seed 127 of 200) until a removal left
/// a receipt that settles it after the taker lock or the session is gone.
#[test]
pub(crate) fn queue_dropped_take_keeps_its_item_through_session_loss() {
    let _one = one_at_a_time();
    block_on(async {
        let cluster = MemCluster::new();
        let ttl = ms(500);
        let a = connect(&cluster, ttl).expect("client a");
        let b = connect(&cluster, ttl).expect("client b");
        let mem_a = a.backend_as::<MemClient>().expect("mem").clone();
        let queue_a = a.queue(QUEUE, 10).expect("queue");
        let items = format!("{NS}/config/{QUEUE}/items/");
        b.queue(QUEUE, 10).expect("queue").push("x").await.expect("push");
        // A's replies travel slowly, so its take can be caught between the cluster applying
        // its remove and the reply arriving.
        mem_a.delay_replies(ms(30));
        let take = tokio::spawn({
            let queue_a = queue_a.clone();
            async move { queue_a.take().await }
        });
        while !cluster.keys_with_prefix(&items).is_empty() {
            sleep(ms(1)).await;
        }
        // The remove is applied and its reply is on its way: A is cut off, its session ends
        // on the server, and the take is dropped.
        mem_a.suspend(ms(200));
        assert!(mem_a.expire_session(), "A's session was alive");
        take.abort();
        mem_a.delay_replies(Duration::ZERO);
        sleep(ttl * 2).await;
        let next = timeout(ms(2000), queue_a.try_take()).await;
        assert!(
            cluster.keys_with_prefix(&items).is_empty(),
            "the item is back in the store"
        );
        assert!(
            matches!(&next, Ok(Ok(Some(item))) if item == b"x"),
            "the item removed for the dropped take is lost: A's next take returned {next:?}"
        );
    });
}
