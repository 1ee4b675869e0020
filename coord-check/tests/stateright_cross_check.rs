//! Cross-checks the linearizability search against stateright's `LinearizabilityTester`
//! on small random histories (complete and in-flight operations) of a register and a
//! counter: both must agree on every history.

use coord_check::{Counter, CounterOp, CounterRet, Model, Op, Verdict, check};
use stateright::semantics::{ConsistencyTester, LinearizabilityTester, SequentialSpec};

/// SplitMix64: a small seeded generator, so that every run checks the same histories.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn chance(&mut self, one_in: u64) -> bool {
        self.below(one_in) == 0
    }
}

/// A register with value-compare-and-set, as both a coord-check model and a stateright
/// sequential specification.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Reg(u8);

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum RegOp {
    Read,
    Write(u8),
    Cas(u8, u8),
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum RegRet {
    Read(u8),
    Written,
    Cas(bool),
}

impl Model for Reg {
    type Input = RegOp;
    type Output = RegRet;
    fn step(&self, input: &RegOp, output: Option<&RegRet>) -> Option<Self> {
        let mut next = self.clone();
        let ret = next.invoke(input);
        match output {
            None => match (input, ret) {
                // An unknown CAS only needs its effective transition; no effect is
                // the same as leaving it out.
                (RegOp::Cas(..), RegRet::Cas(false)) => None,
                _ => Some(next),
            },
            Some(out) => (*out == ret).then_some(next),
        }
    }
}

impl SequentialSpec for Reg {
    type Op = RegOp;
    type Ret = RegRet;
    fn invoke(&mut self, op: &RegOp) -> RegRet {
        match op {
            RegOp::Read => RegRet::Read(self.0),
            RegOp::Write(v) => {
                self.0 = *v;
                RegRet::Written
            }
            RegOp::Cas(from, to) => {
                let hit = self.0 == *from;
                if hit {
                    self.0 = *to;
                }
                RegRet::Cas(hit)
            }
        }
    }
}

/// The shipped counter model, as a stateright specification.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct SpecCounter(i64);

impl Model for SpecCounter {
    type Input = CounterOp;
    type Output = CounterRet;
    fn step(&self, input: &CounterOp, output: Option<&CounterRet>) -> Option<Self> {
        Counter(self.0).step(input, output).map(|c| SpecCounter(c.0))
    }
}

impl SequentialSpec for SpecCounter {
    type Op = CounterOp;
    type Ret = CounterRet;
    fn invoke(&mut self, op: &CounterOp) -> CounterRet {
        match op {
            CounterOp::Get => CounterRet::Value(self.0),
            CounterOp::Add(d) => {
                self.0 += d;
                CounterRet::Value(self.0)
            }
            CounterOp::Set(v) => {
                self.0 = *v;
                CounterRet::Done
            }
        }
    }
}

enum Event<I, O> {
    Invoke(u64, I),
    Return(u64, O),
}

/// A random concurrent execution of up to 8 operations by up to 3 processes against a
/// real object `spec`: each operation takes effect at a random point between its
/// invocation and return; some never return (they took effect or not); sometimes one
/// output is then corrupted, making most such histories non-linearizable.
fn execution<S>(
    rng: &mut Rng,
    mut spec: S,
    random_op: impl Fn(&mut Rng) -> S::Op,
    random_ret: impl Fn(&mut Rng) -> S::Ret,
) -> Vec<Event<S::Op, S::Ret>>
where
    S: SequentialSpec,
    S::Op: Clone,
    S::Ret: Clone,
{
    #[derive(Clone)]
    enum Proc<I, O> {
        Idle,
        Running {
            op: I,
            ret: Option<O>,
            hangs: bool,
        },
        /// Invoked, and will neither take effect nor return.
        Stuck,
    }
    let processes = 1 + rng.below(3) as usize;
    let mut budget = 1 + rng.below(8);
    let mut procs: Vec<Proc<S::Op, S::Ret>> = vec![Proc::Idle; processes];
    let mut events = Vec::new();
    loop {
        // Choices: (process, action) where action 0 invokes, 1 takes effect, 2 returns.
        let mut choices = Vec::new();
        for (p, state) in procs.iter().enumerate() {
            match state {
                Proc::Idle if budget > 0 => choices.push((p, 0)),
                Proc::Idle => {}
                Proc::Running { ret: None, .. } => choices.push((p, 1)),
                Proc::Running {
                    ret: Some(_),
                    hangs: false,
                    ..
                } => choices.push((p, 2)),
                Proc::Running { .. } | Proc::Stuck => {}
            }
        }
        if choices.is_empty() {
            break;
        }
        let (p, action) = choices[rng.below(choices.len() as u64) as usize];
        match action {
            0 => {
                budget -= 1;
                let op = random_op(rng);
                events.push(Event::Invoke(p as u64, op.clone()));
                let hangs = rng.chance(6);
                procs[p] = if hangs && rng.chance(2) {
                    Proc::Stuck
                } else {
                    Proc::Running { op, ret: None, hangs }
                };
            }
            1 => {
                if let Proc::Running { op, hangs, .. } = procs[p].clone() {
                    let ret = spec.invoke(&op);
                    procs[p] = Proc::Running {
                        op,
                        ret: Some(ret),
                        hangs,
                    };
                }
            }
            _ => {
                if let Proc::Running { ret: Some(ret), .. } = std::mem::replace(&mut procs[p], Proc::Idle) {
                    events.push(Event::Return(p as u64, ret));
                }
            }
        }
    }
    if rng.chance(3) {
        let returns: Vec<usize> = (0..events.len())
            .filter(|&i| matches!(events[i], Event::Return(..)))
            .collect();
        if !returns.is_empty() {
            let i = returns[rng.below(returns.len() as u64) as usize];
            if let Event::Return(p, _) = events[i] {
                events[i] = Event::Return(p, random_ret(rng));
            }
        }
    }
    events
}

/// Ours, stateright's, and the history checked.
type Verdicts<I, O> = (bool, bool, Vec<Op<I, O>>);

/// Both verdicts on one execution.
fn verdicts<S>(init: S, events: &[Event<S::Op, S::Ret>]) -> Verdicts<S::Op, S::Ret>
where
    S: SequentialSpec + Model<Input = <S as SequentialSpec>::Op, Output = <S as SequentialSpec>::Ret>,
    <S as SequentialSpec>::Op: Clone + std::fmt::Debug,
    <S as SequentialSpec>::Ret: Clone + std::fmt::Debug,
{
    let mut tester = LinearizabilityTester::new(init.clone());
    let mut history: Vec<Op<S::Op, S::Ret>> = Vec::new();
    let mut open: Vec<Option<usize>> = vec![None; 3];
    for (t, event) in events.iter().enumerate() {
        match event {
            Event::Invoke(p, op) => {
                tester
                    .on_invoke(*p, op.clone())
                    .expect("one op in flight per process");
                open[*p as usize] = Some(history.len());
                history.push(Op::unknown(*p, t as u64, op.clone()));
            }
            Event::Return(p, ret) => {
                tester
                    .on_return(*p, ret.clone())
                    .expect("a return follows an invoke");
                let i = open[*p as usize].take().expect("a return follows an invoke");
                history[i].complete = Some(t as u64);
                history[i].outcome = coord_check::Outcome::Ok(ret.clone());
            }
        }
    }
    let ours = match check(&init, &history) {
        Verdict::Linearizable { .. } => true,
        Verdict::NotLinearizable(_) => false,
        other => panic!("unexpected verdict {other}"),
    };
    (ours, tester.is_consistent(), history)
}

fn cross_check<S>(
    name: &str,
    init: S,
    random_op: impl Fn(&mut Rng) -> <S as SequentialSpec>::Op + Copy,
    random_ret: impl Fn(&mut Rng) -> <S as SequentialSpec>::Ret + Copy,
) where
    S: SequentialSpec + Model<Input = <S as SequentialSpec>::Op, Output = <S as SequentialSpec>::Ret>,
    <S as SequentialSpec>::Op: Clone + std::fmt::Debug,
    <S as SequentialSpec>::Ret: Clone + std::fmt::Debug,
{
    let (mut accepted, mut rejected, mut unknown_ops) = (0, 0, 0);
    for seed in 0..4_000u64 {
        let mut rng = Rng(seed);
        let events = execution(&mut rng, init.clone(), random_op, random_ret);
        let (ours, theirs, history) = verdicts(init.clone(), &events);
        assert_eq!(
            ours, theirs,
            "{name}: seed {seed} disagrees (ours {ours}) on {history:#?}"
        );
        if ours {
            accepted += 1;
        } else {
            rejected += 1;
        }
        unknown_ops += history.iter().filter(|op| op.complete.is_none()).count();
    }
    eprintln!("{name}: {accepted} accepted, {rejected} rejected, {unknown_ops} unknown ops");
    // Both kinds of verdict, and unknown operations, were exercised.
    assert!(
        accepted > 1_000 && rejected > 300,
        "{name}: {accepted} accepted, {rejected} rejected"
    );
    assert!(unknown_ops > 500, "{name}: only {unknown_ops} unknown ops");
}

#[test]
fn register_verdicts_agree_with_stateright() {
    cross_check(
        "register",
        Reg(0),
        |rng| match rng.below(3) {
            0 => RegOp::Read,
            1 => RegOp::Write(rng.below(3) as u8),
            _ => RegOp::Cas(rng.below(3) as u8, rng.below(3) as u8),
        },
        |rng| match rng.below(3) {
            0 => RegRet::Read(rng.below(3) as u8),
            1 => RegRet::Written,
            _ => RegRet::Cas(rng.chance(2)),
        },
    );
}

#[test]
fn counter_verdicts_agree_with_stateright() {
    cross_check(
        "counter",
        SpecCounter(0),
        |rng| match rng.below(3) {
            0 => CounterOp::Get,
            1 => CounterOp::Add(1 + rng.below(2) as i64),
            _ => CounterOp::Set(rng.below(3) as i64),
        },
        |rng| match rng.below(3) {
            0 | 1 => CounterRet::Value(rng.below(5) as i64),
            _ => CounterRet::Done,
        },
    );
}
