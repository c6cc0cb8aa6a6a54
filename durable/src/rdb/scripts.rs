//! The Lua scripts, one file each under `scripts/`, and how each is put together.
//!
//! Every change that touches more than one key is one of these scripts, so Redis applies
//! it atomically. They are sent with `EVALSHA`, and loaded again when Redis answers
//! `NOSCRIPT` (after a restart, say).
//!
//! # The text Redis runs
//!
//! ```text
//! line 1        <header> local <lib functions> local function main() <script line 1>
//! lines 2..=N   <script lines 2..=N>
//! line N+1      end
//! lines N+2..   <the lib files it needs, whole, one after the other>
//! last          <the permission check (script_acl.rs)> return main()
//! ```
//!
//! The header ([`lua_header`]: keys from `KEYS`, the contract's constants) and the
//! forward declaration of the lib functions share line 1 with the script's first line,
//! so a script's lines keep their numbers in Redis's errors (`user_script:40` is line 40
//! of the `.lua` file), and a line of a lib file is told apart by its number and named
//! `lib/<file>.lua:<line>` in our [`Error`](crate::Error) (see [`Script::locate`]). The
//! script's body is the function `main`, whose upvalues are the names it uses from the
//! lib and the header (Lua 5.1 allows 60; tick.lua, the largest, uses about 35), so the
//! lib can come after it: its `function name(...)` lines assign the locals declared on
//! line 1.
//!
//! # The lib
//!
//! The helpers the scripts share live in `scripts/lib/`, a few small files by concern
//! ([`LIB_FILES`]: checked reads, the permission check, chunked commands, meta's clock
//! and counters, job records with the invariants I1-I6, where a job is, batches,
//! recurring schedules, the cold index). Each `function name(...)` of them assigns a
//! local of line 1 and ends at its only `end` at column 0; state of one file alone is a
//! one-line `local` in it ([`Lib::parse`] refuses anything else, naming the line). Names
//! are unique across the files. The other names they use (`META`, `JOBS`, ..., `P`,
//! `CHANNEL`, `W0`, `LEAD`, ...) are the header's.
//!
//! # Only the functions a script calls
//!
//! Redis runs the whole text on every call, and each `function` statement makes a new
//! closure (with an upvalue object for each local it captures), so every lib function
//! costs every call whether the call uses it or not: defining all of them took a third
//! of a single `schedule`'s Redis CPU (BENCHMARKS.md, "What one script call costs"). So
//! each script gets only the functions it names, and those they name in turn, from any
//! file ([`Lib::closure`]); the others' lines are left empty, so that each file's lines
//! keep their numbers and [`Script::locate`] stays a subtraction, and a file holding none
//! of them is left out. A call's cost is mostly Lua's, not its commands': every table,
//! string, function call and command reply counts, and a helper with one caller is
//! better folded into it.
//!
//! [`LIB_FILES`]: super::lua_lib::LIB_FILES
//! [`Lib::parse`]: super::lua_lib::Lib::parse
//! [`Lib::closure`]: super::lua_lib::Lib::closure

use super::lua_lib::Lib;
#[cfg(test)]
use super::lua_lib::{identifiers, LIB_FILES};
use crate::contract::{lua_header, script_keys, Key};
use std::sync::OnceLock;

/// One script of the queue, put together as the module docs say.
pub(crate) struct Script {
    pub(crate) name: &'static str,
    pub(crate) script: redis::Script,
    /// The keys it declares, in `KEYS` order.
    pub(crate) keys: &'static [Key],
    /// Whether running it twice leaves the queue as running it once (schedule by id,
    /// cancel, an ack or a failure by delivery, ...): then a call whose connection was
    /// found closed is sent once more on a new one (see `Rdb::call`).
    pub(crate) idempotent: bool,
    /// The script file's line count: Redis's lines up to it are the script's.
    lines: usize,
    /// The lib files it gets, in order: the line of the text Redis runs that is each
    /// one's first, and its name (`lib/reads.lua`).
    lib: Vec<(usize, &'static str)>,
    /// The first line after the last lib file's: the permission check.
    lib_end: usize,
    /// The text Redis runs (script_acl.rs's tests read its permission check).
    #[cfg(test)]
    pub(crate) source: String,
}

impl Script {
    fn build(
        name: &'static str,
        text: &str,
        keys: &'static [Key],
        idempotent: bool,
        lib: &Lib,
    ) -> Script {
        let header = lua_header(keys);
        // A file without a final newline would put `end` on its last line.
        let text = if text.ends_with('\n') {
            text.to_string()
        } else {
            format!("{text}\n")
        };
        let lines = text.lines().count();
        let mut needed = lib.closure(&text);
        // The check names what the script and its lib functions send, not acl_refused's
        // own words: read before it is added.
        let sent: String = lib.text_of(&needed).into_iter().map(|(_, t)| t).collect();
        let check = super::script_acl::check(&text, &sent);
        lib.need("acl_refused", &mut needed);
        let mut files = Vec::new();
        let mut body = String::new();
        let mut line = lines + 2;
        for (file, file_text) in lib.text_of(&needed) {
            files.push((line, file));
            line += file_text.bytes().filter(|&b| b == b'\n').count();
            body.push_str(&file_text);
        }
        let source = format!(
            "{header}{} local function main() {text}end\n{body}{check}return main()\n",
            lib.declare(&needed),
        );
        Script {
            name,
            script: redis::Script::new(&source),
            keys,
            idempotent,
            lines,
            lib: files,
            lib_end: line,
            #[cfg(test)]
            source,
        }
    }

    /// Where line `line` of the text Redis runs comes from: `<name>.lua:<line>`,
    /// `lib/<file>.lua:<line>`, or the lines around them (`<name>.lua:end` for `main`'s
    /// `end`, `<name>.lua:check` for the permission check and `return main()`).
    pub(crate) fn locate(&self, line: usize) -> String {
        if line <= self.lines {
            return format!("{}.lua:{line}", self.name);
        }
        if line >= self.lib_end {
            return format!("{}.lua:check", self.name);
        }
        match self.lib.iter().rev().find(|(first, _)| *first <= line) {
            Some((first, file)) => format!("{file}:{}", line - first + 1),
            None => format!("{}.lua:end", self.name),
        }
    }

    /// The [`Error`](crate::Error) of a call of this script that failed with `err`,
    /// about `key` (see `Error::script`).
    pub(crate) fn error(&self, key: &str, err: redis::RedisError) -> crate::Error {
        crate::Error::script(key, self.name, |message| self.relabel(message), err)
    }

    /// `message` (an error from Redis about this script) with each `user_script:<n>`
    /// replaced by [`locate`](Self::locate)'s name for it.
    pub(crate) fn relabel(&self, message: &str) -> String {
        const TAG: &str = "user_script:";
        let mut out = String::with_capacity(message.len());
        let mut rest = message;
        while let Some(at) = rest.find(TAG) {
            let digits = rest[at + TAG.len()..]
                .bytes()
                .take_while(u8::is_ascii_digit)
                .count();
            let number = &rest[at + TAG.len()..at + TAG.len() + digits];
            let before = rest[..at].strip_suffix('@').unwrap_or(&rest[..at]);
            out.push_str(before);
            match number.parse() {
                Ok(line) => out.push_str(&self.locate(line)),
                Err(_) => out.push_str(TAG),
            }
            rest = &rest[at + TAG.len() + digits..];
        }
        out.push_str(rest);
        out
    }
}

macro_rules! scripts {
    ($($field:ident: $idempotent:expr, $keys:expr;)*) => {
        /// All the scripts, compiled once per process.
        // The cold tier's move and load are called only with feature `cold`.
        #[cfg_attr(not(feature = "cold"), allow(dead_code))]
        pub(crate) struct Scripts {
            $(pub(crate) $field: Script,)*
        }

        /// Every script's name and text.
        #[cfg(test)]
        pub(crate) const FILES: &[(&str, &str)] = &[
            $((stringify!($field), include_str!(concat!("scripts/", stringify!($field), ".lua"))),)*
        ];

        impl Scripts {
            /// Every script, in the list's order.
            #[cfg(test)]
            pub(crate) fn all(&self) -> Vec<&Script> {
                vec![$(&self.$field,)*]
            }
        }

        fn build() -> Scripts {
            let lib = Lib::new();
            Scripts {
                $($field: Script::build(
                    stringify!($field),
                    include_str!(concat!("scripts/", stringify!($field), ".lua")),
                    $keys,
                    $idempotent,
                    &lib,
                ),)*
            }
        }
    };
}

// Not idempotent: a claim hands out jobs (a second one, others), and a second acquire
// would find its own lease and take it for another holder's.
scripts!(
    schedule: true, script_keys::SCHEDULE;
    cancel: true, script_keys::CANCEL;
    reschedule: true, script_keys::RESCHEDULE;
    tick: true, script_keys::ALL;
    claim: false, script_keys::CLAIM;
    fail: true, script_keys::FAIL;
    extend: true, script_keys::EXTEND;
    // By delivery, as an ack: a second call finds the delivery gone.
    give_back: true, script_keys::GIVE_BACK;
    acquire: false, script_keys::LEASE;
    renew: true, script_keys::LEASE;
    release: true, script_keys::LEASE;
    retry_dead: true, script_keys::RETRY_DEAD;
    // Setting the same record twice leaves it as once; a fill is compare-and-set on the
    // times it was computed from; removing twice removes once.
    recur_set: true, script_keys::RECUR;
    recur_fill: true, script_keys::RECUR;
    recur_del: true, script_keys::RECUR;
    // A page of the repair pass judges the state it finds: run twice, the second finds
    // nothing to fix.
    repair: true, script_keys::ALL;
    // The cold tier (cold/pass.rs, cold/view.rs). A take only reads (and numbers segments); a commit, load
    // or thaw acts only on ids whose record or index entry is still what it was sent.
    cold_take: true, script_keys::COLD_TAKE;
    cold_commit: true, script_keys::COLD_COMMIT;
    cold_load: true, script_keys::COLD_LOAD;
    cold_thaw: true, script_keys::COLD_LOAD;
    cold_retire: true, script_keys::COLD_RETIRE;
    cold_find: true, script_keys::COLD_FIND;
    cold_repair: true, script_keys::COLD_REPAIR;
);

/// The scripts, built on first use.
pub(crate) fn scripts() -> &'static Scripts {
    static SCRIPTS: OnceLock<Scripts> = OnceLock::new();
    SCRIPTS.get_or_init(build)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The 1-based line of `file` that holds `needle`.
    fn line_of(file: &str, needle: &str) -> usize {
        1 + file.lines().position(|l| l.contains(needle)).unwrap()
    }

    /// Runs `script` on a real Redis with `args`, for the error our `Error` shows.
    async fn error_of(script: &Script, args: &[&str]) -> String {
        let server = tickless_test_support::RedisServer::start();
        let mut conn = redis::Client::open(server.url())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let mut call = script.script.prepare_invoke();
        for key in script.keys {
            call.key(format!("tickless:{{lines}}:{}", key.suffix()));
        }
        for arg in args {
            call.arg(*arg);
        }
        let err = call
            .invoke_async::<redis::Value>(&mut conn)
            .await
            .unwrap_err();
        script.error("meta", err).to_string()
    }

    #[tokio::test]
    async fn redis_reports_a_scripts_own_line_and_lib_files_by_their_names() {
        let schedule = &scripts().schedule;
        // Two jobs announced, one sent: schedule.lua raises it itself.
        let err = error_of(schedule, &["2", "a", "a1", "1", ""]).await;
        let own = include_str!("scripts/schedule.lua");
        let line = line_of(own, "'ERR bad arguments: '");
        assert!(err.contains(&format!("schedule.lua:{line}")), "{err}");
        // Not a number: lib/reads.lua's arg_int raises it.
        let err = error_of(schedule, &["x"]).await;
        let lib = include_str!("scripts/lib/reads.lua");
        let line = line_of(lib, "'ERR bad argument ' .. i");
        assert!(err.contains(&format!("lib/reads.lua:{line}")), "{err}");
        assert!(!err.contains("user_script"), "{err}");
        // Not a time: lib/meta.lua's arg_when raises it, in a lib file after others.
        let err = error_of(schedule, &["1", "a", "zz", "1", ""]).await;
        let lib = include_str!("scripts/lib/meta.lua");
        let line = line_of(lib, "(when): ");
        assert!(err.contains(&format!("lib/meta.lua:{line}")), "{err}");
        assert!(!err.contains("user_script"), "{err}");
    }

    #[tokio::test]
    async fn a_claim_or_tick_of_more_than_the_most_a_call_takes_is_refused() {
        let over = (crate::contract::MAX_BATCH + 1).to_string();
        let err = error_of(&scripts().claim, &["1000", &over, "0"]).await;
        assert!(err.contains("bad argument 2 (max)"), "{err}");
        // The limit is checked before the token (this queue has no leader).
        let err = error_of(&scripts().tick, &["token", &over]).await;
        assert!(err.contains("bad argument 2 (limit)"), "{err}");
    }

    /// One cancel.lua call of 8,200 ids, all in one bucket: more than one `unpack` takes
    /// (its reads, the bucket's `SREM` and the records' `HDEL` go through lib/calls.lua's
    /// chunks), and every job is removed. `cancel_batch` sends 128 ids a call; this is
    /// the script's own guard, called directly.
    #[tokio::test]
    async fn one_cancel_call_of_8200_ids_in_one_bucket_removes_every_job() {
        let server = tickless_test_support::RedisServer::start();
        let queue = crate::Queue::connect(&server.url(), "bigcancel")
            .await
            .unwrap();
        let t0 = std::time::UNIX_EPOCH + std::time::Duration::from_millis(1_700_000_000_000);
        queue.set_manual_clock(Some(t0)).await.unwrap();
        let ids: Vec<String> = (0..8200).map(|i| format!("j{i}")).collect();
        let due = crate::When::At(t0 + std::time::Duration::from_secs(5));
        let jobs = ids.iter().map(|id| (id.as_str(), b"", due));
        assert!(queue.schedule_batch(jobs).await.unwrap().iter().all(|&a| a));
        let key = |suffix: &str| format!("tickless:{{bigcancel}}:{suffix}");
        assert_eq!(
            server.cli(&["ZCARD", &key("due")]).trim(),
            "1",
            "one bucket"
        );
        let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
        let removed = crate::rdb::schedule::cancel(queue.rdb(), &ids)
            .await
            .unwrap();
        assert_eq!(removed.len(), ids.len());
        for (removed, id) in removed.iter().zip(&ids) {
            assert!(removed, "{id}");
        }
        assert_eq!(server.cli(&["HLEN", &key("jobs")]).trim(), "0");
        assert_eq!(server.cli(&["ZCARD", &key("due")]).trim(), "0");
        assert_eq!(server.cli(&["KEYS", &key("b:*")]).trim(), "");
    }

    #[test]
    fn lines_are_named_after_the_file_that_holds_them() {
        let s = &scripts().schedule;
        assert_eq!(s.locate(1), "schedule.lua:1");
        assert_eq!(s.locate(s.lines), format!("schedule.lua:{}", s.lines));
        assert_eq!(s.locate(s.lines + 1), "schedule.lua:end");
        assert_eq!(s.locate(s.lines + 2), "lib/reads.lua:1");
        // Every lib file a script gets, from its first line to its last.
        let mut next = s.lines + 2;
        for (first, file) in &s.lib {
            assert_eq!(*first, next, "{file}");
            let text = LIB_FILES.iter().find(|(name, _)| name == file).unwrap().1;
            let lines = text.lines().count();
            assert_eq!(s.locate(*first), format!("{file}:1"));
            assert_eq!(s.locate(first + lines - 1), format!("{file}:{lines}"));
            next = first + lines;
        }
        assert!(s.lib.len() > 2, "{:?}", s.lib);
        assert_eq!(s.locate(s.lib_end), "schedule.lua:check");
        assert_eq!(
            s.relabel("ERR user_script:3: boom script: 43f0, on @user_script:3."),
            "ERR schedule.lua:3: boom script: 43f0, on schedule.lua:3."
        );
    }

    #[test]
    fn lib_functions_assign_the_locals_declared_on_line_one() {
        let lib = Lib::new();
        for (name, text) in lib.files {
            assert!(!text.contains("local function "), "{name}");
        }
        assert!(lib.functions.len() > 20, "{}", lib.functions.len());
        let schedule = lib.closure(include_str!("scripts/schedule.lua"));
        let declare = lib.declare(&schedule);
        assert!(
            declare.contains(" flush,") || declare.ends_with(" flush"),
            "{declare}"
        );
    }

    /// Each script gets the lib functions it names and those they name, with their
    /// files' line numbers: no function it can reach is missing (it would be a global,
    /// which Redis refuses at run time), and the others are left out, with the files
    /// that hold none it needs.
    #[test]
    fn a_script_gets_every_lib_function_it_can_reach_and_no_other() {
        let lib = Lib::new();
        let mut left_out = 0;
        for (name, text) in FILES {
            let needed = lib.closure(text);
            let emitted = lib.text_of(&needed);
            let all: String = emitted.iter().map(|(_, t)| t.as_str()).collect();
            let reachable = identifiers(text)
                .into_iter()
                .chain(identifiers(&all))
                .collect::<std::collections::HashSet<_>>();
            let declare = lib.declare(&needed);
            for (f, &is_needed) in lib.functions.iter().zip(&needed) {
                let (file, file_text) = lib.files[f.file];
                let file_lines: Vec<&str> = file_text.split('\n').collect();
                let lines = emitted
                    .iter()
                    .find(|(n, _)| *n == file)
                    .map(|(_, t)| t.split('\n').collect::<Vec<&str>>());
                if let Some(lines) = &lines {
                    assert_eq!(lines.len(), file_lines.len(), "{name}: {file}");
                }
                let range = f.first..=f.last;
                if is_needed {
                    let lines = lines.unwrap_or_else(|| panic!("{name}: {file} left out"));
                    assert_eq!(
                        lines[range.clone()],
                        file_lines[range],
                        "{name}: {}",
                        f.name
                    );
                    assert!(
                        declare.split([' ', ',']).any(|n| n == f.name),
                        "{name}: {} not declared",
                        f.name
                    );
                } else {
                    assert!(!reachable.contains(f.name), "{name}: {} missing", f.name);
                    // Its lines are empty, or its file is left out.
                    if let Some(lines) = lines {
                        assert!(
                            lines[range].iter().all(|l| l.is_empty()),
                            "{name}: {}",
                            f.name
                        );
                    }
                    left_out += 1;
                }
            }
        }
        // The point of it: a script such as release.lua needs little of the lib.
        assert!(left_out > FILES.len() * 10, "{left_out}");
    }

    /// The parser refuses what would cut a function wrongly, naming the file and line.
    #[test]
    fn a_lib_file_off_the_style_is_refused_by_file_and_line() {
        let refused = |text: &'static str| {
            let files: &'static [(&str, &str)] = Box::leak(Box::new([("lib/x.lua", text)]));
            std::panic::catch_unwind(|| Lib::parse(files))
                .err()
                .and_then(|e| e.downcast_ref::<String>().cloned())
                .unwrap_or_default()
        };
        let nested = "function f()\n  if a then\nend\n  end\nend\n";
        assert!(refused(nested).starts_with("lib/x.lua:4: outside a function"));
        let column0 = "function f()\nif a then end\nend\n";
        assert!(refused(column0).starts_with("lib/x.lua:2: only function f's own"));
        let twice = "function f()\nend\n\nfunction f()\nend\n";
        assert!(refused(twice).starts_with("lib/x.lua:4: function f is in lib/x.lua"));
        assert!(refused("function f()\n  return 1\nend\n").is_empty());
    }

    #[test]
    fn identifiers_skip_comments_strings_fields_and_numbers() {
        let ids = identifiers("local a = b.c .. d -- e\nf('g', \"h\\\"i\", 1e5)..j");
        let mut ids: Vec<&str> = ids.into_iter().collect();
        ids.sort_unstable();
        assert_eq!(ids, ["a", "b", "d", "f", "j", "local"]);
    }
}
