//! What the tests of `tickless` and `tickless-durable` (and the benchmark crate) share:
//! wakers that count or misbehave on purpose, a manual-clock timer, polling by hand,
//! runtimes of every flavour, a seeded generator, a watchdog for tests whose failure mode
//! is a hang, and for the durable tests real `redis-server`s of their own (a single node,
//! a cluster, TLS and ACL variants) and an S3-protocol server (`s3s-fs`). Never published.

mod info;
mod process;
mod readme;
mod redis_cluster;
mod redis_server;
mod redis_variant;
mod s3_server;

pub use info::{calls_but_info, calls_of, command_stats, CommandStat};
pub use process::{run_to_end, wait_exit, Ended};
pub use readme::readme_block;
pub use redis_cluster::{master_of_slot_seen_by, RedisCluster, NODE_TIMEOUT_MS};
pub use redis_server::{make_ca, make_client_certificate, RedisServer};
pub use redis_variant::{readme_acl, readme_user, Variant};
pub use s3_server::{S3Server, S3_ACCESS_KEY, S3_BUCKET, S3_SECRET_KEY};

/// The moment the durable tests set their manual clocks to (2023-11-14 22:13:20 UTC), in
/// milliseconds since the Unix epoch: far from zero and from today, so that a test which
/// reads the wall clock by mistake sees a day that is not its own.
pub const T0: u64 = 1_700_000_000_000;

/// `ms` milliseconds after the Unix epoch.
pub fn at(ms: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_millis(ms)
}

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, RawWaker, RawWakerVTable, Wake, Waker};
use std::time::{Duration, SystemTime};
use tickless::Timer;

pub const MS: Duration = Duration::from_millis(1);

/// A deterministic generator (splitmix64): one per thread, seeded by the test.
#[derive(Clone, Debug)]
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform enough in `[0, n)`, for `n > 0`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}

/// A timer on a manual clock: time moves only by `Timer::advance`.
pub fn manual() -> Timer {
    Timer::builder().manual_clock().build().unwrap()
}

/// A waker that counts its wakes.
#[derive(Default)]
pub struct Counter(AtomicUsize);

impl Counter {
    pub fn new() -> Arc<Counter> {
        Arc::new(Counter::default())
    }

    pub fn count(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

impl Wake for Counter {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// Polls `future` once with `waker`.
pub fn poll_with<F: Future + Unpin>(future: &mut F, waker: &Waker) -> Poll<F::Output> {
    Pin::new(future).poll(&mut Context::from_waker(waker))
}

/// Polls `future` once with a no-op waker.
pub fn poll_once<F: Future + Unpin>(future: &mut F) -> Poll<F::Output> {
    poll_with(future, Waker::noop())
}

/// Where a [`faulty_waker`] panics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    Wake,
    Clone,
    Drop,
}

struct Faulty {
    fault: Fault,
    wakes: AtomicUsize,
}

/// A waker that panics on wake, on clone or on drop (of a clone: the original handed out
/// here is dropped without a panic by [`FaultyWaker`]'s own drop only when the fault is
/// not `Drop`). Counts wakes that got as far as the waker.
pub struct FaultyWaker {
    waker: Option<Waker>,
    state: Arc<Faulty>,
}

impl FaultyWaker {
    pub fn waker(&self) -> &Waker {
        self.waker.as_ref().unwrap()
    }

    pub fn wakes(&self) -> usize {
        self.state.wakes.load(Ordering::SeqCst)
    }
}

impl Drop for FaultyWaker {
    fn drop(&mut self) {
        // The original is leaked when its drop would panic: only the clones misbehave.
        if let Some(waker) = self.waker.take() {
            if self.state.fault == Fault::Drop {
                std::mem::forget(waker);
            }
        }
    }
}

pub fn faulty_waker(fault: Fault) -> FaultyWaker {
    let state = Arc::new(Faulty {
        fault,
        wakes: AtomicUsize::new(0),
    });
    let raw = RawWaker::new(Arc::into_raw(state.clone()).cast(), &VTABLE);
    // SAFETY: the vtable's functions treat the data pointer as an `Arc<Faulty>` made by
    // `Arc::into_raw`, and keep its reference count balanced.
    let waker = unsafe { Waker::from_raw(raw) };
    FaultyWaker {
        waker: Some(waker),
        state,
    }
}

static VTABLE: RawWakerVTable = RawWakerVTable::new(clone_raw, wake_raw, wake_by_ref_raw, drop_raw);

fn faulty(data: *const ()) -> &'static Faulty {
    // SAFETY: `data` is a live `Arc<Faulty>` pointer for as long as a waker holds it.
    unsafe { &*data.cast::<Faulty>() }
}

unsafe fn clone_raw(data: *const ()) -> RawWaker {
    if faulty(data).fault == Fault::Clone {
        panic!("a waker panicked on clone (injected)");
    }
    // SAFETY: `data` came from `Arc::into_raw`; the clone adds one reference.
    unsafe { Arc::increment_strong_count(data.cast::<Faulty>()) };
    RawWaker::new(data, &VTABLE)
}

unsafe fn wake_raw(data: *const ()) {
    // SAFETY: waking by value consumes this reference.
    unsafe { wake_by_ref_raw(data) };
    // SAFETY: as above.
    unsafe { drop_raw_quietly(data) };
}

unsafe fn wake_by_ref_raw(data: *const ()) {
    let state = faulty(data);
    state.wakes.fetch_add(1, Ordering::SeqCst);
    if state.fault == Fault::Wake {
        panic!("a waker panicked on wake (injected)");
    }
}

unsafe fn drop_raw(data: *const ()) {
    let fault = faulty(data).fault;
    // SAFETY: releases this waker's reference.
    unsafe { drop_raw_quietly(data) };
    if fault == Fault::Drop {
        panic!("a waker panicked on drop (injected)");
    }
}

unsafe fn drop_raw_quietly(data: *const ()) {
    // SAFETY: `data` came from `Arc::into_raw` and this waker owned one reference.
    unsafe { drop(Arc::from_raw(data.cast::<Faulty>())) };
}

/// A multi-thread runtime of two workers with every driver on. In a `--cfg tokio_unstable`
/// build it runs tokio's alternative timer (`enable_alt_timer`), so CI's second pass puts
/// every multi-thread test on that timer too; the plain pass covers tokio's standard one.
pub fn multi_thread() -> tokio::runtime::Runtime {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.worker_threads(2).enable_all();
    #[cfg(tokio_unstable)]
    builder.enable_alt_timer();
    builder.build().unwrap()
}

/// A multi-thread runtime of two workers on tokio's alternative timer.
#[cfg(tokio_unstable)]
pub fn alt_timer() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_alt_timer()
        .enable_all()
        .build()
        .unwrap()
}

/// A multi-thread runtime of two workers on tokio's standard timer, whatever the build.
pub fn multi_thread_standard_timer() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Runs `f` on a thread and fails the test if it does not finish within `limit`: for
/// tests whose failure is a hang or a spin.
///
/// Under Miri the limit is twenty times longer: the interpreter runs these tests a
/// hundred times slower than native code and, in CI, beside other steps (a loaded run
/// took 438 s for one binary); scripts/miri.sh's own limit still catches a hang.
pub fn within<T: Send + 'static>(
    limit: Duration,
    what: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let limit = if cfg!(miri) { limit * 20 } else { limit };
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(f());
    });
    match finished.recv_timeout(limit) {
        Ok(value) => value,
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            panic!("{what}: did not finish within {limit:?} (hang or spin)")
        }
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => panic!("{what}: panicked"),
    }
}

/// Runs `f`, catching a panic; `true` if it panicked.
pub fn panicked(f: impl FnOnce()) -> bool {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).is_err()
}

/// A queue name no other test of this process uses.
pub fn queue_name(test: &str) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    format!("{test}-{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// A property test's case count: `PROPTEST_CASES` if set (to hunt with many more, or to
/// run a quick pass), else `default`, sized to keep the test within its time budget.
pub fn proptest_cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|cases| cases.parse().ok())
        .unwrap_or(default)
}
