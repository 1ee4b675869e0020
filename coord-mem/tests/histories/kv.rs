//! Counter and config histories, judged linearizable per key.

use super::*;

// ---------------------------------------------------------------------------------------
// Counter and config

pub(crate) type CounterInput = (String, CounterOp);
pub(crate) type CounterRecord = Op<CounterInput, CounterRet>;
pub(crate) type RegisterInput = (String, RegisterOp<String>);
pub(crate) type RegisterRecord = Op<RegisterInput, RegisterRet<String>>;

/// A mem version as the `Register` model's number: mem's versions are revisions.
pub(crate) fn version(v: Version) -> u64 {
    let (revision, minor) = coord_core::raw::version_parts(v);
    assert_eq!(minor, 0, "mem versions are revisions (minor 0), not {v}");
    revision
}

pub(crate) fn op_limit(rng: &mut StdRng) -> Duration {
    if rng.random_bool(0.25) {
        ms(rng.random_range(0..3))
    } else {
        ms(300)
    }
}

pub(crate) async fn counter_op(
    client: &Client,
    process: u64,
    rng: &mut StdRng,
    rec: &Recorder<CounterInput, CounterRet>,
) {
    let key = *COUNTERS.choose(rng).unwrap_or(&COUNTERS[0]);
    let counter = client.counter(key).expect("a valid counter key");
    let op = match rng.random_range(0..100) {
        0..40 => CounterOp::Get,
        40..85 => CounterOp::Add(if rng.random_bool(0.8) {
            rng.random_range(1..=10)
        } else {
            -rng.random_range(1..=5)
        }),
        _ => CounterOp::Set(rng.random_range(0..100)),
    };
    let limit = op_limit(rng);
    let t = rec.invoke(process, (key.to_owned(), op));
    let outcome = match op {
        // A read that failed or was dropped had no effect.
        CounterOp::Get => match timeout(limit, counter.get()).await {
            Ok(Ok(v)) => Outcome::Ok(CounterRet::Value(v)),
            _ => Outcome::Failed,
        },
        CounterOp::Add(delta) => match timeout(limit, counter.add(delta)).await {
            Ok(Ok(v)) => Outcome::Ok(CounterRet::Value(v)),
            Ok(Err(e)) => write_failure(&e),
            Err(_) => Outcome::Unknown,
        },
        CounterOp::Set(value) => match timeout(limit, counter.set(value)).await {
            Ok(Ok(())) => Outcome::Ok(CounterRet::Done),
            Ok(Err(e)) => write_failure(&e),
            Err(_) => Outcome::Unknown,
        },
    };
    rec.complete(t, outcome);
}

pub(crate) async fn config_op(
    client: &Client,
    process: u64,
    n: u64,
    rng: &mut StdRng,
    seen: &mut HashMap<&'static str, Option<Version>>,
    rec: &Recorder<RegisterInput, RegisterRet<String>>,
) {
    let key = *KEYS.choose(rng).unwrap_or(&KEYS[0]);
    let value = format!("p{process}n{n}");
    let limit = op_limit(rng);
    let roll = rng.random_range(0..100);
    if roll < 35 {
        let t = rec.invoke(process, (key.to_owned(), RegisterOp::Get));
        let outcome = match timeout(limit, client.get(key)).await {
            Ok(Ok(Some(v))) => {
                seen.insert(key, Some(v.version));
                Outcome::Ok(RegisterRet::Get(Some((text(&v.value), version(v.version)))))
            }
            Ok(Ok(None)) => {
                seen.insert(key, None);
                Outcome::Ok(RegisterRet::Get(None))
            }
            _ => Outcome::Failed,
        };
        rec.complete(t, outcome);
    } else if roll < 60 {
        let t = rec.invoke(process, (key.to_owned(), RegisterOp::Put(value.clone())));
        let outcome = match timeout(limit, client.put(key, value)).await {
            Ok(Ok(v)) => {
                seen.insert(key, Some(v));
                Outcome::Ok(RegisterRet::Put(version(v)))
            }
            Ok(Err(e)) => write_failure(&e),
            Err(_) => Outcome::Unknown,
        };
        rec.complete(t, outcome);
    } else if roll < 90 {
        let expected = match rng.random_range(0..100) {
            0..70 => seen.get(key).copied().flatten(),
            70..85 => None,
            _ => Some(coord_core::raw::version(rng.random_range(1..60), 0)),
        };
        let input = RegisterOp::CompareAndSet {
            expected: expected.map(version),
            value: value.clone(),
        };
        let t = rec.invoke(process, (key.to_owned(), input));
        let outcome = match timeout(limit, client.compare_and_set(key, expected, value)).await {
            Ok(Ok(v)) => {
                seen.insert(key, Some(v));
                Outcome::Ok(RegisterRet::CompareAndSet(Ok(version(v))))
            }
            Ok(Err(e)) if e.kind() == ErrorKind::VersionMismatch => {
                Outcome::Ok(RegisterRet::CompareAndSet(Err(Mismatch)))
            }
            Ok(Err(e)) => write_failure(&e),
            Err(_) => Outcome::Unknown,
        };
        rec.complete(t, outcome);
    } else {
        let t = rec.invoke(process, (key.to_owned(), RegisterOp::Delete));
        let outcome = match timeout(limit, client.delete(key)).await {
            Ok(Ok(existed)) => {
                seen.insert(key, None);
                Outcome::Ok(RegisterRet::Delete(existed))
            }
            Ok(Err(e)) => write_failure(&e),
            Err(_) => Outcome::Unknown,
        };
        rec.complete(t, outcome);
    }
}

pub(crate) async fn kv_worker(
    world: Arc<World>,
    node: Arc<Node>,
    process: u64,
    mut rng: StdRng,
    counters: Recorder<CounterInput, CounterRet>,
    registers: Recorder<RegisterInput, RegisterRet<String>>,
) {
    let mut seen = HashMap::new();
    let mut n = 0;
    while world.running(&node) {
        if rng.random_bool(0.35) {
            counter_op(&node.client, process, &mut rng, &counters).await;
        } else {
            config_op(&node.client, process, n, &mut rng, &mut seen, &registers).await;
            n += 1;
        }
        sleep(ms(rng.random_range(1..8))).await;
    }
}

/// Linearizability of each key: violations (described) and how many keys were
/// inconclusive.
pub(crate) fn judge<M, I, O>(
    model: &M,
    history: &[Op<(String, I), O>],
    what: &str,
) -> Result<(Vec<String>, usize), String>
where
    M: coord_check::Model<Input = I, Output = O>,
    I: Clone + Debug,
    O: Debug,
{
    let verdicts = Checker::new().check_per_key(model, history, |(k, i)| (k.clone(), i.clone()));
    let mut violations = Vec::new();
    let mut inconclusive = 0;
    for (key, verdict) in &verdicts.verdicts {
        match verdict {
            Verdict::Linearizable { .. } => {}
            Verdict::NotLinearizable(v) => violations.push(format!(
                "{what} {key:?} is not linearizable: {}",
                describe(v, history)
            )),
            Verdict::Inconclusive { steps } => {
                inconclusive += 1;
                eprintln!("{what} {key:?}: inconclusive after {steps} steps");
            }
            Verdict::Malformed { op, reason } => {
                return Err(format!("{what} {key:?}: malformed history at #{op}: {reason}"));
            }
        }
    }
    Ok((violations, inconclusive))
}

/// Whether the history of `key` alone is shown not linearizable.
pub(crate) fn rejects<M, I, O>(model: &M, history: &[Op<(String, I), O>], key: &str) -> bool
where
    M: coord_check::Model<Input = I, Output = O>,
    I: Clone,
    O: Clone,
{
    let ops: Vec<Op<I, O>> = history
        .iter()
        .filter(|op| op.input.0 == key)
        .map(|op| Op {
            process: op.process,
            invoke: op.invoke,
            complete: op.complete,
            input: op.input.1.clone(),
            outcome: op.outcome.clone(),
        })
        .collect();
    Checker::new().check(model, &ops).is_violation()
}

/// Negative control for the counter: a read changed to a value no sequence of these
/// operations reaches. `None` if there is no read to change.
pub(crate) fn counter_mutant(history: &[CounterRecord]) -> Option<bool> {
    let reads: Vec<usize> = (0..history.len())
        .filter(|&i| history[i].input.1 == CounterOp::Get && history[i].is_ok())
        .collect();
    let &i = reads.get(reads.len() / 4)?;
    let mut mutant = history.to_vec();
    if let Outcome::Ok(CounterRet::Value(v)) = &mut mutant[i].outcome {
        *v += 1_000_000_007;
    }
    Some(rejects(&Counter(0), &mutant, &history[i].input.0))
}

/// Negative control for the config: a read made stale — it returns what an earlier read
/// saw, though an acknowledged write completed between that read and it (versions never
/// return, so no linearization explains it). `None` if the history has no such triple.
pub(crate) fn stale_read_mutant(history: &[RegisterRecord]) -> Option<bool> {
    let is_read = |op: &RegisterRecord| op.input.1 == RegisterOp::Get && op.is_ok();
    let is_write = |op: &RegisterRecord| {
        matches!(
            (&op.input.1, &op.outcome),
            (RegisterOp::Put(_), Outcome::Ok(_))
                | (
                    RegisterOp::CompareAndSet { .. },
                    Outcome::Ok(RegisterRet::CompareAndSet(Ok(_)))
                )
        )
    };
    for w in history.iter().filter(|op| is_write(op)) {
        let key = &w.input.0;
        let Some(before) = history.iter().find(|g| {
            &g.input.0 == key && g.precedes(w) && matches!(g.outcome, Outcome::Ok(RegisterRet::Get(Some(_))))
        }) else {
            continue;
        };
        let Some(after) = history
            .iter()
            .position(|g| &g.input.0 == key && is_read(g) && w.precedes(g))
        else {
            continue;
        };
        let mut mutant = history.to_vec();
        mutant[after].outcome = before.outcome.clone();
        return Some(rejects(&Register::new(), &mutant, key));
    }
    None
}

pub(crate) struct KvRun {
    pub(crate) counter_ops: usize,
    pub(crate) counter_unknown: usize,
    pub(crate) config_ops: usize,
    pub(crate) config_unknown: usize,
    pub(crate) counter_violations: Vec<String>,
    pub(crate) config_violations: Vec<String>,
    pub(crate) inconclusive: usize,
    pub(crate) counter_mutant: Option<bool>,
    pub(crate) config_mutant: Option<bool>,
    pub(crate) nemesis: String,
}

pub(crate) async fn kv_history(seed: u64) -> Result<KvRun, String> {
    let mut rng = StdRng::seed_from_u64(seed);
    let world = World::new(&mut rng)?;
    let nemesis_rng = StdRng::from_rng(&mut rng);
    let counters: Recorder<CounterInput, CounterRet> = Recorder::new();
    let registers: Recorder<RegisterInput, RegisterRet<String>> = Recorder::new();
    let mut workers = Vec::new();
    for node in &world.nodes {
        for w in 0..rng.random_range(2..=3) {
            workers.push(tokio::spawn(kv_worker(
                world.clone(),
                node.clone(),
                pid(node.id, w),
                StdRng::from_rng(&mut rng),
                counters.clone(),
                registers.clone(),
            )));
        }
    }
    // The operator deletes a counter (recorded as setting it to 0, what an absent counter
    // reads) or a config key (recorded as a delete).
    let operator: Operator = {
        let (counters, registers) = (counters.clone(), registers.clone());
        Box::new(move |world, rng| {
            let all: Vec<&str> = COUNTERS.iter().chain(&KEYS).copied().collect();
            let key = *all.choose(rng)?;
            let full = format!("{NS}/config/{key}");
            if COUNTERS.contains(&key) {
                let t = counters.invoke(OPERATOR, (key.to_owned(), CounterOp::Set(0)));
                world.cluster.delete_key(&full);
                counters.complete(t, Outcome::Ok(CounterRet::Done));
            } else {
                let t = registers.invoke(OPERATOR, (key.to_owned(), RegisterOp::Delete));
                let existed = world.cluster.delete_key(&full);
                registers.complete(t, Outcome::Ok(RegisterRet::Delete(existed)));
            }
            Some(format!("operator deletes config key {key}"))
        })
    };
    let nemesis = Nemesis {
        profile: Profile::Full,
        operator,
        on_crash: Box::new(|_| {}),
        on_fault: Box::new(|_| {}),
    };
    tokio::spawn(run_nemesis(world.clone(), nemesis_rng, nemesis))
        .await
        .map_err(|e| format!("the nemesis failed: {e}"))?;
    world.settle().await;
    world.join(workers).await?;

    let counter_history = counters.history();
    let config_history = registers.history();
    let unknown = |outcomes: &mut dyn Iterator<Item = bool>| outcomes.filter(|&u| u).count();
    let (counter_violations, inconclusive_counters) = judge(&Counter(0), &counter_history, "counter")?;
    let (config_violations, inconclusive_keys) = judge(&Register::new(), &config_history, "config key")?;
    Ok(KvRun {
        counter_ops: counter_history.len(),
        counter_unknown: unknown(&mut counter_history.iter().map(|op| op.outcome == Outcome::Unknown)),
        config_ops: config_history.len(),
        config_unknown: unknown(&mut config_history.iter().map(|op| op.outcome == Outcome::Unknown)),
        counter_violations,
        config_violations,
        inconclusive: inconclusive_counters + inconclusive_keys,
        counter_mutant: counter_mutant(&counter_history),
        config_mutant: stale_read_mutant(&config_history),
        nemesis: world.nemesis_log(),
    })
}

#[test]
pub(crate) fn counter_and_config_histories() {
    let _one = one_at_a_time();
    let plan = plan();
    let started = std::time::Instant::now();
    let mut failures = Vec::new();
    let (mut counter_ops, mut counter_unknown, mut config_ops, mut config_unknown) = (0, 0, 0, 0);
    let (mut counter_violating, mut config_violating, mut inconclusive) = (0, 0, 0);
    let (mut counter_caught, mut counter_mutants, mut config_caught, mut config_mutants) = (0, 0, 0, 0);
    let results = block_on(run_all(&plan.seeds, kv_history));
    for (seed, run) in results {
        let hint = replay_hint(seed, "counter_and_config_histories");
        let run = match run {
            Ok(run) => run,
            Err(e) => {
                failures.push(format!("seed {seed}: counter and config: {e}\n  {hint}"));
                continue;
            }
        };
        counter_ops += run.counter_ops;
        counter_unknown += run.counter_unknown;
        config_ops += run.config_ops;
        config_unknown += run.config_unknown;
        inconclusive += run.inconclusive;
        for (mutant, caught, tried, what) in [
            (
                run.counter_mutant,
                &mut counter_caught,
                &mut counter_mutants,
                "an unreachable counter read",
            ),
            (
                run.config_mutant,
                &mut config_caught,
                &mut config_mutants,
                "a stale config read",
            ),
        ] {
            if let Some(rejected) = mutant {
                *tried += 1;
                if rejected {
                    *caught += 1;
                } else {
                    failures.push(format!("seed {seed}: {what} was not rejected\n  {hint}"));
                }
            }
        }
        counter_violating += usize::from(!run.counter_violations.is_empty());
        config_violating += usize::from(!run.config_violations.is_empty());
        let violations: Vec<String> = run
            .counter_violations
            .into_iter()
            .chain(run.config_violations)
            .collect();
        if !violations.is_empty() {
            failures.push(format!(
                "seed {seed}: {}\n  nemesis: {}\n  {hint}",
                violations.join("\n  "),
                run.nemesis
            ));
        }
    }
    let seeds = plan.seeds.len();
    println!(
        "histories counter: {seeds} seeds, {counter_ops} ops, {counter_unknown} unknown, {counter_violating} \
         violations; mutant unreachable-read rejected in {counter_caught}/{counter_mutants}"
    );
    println!(
        "histories config: {seeds} seeds, {config_ops} ops, {config_unknown} unknown, {config_violating} \
         violations; mutant stale-read rejected in {config_caught}/{config_mutants}"
    );
    println!(
        "histories counter+config: {inconclusive} keys inconclusive; {:.1}s",
        started.elapsed().as_secs_f64()
    );
    if !plan.replay {
        if counter_mutants == 0 {
            failures.push("no history had a counter read to corrupt".to_owned());
        }
        if config_mutants == 0 {
            failures.push("no history had a read, a write and a read in a row to make stale".to_owned());
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
