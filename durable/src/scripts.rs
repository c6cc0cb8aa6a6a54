//! The Lua scripts, one file each under `scripts/`, and how each is put together.
//!
//! Every change that touches more than one key is one of these scripts, so Redis applies
//! it atomically. They are sent with `EVALSHA`, and loaded again when Redis answers
//! `NOSCRIPT` (after a restart, say).
//!
//! # The text Redis runs
//!
//! ```text
//! line 1        <header> local <lib's functions> local function main() <script line 1>
//! lines 2..=N   <script lines 2..=N>
//! line N+1      end
//! lines N+2..   <lib.lua>
//! last          <the permission check (script_acl.rs)> return main()
//! ```
//!
//! The header ([`lua_header`]: keys from `KEYS`, the contract's constants) and the
//! forward declaration of lib.lua's functions share line 1 with the script's first line,
//! so a script's lines keep their numbers in Redis's errors (`user_script:40` is line 40
//! of the `.lua` file), and a line inside lib.lua is told apart by its number and named
//! `lib.lua:<line>` in our [`Error`](super::Error) (see [`Script::locate`]). The script's
//! body is the function `main`, whose upvalues are the names it uses from lib.lua and the
//! header (Lua 5.1 allows 60; tick.lua, the largest, uses about 35), so lib.lua can come
//! after it: its `function name(...)` lines assign the locals declared on line 1.
//!
//! # Only the functions a script calls
//!
//! Redis runs the whole text on every call, and each `function` statement makes a new
//! closure (with an upvalue object for each local it captures), so every function of
//! lib.lua costs every call whether the call uses it or not: defining all of lib.lua took
//! a third of a single `schedule`'s Redis CPU (BENCHMARKS.md, "What one script call
//! costs"). So each script gets only the functions it names, and those they name in turn
//! ([`Lib::closure`]); the others' lines are left empty, so that lib.lua's lines keep
//! their numbers and [`Script::locate`] stays a subtraction.

use super::contract::{lua_header, script_keys, Key};
use std::sync::OnceLock;

/// One script of the queue, put together as the module docs say.
pub(crate) struct Script {
    pub(crate) name: &'static str,
    pub(crate) script: redis::Script,
    /// The keys it declares, in `KEYS` order.
    pub(crate) keys: &'static [Key],
    /// Whether running it twice leaves the queue as running it once (schedule by id,
    /// cancel, an ack or a failure by delivery, ...): then a call whose connection was
    /// found closed is sent once more on a new one (see `Queue::call`).
    pub(crate) idempotent: bool,
    /// The script file's line count: Redis's lines up to it are the script's, the ones
    /// after the `end` line are lib.lua's.
    lines: usize,
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
        let check = super::script_acl::check(&text, &lib.text_of(&needed));
        lib.need("acl_refused", &mut needed);
        let source = format!(
            "{header}{} local function main() {text}end\n{}\n{check}return main()\n",
            lib.declare(&needed),
            lib.text_of(&needed)
        );
        Script {
            name,
            script: redis::Script::new(&source),
            keys,
            idempotent,
            lines,
            #[cfg(test)]
            source,
        }
    }

    /// Where line `line` of the text Redis runs comes from: `<name>.lua:<line>` or
    /// `lib.lua:<line>`.
    pub(crate) fn locate(&self, line: usize) -> String {
        if line <= self.lines {
            format!("{}.lua:{line}", self.name)
        } else if line == self.lines + 1 {
            format!("{}.lua:end", self.name)
        } else {
            format!("lib.lua:{}", line - self.lines - 1)
        }
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

/// lib.lua, cut into its functions.
struct Lib {
    text: &'static str,
    functions: Vec<Function>,
}

/// One `function name(...)` of lib.lua: from that line to the first line after it that
/// is `end` (lib.lua's style: a function's own `end` is the only one at column 0).
struct Function {
    name: &'static str,
    /// Its first and last line, 0-based.
    first: usize,
    last: usize,
    /// The lib functions it names (indices into `Lib::functions`).
    uses: Vec<usize>,
}

impl Lib {
    fn new() -> Lib {
        Lib::parse(include_str!("scripts/lib.lua"))
    }

    fn parse(text: &'static str) -> Lib {
        let lines: Vec<&str> = text.lines().collect();
        let mut functions = Vec::new();
        let mut i = 0;
        while i < lines.len() {
            let Some(rest) = lines[i].strip_prefix("function ") else {
                i += 1;
                continue;
            };
            let name = rest.split('(').next().unwrap_or(rest).trim();
            let last = (i..lines.len())
                .find(|&l| lines[l] == "end")
                .unwrap_or_else(|| panic!("lib.lua: function {name} has no `end` line"));
            functions.push(Function {
                name,
                first: i,
                last,
                uses: Vec::new(),
            });
            i = last + 1;
        }
        let mut lib = Lib { text, functions };
        let uses: Vec<Vec<usize>> = lib
            .functions
            .iter()
            .map(|f| lib.named_in(&lines[f.first..=f.last].join("\n")))
            .collect();
        for (f, uses) in lib.functions.iter_mut().zip(uses) {
            f.uses = uses;
        }
        lib
    }

    /// The lib functions that `code` names (outside comments and strings), in lib.lua's
    /// order.
    fn named_in(&self, code: &str) -> Vec<usize> {
        let names = identifiers(code);
        (0..self.functions.len())
            .filter(|&i| names.contains(self.functions[i].name))
            .collect()
    }

    /// Whether each function is needed by `script`: named by it, or by a needed function.
    fn closure(&self, script: &str) -> Vec<bool> {
        let mut needed = vec![false; self.functions.len()];
        let mut todo = self.named_in(script);
        while let Some(f) = todo.pop() {
            if !needed[f] {
                needed[f] = true;
                todo.extend(&self.functions[f].uses);
            }
        }
        needed
    }

    /// `local a, b, ...` for the needed functions (nothing if none is).
    fn declare(&self, needed: &[bool]) -> String {
        let names: Vec<&str> = self
            .functions
            .iter()
            .zip(needed)
            .filter(|(_, &n)| n)
            .map(|(f, _)| f.name)
            .collect();
        if names.is_empty() {
            String::new()
        } else {
            format!("local {}", names.join(", "))
        }
    }

    /// Marks lib function `name` needed.
    fn need(&self, name: &str, needed: &mut [bool]) {
        let f = self.functions.iter().position(|f| f.name == name);
        needed[f.unwrap_or_else(|| panic!("lib.lua has no function {name}"))] = true;
    }

    /// lib.lua with the lines of the functions not needed left empty (so every line
    /// keeps its number).
    fn text_of(&self, needed: &[bool]) -> String {
        let mut lines: Vec<&str> = self.text.split('\n').collect();
        for (f, _) in self.functions.iter().zip(needed).filter(|(_, &n)| !n) {
            for line in &mut lines[f.first..=f.last] {
                *line = "";
            }
        }
        lines.join("\n")
    }
}

/// The identifiers in Lua `code`, outside comments (`--` to the end of the line: lib.lua
/// and the scripts use no block comments) and quoted strings.
fn identifiers(code: &str) -> std::collections::HashSet<&str> {
    let mut out = std::collections::HashSet::new();
    for line in code.lines() {
        let bytes = line.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            let c = bytes[i];
            if c == b'-' && bytes.get(i + 1) == Some(&b'-') {
                break;
            } else if c == b'\'' || c == b'"' {
                i += 1;
                while i < bytes.len() && bytes[i] != c {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
            } else if c.is_ascii_digit() {
                // A number (`1e5`, `0x10`): no identifier inside.
                while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'.') {
                    i += 1;
                }
            } else if c.is_ascii_alphabetic() || c == b'_' {
                let start = i;
                while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                    i += 1;
                }
                // A field (`b.order`, `string.format`) is not a variable; after `..`
                // (concatenation) it is.
                let field = start > 0
                    && bytes[start - 1] == b'.'
                    && (start < 2 || bytes[start - 2] != b'.');
                if !field {
                    out.insert(&line[start..i]);
                }
            } else {
                i += 1;
            }
        }
    }
    out
}

macro_rules! scripts {
    ($($field:ident: $idempotent:expr, $keys:expr;)*) => {
        /// All the scripts, compiled once per process.
        // The cold tier's move, load and thaw are called only with feature `cold`.
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
    // The cold tier (cold.rs). A take only reads (and numbers segments); a commit, load
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
        crate::Error::script("meta", script, err).to_string()
    }

    #[tokio::test]
    async fn redis_reports_a_scripts_own_line_and_lib_lua_by_its_name() {
        let schedule = &scripts().schedule;
        // Two jobs announced, one sent: schedule.lua raises it itself.
        let err = error_of(schedule, &["2", "a", "a1", "1", ""]).await;
        let own = include_str!("scripts/schedule.lua");
        let line = line_of(own, "'ERR bad arguments: '");
        assert!(err.contains(&format!("schedule.lua:{line}")), "{err}");
        // Not a number: lib.lua's arg_int raises it.
        let err = error_of(schedule, &["x"]).await;
        let lib = include_str!("scripts/lib.lua");
        let line = line_of(lib, "'ERR bad argument ' .. i");
        assert!(err.contains(&format!("lib.lua:{line}")), "{err}");
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
    /// (its reads, the bucket's `SREM` and the records' `HDEL` go through lib.lua's
    /// chunks), and every job is removed. `cancel_batch` sends 128 ids a call; this is the
    /// script's own guard, called directly.
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
        let args: Vec<&[u8]> = ids.iter().map(|id| id.as_bytes()).collect();
        let reply = queue.call(&scripts().cancel, &args).await.unwrap();
        assert_eq!(reply.len(), ids.len());
        for (i, id) in ids.iter().enumerate() {
            assert_eq!(reply.int(i).unwrap(), 1, "{id}");
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
        assert_eq!(s.locate(s.lines + 2), "lib.lua:1");
        assert_eq!(
            s.relabel("ERR user_script:3: boom script: 43f0, on @user_script:3."),
            "ERR schedule.lua:3: boom script: 43f0, on schedule.lua:3."
        );
    }

    #[test]
    fn lib_functions_assign_the_locals_declared_on_line_one() {
        let lib = Lib::new();
        assert!(!lib.text.contains("local function "));
        assert!(lib.functions.len() > 20, "{}", lib.functions.len());
        let schedule = lib.closure(include_str!("scripts/schedule.lua"));
        let declare = lib.declare(&schedule);
        assert!(
            declare.contains(" flush,") || declare.ends_with(" flush"),
            "{declare}"
        );
    }

    /// Each script gets the lib functions it names and those they name, with lib.lua's
    /// line numbers: no function it can reach is missing (it would be a global, which
    /// Redis refuses at run time), and the others are left out.
    #[test]
    fn a_script_gets_every_lib_function_it_can_reach_and_no_other() {
        let lib = Lib::new();
        let lib_lines: Vec<&str> = lib.text.split('\n').collect();
        let mut left_out = 0;
        for (name, text) in FILES {
            let needed = lib.closure(text);
            let emitted = lib.text_of(&needed);
            let emitted_lines: Vec<&str> = emitted.split('\n').collect();
            assert_eq!(emitted_lines.len(), lib_lines.len(), "{name}");
            let reachable = identifiers(text)
                .into_iter()
                .chain(identifiers(&emitted))
                .collect::<std::collections::HashSet<_>>();
            let declare = lib.declare(&needed);
            for (f, &is_needed) in lib.functions.iter().zip(&needed) {
                let kept = &emitted_lines[f.first..=f.last];
                if is_needed {
                    assert_eq!(kept, &lib_lines[f.first..=f.last], "{name}: {}", f.name);
                    assert!(
                        declare.split([' ', ',']).any(|n| n == f.name),
                        "{name}: {} not declared",
                        f.name
                    );
                } else {
                    assert!(!reachable.contains(f.name), "{name}: {} missing", f.name);
                    assert!(kept.iter().all(|l| l.is_empty()), "{name}: {}", f.name);
                    left_out += 1;
                }
            }
        }
        // The point of it: a script such as release.lua needs little of lib.lua.
        assert!(left_out > FILES.len() * 10, "{left_out}");
    }

    #[test]
    fn identifiers_skip_comments_strings_fields_and_numbers() {
        let ids = identifiers("local a = b.c .. d -- e\nf('g', \"h\\\"i\", 1e5)..j");
        let mut ids: Vec<&str> = ids.into_iter().collect();
        ids.sort_unstable();
        assert_eq!(ids, ["a", "b", "d", "f", "j", "local"]);
    }
}
