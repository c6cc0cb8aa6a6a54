//! The driver as a task on a tokio runtime.
//!
//! It waits with tokio's own [`Sleep`](tokio::time::Sleep), so a paused tokio clock
//! auto-advances straight to the next bucket expiry and `tokio::time::advance` moves it.
//! Its future holds the timer weakly: when every handle and `Sleep` is gone, the timer's
//! drop wakes the task and it ends.

use super::{Running, Shared};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::task::{Context, Poll, Waker};
use tokio::runtime::Handle;

struct TaskDriver {
    shared: Weak<Shared>,
    /// Allocated once; reset to each next expiry.
    sleep: Pin<Box<tokio::time::Sleep>>,
    batch: Vec<Waker>,
}

/// Spawns the driver of `shared` on `handle`'s runtime. The caller has checked that the
/// runtime's time driver is enabled (creating a tokio `Sleep` panics otherwise).
pub(crate) fn spawn_task(shared: &Arc<Shared>, handle: &Handle) {
    let sleep = {
        let _enter = handle.enter();
        Box::pin(tokio::time::sleep_until(shared.clock.instant_at(u64::MAX)))
    };
    shared.set_running(Running::Task);
    let driver = TaskDriver {
        shared: Arc::downgrade(shared),
        sleep,
        batch: Vec::new(),
    };
    drop(handle.spawn(driver));
}

impl Future for TaskDriver {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        loop {
            let Some(shared) = this.shared.upgrade() else {
                return Poll::Ready(());
            };
            let Some(next_tick) = shared.turn(cx.waker(), &mut this.batch) else {
                return Poll::Pending;
            };
            this.sleep
                .as_mut()
                .reset(shared.clock.instant_at(next_tick));
            drop(shared);
            if this.sleep.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
        }
    }
}

impl Drop for TaskDriver {
    fn drop(&mut self) {
        if let Some(shared) = self.shared.upgrade() {
            shared.task_driver_stopped();
        }
    }
}
