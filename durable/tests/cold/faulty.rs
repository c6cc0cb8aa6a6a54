//! A store that fails on command, over a real directory (`object_store`'s
//! `LocalFileSystem`): errors, a full disk (ENOSPC, as the filesystem says it), and hangs
//! at each step of a move or a load, which stand for a leader killed there (its pass stops
//! and never comes back, until `release`). It counts the LISTs (the leader's sweeps).

use async_trait::async_trait;
use futures::stream::{BoxStream, StreamExt};
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, Result,
};
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    None,
    /// Every PUT fails (a store answering errors).
    FailPut,
    /// Every GET fails.
    FailGet,
    /// Every PUT fails as a full disk does.
    Full,
    /// A PUT stops before it writes.
    HangBeforePut,
    /// A PUT writes the object, then stops before it returns.
    HangAfterPut,
    /// A GET stops.
    HangGet,
    /// A DELETE stops before it deletes.
    HangDelete,
}

#[derive(Clone)]
pub struct Faulty {
    inner: Arc<LocalFileSystem>,
    fault: Arc<Mutex<Fault>>,
    hung: Arc<AtomicBool>,
    released: watch::Sender<bool>,
    lists: Arc<AtomicU64>,
}

impl fmt::Debug for Faulty {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Faulty({})", self.inner)
    }
}

impl fmt::Display for Faulty {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Faulty({})", self.inner)
    }
}

impl Faulty {
    pub fn new(dir: &std::path::Path) -> Faulty {
        Faulty {
            inner: Arc::new(
                LocalFileSystem::new_with_prefix(dir)
                    .expect("a local store")
                    .with_fsync(true),
            ),
            fault: Arc::new(Mutex::new(Fault::None)),
            hung: Arc::new(AtomicBool::new(false)),
            released: watch::channel(false).0,
            lists: Arc::new(AtomicU64::new(0)),
        }
    }

    pub fn set(&self, fault: Fault) {
        *self.fault.lock().unwrap() = fault;
    }

    fn fault(&self) -> Fault {
        *self.fault.lock().unwrap()
    }

    /// LISTs asked of it so far (each sweep of the leader is one).
    pub fn lists(&self) -> u64 {
        self.lists.load(Ordering::SeqCst)
    }

    /// Lets every hung call go on.
    pub fn release(&self) {
        self.released.send_replace(true);
    }

    /// Waits (at most `limit`) until a call hangs.
    pub async fn wait_hung(&self, limit: Duration, what: &str) {
        let start = std::time::Instant::now();
        while !self.hung.load(Ordering::SeqCst) {
            assert!(
                start.elapsed() < limit,
                "no store call hung at {what} within {limit:?}"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    async fn hang(&self) {
        self.hung.store(true, Ordering::SeqCst);
        let mut released = self.released.subscribe();
        let _ = released.wait_for(|r| *r).await;
    }
}

fn failed(what: &str) -> object_store::Error {
    object_store::Error::Generic {
        store: "Faulty",
        source: format!("injected: {what} refused").into(),
    }
}

#[async_trait]
impl ObjectStore for Faulty {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        match self.fault() {
            Fault::FailPut => return Err(failed("PUT")),
            Fault::Full => {
                return Err(object_store::Error::Generic {
                    store: "LocalFileSystem",
                    source: Box::new(std::io::Error::from_raw_os_error(28)),
                })
            }
            Fault::HangBeforePut => self.hang().await,
            _ => {}
        }
        let result = self.inner.put_opts(location, payload, opts).await;
        if self.fault() == Fault::HangAfterPut {
            self.hang().await;
        }
        result
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        match self.fault() {
            Fault::FailGet => return Err(failed("GET")),
            Fault::HangGet => self.hang().await,
            _ => {}
        }
        self.inner.get_opts(location, options).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        let this = self.clone();
        futures::stream::once(async move {
            if this.fault() == Fault::HangDelete {
                this.hang().await;
            }
            this.inner.delete_stream(locations)
        })
        .flatten()
        .boxed()
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        self.lists.fetch_add(1, Ordering::SeqCst);
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}
