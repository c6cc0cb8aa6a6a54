//! The Lua scripts, one file each under `scripts/`, with `lib.lua` prepended.
//!
//! Every change that touches more than one key is one of these scripts, so Redis applies
//! it atomically. They are sent with `EVALSHA`, and loaded again when Redis answers
//! `NOSCRIPT` (after a restart, say).

use std::sync::OnceLock;

/// One script of the queue, with the shared library in front of it.
pub(crate) struct Script {
    pub(crate) name: &'static str,
    pub(crate) script: redis::Script,
}

macro_rules! scripts {
    ($($field:ident),* $(,)?) => {
        /// All the scripts, compiled once per process.
        pub(crate) struct Scripts {
            $(pub(crate) $field: Script,)*
        }

        fn build() -> Scripts {
            let lib = include_str!("scripts/lib.lua");
            Scripts {
                $($field: Script {
                    name: stringify!($field),
                    script: redis::Script::new(&format!(
                        "{lib}\n{}",
                        include_str!(concat!("scripts/", stringify!($field), ".lua"))
                    )),
                },)*
            }
        }
    };
}

scripts!(
    schedule, cancel, reschedule, tick, claim, fail, extend, acquire, renew, release, retry_dead,
);

/// The scripts, built on first use.
pub(crate) fn scripts() -> &'static Scripts {
    static SCRIPTS: OnceLock<Scripts> = OnceLock::new();
    SCRIPTS.get_or_init(build)
}
