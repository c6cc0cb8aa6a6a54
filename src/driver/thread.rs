//! The driver as a thread of its own, for use under any executor.
//!
//! It parks until the next bucket expiry (`park_timeout`) or until an insert unparks it.
//! It holds the timer weakly and only during a turn: when every handle and `Sleep` is
//! gone, the timer's drop unparks it and the thread ends.

use super::{Running, Shared};
use std::io;
use std::sync::{Arc, Weak};
use std::task::{Wake, Waker};
use std::thread::{self, Thread};

struct Unparker(Thread);

impl Wake for Unparker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// Starts a driver thread for `shared`.
pub(crate) fn spawn_thread(shared: &Arc<Shared>) -> io::Result<()> {
    let weak = Arc::downgrade(shared);
    thread::Builder::new()
        .name("tickless-driver".into())
        .spawn(move || run(weak))?;
    Ok(())
}

fn run(shared: Weak<Shared>) {
    let waker = Waker::from(Arc::new(Unparker(thread::current())));
    let mut batch = Vec::new();
    loop {
        let Some(timer) = shared.upgrade() else {
            return;
        };
        let wait = timer
            .turn(&waker, &mut batch)
            .map(|tick| timer.clock.instant_at(tick) - timer.clock.now());
        drop(timer);
        match wait {
            None => thread::park(),
            Some(wait) if !wait.is_zero() => thread::park_timeout(wait),
            Some(_) => {}
        }
    }
}

impl Shared {
    /// Starts the thread driver for a newly built timer.
    pub(crate) fn start_thread(self: &Arc<Self>) -> io::Result<()> {
        spawn_thread(self)?;
        self.set_running(Running::Thread);
        Ok(())
    }
}
