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
    /// Whether running it twice leaves the queue as running it once (schedule by id,
    /// cancel, an ack or a failure by delivery, ...): then a call whose connection was
    /// found closed is sent once more on a new one (see `Queue::call`).
    pub(crate) idempotent: bool,
}

macro_rules! scripts {
    ($($field:ident: $idempotent:expr),* $(,)?) => {
        /// All the scripts, compiled once per process.
        pub(crate) struct Scripts {
            $(pub(crate) $field: Script,)*
        }

        fn build() -> Scripts {
            let lib = include_str!("scripts/lib.lua");
            Scripts {
                $($field: Script {
                    name: stringify!($field),
                    idempotent: $idempotent,
                    script: redis::Script::new(&format!(
                        "{lib}\n{}",
                        include_str!(concat!("scripts/", stringify!($field), ".lua"))
                    )),
                },)*
            }
        }
    };
}

// Not idempotent: a claim hands out jobs (a second one, others), and a second acquire
// would find its own lease and take it for another holder's.
scripts!(
    schedule: true,
    cancel: true,
    reschedule: true,
    tick: true,
    claim: false,
    fail: true,
    extend: true,
    acquire: false,
    renew: true,
    release: true,
    retry_dead: true,
    // Setting the same record twice leaves it as once; a fill is compare-and-set on the
    // times it was computed from; removing twice removes once.
    recur_set: true,
    recur_fill: true,
    recur_del: true,
);

/// The scripts, built on first use.
pub(crate) fn scripts() -> &'static Scripts {
    static SCRIPTS: OnceLock<Scripts> = OnceLock::new();
    SCRIPTS.get_or_init(build)
}
