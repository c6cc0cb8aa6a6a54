//! The cold tier's share of the [`Leader`]: its passes (`crate::cold`), run as a task
//! of their own beside the ticks, and a leader without a tier noticing cold jobs it
//! cannot load.

#[cfg(feature = "cold")]
use super::Role;
use super::{Leader, FAR};
use crate::error::Error;
#[cfg(feature = "cold")]
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::time::Instant;

/// When the leader next looks at the cold tier, and the pass running now.
#[cfg(feature = "cold")]
#[derive(Debug)]
pub(super) struct ColdRun {
    at: Instant,
    /// The pass running now: its leadership (token), when it started if it sweeps first.
    task: Option<(u64, Option<Instant>, PassTask)>,
    /// The leadership (token) that last swept the store's orphans in a pass that ended
    /// whole, and when that pass started: a new leadership's first pass sweeps, and then
    /// the first pass a `ColdTier::sweep_every` after that.
    swept: Option<(u64, Instant)>,
    /// Stepped by hand (`Leader::step`): its passes run there, whole, and none as a
    /// task (one started by the round and then stopped by the step could have taken
    /// jobs, or written an object, for nothing).
    by_hand: bool,
}

/// A leader stopped or dropped stops its pass too (a pass cut short is a crash of its
/// own: its token fences what it would still write, the next sweep deletes its object).
/// A pass running as a task: what it did, and how it ended.
#[cfg(feature = "cold")]
type PassTask = tokio::task::JoinHandle<(crate::cold::pass::Pass, Result<(), Error>)>;

#[cfg(feature = "cold")]
impl Drop for ColdRun {
    fn drop(&mut self) {
        if let Some((_, _, task)) = self.task.take() {
            task.abort();
        }
    }
}

#[cfg(feature = "cold")]
impl ColdRun {
    pub(super) fn new() -> ColdRun {
        ColdRun {
            at: Instant::now(),
            task: None,
            swept: None,
            by_hand: false,
        }
    }
}

/// How often a leader without a cold tier looks for cold windows near (see
/// `Leader::look_for_cold_jobs`), and how near is too near.
const COLD_LOOK_EVERY: Duration = Duration::from_secs(60);
const COLD_LOOK_AHEAD_MS: u64 = 3_600_000;

impl Leader {
    /// `step` is driving this leader: no pass as a task from now on.
    #[cfg(feature = "cold")]
    pub(super) fn cold_by_hand(&mut self) {
        self.cold.by_hand = true;
    }

    /// `step`'s share: a whole pass now (a running one is stopped: its token fences it).
    #[cfg(feature = "cold")]
    pub(super) async fn cold_pass_now(&mut self) -> Result<(), Error> {
        self.cold.by_hand = true;
        if let (Some(tier), Role::Leading { .. }) = (self.queue.cold_tier().cloned(), self.role) {
            if let Some((_, _, task)) = self.cold.task.take() {
                task.abort();
            }
            // The pass runs inline, and nothing renews the lease while it runs (the run
            // loop does, beside a pass on a task of its own): so first renew it to what
            // the work ahead allows. A new leadership holds the busy lease (100 ms), and
            // a first pass longer than that was fenced at its commit, every round.
            self.renew().await?;
            let Role::Leading { token, .. } = self.role else {
                return Ok(());
            };
            let started = Instant::now();
            let (pass, result) =
                crate::cold::pass::pass(self.queue.rdb(), &tier, token, true).await;
            self.cold_done(token, Some(started), pass, result.is_ok());
            result?;
        }
        Ok(())
    }

    /// When the cold tier wants this leader next (never, without one).
    pub(super) fn cold_at(&self) -> Instant {
        #[cfg(feature = "cold")]
        if self.queue.cold_tier().is_some() {
            return self.cold.at;
        }
        Instant::now() + FAR
    }

    /// The cold tier's share of a round: collects a finished pass (an error is counted as
    /// the leader's, as the takeover's repair is: the ticks go on), and starts the next
    /// when it is time. A pass runs as a task of its own, fenced by this leadership's
    /// token, so that a long move or load never holds up a tick.
    #[cfg(feature = "cold")]
    pub(super) async fn cold_step(&mut self) {
        let (Some(tier), Role::Leading { token, .. }) =
            (self.queue.cold_tier().cloned(), self.role)
        else {
            return;
        };
        if self.cold.by_hand {
            return;
        }
        if let Some((_, _, task)) = &self.cold.task {
            if !task.is_finished() {
                // Look again in `every`: `at` is past once a pass outlasts it, and the
                // loop's deadline would then be past at every round, a loop that never
                // yields (a current-thread runtime never ran the pass again).
                self.cold.at = Instant::now() + tier.every();
                return;
            }
        }
        if let Some((ran, swept_at, task)) = self.cold.task.take() {
            if let Ok((pass, result)) = task.await {
                self.cold_done(ran, swept_at, pass, result.is_ok());
                if let Err(err) = result {
                    self.queue.report("leader", &err).await;
                    crate::trace::event!(warn, queue = self.queue.name(), error = %err, "cold tier pass failed");
                    self.shared.counted(&err);
                }
            }
        }
        let now = Instant::now();
        if now < self.cold.at {
            return;
        }
        self.cold.at = now + tier.every();
        let queue = self.queue.clone();
        // A new leadership's first pass sweeps, and the first a `sweep_every` after its
        // last sweep.
        let sweep = match self.cold.swept {
            Some((led, at)) if led == token => {
                now.saturating_duration_since(at) >= tier.sweep_period()
            }
            _ => true,
        };
        self.cold.task = Some((
            token,
            sweep.then_some(now),
            tokio::spawn(
                async move { crate::cold::pass::pass(queue.rdb(), &tier, token, sweep).await },
            ),
        ));
    }

    #[cfg(feature = "cold")]
    /// What a pass did (`whole`: it ended without an error) goes into the stats; a pass
    /// that swept (`swept_at`: when it started) and ended whole is the last sweep.
    pub(super) fn cold_done(
        &mut self,
        token: u64,
        swept_at: Option<Instant>,
        pass: crate::cold::pass::Pass,
        whole: bool,
    ) {
        if pass.fenced {
            // Redis refused the token: this leadership has ended.
            if matches!(self.role, Role::Leading { token: now, .. } if now == token) {
                self.lose();
            }
        } else if let (true, Some(at)) = (whole, swept_at) {
            self.cold.swept = Some((token, at));
        }
        self.shared
            .cold_moved
            .fetch_add(pass.moved, Ordering::Relaxed);
        self.shared
            .cold_loaded
            .fetch_add(pass.loaded, Ordering::Relaxed);
        if pass.moved + pass.loaded + pass.swept > 0 {
            crate::trace::event!(
                debug,
                queue = self.queue.name(),
                moved = pass.moved,
                loaded = pass.loaded,
                retired = pass.retired,
                swept = pass.swept,
                "cold tier pass"
            );
        }
    }

    /// A leader without the queue's cold tier cannot load cold jobs: they would wait for
    /// ever, silently. So it looks (once a minute, and every round once it has seen them)
    /// whether a cold window starts within the hour, and if so fails its round with an
    /// error saying so (counted, warned, and shown on the dashboard as any failing
    /// round; it still ticks first, so hot jobs go on).
    /// `now`: look whatever the timer says (`step`, on a manual clock that jumps).
    pub(super) async fn look_for_cold_jobs(&mut self, now: bool) -> Result<(), Error> {
        #[cfg(feature = "cold")]
        if self.queue.cold_tier().is_some() {
            return Ok(());
        }
        let (at, seen) = self.cold_look;
        if !self.is_leading() || (!now && !seen && Instant::now() < at) {
            return Ok(());
        }
        self.cold_look = (Instant::now() + COLD_LOOK_EVERY, false);
        let key = self.queue.rdb().key(crate::contract::Key::ColdWindows);
        let head: Vec<(String, u64)> = redis::cmd("ZRANGE")
            .arg(key)
            .arg(0)
            .arg(0)
            .arg("WITHSCORES")
            .query_async(&mut self.queue.rdb().conn())
            .await
            .map_err(|err| Error::redis(key, "ZRANGE", err))?;
        let (now_ms, _) = self.queue_now_estimate();
        match head.first() {
            Some((_, start)) if *start <= now_ms + COLD_LOOK_AHEAD_MS => {
                self.cold_look.1 = true;
                Err(Error::store(
                    "load",
                    key,
                    format!(
                        "a cold window starts at {start} ms (Unix) and this leader has no cold \
                         tier to load it from: every leader of a queue with cold jobs needs \
                         Queue::with_cold_tier (feature `cold`)"
                    ),
                ))
            }
            _ => Ok(()),
        }
    }
}
