//! The driver as a thread of its own, for use under any executor.
//!
//! It parks until the next bucket expiry (`park_timeout`) or until an insert unparks it
//! ([`Core::wake_for`]). It holds the timer weakly and only during a turn: when every
//! handle and timer of it is gone, the core's drop unparks it and the thread ends.

use super::Core;
use std::io;
use std::sync::{Arc, Weak};
use std::thread;

/// Starts a driver thread for `core`.
pub(crate) fn spawn_thread(core: &Arc<Core>) -> io::Result<()> {
    let weak = Arc::downgrade(core);
    thread::Builder::new()
        .name("tickless-driver".into())
        .spawn(move || run(weak))?;
    Ok(())
}

fn run(weak: Weak<Core>) {
    match weak.upgrade() {
        // Known before the first turn, so an insert that comes after the turn looked at
        // its shard finds the thread to unpark (ground rule 4).
        Some(core) => core.set_thread(thread::current()),
        None => return,
    }
    let mut scratch = super::Scratch::default();
    loop {
        let Some(core) = weak.upgrade() else {
            return;
        };
        let next = core.turn(core.clock.now_tick(), &mut scratch);
        let wait = next.map(|tick| {
            core.clock
                .instant_at(tick)
                .saturating_duration_since(core.clock.now())
        });
        drop(core);
        match wait {
            None => thread::park(),
            Some(wait) if !wait.is_zero() => thread::park_timeout(wait),
            Some(_) => {}
        }
    }
}
