//! What a caller holds of a watched operation: an [`OperationHandle`], and the future
//! [`Watch`] that derefs to one.

use super::inner::{cancel, Entry, Inner};
use super::op::{Ended, Forced};
#[cfg(doc)]
use super::{DelayedOperation, Purgatory};
use super::{Key, Outcome};
use crate::sync::Arc;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc as Shared;
use std::task::{Context, Poll};

/// A handle to a watched operation: force it, cancel it, ask whether it ended. Made by
/// [`Purgatory::watch_operation`] for a [`DelayedOperation`]; dropping it leaves the
/// operation watched. A [`Watch`] (the future of [`Purgatory::watch`]) derefs to one.
///
/// # Examples
///
/// ```
/// use std::sync::mpsc;
/// use std::time::Duration;
/// use tickless::purgatory::{DelayedOperation, Purgatory};
///
/// /// A write that waits for its segment to be flushed to disk.
/// struct AwaitFlush(mpsc::Sender<&'static str>);
///
/// impl DelayedOperation for AwaitFlush {
///     type Output = &'static str;
///
///     fn try_complete(&mut self) -> Option<&'static str> {
///         None // completed only by force, below
///     }
///
///     fn on_complete(&mut self, how: &'static str) {
///         let _ = self.0.send(how);
///     }
/// }
///
/// let timer = tickless::Timer::builder().manual_clock().build()?;
/// let flushes = Purgatory::with_timer(timer);
/// let (tx, rx) = mpsc::channel();
/// let write = flushes.watch_operation(["segment-3"], Duration::from_secs(60), AwaitFlush(tx));
///
/// // Shutting down: answer every waiting write now.
/// assert_eq!(write.force_complete("shutting down"), Ok(()));
/// assert!(write.is_done());
/// assert_eq!(rx.try_recv(), Ok("shutting down"));
/// assert_eq!(write.force_complete("again"), Err("again"), "it had ended");
/// assert!(!write.cancel());
/// # Ok::<(), tickless::BuildError>(())
/// ```
pub struct OperationHandle<K: Key, T: Send + 'static> {
    pub(super) entry: Arc<Entry<K, T>>,
    pub(super) inner: Shared<Inner<K, T>>,
}

impl<K: Key, T: Send + 'static> OperationHandle<K, T> {
    /// Completes the operation with `value`, unless it has ended (Kafka's
    /// `forceComplete`): `Ok` if it completed with this value (a [`DelayedOperation`]'s
    /// `on_complete` runs with it), else the value back. If its condition is running on
    /// another thread at that moment, this waits for it to finish, and the condition's
    /// own value wins if it holds; so do not call this from inside the operation's own
    /// condition.
    pub fn force_complete(&self, value: T) -> Result<(), T> {
        match self.entry.op.force(value) {
            Forced::Here => {
                self.inner.finish(&self.entry, Ended::Completed);
                Ok(())
            }
            Forced::ByRunner => Ok(()),
            Forced::No(value) => Err(value),
        }
    }

    /// Withdraws the operation: `true` if this decided its end. Then its outcome is
    /// `Cancelled` and neither of a [`DelayedOperation`]'s hooks runs, even if its
    /// condition is running on another thread right now and then holds (that thread
    /// finishes ending it, dropping the condition's value). `false` if it had ended, or
    /// another cancel or a force came first. Never waits, so it may be called from
    /// anywhere, the operation's own condition included.
    pub fn cancel(&self) -> bool {
        cancel(&self.inner, &self.entry)
    }

    /// Whether the operation has ended. Right after a [`cancel`](Self::cancel) that
    /// returned `true` this may read `false` for as long as its condition, running on
    /// another thread, takes to return.
    pub fn is_done(&self) -> bool {
        self.entry.op.is_done()
    }
}

impl<K: Key, T: Send + 'static> fmt::Debug for OperationHandle<K, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OperationHandle")
            .field("done", &self.is_done())
            .finish_non_exhaustive()
    }
}

/// A watched operation's future: resolves to its [`Outcome`]. Made by
/// [`Purgatory::watch`]. Dropping it before it resolves withdraws the operation from every
/// key and from the timer. It derefs to its [`OperationHandle`], for
/// [`force_complete`](OperationHandle::force_complete),
/// [`cancel`](OperationHandle::cancel) and [`is_done`](OperationHandle::is_done).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tickless::purgatory::{Outcome, Purgatory};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let acks: Purgatory<&str, u64> = Purgatory::new();
/// let first = acks.watch(["p0"], Duration::from_secs(1), || None);
/// let second = acks.watch(["p0", "p1"], Duration::from_secs(1), || None);
/// assert_eq!((acks.delayed(), acks.watched()), (2, 3));
///
/// drop(second); // the client went away: withdrawn from both keys and from the timer
/// assert_eq!((acks.delayed(), acks.watched()), (1, 1));
///
/// first.force_complete(7).unwrap(); // through its `OperationHandle`
/// assert_eq!(first.await, Outcome::Completed(7));
/// # }
/// ```
#[must_use = "dropping it withdraws the operation"]
pub struct Watch<K: Key, T: Send + 'static> {
    pub(super) handle: OperationHandle<K, T>,
}

impl<K: Key, T: Send + 'static> std::ops::Deref for Watch<K, T> {
    type Target = OperationHandle<K, T>;

    fn deref(&self) -> &OperationHandle<K, T> {
        &self.handle
    }
}

impl<K: Key, T: Send + 'static> Future for Watch<K, T> {
    type Output = Outcome<T>;

    /// # Panics
    ///
    /// If polled again after it resolved.
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Outcome<T>> {
        match self.handle.entry.op.poll(cx.waker()) {
            Poll::Ready(Some(outcome)) => Poll::Ready(outcome),
            Poll::Ready(None) => panic!("a purgatory Watch polled after it resolved"),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<K: Key, T: Send + 'static> Drop for Watch<K, T> {
    fn drop(&mut self) {
        if !self.is_done() {
            self.cancel();
        }
    }
}

impl<K: Key, T: Send + 'static> fmt::Debug for Watch<K, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Watch")
            .field("done", &self.is_done())
            .finish_non_exhaustive()
    }
}
