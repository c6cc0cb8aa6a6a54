//! The cold tier's calls as the roles' user (feature `cold`): the leader's move and load,
//! a cold id scheduled again, looked up, cancelled and rescheduled, its windows read,
//! the repair of its index.

use super::{check, set_clock, step, yes, Admin, Step};
use std::time::Duration;
use tickless_durable::{ColdTier, JobState, LeaderOptions, Queue};
use tickless_test_support::{at, T0};

const HOUR: u64 = 3_600_000;

/// The store's directory, removed however the roles end.
pub(super) struct Dir(pub(super) std::path::PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub(super) async fn roles(url: &str, name: &str, admin: &mut Admin) -> Step<()> {
    let name = format!("{name}-cold");
    let dir =
        Dir(std::env::temp_dir().join(format!("tickless-acl-cold-{}-{name}", std::process::id())));
    let tier = step("cold tier", ColdTier::local(&dir.0))?
        .horizon(Duration::from_secs(6 * 3600))
        .window(Duration::from_secs(3600));
    let queue = step("connect", Queue::connect(url, &name).await)?.with_cold_tier(tier);
    set_clock(admin, &name, T0).await;
    let far = at(T0 + 48 * HOUR);
    for id in ["f1", "f2", "f3"] {
        yes("schedule", queue.schedule(id, b"x", far).await)?;
    }
    let mut leader = queue.leader(LeaderOptions::default());
    step("cold move", leader.step().await)?;
    let moved = leader.stats().cold_moved;
    check("cold move", moved == 3, || format!("moved {moved}"))?;
    let again = step("schedule a cold id", queue.schedule("f1", b"y", far).await)?;
    check("schedule a cold id", !again, || "added".into())?;
    let state = step("job", queue.job("f2").await)?.map(|info| info.state);
    check("job", state == Some(JobState::Cold), || {
        format!("{state:?}")
    })?;
    yes("cancel a cold job", queue.cancel("f2").await)?;
    yes(
        "reschedule a cold job",
        queue.reschedule("f3", at(T0 + 60_000)).await,
    )?;
    let windows = step("cold_windows", queue.cold_windows().await)?;
    let cold: u64 = windows.iter().map(|w| w.jobs).sum();
    check("cold_windows", cold == 1, || format!("{windows:?}"))?;
    step("repair", queue.repair().await)?;
    set_clock(admin, &name, T0 + 47 * HOUR).await;
    step("cold load", leader.step().await)?;
    let loaded = leader.stats().cold_loaded;
    check("cold load", loaded == 1, || format!("loaded {loaded}"))
}
