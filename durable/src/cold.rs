//! The cold tier (feature `cold`): jobs due far ahead leave Redis memory for segments in a
//! store (a local directory, S3, anything `object_store` serves) and come back into the
//! wheel before their window starts.
//!
//! # The path of a far job
//!
//! 1. **Scheduled as any job** (schedule.lua): it is durable in Redis when the call
//!    returns, at Redis's speed. The store is never on a schedule's path.
//! 2. **Moved** by the fenced leader ([`pass`], every [`ColdTier::check_every`]):
//!    `cold_take.lua` reads far jobs (their window, the due time rounded down to
//!    [`ColdTier::window`], starting at or after now + horizon), grouped by window; the
//!    leader fills one segment per window across the takes of a pass (`Filling`, up to
//!    10,000 jobs), numbers it (meta's `cseq`), writes it to the store (one object,
//!    [`encode`]), and only once the store has it, `cold_commit.lua` takes
//!    each job whose record is still exactly the one written out of the wheel and into
//!    the index (`ci:<hhhh>`: id -> segment; lib/cold.lua's C1, C2).
//! 3. **Loaded** when its window starts within [`ColdTier::lead`]: the leader reads the
//!    segment back, `cold_load.lua` puts every job whose index entry still names that
//!    segment into the wheel (a cancelled or rescheduled one is skipped), in calls of
//!    [`CALL_JOBS`] jobs; `cold_retire.lua` forgets the segment, and the leader deletes
//!    its object.
//!
//! # Why nothing is lost, doubled or early
//!
//! - A crash between the PUT and the commit leaves jobs in the wheel and an object no
//!   index entry names: [`sweep`] deletes it at the next leadership's first pass (and
//!   every [`ColdTier::sweep_every`] after it, for a stale leader's late PUT).
//! - A commit, load or retire of a leader that lost its lease is refused by its token.
//! - A load repeated after a crash loads only ids whose index entry still names the
//!   segment; each load call removes the entries of the jobs it inserts, atomically.
//! - A loaded job goes where its due time says: `ready` only once due (I6).
//! - The object is deleted only after Redis forgot the segment, so a crash between the
//!   two leaves an object [`sweep`] removes.
//!
//! What depends on the store: a job in the cold tier lives in the store alone (its index
//! entry names it), so the store's durability is the job's: a local directory is written
//! with `fsync` (file and directory) before Redis is told, an S3 PUT has returned.

use super::contract::{self, Key, MAX_BATCH};
use super::error::Error;
use super::queue::Queue;
use super::rdb::cold as rdb;
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
    store: Arc<dyn ObjectStore>,
    root: String,
    horizon: Duration,
    window: Duration,
    lead: Option<Duration>,
    every: Duration,
    sweep_every: Duration,
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

/// Jobs per `cold_commit.lua` or `cold_load.lua` call: a call holds Redis for about 10 ms
/// (BENCHMARKS.md, "The cold tier").
pub(crate) const CALL_JOBS: usize = 2_000;

/// Jobs per segment at most (one `cold_take.lua` call).
const SEGMENT_JOBS: usize = MAX_BATCH;

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
    fn deployment_dir(&self, queue: &str, dep: &str) -> Path {
        Path::from_iter([
            PathPart::from(self.root.as_str()),
            PathPart::from(queue),
            PathPart::from(dep),
        ])
    }

    /// Segment `seg` of window `window` (ms): `<root>/<queue>/<dep>/<window>/<seg>.seg`.
    fn segment_path(&self, queue: &str, dep: &str, window: u64, seg: u64) -> Path {
        self.deployment_dir(queue, dep)
            .join(window.to_string())
            .join(format!("{seg}.seg"))
    }

    async fn put(&self, path: &Path, bytes: Vec<u8>) -> Result<(), Error> {
        self.store
            .put(path, PutPayload::from(bytes))
            .await
            .map(|_| ())
            .map_err(|err| Error::store("PUT", path.as_ref(), err))
    }

    async fn get(&self, path: &Path) -> Result<Vec<u8>, Error> {
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

    async fn delete(&self, path: &Path) -> Result<(), Error> {
        match self.store.delete(path).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(err) => Err(Error::store("DELETE", path.as_ref(), err)),
        }
    }

    /// Every segment object of deployment `dep` of `queue`: (path, segment number). A
    /// prefix matches whole path parts, so another deployment's objects are never listed.
    async fn list(&self, queue: &str, dep: &str) -> Result<Vec<(Path, u64)>, Error> {
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

const MAGIC: &[u8; 8] = b"TKCOLD01";

/// A segment's jobs: (id, record) pairs.
pub(crate) type Jobs = Vec<(Vec<u8>, Vec<u8>)>;

/// A segment: `TKCOLD01`, the job count (u32, little-endian), then per job its id and
/// its record (`jobs`'s value, lib/jobs.lua's I1), each as a u32 length and the bytes,
/// then the FNV-1a 64-bit hash of everything before it (u64): a truncated or altered
/// object is refused rather than loaded.
pub(crate) fn encode(jobs: &[(Vec<u8>, Vec<u8>)]) -> Vec<u8> {
    let size: usize = jobs.iter().map(|(id, rec)| 8 + id.len() + rec.len()).sum();
    let mut out = Vec::with_capacity(8 + 4 + size + 8);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&(jobs.len() as u32).to_le_bytes());
    for (id, rec) in jobs {
        out.extend_from_slice(&(id.len() as u32).to_le_bytes());
        out.extend_from_slice(id);
        out.extend_from_slice(&(rec.len() as u32).to_le_bytes());
        out.extend_from_slice(rec);
    }
    let hash = fnv1a(&out);
    out.extend_from_slice(&hash.to_le_bytes());
    out
}

/// The jobs of a segment [`encode`] wrote; an error naming `path` for anything else.
pub(crate) fn decode(bytes: &[u8], path: &str) -> Result<Jobs, Error> {
    let bad = |why: &str| Error::store("read", path, format!("not a segment: {why}"));
    if bytes.len() < MAGIC.len() + 12 || &bytes[..MAGIC.len()] != MAGIC {
        return Err(bad("no TKCOLD01 header"));
    }
    let (body, tail) = bytes.split_at(bytes.len() - 8);
    let hash = u64::from_le_bytes(tail.try_into().expect("8 bytes"));
    if fnv1a(body) != hash {
        return Err(bad("its checksum does not match (truncated or altered)"));
    }
    let mut rest = &body[MAGIC.len()..];
    let mut take = |n: usize| -> Result<&[u8], Error> {
        if rest.len() < n {
            return Err(bad("shorter than its lengths say"));
        }
        let (head, tail) = rest.split_at(n);
        rest = tail;
        Ok(head)
    };
    let count = u32::from_le_bytes(take(4)?.try_into().expect("4 bytes")) as usize;
    let mut jobs = Vec::with_capacity(count.min(SEGMENT_JOBS));
    for _ in 0..count {
        let n = u32::from_le_bytes(take(4)?.try_into().expect("4 bytes")) as usize;
        let id = take(n)?.to_vec();
        let n = u32::from_le_bytes(take(4)?.try_into().expect("4 bytes")) as usize;
        jobs.push((id, take(n)?.to_vec()));
    }
    if !rest.is_empty() {
        return Err(bad("bytes after its last job"));
    }
    Ok(jobs)
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &b| {
        (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// What one pass of the leader did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Pass {
    /// Jobs moved out of Redis into the store.
    pub(crate) moved: u64,
    /// Jobs loaded back into the wheel.
    pub(crate) loaded: u64,
    /// Segments retired (loaded whole and deleted).
    pub(crate) retired: u64,
    /// Objects deleted that no segment of Redis named (a move cut short, a retire whose
    /// delete did not happen).
    pub(crate) swept: u64,
    /// The token was refused: another leadership holds the queue.
    pub(crate) fenced: bool,
}

/// One pass of the leader holding `token`: with `sweep_first` (a new leadership's first
/// pass, or the first a [`ColdTier::sweep_every`] after its last sweep), the store's
/// orphans first; then every move due; then every load due. What it
/// did, whether or not it ended in an error (a load that failed at one segment has still
/// loaded the others).
pub(crate) async fn pass(
    queue: &Queue,
    tier: &ColdTier,
    token: u64,
    sweep_first: bool,
) -> (Pass, Result<(), Error>) {
    let mut done = Pass::default();
    let result = run_pass(queue, tier, token, sweep_first, &mut done).await;
    (done, result)
}

async fn run_pass(
    queue: &Queue,
    tier: &ColdTier,
    token: u64,
    sweep_first: bool,
    done: &mut Pass,
) -> Result<(), Error> {
    if sweep_first {
        done.swept = sweep(queue, tier).await?;
    }
    let token = token.to_string();
    let Some((now, dep)) = move_out(queue, tier, &token, done).await? else {
        done.fenced = true;
        return Ok(());
    };
    if !load_in(queue, tier, &token, &dep, now, done).await? {
        done.fenced = true;
    }
    Ok(())
}

/// Moves every job due beyond the horizon into segments; the queue's clock (ms) as the
/// last take read it and the queue's deployment id (meta's `cdep`, which the first take
/// sets), or `None` if the token was refused.
async fn move_out(
    queue: &Queue,
    tier: &ColdTier,
    token: &str,
    done: &mut Pass,
) -> Result<Option<(u64, String)>, Error> {
    let horizon = contract::ms_ceil(tier.horizon);
    let window = contract::ms_ceil(tier.window).max(1);
    // A candidate: the first take of the queue's first move keeps it (meta's `cdep`).
    let fresh_dep = crate::random::random_hex();
    let mut filling = Filling::default();
    let mut dep: String;
    let now = loop {
        let Some(rdb::Taken {
            now,
            dep: taken_dep,
            jobs: taken_jobs,
        }) = rdb::take(queue.rdb(), token, horizon, window, SEGMENT_JOBS, &fresh_dep).await?
        else {
            return Ok(None);
        };
        dep = taken_dep;
        let (taken, mut fresh) = (taken_jobs.len(), 0);
        for (window, id, rec) in taken_jobs {
            fresh += usize::from(filling.add(window, id, rec));
        }
        while let Some((window, jobs)) = filling.next(false) {
            if !write_segment(queue, tier, token, &dep, window, &jobs, done).await? {
                return Ok(None);
            }
        }
        // A take of fewer than asked found every far job; one of nothing new met only
        // jobs held here already (they stay in the wheel until their segment is in).
        if taken < SEGMENT_JOBS || fresh == 0 {
            break now;
        }
    };
    while let Some((window, jobs)) = filling.next(true) {
        if !write_segment(queue, tier, token, &dep, window, &jobs, done).await? {
            return Ok(None);
        }
    }
    Ok(Some((now, dep)))
}

/// Jobs taken but not yet in a segment, by window. A take meets several windows (a
/// bucket of the wheel can span days of them), so a window's segment is filled across
/// the takes of a pass rather than cut at every take.
#[derive(Default)]
struct Filling {
    windows: std::collections::BTreeMap<u64, Jobs>,
    held: std::collections::HashSet<Vec<u8>>,
}

/// The most jobs a pass holds before it writes its largest window's segment, full or
/// not (~10 MB of 236-byte records).
const MAX_HELD: usize = 4 * SEGMENT_JOBS;

impl Filling {
    /// Adds a taken job; `false` if it is held already (a take samples the wheel, where
    /// a held job still is).
    fn add(&mut self, window: u64, id: Vec<u8>, record: Vec<u8>) -> bool {
        if !self.held.insert(id.clone()) {
            return false;
        }
        self.windows.entry(window).or_default().push((id, record));
        true
    }

    /// The next segment to write: a full one; or, with `all` or when more than
    /// [`MAX_HELD`] jobs are held, the largest window's jobs.
    fn next(&mut self, all: bool) -> Option<(u64, Jobs)> {
        let (&window, jobs) = self.windows.iter_mut().max_by_key(|(_, jobs)| jobs.len())?;
        let jobs = if jobs.len() >= SEGMENT_JOBS {
            jobs.split_off(jobs.len() - SEGMENT_JOBS)
        } else if all || self.held.len() > MAX_HELD {
            std::mem::take(jobs)
        } else {
            return None;
        };
        if self.windows.get(&window).is_some_and(Vec::is_empty) {
            self.windows.remove(&window);
        }
        for (id, _) in &jobs {
            self.held.remove(id);
        }
        Some((window, jobs))
    }
}

/// Numbers a new segment (meta's `cseq`) and writes and commits it (see
/// [`commit_segment`]); `false` if the token was refused. A stale leader's number is
/// simply never used: numbers only need to be unique.
async fn write_segment(
    queue: &Queue,
    tier: &ColdTier,
    token: &str,
    dep: &str,
    window: u64,
    jobs: &[(Vec<u8>, Vec<u8>)],
    done: &mut Pass,
) -> Result<bool, Error> {
    let meta = queue.rdb().meta_key();
    let seg: u64 = redis::cmd("HINCRBY")
        .arg(meta)
        .arg("cseq")
        .arg(1)
        .query_async(&mut queue.rdb().conn())
        .await
        .map_err(|err| Error::redis(meta, "HINCRBY", err))?;
    match commit_segment(queue, tier, token, dep, seg, window, jobs).await? {
        Some(moved) => {
            done.moved += moved;
            Ok(true)
        }
        None => Ok(false),
    }
}

/// Writes segment `seg` and commits it; the jobs moved, or `None` if the token was
/// refused. A segment none of whose jobs moved is deleted again.
async fn commit_segment(
    queue: &Queue,
    tier: &ColdTier,
    token: &str,
    dep: &str,
    seg: u64,
    window: u64,
    jobs: &[(Vec<u8>, Vec<u8>)],
) -> Result<Option<u64>, Error> {
    let path = tier.segment_path(queue.name(), dep, window, seg);
    let bytes = encode(jobs);
    let size = bytes.len();
    tier.put(&path, bytes).await?;
    let mut moved = 0;
    for chunk in jobs.chunks(CALL_JOBS) {
        let Some(n) = rdb::commit(queue.rdb(), token, seg, window, size, chunk).await? else {
            return Ok(None);
        };
        moved += n;
    }
    if moved == 0 {
        tier.delete(&path).await?;
    }
    Ok(Some(moved))
}

/// Loads every segment whose window starts within the lead of `now`; `false` if the
/// token was refused. A segment that cannot be read (the store failing, an object lost
/// or damaged) does not hold up the others: each is tried, and the first such error is
/// returned once they all were (the leader counts it, and tries that one again at its
/// next pass).
async fn load_in(
    queue: &Queue,
    tier: &ColdTier,
    token: &str,
    dep: &str,
    now: u64,
    done: &mut Pass,
) -> Result<bool, Error> {
    let until = now.saturating_add(contract::ms_ceil(tier.lead()));
    let key = queue.rdb().key(Key::ColdWindows);
    // Every segment due (their count is windows x segments per window: hundreds, not
    // millions), so that one that fails is not met again at the head of each page.
    let due: Vec<(String, f64)> = redis::cmd("ZRANGEBYSCORE")
        .arg(key)
        .arg("-inf")
        .arg(until)
        .arg("WITHSCORES")
        .query_async(&mut queue.rdb().conn())
        .await
        .map_err(|err| Error::redis(key, "ZRANGEBYSCORE", err))?;
    let mut failed = None;
    for (seg, window) in due {
        let (Ok(seg_no), window) = (seg.parse::<u64>(), window.max(0.0) as u64) else {
            return Err(Error::garbage(
                key,
                format!("member {seg:?} is not a segment number"),
            ));
        };
        match load_segment(queue, tier, token, dep, seg_no, window, done).await {
            Ok(true) => {}
            Ok(false) => return Ok(false),
            Err(err) if err.is_store() => {
                failed.get_or_insert(err);
            }
            Err(err) => return Err(err),
        }
    }
    match failed {
        Some(err) => Err(err),
        None => Ok(true),
    }
}

async fn load_segment(
    queue: &Queue,
    tier: &ColdTier,
    token: &str,
    dep: &str,
    seg: u64,
    window: u64,
    done: &mut Pass,
) -> Result<bool, Error> {
    let path = tier.segment_path(queue.name(), dep, window, seg);
    let jobs = decode(&tier.get(&path).await?, path.as_ref())?;
    for chunk in jobs.chunks(CALL_JOBS) {
        let Some(loaded) = rdb::load(queue.rdb(), token, seg, chunk).await? else {
            return Ok(false);
        };
        done.loaded += loaded;
    }
    let Some(left) = rdb::retire(queue.rdb(), token, seg).await? else {
        return Ok(false);
    };
    tier.delete(&path).await?;
    done.retired += 1;
    if left > 0 {
        // Entries naming ids the segment does not hold: only a hand-made change can do
        // that. `repair` finds them (index entries with no segment).
        return Err(Error::garbage(
            queue.rdb().key(Key::ColdSegs),
            format!("segment {seg} was loaded whole, yet {left} index entries still named it"),
        ));
    }
    Ok(true)
}

/// Deletes the objects of this deployment's part of the store that no segment of Redis
/// names; how many. Run first in a pass (a new leadership's first, then one every
/// [`ColdTier::sweep_every`]), before its moves, so no move of this leader's own is
/// between its PUT and its commit; an older leadership's commit would be refused by its
/// token. Another deployment's objects (another `cdep`) are never listed.
pub(crate) async fn sweep(queue: &Queue, tier: &ColdTier) -> Result<u64, Error> {
    let Some(dep) = queue.cold_deployment().await? else {
        // No take has run: this deployment has written nothing.
        return Ok(0);
    };
    let objects = tier.list(queue.name(), &dep).await?;
    if objects.is_empty() {
        return Ok(0);
    }
    let key = queue.rdb().key(Key::ColdSegs);
    let segs: Vec<String> = objects.iter().map(|(_, seg)| seg.to_string()).collect();
    let known: Vec<Option<String>> = redis::cmd("HMGET")
        .arg(key)
        .arg(&segs)
        .query_async(&mut queue.rdb().conn())
        .await
        .map_err(|err| Error::redis(key, "HMGET", err))?;
    let mut swept = 0;
    for ((path, _), known) in objects.iter().zip(known) {
        if known.is_none() {
            tier.delete(path).await?;
            swept += 1;
        }
    }
    Ok(swept)
}

impl Queue {
    /// The same queue with a cold tier: its leader moves jobs due beyond the tier's
    /// horizon out of Redis into the tier's store, and loads them back before they are
    /// due; [`reschedule`](Queue::reschedule) and [`job`](Queue::job) read a cold job
    /// from the store. Every leader of the queue needs the tier (a leader without one
    /// moves and loads nothing, so cold jobs would wait for one that has it); schedulers
    /// and workers do not.
    pub fn with_cold_tier(&self, tier: ColdTier) -> Queue {
        self.with_cold(Some(tier))
    }

    /// The record of cold job `id` from segment `seg` of `window`, if the queue has a
    /// tier.
    pub(crate) async fn cold_record(
        &self,
        id: &str,
        seg: u64,
        window: u64,
    ) -> Result<Option<Vec<u8>>, Error> {
        let Some(tier) = self.cold_tier() else {
            return Ok(None);
        };
        let meta = self.rdb().meta_key();
        let dep = self.cold_deployment().await?.ok_or_else(|| {
            Error::garbage(
                meta,
                "a cold job's index entry, yet no field cdep".to_string(),
            )
        })?;
        Ok(Some(
            tier.record_of(self.name(), &dep, seg, window, id).await?,
        ))
    }

    /// The deployment id in this queue's object paths (meta's `cdep`), once a leader's
    /// first take has set it.
    async fn cold_deployment(&self) -> Result<Option<String>, Error> {
        let meta = self.rdb().meta_key();
        redis::cmd("HGET")
            .arg(meta)
            .arg("cdep")
            .query_async(&mut self.rdb().conn())
            .await
            .map_err(|err| Error::redis(meta, "HGET", err))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_segment_reads_back_as_written_and_refuses_damage() {
        let jobs = vec![
            (b"a".to_vec(), b"100|3|0|5|0|payload".to_vec()),
            (b"order:\xff".to_vec(), Vec::new()),
        ];
        let bytes = encode(&jobs);
        assert_eq!(decode(&bytes, "p").unwrap(), jobs);
        assert_eq!(decode(&encode(&[]), "p").unwrap(), vec![]);
        for cut in [0, 5, 12, bytes.len() - 1] {
            let err = decode(&bytes[..cut], "seg/1.seg").unwrap_err();
            assert!(
                err.is_store() && err.to_string().contains("seg/1.seg"),
                "{err}"
            );
        }
        let mut flipped = bytes.clone();
        flipped[20] ^= 1;
        assert!(decode(&flipped, "p")
            .unwrap_err()
            .to_string()
            .contains("checksum"));
    }

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
