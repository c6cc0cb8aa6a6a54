//! A missing grant changes nothing: as a user without any one grant of README's line,
//! every call of the queue's (schedule, cancel, reschedule, claim, extend, give back,
//! ack, fail, retry of a dead job, recurring set and removed, repair, the leader's
//! acquire, tick and cold tier move and load, a cold job looked up and rescheduled)
//! either succeeds or fails with a permission error that names the grant, and no script
//! ran a command before it was refused: Redis's ACL LOG holds no refusal from inside a
//! script (the check before a script's body is not logged), and a refused call leaves
//! every key of the queue byte for byte as it was (`DUMP`; a call that runs several
//! scripts, such as a leader's step that acquired and ticked before its cold tier move
//! was refused, is compared only when its first script was refused, and otherwise judged
//! by the log and the error). Redis refuses a command only when a script reaches it and
//! keeps what the script wrote before: lib/acl.lua's `acl_refused` checks every command
//! first.
//!
//! Every script of `src/rdb/scripts/` is refused to some user on some call here, or is
//! listed in [`NEVER_REFUSED`] with why no missing grant can stop it on the calls that
//! reach it (script_acl.rs's own test checks each script's check directly): a new script
//! no call reaches fails the test.

use super::{at, cmd, readme_rules, set_clock, set_user, Admin, T0};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;
use support::{queue_name, readme_user, RedisServer};
use tickless_durable::{Error, LeaderOptions, Queue, WorkerOptions};
use tickless_test_support as support;

/// The scripts no missing grant refuses on the calls that reach them, and why: every
/// command they send is one a script the same call ran before them sends too.
const NEVER_REFUSED: &[(&str, &str)] = &[
    (
        "renew",
        "a leader renews after its acquire and tick, which send all its commands",
    ),
    (
        "release",
        "a leader releases after its acquire and tick, which send all its commands",
    ),
    (
        "recur_fill",
        "the leader refills after its tick, which sends all its commands",
    ),
    (
        "cold_thaw",
        "a cold job's reschedule runs reschedule.lua first, which sends all its commands (the \
         stream outlet's HDEL included)",
    ),
    (
        "cold_retire",
        "a segment is retired after its load and the tick, which send all its commands",
    ),
    (
        "cold_repair",
        "repair runs repair.lua and reads the index (HGETALL) before it, which send all its \
         commands",
    ),
];

/// The scripts in `src/rdb/scripts/` (their library is in `lib/`), by name: those of
/// the cold tier only with feature `cold`.
fn script_files() -> BTreeSet<String> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/rdb/scripts");
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|entry| {
            let name = entry.unwrap().file_name().into_string().unwrap();
            name.strip_suffix(".lua").map(str::to_string)
        })
        .filter(|name| cfg!(feature = "cold") || !name.starts_with("cold_"))
        .collect()
}

/// The script a permission error names (`the redis user may not <script> for ...`).
fn refused_script(err: &Error) -> Option<String> {
    let text = err.to_string();
    let rest = text.split("may not ").nth(1)?;
    let word = rest.split(' ').next()?;
    script_files().contains(word).then(|| word.to_string())
}

/// The commands Redis refused to `user` inside a script since the log was last reset.
async fn refused_inside_scripts(admin: &mut Admin, user: &str) -> Vec<String> {
    let log: Vec<BTreeMap<String, redis::Value>> = cmd(admin, &["ACL", "LOG"]).await;
    let text = |entry: &BTreeMap<String, redis::Value>, field: &str| {
        entry
            .get(field)
            .and_then(|v| redis::from_redis_value::<String>(v).ok())
            .unwrap_or_default()
    };
    log.iter()
        .filter(|entry| text(entry, "context") == "lua" && text(entry, "username") == user)
        .map(|entry| format!("{} ({})", text(entry, "object"), text(entry, "reason")))
        .collect()
}

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

/// The directory of queue `name`'s cold tier (feature `cold`).
#[cfg(feature = "cold")]
fn cold_dir(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("tickless-atomic-{}-{name}", std::process::id()))
}

/// The cold tier of queue `name`: horizon 6 h, windows of an hour.
#[cfg(feature = "cold")]
fn cold_tier(name: &str) -> tickless_durable::ColdTier {
    tickless_durable::ColdTier::local(cold_dir(name))
        .unwrap()
        .horizon(Duration::from_secs(6 * 3600))
        .window(Duration::from_secs(3600))
}

const HOUR: u64 = 3_600_000;

/// The queue's state before the calls, made by the test's own (default) user: three jobs
/// in flight (to ack, fail and give back), one dead, one ready, one staged, one in a
/// bucket, one due at T0 + 1 s for the leader to move, a recurring schedule, and (feature
/// `cold`) two far jobs for the leader to move cold, and three cold already: one whose
/// window the leader loads, one to look up, one to reschedule. The clock is then set to
/// T0 + 2 s.
async fn setup(url: &str, name: &str, admin: &mut Admin) -> Vec<tickless_durable::Job> {
    let queue = Queue::connect(url, name).await.unwrap();
    #[cfg(feature = "cold")]
    {
        // Moved 50 h before T0 by a leader whose lease is long over at T0.
        let queue = queue.with_cold_tier(cold_tier(name));
        set_clock(admin, name, T0 - 50 * HOUR).await;
        for (id, due) in [
            ("cl", T0 + HOUR),
            ("cf", T0 + 48 * HOUR),
            ("ct", T0 + 48 * HOUR),
        ] {
            assert!(queue.schedule(id, b"z", at(due)).await.unwrap());
        }
        let mut options = LeaderOptions::default();
        options.busy_lease = Duration::from_secs(1);
        options.idle_lease = options.busy_lease;
        let mut leader = queue.leader(options);
        leader.step().await.unwrap();
        assert_eq!(leader.stats().cold_moved, 3);
    }
    set_clock(admin, name, T0).await;
    for id in ["f1", "f2", "f3"] {
        assert!(queue.schedule(id, b"x", at(T0)).await.unwrap());
    }
    assert!(queue
        .with_max_attempts(1)
        .schedule("dd", b"x", at(T0))
        .await
        .unwrap());
    let worker = queue.worker(WorkerOptions::default());
    let mut flying = worker.try_claim(4).await.unwrap();
    assert_eq!(flying.len(), 4);
    let dead = flying.remove(flying.iter().position(|j| j.id() == "dd").unwrap());
    worker.fail(&dead, "boom").await.unwrap();
    for (id, due) in [
        ("r", T0),
        ("s", T0 + 5_000),
        ("b", T0 + HOUR),
        ("t", T0 + 1_000),
        ("m1", T0 + 48 * HOUR),
        ("m2", T0 + 48 * HOUR),
    ] {
        assert!(queue.schedule(id, b"y", at(due)).await.unwrap());
    }
    queue
        .every("beat", Duration::from_secs(60), b"")
        .await
        .unwrap();
    set_clock(admin, name, T0 + 2_000).await;
    flying
}

/// Every key of a queue with its `DUMP`, as [`snapshot`] reads them.
type Keys = [(String, Vec<u8>)];

/// What a call's outcome says is wrong: a refusal that does not name `grant`, a command
/// refused inside a script (`inside`, from the ACL LOG), or a refusal that changed a key
/// (`before` and `after` the call differ; `None`: not compared).
fn judge(
    call: &str,
    result: &Result<(), Error>,
    grant: &str,
    inside: &[String],
    compared: Option<(&Keys, &Keys)>,
) -> Vec<String> {
    let mut wrong = Vec::new();
    if !inside.is_empty() {
        wrong.push(format!(
            "{call}: a script ran until Redis refused {inside:?} ({result:?})"
        ));
    }
    if let Err(err) = result {
        if !names(err, grant) {
            wrong.push(format!("{call}: an error not naming {grant}: {err}"));
        }
        if let Some((before, after)) = compared.filter(|(before, after)| before != after) {
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

/// What the calls of one user found.
#[derive(Default)]
struct Found {
    wrong: Vec<String>,
    /// Calls refused.
    refused: usize,
    /// The scripts whose refusal a call's error named.
    scripts: BTreeSet<String>,
}

/// The calls as `user` (at `url`) on queue `name` (set up by `setup` as the default
/// user), each judged.
async fn calls(
    server: &RedisServer,
    (user, url): (&str, &str),
    name: &str,
    grant: &str,
    admin: &mut Admin,
) -> Found {
    #[cfg(feature = "cold")]
    let _dir = super::cold::Dir(cold_dir(name));
    let flying = setup(&server.admin_url(), name, admin).await;
    let mut found = Found::default();
    let _: () = cmd(admin, &["ACL", "LOG", "RESET"]).await;
    let mut before = snapshot(admin, name).await;
    let queue = match Queue::connect(url, name).await {
        Ok(queue) => queue,
        Err(err) => {
            let after = snapshot(admin, name).await;
            let inside = refused_inside_scripts(admin, user).await;
            let compared = Some((&before[..], &after[..]));
            found.wrong = judge("connect", &Err(err), grant, &inside, compared);
            found.refused = 1;
            return found;
        }
    };
    #[cfg(feature = "cold")]
    let queue = queue.with_cold_tier(cold_tier(name));
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
    // theirs) while the other calls are judged. Its steps move m1 and m2 cold and load
    // cl's window.
    for call in [
        "leader step",
        "leader step again",
        "leader load",
        "schedule_batch",
        "schedule",
        "cancel bucket",
        "cancel ready",
        "reschedule",
        "claim",
        "extend",
        "give_back",
        "ack",
        "fail",
        "retry_dead",
        "every",
        "unschedule",
        "repair",
        "job cold",
        "reschedule cold",
    ] {
        if call == "leader load" {
            // The far jobs gone (cancelled, by the test's user), so that the step has
            // nothing to move and goes on to load (a refused move would stop it first).
            let admin_queue = Queue::connect(&server.admin_url(), name).await.unwrap();
            admin_queue.cancel_batch(["m1", "m2"]).await.unwrap();
            before = snapshot(admin, name).await;
            let _: () = cmd(admin, &["ACL", "LOG", "RESET"]).await;
        }
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
            "give_back" => worker.give_back(&flying[2..]).await.map(drop),
            "ack" => worker.ack(&flying[0]).await.map(drop),
            "fail" => worker.fail(&flying[1], "boom").await.map(drop),
            "retry_dead" => queue.retry_dead("dd").await.map(drop),
            "every" => queue
                .every("beat2", Duration::from_secs(60), b"")
                .await
                .map(drop),
            "unschedule" => queue.unschedule("beat").await.map(drop),
            "repair" => queue.repair().await.map(drop),
            "job cold" if cfg!(feature = "cold") => queue.job("cf").await.map(drop),
            "reschedule cold" if cfg!(feature = "cold") => {
                queue.reschedule("ct", at(T0 + 10 * HOUR)).await.map(drop)
            }
            "job cold" | "reschedule cold" => Ok(()),
            // The first step acquires, then ticks: if the acquire worked and the tick
            // failed, the second step's tick (which fails before any renewal) is judged
            // alone.
            "leader step" => leader.step().await,
            _ if leader.is_leading() => leader.step().await,
            _ => Ok(()),
        };
        let after = snapshot(admin, name).await;
        let inside = refused_inside_scripts(admin, user).await;
        let _: () = cmd(admin, &["ACL", "LOG", "RESET"]).await;
        found.refused += usize::from(result.is_err());
        let refused = result.as_ref().err().and_then(refused_script);
        found.scripts.extend(refused.clone());
        // A call that runs several scripts (a leader's step: acquire, tick, the cold
        // tier's move and load; repair; a cold job's reschedule) compares the keys only
        // when its first script was refused: one refused after another changed keys is
        // judged by the log and its error.
        let first = match call {
            "leader step" => Some("acquire"),
            "leader step again" | "leader load" => Some("tick"),
            "repair" => Some("repair"),
            "reschedule cold" => Some("reschedule"),
            _ => None,
        };
        let compared = match first {
            Some(first) if refused.as_deref() != Some(first) => None,
            _ => Some((&before[..], &after[..])),
        };
        found
            .wrong
            .extend(judge(call, &result, grant, &inside, compared));
        before = after;
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_refused_for_a_missing_grant_names_it_and_changes_nothing() {
    let server = RedisServer::start();
    let mut admin = server.admin().await;
    let (_, password) = readme_user();
    let rules = readme_rules();
    let mut wrong = Vec::new();
    let mut refusing = 0;
    let mut refused_scripts = BTreeSet::new();
    for grant in rules.iter().filter(|rule| rule.starts_with('+')) {
        let user = format!("atomic{}", grant.replace(['+', '|'], "-"));
        let without: Vec<String> = rules.iter().filter(|r| *r != grant).cloned().collect();
        set_user(&mut admin, &user, &without).await;
        let url = server.url_as(&user, &password);
        let name = queue_name(&format!("atomic{}", grant.replace(['+', '|'], "-")));
        let found = calls(&server, (&user, &url), &name, grant, &mut admin).await;
        wrong.extend(
            found
                .wrong
                .into_iter()
                .map(|w| format!("without {grant}: {w}")),
        );
        refusing += usize::from(found.refused > 0);
        refused_scripts.extend(found.scripts);
    }
    // Most grants are met by these calls (the others by the roles of durable_acl.rs).
    assert!(refusing > 20, "only {refusing} grants refused a call");
    assert!(wrong.is_empty(), "{wrong:#?}");
    // Every script is refused on some call, or listed with why it cannot be.
    let never: BTreeSet<String> = NEVER_REFUSED
        .iter()
        .map(|(name, _)| name.to_string())
        .filter(|name| cfg!(feature = "cold") || !name.starts_with("cold_"))
        .collect();
    let files = script_files();
    let unreached: Vec<&String> = files
        .iter()
        .filter(|s| !refused_scripts.contains(*s) && !never.contains(*s))
        .collect();
    assert!(
        unreached.is_empty(),
        "scripts no call here saw refused: {unreached:?} (refused: {refused_scripts:?})"
    );
    let listed_but_refused: Vec<&String> = never.intersection(&refused_scripts).collect();
    assert!(
        listed_but_refused.is_empty(),
        "NEVER_REFUSED lists scripts a call saw refused: {listed_but_refused:?}"
    );
    assert!(never.is_subset(&files), "{never:?} not all scripts");
}
