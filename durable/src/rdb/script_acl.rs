//! The permission check each script runs first (scripts.rs puts it on the last line,
//! before `return main()`): `redis.acl_check_cmd` for every command the script and the
//! lib functions it has can send, read from their text.
//!
//! Redis refuses a command only when a script reaches it, and keeps what the script
//! wrote before: without this check, a user missing a grant would leave half a change (a
//! bucket key without its job, a `due` member without its bucket). With it, the call
//! fails with NOPERM naming the command and its grant (lib/acl.lua's `acl_refused`), and
//! nothing was written. The checks are one `and` after the other (a loop over a table
//! cost 0.07 µs a command more): about 0.1–0.18 µs of Redis CPU each, measured with
//! `redis-benchmark` on Redis 7.0.15 (`INFO commandstats`). A single schedule checks 13:
//! 1.3–1.6 µs more per call as the default user, 2.0–2.3 µs as README's ACL user, on a
//! call that costs 21–27 µs.

use std::collections::BTreeSet;

/// The commands the scripts send, as written in them (`'HSET'`): a script's
/// single-quoted words that are one of these are what [`check`] checks. The scripts'
/// other single-quoted upper-case words are options (`OPTIONS`, in tests); a test asks
/// Redis which words are commands.
const COMMANDS: &[&str] = &[
    "EXISTS",
    "HDEL",
    "HEXISTS",
    "HGET",
    "HGETALL",
    "HINCRBY",
    "HLEN",
    "HMGET",
    "HSCAN",
    "HSET",
    "LLEN",
    "LRANGE",
    "LTRIM",
    "PUBLISH",
    "RPUSH",
    "SADD",
    "SCARD",
    "SMISMEMBER",
    "SRANDMEMBER",
    "SREM",
    "SSCAN",
    "TIME",
    "TYPE",
    "XADD",
    "ZADD",
    "ZCARD",
    "ZMSCORE",
    "ZRANGE",
    "ZRANGEBYSCORE",
    "ZREM",
    "ZSCORE",
];

/// The scripts' single-quoted upper-case words that are not commands (a command's
/// options).
#[cfg(test)]
const OPTIONS: &[&str] = &[
    "CH",
    "COUNT",
    "LIMIT",
    "LT",
    "MAXLEN",
    "NX",
    "WITHSCORES",
    "XX",
];

/// The check for the text Redis runs, given a script's text and the lib text it gets
/// (without `acl_refused`, whose own text names PUBLISH): `local acl = ... if not
/// (acl('HMGET') and ...) then acl_refused('HMGET', ...) end `. `PUBLISH` is checked on
/// the queue's channel (`CHANNEL`, from the header). `TYPE` is left out: a script sends
/// it only after a command failed (lib/reads.lua's `read`), to name the key, or to check
/// a stream outlet's key. `XADD` is left out too: only a queue with a stream outlet sends
/// it, and lib/batch.lua's `outlet_check` checks it then, on the stream's key, before
/// anything is written (so a user of a queue without one needs no grant for it).
pub(crate) fn check(script: &str, lib: &str) -> String {
    let mut sent = quoted_words(script);
    sent.extend(quoted_words(lib));
    sent.retain(|word| COMMANDS.contains(word) && !matches!(*word, "TYPE" | "XADD"));
    if sent.is_empty() {
        return String::new();
    }
    let checks: Vec<String> = sent
        .iter()
        .map(|c| match *c {
            "PUBLISH" => "acl('PUBLISH', CHANNEL, '')".to_string(),
            c => format!("acl('{c}')"),
        })
        .collect();
    let names: Vec<String> = sent.iter().map(|c| format!("'{c}'")).collect();
    format!(
        "local acl = redis.acl_check_cmd if not ({}) then acl_refused({}) end ",
        checks.join(" and "),
        names.join(", ")
    )
}

/// The single-quoted strings of Lua `code` that are all upper-case letters (and `_`),
/// outside comments: the commands it names (and options: `NX`, `LIMIT`, ...).
fn quoted_words(code: &str) -> BTreeSet<&str> {
    let mut out = BTreeSet::new();
    for line in code.lines() {
        let line = line.split("--").next().unwrap_or(line);
        for word in line.split('\'').skip(1).step_by(2) {
            if !word.is_empty() && word.bytes().all(|c| c.is_ascii_uppercase() || c == b'_') {
                out.insert(word);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rdb::lua_lib::LIB_FILES;
    use crate::rdb::scripts::FILES;

    /// The scripts' quoted upper-case words are commands (checked) or options, as Redis
    /// itself tells them apart: a command missing from [`COMMANDS`] would go unchecked,
    /// and a script could write and then meet its refusal.
    #[tokio::test]
    async fn every_command_a_script_names_is_checked_before_it_runs() {
        let server = tickless_test_support::RedisServer::start_plain(&[]);
        let mut conn = redis::Client::open(server.url())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let mut words = BTreeSet::new();
        for (_, text) in LIB_FILES.iter().chain(FILES) {
            words.extend(quoted_words(text));
        }
        let words: Vec<&str> = words.into_iter().collect();
        // (Not `cmd("...")`, which durable_acl.rs's scan takes for a command sent.)
        let infos: Vec<redis::Value> = redis::Cmd::new()
            .arg("COMMAND")
            .arg("INFO")
            .arg(&words)
            .query_async(&mut conn)
            .await
            .unwrap();
        for (word, info) in words.iter().zip(&infos) {
            let command = !matches!(info, redis::Value::Nil);
            assert_eq!(command, COMMANDS.contains(word), "{word}");
            assert_eq!(!command, OPTIONS.contains(word), "{word}");
        }
    }

    /// A command of the test's own (not `cmd("...")`, which durable_acl.rs's scan of the
    /// sources takes for a command the queue sends).
    fn own(args: &[&str]) -> redis::Cmd {
        let mut command = redis::Cmd::new();
        command.arg(args);
        command
    }

    /// The commands a built script's check names: its `acl_refused(...)` call's (none
    /// without a check).
    fn checked(source: &str) -> Vec<String> {
        let Some(from) = source.rfind("then acl_refused(") else {
            return Vec::new();
        };
        let rest = &source[from + "then acl_refused(".len()..];
        let list = &rest[..rest.find(')').unwrap()];
        list.split(", ")
            .map(|c| c.trim_matches('\'').to_string())
            .collect()
    }

    /// Every script of the crate's list, as a user missing any one command its check
    /// names, is refused before it runs any command: the refusal names the command, no
    /// command but the script call itself reached Redis (`INFO commandstats`), Redis's
    /// ACL LOG holds nothing (a command refused inside a script is logged there, the
    /// check is not), and no key was made. A script without the check fails here whatever
    /// paths reach it; that each check names every command its script can send is the
    /// test above's (every quoted command is one) and durable_acl's atomic.rs's, which
    /// runs the paths as users missing a grant and reads the ACL LOG.
    #[tokio::test]
    async fn every_script_refuses_a_user_missing_any_of_its_commands_before_running_one() {
        let server = tickless_test_support::RedisServer::start_plain(&[]);
        let admin = redis::Client::open(server.url()).unwrap();
        let mut admin = admin.get_multiplexed_async_connection().await.unwrap();
        let mut conns = std::collections::HashMap::new();
        let mut wrong = Vec::new();
        let mut refusals = 0;
        let scripts = crate::rdb::scripts::scripts().all();
        assert_eq!(scripts.len(), FILES.len());
        for script in scripts {
            let commands = checked(&script.source);
            if commands.is_empty() {
                wrong.push(format!("{}: no permission check", script.name));
            }
            for command in &commands {
                let user = format!("no-{}", command.to_lowercase());
                if !conns.contains_key(&user) {
                    let rule = format!("-{}", command.to_lowercase());
                    let _: () = own(&["ACL", "SETUSER", &user, "reset", "on", ">p", "~*", "&*"])
                        .arg("+@all")
                        .arg(&rule)
                        .query_async(&mut admin)
                        .await
                        .unwrap();
                    let client = redis::Client::open(server.url_as(&user, "p")).unwrap();
                    let conn = client.get_multiplexed_async_connection().await.unwrap();
                    conns.insert(user.clone(), conn);
                }
                let conn = conns.get_mut(&user).unwrap();
                // Loaded first, so that the call is one EVALSHA.
                let _: String = script
                    .script
                    .prepare_invoke()
                    .load_async(conn)
                    .await
                    .unwrap();
                let _: () = own(&["CONFIG", "RESETSTAT"])
                    .query_async(&mut admin)
                    .await
                    .unwrap();
                let _: () = own(&["ACL", "LOG", "RESET"])
                    .query_async(&mut admin)
                    .await
                    .unwrap();
                let mut call = script.script.prepare_invoke();
                for key in script.keys {
                    call.key(format!("tickless:{{acl}}:{}", key.suffix()));
                }
                let result = call.invoke_async::<redis::Value>(conn).await;
                let what = format!("{} without {command}", script.name);
                let grant = match command.as_str() {
                    "PUBLISH" => "publish on tickless:{acl}:wake".to_string(),
                    c => format!("run {c} (grant +{})", c.to_lowercase()),
                };
                match &result {
                    Err(err)
                        if err.code() == Some("NOPERM") && err.to_string().contains(&grant) =>
                    {
                        refusals += 1
                    }
                    other => wrong.push(format!("{what}: not refused naming it: {other:?}")),
                }
                let stats: String = own(&["INFO", "commandstats"])
                    .query_async(&mut admin)
                    .await
                    .unwrap();
                let ran: Vec<&str> = stats
                    .lines()
                    .filter_map(|l| l.strip_prefix("cmdstat_"))
                    .filter(|l| !l.starts_with("evalsha:") && !l.starts_with("config|resetstat:"))
                    .filter(|l| !l.starts_with("acl|log:"))
                    .collect();
                if !ran.is_empty() {
                    wrong.push(format!("{what}: commands reached Redis: {ran:?}"));
                }
                let log: Vec<redis::Value> =
                    own(&["ACL", "LOG"]).query_async(&mut admin).await.unwrap();
                if !log.is_empty() {
                    wrong.push(format!("{what}: refused inside the script: {log:?}"));
                }
                let keys: i64 = own(&["DBSIZE"]).query_async(&mut admin).await.unwrap();
                if keys != 0 {
                    wrong.push(format!("{what}: {keys} keys made"));
                }
            }
        }
        assert!(wrong.is_empty(), "{wrong:#?}");
        // Every script checks several commands (tick.lua about 20).
        assert!(refusals > 5 * FILES.len(), "{refusals}");
    }

    #[test]
    fn the_check_names_each_command_once_and_publish_with_the_channel() {
        let check = check(
            "local x = redis.call('HSET', K, 'NX') -- 'ZADD'\nread('zset', 'ZCARD', K)",
            "redis.call('PUBLISH', CHANNEL, m) redis.call('HSET') redis.call('TYPE', k)",
        );
        assert_eq!(
            check,
            "local acl = redis.acl_check_cmd if not (acl('HSET') and acl('PUBLISH', CHANNEL, \
             '') and acl('ZCARD')) then acl_refused('HSET', 'PUBLISH', 'ZCARD') end "
        );
        assert_eq!(super::check("return 1", ""), "");
    }
}
