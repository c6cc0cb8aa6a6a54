//! [`ColdTier`]: where a queue keeps its far jobs, and how far is far.

use super::segment::decode;
use crate::error::Error;
#[cfg(doc)]
use crate::Queue;
use object_store::path::{Path, PathPart};
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// Where a queue keeps its far jobs, and how far is far (see [`Queue::with_cold_tier`]).
///
/// A job due at or after now + [`horizon`](ColdTier::horizon) is moved out of Redis by
/// the queue's leader into a segment of the store, one per
/// [`window`](ColdTier::window) of due times, and loaded back into Redis
/// [`lead`](ColdTier::lead) before its window starts. Every promise of [`Queue`] holds
/// for it unchanged: scheduling its id again adds nothing, [`Queue::cancel`] and
/// [`Queue::reschedule`] find it, it is never delivered early.
///
/// # Examples
///
/// One line: a local directory, the defaults (a 6 h horizon, 1 h windows loaded 3 h
/// ahead):
///
/// ```no_run
/// use tickless_durable::{ColdTier, LeaderOptions, Queue};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), tickless_durable::Error> {
/// let queue = Queue::connect("redis://127.0.0.1/", "ratings")
///     .await?
///     .with_cold_tier(ColdTier::local("/var/lib/ratings-cold")?);
/// let leader = queue.leader(LeaderOptions::default()).spawn(); // moves and loads
/// # Ok(())
/// # }
/// ```
///
/// S3 (feature `s3`), or any `object_store` store through [`ColdTier::new`]:
///
/// ```no_run
/// # #[cfg(feature = "s3")]
/// # fn f() -> Result<(), tickless_durable::Error> {
/// use std::time::Duration;
/// use tickless_durable::object_store::aws::AmazonS3Builder;
/// use tickless_durable::ColdTier;
///
/// let s3 = AmazonS3Builder::from_env().with_bucket_name("ratings-cold");
/// let tier = ColdTier::s3(s3)?.horizon(Duration::from_secs(12 * 3600));
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct ColdTier {
    pub(super) store: Arc<dyn ObjectStore>,
    pub(super) root: String,
    pub(super) horizon: Duration,
    pub(super) window: Duration,
    pub(super) lead: Option<Duration>,
    pub(super) every: Duration,
    pub(super) sweep_every: Duration,
}

impl fmt::Debug for ColdTier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // A store's Display names its kind and place (a directory, a bucket), never its
        // credentials.
        f.debug_struct("ColdTier")
            .field("store", &format_args!("{}", self.store))
            .field("root", &self.root)
            .field("horizon", &self.horizon)
            .field("window", &self.window)
            .field("lead", &self.lead())
            .field("check_every", &self.every)
            .field("sweep_every", &self.sweep_every)
            .finish()
    }
}

impl ColdTier {
    /// A tier on `store`, with the defaults: objects under `tickless/`, a 6 h horizon, 1 h
    /// windows, loaded half the horizon ahead, the leader looking every 10 s and sweeping
    /// the store every hour.
    pub fn new(store: Arc<dyn ObjectStore>) -> ColdTier {
        // S3's client (feature `s3`) takes rustls's process-wide provider: ring, as for
        // `rediss://`. One already installed (by the application) is kept.
        let _ = rustls::crypto::ring::default_provider().install_default();
        ColdTier {
            store,
            root: "tickless".to_string(),
            horizon: Duration::from_secs(6 * 3600),
            window: Duration::from_secs(3600),
            lead: None,
            every: Duration::from_secs(10),
            sweep_every: Duration::from_secs(3600),
        }
    }

    /// A tier in the local directory `dir` (made if missing), each object written with
    /// `fsync` (the file, then its directory) before Redis is told of it; a folder left
    /// empty by a delete (a window's, once loaded) is removed with it.
    ///
    /// # Errors
    ///
    /// [`Error::is_store`] when the directory cannot be made or opened, or `dir` is a
    /// file.
    pub fn local(dir: impl AsRef<std::path::Path>) -> Result<ColdTier, Error> {
        let dir = dir.as_ref();
        let shown = dir.display().to_string();
        std::fs::create_dir_all(dir).map_err(|err| match std::fs::metadata(dir) {
            // `create_dir_all` says only "File exists" when a file holds the path.
            Ok(found) if !found.is_dir() => {
                Error::store("create", &shown, "it is a file, not a directory")
            }
            _ => Error::store("create", &shown, err),
        })?;
        let store = object_store::local::LocalFileSystem::new_with_prefix(dir)
            .map_err(|err| Error::store("open", &shown, err))?
            .with_fsync(true)
            // A window's folder goes with its last segment (up to `dir`, which stays).
            .with_automatic_cleanup(true);
        Ok(ColdTier::new(Arc::new(store)))
    }

    /// A tier on S3 (or an S3-compatible store), from `object_store`'s builder (see
    /// [`crate::object_store::aws::AmazonS3Builder`]): its client takes rustls's
    /// process-wide crypto provider, which this installs first (ring, as for `rediss://`;
    /// one the application installed is kept), where `builder.build()` alone would panic.
    ///
    /// # Errors
    ///
    /// [`Error::is_store`] when the builder's settings are incomplete (no bucket, say).
    #[cfg(feature = "s3")]
    #[cfg_attr(docsrs, doc(cfg(feature = "s3")))]
    pub fn s3(builder: object_store::aws::AmazonS3Builder) -> Result<ColdTier, Error> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let store = builder
            .build()
            .map_err(|err| Error::store("open", "the S3 store", err))?;
        Ok(ColdTier::new(Arc::new(store)))
    }

    /// Jobs due at or after now + `horizon` go cold (default 6 h; at least 1 s).
    pub fn horizon(mut self, horizon: Duration) -> ColdTier {
        self.horizon = horizon.max(Duration::from_secs(1));
        self
    }

    /// The width of a window: jobs due within one window share segments (default 1 h;
    /// between 1 s and the horizon).
    pub fn window(mut self, window: Duration) -> ColdTier {
        self.window = window.clamp(
            Duration::from_secs(1),
            self.horizon.max(Duration::from_secs(1)),
        );
        self
    }

    /// How long before its window starts a segment is loaded (default half the horizon;
    /// at most the horizon). A job is loaded at least this long before it is due, and a
    /// job is never moved and loaded back in the same hour of a 6 h horizon.
    pub fn lead(&self) -> Duration {
        self.lead.unwrap_or(self.horizon / 2).min(self.horizon)
    }

    /// Sets [`lead`](ColdTier::lead).
    pub fn with_lead(mut self, lead: Duration) -> ColdTier {
        self.lead = Some(lead);
        self
    }

    /// How often the leader looks for jobs to move and segments to load (default 10 s;
    /// at least 10 ms).
    pub fn check_every(mut self, every: Duration) -> ColdTier {
        self.every = every.max(Duration::from_millis(10));
        self
    }

    /// How often a leader sweeps the store again (default 1 h): deletes the objects of
    /// its deployment that no segment of Redis names. A new leadership's first pass
    /// always sweeps; the later sweeps delete what arrived since: the object of a move
    /// whose leader lost its lease between its PUT and its commit (which its token then
    /// refused), written after the new leadership's first sweep. Each sweep is one LIST
    /// of the deployment's objects; the first pass (see
    /// [`check_every`](ColdTier::check_every)) at least this long after the last sweep
    /// sweeps.
    pub fn sweep_every(mut self, every: Duration) -> ColdTier {
        self.sweep_every = every;
        self
    }

    /// The objects' prefix in the store (default `tickless`): a queue's segments are
    /// under `<root>/<queue name>/<deployment>/`, the deployment being an id kept in the
    /// queue's Redis, so that deployments with queues of one name can share a root.
    pub fn root(mut self, root: &str) -> ColdTier {
        self.root = root.to_string();
        self
    }

    pub(crate) fn every(&self) -> Duration {
        self.every
    }

    pub(crate) fn sweep_period(&self) -> Duration {
        self.sweep_every
    }

    /// What deployment `dep` of `queue` owns: `<root>/<queue>/<dep>/`.
    pub(super) fn deployment_dir(&self, queue: &str, dep: &str) -> Path {
        Path::from_iter([
            PathPart::from(self.root.as_str()),
            PathPart::from(queue),
            PathPart::from(dep),
        ])
    }

    /// Segment `seg` of window `window` (ms): `<root>/<queue>/<dep>/<window>/<seg>.seg`.
    pub(super) fn segment_path(&self, queue: &str, dep: &str, window: u64, seg: u64) -> Path {
        self.deployment_dir(queue, dep)
            .join(window.to_string())
            .join(format!("{seg}.seg"))
    }

    pub(super) async fn put(&self, path: &Path, bytes: Vec<u8>) -> Result<(), Error> {
        self.store
            .put(path, PutPayload::from(bytes))
            .await
            .map(|_| ())
            .map_err(|err| Error::store("PUT", path.as_ref(), err))
    }

    pub(super) async fn get(&self, path: &Path) -> Result<Vec<u8>, Error> {
        let got = self
            .store
            .get(path)
            .await
            .map_err(|err| Error::store("GET", path.as_ref(), err))?;
        let bytes = got
            .bytes()
            .await
            .map_err(|err| Error::store("GET", path.as_ref(), err))?;
        Ok(bytes.to_vec())
    }

    pub(super) async fn delete(&self, path: &Path) -> Result<(), Error> {
        match self.store.delete(path).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(err) => Err(Error::store("DELETE", path.as_ref(), err)),
        }
    }

    /// Every segment object of deployment `dep` of `queue`: (path, segment number). A
    /// prefix matches whole path parts, so another deployment's objects are never listed.
    pub(super) async fn list(&self, queue: &str, dep: &str) -> Result<Vec<(Path, u64)>, Error> {
        let dir = self.deployment_dir(queue, dep);
        let mut listing = self.store.list(Some(&dir));
        let mut out = Vec::new();
        while let Some(meta) = std::future::poll_fn(|cx| listing.as_mut().poll_next(cx)).await {
            let meta = meta.map_err(|err| Error::store("LIST", dir.as_ref(), err))?;
            let seg = meta
                .location
                .filename()
                .and_then(|name| name.strip_suffix(".seg"));
            if let Some(seg) = seg.and_then(|seg| seg.parse().ok()) {
                out.push((meta.location, seg));
            }
        }
        Ok(out)
    }

    /// The record of `id` in segment `seg` of `window`, read from the store.
    pub(crate) async fn record_of(
        &self,
        queue: &str,
        dep: &str,
        seg: u64,
        window: u64,
        id: &str,
    ) -> Result<Vec<u8>, Error> {
        let path = self.segment_path(queue, dep, window, seg);
        let jobs = decode(&self.get(&path).await?, path.as_ref())?;
        jobs.into_iter()
            .find(|(job, _)| job == id.as_bytes())
            .map(|(_, record)| record)
            .ok_or_else(|| {
                Error::store(
                    "GET",
                    path.as_ref(),
                    format!("the segment holds no job {id:?}"),
                )
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_escape_the_queue_name() {
        let tier = ColdTier::new(Arc::new(object_store::local::LocalFileSystem::new()));
        let path = tier.segment_path("a/b c", "d/e", 3_600_000, 7);
        assert_eq!(path.as_ref(), "tickless/a%2Fb c/d%2Fe/3600000/7.seg");
        assert_eq!(path.filename(), Some("7.seg"));
    }

    #[test]
    fn the_lead_is_half_the_horizon_unless_set_and_never_more() {
        let tier = ColdTier::new(Arc::new(object_store::local::LocalFileSystem::new()));
        assert_eq!(tier.lead(), Duration::from_secs(3 * 3600));
        let tier = tier.horizon(Duration::from_secs(60));
        assert_eq!(tier.lead(), Duration::from_secs(30));
        assert_eq!(
            tier.clone().with_lead(Duration::from_secs(90)).lead(),
            Duration::from_secs(60)
        );
        assert_eq!(tier.window(Duration::ZERO).window, Duration::from_secs(1));
    }
}
