//! A missing grant changes nothing: as a user without any one grant of README's line,
//! every call of the queue's (schedule, cancel, reschedule, claim, extend, ack, fail,
//! the leader's acquire and tick) either succeeds or fails with a permission error that
//! names the grant, and leaves every key of the queue byte for byte as it was (`DUMP`).
//! Redis refuses a command only when a script reaches it and keeps what the script wrote
//! before: lib.lua's `acl_check` checks every command first.

use super::{at, cmd, readme_rules, set_clock, set_user, Admin, T0};
use std::time::Duration;
use support::{queue_name, readme_user, RedisServer};
use tickless_durable::{Error, LeaderOptions, Queue, WorkerOptions};
use tickless_test_support as support;

/// Every key of queue `name`, sorted, with its `DUMP`.
async fn snapshot(admin: &mut Admin, name: &str) -> Vec<(String, Vec<u8>)> {
    let mut keys: Vec<String> = cmd(admin, &["KEYS", &format!("tickless:{{{name}}}:*")]).await;
    keys.sort();
    let mut out = Vec::new();
    for key in keys {
        let dump: Vec<u8> = cmd(admin, &["DUMP", &key]).await;
        out.push((key, dump));
    }
    out
}

/// Whether `err` names `grant` (`+hset`): our check's `grant +hset)`, or Redis's own
/// refusal of a command sent outside a script (`'hset' command`).
fn names(err: &Error, grant: &str) -> bool {
    let text = err.to_string();
    let command = grant.trim_start_matches('+');
    err.is_permission()
        && (text.contains(&format!("grant {grant})")) || text.contains(&format!("'{command}'")))
}

/// The queue's state before the calls, made by the test's own (default) user: a job in
/// flight to ack and one to fail, one ready, one staged, one in a bucket, and one due at
/// T0 + 1 s for the leader to move (the clock is then set to T0 + 2 s).
async fn setup(url: &str, name: &str, admin: &mut Admin) -> Vec<tickless_durable::Job> {
    let queue = Queue::connect(url, name).await.unwrap();
    set_clock(admin, name, T0).await;
    for id in ["f1", "f2"] {
        assert!(queue.schedule(id, b"x", at(T0)).await.unwrap());
    }
    let flying = queue
        .worker(WorkerOptions::default())
        .try_claim(2)
        .await
        .unwrap();
    assert_eq!(flying.len(), 2);
    for (id, due) in [
        ("r", T0),
        ("s", T0 + 5_000),
        ("b", T0 + 3_600_000),
        ("t", T0 + 1_000),
    ] {
        assert!(queue.schedule(id, b"y", at(due)).await.unwrap());
    }
    set_clock(admin, name, T0 + 2_000).await;
    flying
}

/// What a call's outcome says is wrong: a refusal that does not name `grant`, or one
/// that changed a key (`before` and `after` the call differ).
fn judge(
    call: &str,
    result: &Result<(), Error>,
    grant: &str,
    before: &[(String, Vec<u8>)],
    after: &[(String, Vec<u8>)],
) -> Vec<String> {
    let mut wrong = Vec::new();
    if let Err(err) = result {
        if !names(err, grant) {
            wrong.push(format!("{call}: an error not naming {grant}: {err}"));
        }
        if before != after {
            let changed: Vec<&str> = before
                .iter()
                .chain(after)
                .filter(|kv| !(before.contains(kv) && after.contains(kv)))
                .map(|(key, _)| key.as_str())
                .collect();
            wrong.push(format!("{call} failed ({err}) and changed {changed:?}"));
        }
    }
    wrong
}

/// The calls as `url`'s user on queue `name` (set up by `setup` as the default user):
/// what went wrong, and how many calls were refused.
async fn calls(
    server: &RedisServer,
    url: &str,
    name: &str,
    grant: &str,
    admin: &mut Admin,
) -> (Vec<String>, usize) {
    let flying = setup(&server.admin_url(), name, admin).await;
    let mut wrong = Vec::new();
    let mut refused = 0;
    let mut before = snapshot(admin, name).await;
    let queue = match Queue::connect(url, name).await {
        Ok(queue) => queue,
        Err(err) => {
            let after = snapshot(admin, name).await;
            return (judge("connect", &Err(err), grant, &before, &after), 1);
        }
    };
    let worker = queue.worker(WorkerOptions::default());
    let mut options = LeaderOptions::default();
    options.busy_lease = Duration::from_secs(86_400);
    options.idle_lease = options.busy_lease;
    let mut leader = queue.leader(options);
    let batch = [
        ("n1", &b"1"[..], at(T0).into()),
        ("n2", b"2", at(T0 + 5_000).into()),
        ("n3", b"3", at(T0 + 7_200_000).into()),
    ];
    // The leader first: its takeover starts a repair pass in the background, which must
    // find nothing to fix (as after `setup`, with jobs in flight and the lease marker
    // theirs) while the other calls are judged.
    for call in [
        "leader step",
        "leader step again",
        "schedule_batch",
        "schedule",
        "cancel bucket",
        "cancel ready",
        "reschedule",
        "claim",
        "extend",
        "ack",
        "fail",
    ] {
        let result = match call {
            "schedule_batch" => queue.schedule_batch(batch).await.map(drop),
            "schedule" => queue
                .schedule("n4", b"4", at(T0 + 86_400_000))
                .await
                .map(drop),
            "cancel bucket" => queue.cancel("b").await.map(drop),
            "cancel ready" => queue.cancel("r").await.map(drop),
            "reschedule" => queue.reschedule("s", at(T0 + 10_800_000)).await.map(drop),
            "claim" => worker.try_claim(1).await.map(drop),
            "extend" => worker.extend(&flying).await.map(drop),
            "ack" => worker.ack(&flying[0]).await.map(drop),
            "fail" => worker.fail(&flying[1], "boom").await.map(drop),
            // The first step acquires, then ticks: if the acquire worked and the tick
            // failed, the second step's tick (which fails before any renewal) is judged
            // alone.
            "leader step" => leader.step().await,
            _ if leader.is_leading() => leader.step().await,
            _ => Ok(()),
        };
        let after = snapshot(admin, name).await;
        refused += usize::from(result.is_err());
        if call == "leader step" && leader.is_leading() {
            // Acquired (a change, and a call of its own): only the tick's error is judged.
            wrong.extend(judge(call, &result, grant, &after, &after));
        } else {
            wrong.extend(judge(call, &result, grant, &before, &after));
        }
        before = after;
    }
    (wrong, refused)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_refused_for_a_missing_grant_names_it_and_changes_nothing() {
    let server = RedisServer::start();
    let mut admin = server.admin().await;
    let (_, password) = readme_user();
    let rules = readme_rules();
    let mut wrong = Vec::new();
    let mut refusing = 0;
    for grant in rules.iter().filter(|rule| rule.starts_with('+')) {
        let user = format!("atomic{}", grant.replace(['+', '|'], "-"));
        let without: Vec<String> = rules.iter().filter(|r| *r != grant).cloned().collect();
        set_user(&mut admin, &user, &without).await;
        let url = server.url_as(&user, &password);
        let name = queue_name(&format!("atomic{}", grant.replace(['+', '|'], "-")));
        let (found, refused) = calls(&server, &url, &name, grant, &mut admin).await;
        wrong.extend(found.into_iter().map(|w| format!("without {grant}: {w}")));
        refusing += usize::from(refused > 0);
    }
    // Most grants are met by these calls (the others by the roles of durable_acl.rs).
    assert!(refusing > 20, "only {refusing} grants refused a call");
    assert!(wrong.is_empty(), "{wrong:#?}");
}
