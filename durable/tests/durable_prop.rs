//! Property test: schedule / cancel / reschedule / advance / claim / ack / fail against an
//! oracle, on a real `redis-server`, with the queue on a manual clock that only the test
//! moves (so nothing sleeps and every due time is exact).

use tickless_test_support as support;

use proptest::prelude::*;
use proptest::test_runner::{Config, FileFailurePersistence, TestRunner};
use std::collections::BTreeMap;
use std::time::Duration;
use support::{at, queue_name, RedisServer};
use tickless_durable::{Backoff, Failed, Job, JobState, Queue, WorkerOptions};

const IDS: u8 = 8;
const LEASE_MS: u64 = 10_000;
const BACKOFF_MS: u64 = 1_500;
const MAX_ATTEMPTS: u32 = 2;

#[derive(Clone, Debug)]
enum Op {
    Schedule(u8, u64),
    Cancel(u8),
    CancelBatch(Vec<u8>),
    Reschedule(u8, u64),
    Advance(u64),
    Claim,
    Ack(u8),
    Fail(u8),
}

/// Delays from now: mostly within seconds (level 0 and the staged window), some minutes
/// and hours ahead (levels 1 and 2), and some in the past.
fn delay() -> impl Strategy<Value = u64> {
    prop_oneof![
        2 => 0u64..3,
        4 => 0u64..3_000,
        2 => 0u64..200_000,
        1 => 0u64..20_000_000,
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..IDS, delay()).prop_map(|(id, d)| Op::Schedule(id, d)),
        1 => (0..IDS).prop_map(Op::Cancel),
        1 => proptest::collection::vec(0..IDS, 1..6).prop_map(Op::CancelBatch),
        2 => (0..IDS, delay()).prop_map(|(id, d)| Op::Reschedule(id, d)),
        4 => prop_oneof![0u64..3, 0u64..2_000, 0u64..100_000, 0u64..10_000_000].prop_map(Op::Advance),
        3 => Just(Op::Claim),
        2 => (0..IDS).prop_map(Op::Ack),
        1 => (0..IDS).prop_map(Op::Fail),
    ]
}

#[derive(Clone, Debug, PartialEq)]
enum State {
    /// Scheduled, staged or ready: due at this time.
    Waiting {
        due: u64,
        attempts: u32,
    },
    InFlight {
        /// The due time its record keeps (a lease that ends leaves it as it was).
        due: u64,
        lease_end: u64,
        attempts: u32,
    },
    Dead {
        attempts: u32,
    },
}

struct Model {
    now: u64,
    jobs: BTreeMap<String, State>,
}

impl Model {
    /// Leases that ended go back to waiting (due at once), or die after the last attempt.
    fn end_leases(&mut self) {
        for state in self.jobs.values_mut() {
            if let State::InFlight {
                due,
                lease_end,
                attempts,
            } = *state
            {
                if lease_end <= self.now {
                    *state = if attempts >= MAX_ATTEMPTS {
                        State::Dead { attempts }
                    } else {
                        State::Waiting { due, attempts }
                    };
                }
            }
        }
    }
}

async fn run_case(url: &str, start: u64, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let queue = Queue::connect(url, &queue_name("prop"))
        .await
        .unwrap()
        .with_max_attempts(MAX_ATTEMPTS);
    queue.set_manual_clock(Some(at(start))).await.unwrap();
    let mut leader = queue.leader(Default::default());
    let mut options = WorkerOptions::default();
    options.lease = Duration::from_millis(LEASE_MS);
    options.backoff = Backoff::fixed(Duration::from_millis(BACKOFF_MS));
    let worker = queue.worker(options);
    let mut model = Model {
        now: start,
        jobs: BTreeMap::new(),
    };
    let mut held: BTreeMap<String, Job> = BTreeMap::new();
    for op in ops {
        match op {
            Op::Schedule(id, d) => {
                let id = format!("job{id}");
                let added = queue
                    .schedule(&id, id.as_bytes(), at(model.now + d))
                    .await
                    .unwrap();
                let expected = !model.jobs.contains_key(&id);
                prop_assert_eq!(added, expected, "schedule {}", id);
                if expected {
                    model.jobs.insert(
                        id,
                        State::Waiting {
                            due: model.now + d,
                            attempts: 0,
                        },
                    );
                }
            }
            Op::Cancel(id) => {
                let id = format!("job{id}");
                let removed = queue.cancel(&id).await.unwrap();
                prop_assert_eq!(removed, model.jobs.remove(&id).is_some(), "cancel {}", id);
                held.remove(&id);
            }
            Op::CancelBatch(ids) => {
                let ids: Vec<String> = ids.iter().map(|id| format!("job{id}")).collect();
                let removed = queue
                    .cancel_batch(ids.iter().map(String::as_str))
                    .await
                    .unwrap();
                let expected: Vec<bool> = ids
                    .iter()
                    .map(|id| {
                        held.remove(id);
                        model.jobs.remove(id).is_some()
                    })
                    .collect();
                prop_assert_eq!(removed, expected, "cancel_batch {:?}", ids);
            }
            Op::Reschedule(id, d) => {
                let id = format!("job{id}");
                let moved = queue.reschedule(&id, at(model.now + d)).await.unwrap();
                let expected = match model.jobs.get_mut(&id) {
                    Some(State::Waiting { due, .. }) => {
                        *due = model.now + d;
                        true
                    }
                    _ => false,
                };
                prop_assert_eq!(moved, expected, "reschedule {}", id);
            }
            Op::Advance(d) => {
                // The leader acts whenever time moves, as a running one would.
                queue
                    .advance_manual_clock(Duration::from_millis(d))
                    .await
                    .unwrap();
                leader.step().await.unwrap();
                model.now += d;
                model.end_leases();
            }
            Op::Claim => {
                leader.step().await.unwrap();
                let jobs = worker.try_claim(100).await.unwrap();
                let mut got: Vec<(String, u32)> = jobs
                    .iter()
                    .map(|j| (j.id().to_string(), j.attempt()))
                    .collect();
                got.sort();
                let mut want = Vec::new();
                for (id, state) in &mut model.jobs {
                    if let State::Waiting { due, attempts } = *state {
                        if due <= model.now {
                            want.push((id.clone(), attempts + 1));
                            *state = State::InFlight {
                                due,
                                lease_end: model.now + LEASE_MS,
                                attempts: attempts + 1,
                            };
                        }
                    }
                }
                prop_assert_eq!(&got, &want, "claim at {}", model.now - start);
                for job in jobs {
                    prop_assert!(job.claimed_at() >= job.due(), "early: {:?}", job);
                    held.insert(job.id().to_string(), job);
                }
            }
            Op::Ack(id) => {
                let id = format!("job{id}");
                if let Some(job) = held.remove(&id) {
                    let acked = worker.ack(&job).await.unwrap();
                    let expected = matches!(model.jobs.get(&id),
                        Some(State::InFlight { attempts, .. }) if *attempts == job.attempt());
                    prop_assert_eq!(acked, expected, "ack {}", id);
                    if expected {
                        model.jobs.remove(&id);
                    }
                }
            }
            Op::Fail(id) => {
                let id = format!("job{id}");
                if let Some(job) = held.remove(&id) {
                    let outcome = worker.fail(&job, "it broke").await.unwrap();
                    let expected = match model.jobs.get(&id) {
                        Some(State::InFlight { attempts, .. }) if *attempts == job.attempt() => {
                            if *attempts >= MAX_ATTEMPTS {
                                Failed::Dead
                            } else {
                                Failed::Retried
                            }
                        }
                        _ => Failed::LeaseLost,
                    };
                    prop_assert_eq!(outcome, expected, "fail {}", id);
                    match expected {
                        Failed::Dead => {
                            let attempts = job.attempt();
                            model.jobs.insert(id, State::Dead { attempts });
                        }
                        Failed::Retried => {
                            let attempts = job.attempt();
                            model.jobs.insert(
                                id,
                                State::Waiting {
                                    due: model.now + BACKOFF_MS,
                                    attempts,
                                },
                            );
                        }
                        _ => {}
                    }
                }
            }
        }
    }
    // The counts agree with the model, and nothing is left in a state the model lacks.
    leader.step().await.unwrap();
    let stats = queue.stats().await.unwrap();
    let in_flight = model
        .jobs
        .values()
        .filter(|s| matches!(s, State::InFlight { .. }))
        .count();
    let dead = model
        .jobs
        .values()
        .filter(|s| matches!(s, State::Dead { .. }))
        .count();
    prop_assert_eq!(stats.in_flight, in_flight as u64);
    prop_assert_eq!(stats.dead, dead as u64);
    // Every job, as the queue holds it, is as the model has it; ended ones are gone.
    for n in 0..IDS {
        let id = format!("job{n}");
        let info = queue.job(&id).await.unwrap();
        let Some(state) = model.jobs.get(&id) else {
            prop_assert!(info.is_none(), "{} ended, yet the queue has {:?}", id, info);
            continue;
        };
        let Some(info) = info else {
            return Err(TestCaseError::fail(format!(
                "{id} is gone, the model has it {state:?}"
            )));
        };
        let seen = (info.state, info.attempts);
        match *state {
            State::Waiting { due, attempts } => {
                let place = if due <= model.now {
                    JobState::Ready
                } else {
                    JobState::Scheduled
                };
                prop_assert_eq!(seen, (place, attempts), "{} {:?}", id, state);
                prop_assert_eq!(info.due, at(due), "{} {:?}", id, state);
                prop_assert_eq!(info.lease_ends, None, "{}", id);
            }
            State::InFlight {
                due,
                lease_end,
                attempts,
            } => {
                prop_assert_eq!(seen, (JobState::InFlight, attempts), "{} {:?}", id, state);
                prop_assert_eq!(info.due, at(due), "{} {:?}", id, state);
                prop_assert_eq!(info.lease_ends, Some(at(lease_end)), "{}", id);
            }
            State::Dead { attempts } => {
                prop_assert_eq!(seen, (JobState::Dead, attempts), "{} {:?}", id, state);
            }
        }
    }
    Ok(())
}

#[test]
fn queue_agrees_with_an_oracle_on_a_manual_clock() {
    let server = RedisServer::start_with_fsync("everysec");
    let url = server.url();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // A failing case is kept beside this file and tried first next time.
    let mut runner = TestRunner::new(Config {
        cases: 512,
        source_file: Some(file!()),
        failure_persistence: Some(Box::new(FileFailurePersistence::WithSource(
            "proptest-regressions",
        ))),
        ..Config::default()
    });
    // Starts vary the alignment of the wheel's slots.
    let case = (0u64..5_000, proptest::collection::vec(op(), 1..60));
    runner
        .run(&case, |(offset, ops)| {
            runtime.block_on(run_case(&url, 1_700_000_000_000 + offset, ops))
        })
        .unwrap();
}
