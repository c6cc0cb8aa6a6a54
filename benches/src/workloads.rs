//! The bodies of the churn workloads, shared by the `compare` program (`src/main.rs`)
//! and `benches/`, so that both measure the same code.

use crate::Peer;
use std::future::Future;
use std::hint::black_box;
use std::pin::{pin, Pin};
use std::task::{Context, Poll};
use std::time::Duration;

/// Runs `future` as a spawned task of `runtime` (not as `block_on`'s own future, which tokio
/// does not count as a task) and returns its output: the workloads say "in one task".
pub fn in_task<T: Send + 'static>(
    runtime: &tokio::runtime::Runtime,
    future: impl Future<Output = T> + Send + 'static,
) -> T {
    runtime
        .block_on(runtime.spawn(future))
        .expect("a workload task")
}

/// How far ahead the churn workloads' timers are: they never fire.
pub const AHEAD: Duration = Duration::from_secs(10);

/// The timer `Peer::TicklessTimer` uses: one `Timer::new()` per workload, made in the
/// workload's runtime and cloned into each of its tasks, as an application shares one.
pub fn shared_timer(peer: Peer) -> Option<tickless::Timer> {
    (peer == Peer::TicklessTimer).then(tickless::Timer::new)
}

/// W1's body: `n` times, create a sleep `AHEAD`, poll it once with `cx`, drop it.
pub fn register_cancel(peer: Peer, timer: Option<&tickless::Timer>, n: u32, cx: &mut Context<'_>) {
    fn each<F: Future>(n: u32, cx: &mut Context<'_>, make: impl Fn() -> F) {
        for _ in 0..n {
            let mut sleep = pin!(make());
            let _ = black_box(sleep.as_mut().poll(cx));
        }
    }
    match peer {
        Peer::Tickless => each(n, cx, || tickless::sleep(AHEAD)),
        Peer::TicklessTimer => {
            let timer = timer.expect("the workload's shared timer");
            each(n, cx, || timer.sleep(AHEAD))
        }
        Peer::Tokio => each(n, cx, || tokio::time::sleep(AHEAD)),
        Peer::FuturesTimer => each(n, cx, || futures_timer::Delay::new(AHEAD)),
        Peer::AsyncIo => each(n, cx, || async_io::Timer::after(AHEAD)),
        Peer::Pingora => each(n, cx, || pingora_timeout::fast_timeout::fast_sleep(AHEAD)),
    }
}

/// Pending once (waking itself at once), then ready: the inner future of W1t.
#[derive(Default)]
pub struct YieldOnce(bool);

impl Future for YieldOnce {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if std::mem::replace(&mut self.0, true) {
            return Poll::Ready(());
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

/// A timeout for the peers that have none: the future first, then the timer, as tokio's
/// `Timeout` polls them.
pub struct Race<F, T>(pub F, pub T);

impl<F: Future + Unpin, T: Future + Unpin> Future for Race<F, T> {
    type Output = Option<F::Output>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if let Poll::Ready(output) = Pin::new(&mut self.0).poll(cx) {
            return Poll::Ready(Some(output));
        }
        Pin::new(&mut self.1).poll(cx).map(|_| None)
    }
}

/// W1t's body: `n` timeouts `AHEAD` over a future that yields once.
pub async fn timeout_churn(peer: Peer, timer: Option<&tickless::Timer>, n: u32) {
    async fn each<F: Future>(n: u32, make: impl Fn() -> F) {
        for _ in 0..n {
            black_box(make().await);
        }
    }
    match peer {
        Peer::Tickless => each(n, || tickless::timeout(AHEAD, YieldOnce::default())).await,
        Peer::TicklessTimer => {
            let timer = timer.expect("the workload's shared timer");
            each(n, || timer.timeout(AHEAD, YieldOnce::default())).await
        }
        Peer::Tokio => each(n, || tokio::time::timeout(AHEAD, YieldOnce::default())).await,
        Peer::FuturesTimer => {
            each(n, || {
                Race(YieldOnce::default(), futures_timer::Delay::new(AHEAD))
            })
            .await
        }
        Peer::AsyncIo => {
            each(n, || {
                Race(YieldOnce::default(), async_io::Timer::after(AHEAD))
            })
            .await
        }
        Peer::Pingora => {
            each(n, || {
                pingora_timeout::fast_timeout::fast_timeout(AHEAD, YieldOnce::default())
            })
            .await
        }
    }
}

/// W1r's body: `n` timeouts `AHEAD` over a future that is ready at once (a cache hit, a
/// buffered read), each polled once with `cx`.
pub fn ready_timeouts(peer: Peer, timer: Option<&tickless::Timer>, n: u32, cx: &mut Context<'_>) {
    fn each<F: Future>(n: u32, cx: &mut Context<'_>, make: impl Fn() -> F) {
        for _ in 0..n {
            let mut timeout = pin!(make());
            assert!(black_box(timeout.as_mut().poll(cx)).is_ready());
        }
    }
    let ready = || std::future::ready(black_box(1_u32));
    match peer {
        Peer::Tickless => each(n, cx, || tickless::timeout(AHEAD, ready())),
        Peer::TicklessTimer => {
            let timer = timer.expect("the workload's shared timer");
            each(n, cx, || timer.timeout(AHEAD, ready()))
        }
        Peer::Tokio => each(n, cx, || tokio::time::timeout(AHEAD, ready())),
        Peer::FuturesTimer => each(n, cx, || Race(ready(), futures_timer::Delay::new(AHEAD))),
        Peer::AsyncIo => each(n, cx, || Race(ready(), async_io::Timer::after(AHEAD))),
        Peer::Pingora => each(n, cx, || {
            pingora_timeout::fast_timeout::fast_timeout(AHEAD, ready())
        }),
    }
}

/// W4t's body: `tasks` tasks spawned on the current runtime, each doing `per_task` of W1t;
/// returns when all are done. `TicklessTimer` tasks share `timer`.
pub async fn spread_timeouts_over_tasks(
    peer: Peer,
    timer: Option<&tickless::Timer>,
    tasks: u32,
    per_task: u32,
) {
    let handles: Vec<_> = (0..tasks)
        .map(|_| {
            let timer = timer.cloned();
            tokio::spawn(async move { timeout_churn(peer, timer.as_ref(), per_task).await })
        })
        .collect();
    for handle in handles {
        handle.await.expect("a timeout churn task");
    }
}

/// W4's body: `tasks` tasks spawned on the current runtime, each doing `per_task` of W1 in
/// one poll; returns when all are done. `TicklessTimer` tasks share `timer`.
pub async fn spread_over_tasks(
    peer: Peer,
    timer: Option<&tickless::Timer>,
    tasks: u32,
    per_task: u32,
) {
    let handles: Vec<_> = (0..tasks)
        .map(|_| {
            let timer = timer.cloned();
            tokio::spawn(std::future::poll_fn(move |cx| {
                register_cancel(peer, timer.as_ref(), per_task, cx);
                Poll::Ready(())
            }))
        })
        .collect();
    for handle in handles {
        handle.await.expect("a churn task");
    }
}
