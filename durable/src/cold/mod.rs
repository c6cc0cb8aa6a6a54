//! The cold tier (feature `cold`): jobs due far ahead leave Redis memory for segments in a
//! store (a local directory, S3, anything `object_store` serves) and come back into the
//! wheel before their window starts.
//!
//! # The path of a far job
//!
//! 1. **Scheduled as any job** (schedule.lua): it is durable in Redis when the call
//!    returns, at Redis's speed. The store is never on a schedule's path.
//! 2. **Moved** by the fenced leader ([`pass`](pass::pass), every [`ColdTier::check_every`]):
//!    `cold_take.lua` reads far jobs (their window, the due time rounded down to
//!    [`ColdTier::window`], starting at or after now + horizon), grouped by window; the
//!    leader fills one segment per window across the takes of a pass (`Filling`, up to
//!    10,000 jobs, written once the walk has passed the window), numbers it (meta's `cseq`), writes it to the store (one object,
//!    [`encode`](segment::encode)), and only once the store has it, `cold_commit.lua` takes
//!    each job whose record is still exactly the one written out of the wheel and into
//!    the index (`ci:<hhhh>`: id -> segment; lib/cold.lua's C1, C2).
//! 3. **Loaded** when its window starts within [`ColdTier::lead`]: the leader reads the
//!    segment back, `cold_load.lua` puts every job whose index entry still names that
//!    segment into the wheel (a cancelled or rescheduled one is skipped), in calls of
//!    [`CALL_JOBS`](pass::CALL_JOBS) jobs; `cold_retire.lua` forgets the segment, and
//!    the leader deletes its object.
//!
//! # Why nothing is lost, doubled or early
//!
//! - A crash between the PUT and the commit leaves jobs in the wheel and an object no
//!   index entry names: [`sweep`](pass::sweep) deletes it at the next leadership's first pass (and
//!   every [`ColdTier::sweep_every`] after it, for a stale leader's late PUT).
//! - A commit, load or retire of a leader that lost its lease is refused by its token.
//! - A load repeated after a crash loads only ids whose index entry still names the
//!   segment; each load call removes the entries of the jobs it inserts, atomically.
//! - A loaded job goes where its due time says: `ready` only once due (I6).
//! - The object is deleted only after Redis forgot the segment, so a crash between the
//!   two leaves an object [`sweep`](pass::sweep) removes.
//!
//! What depends on the store: a job in the cold tier lives in the store alone (its index
//! entry names it), so the store's durability is the job's: a local directory is written
//! with `fsync` (file and directory) before Redis is told, an S3 PUT has returned.
//!
//! Here: the tier's settings and store ([`tier`]), the segment format ([`segment`]), the
//! leader's pass ([`pass`]), and what Redis knows of cold jobs, read without the store
//! ([`view`], in every build).

#[cfg(feature = "cold")]
mod filling;
#[cfg(feature = "cold")]
pub(crate) mod pass;
#[cfg(feature = "cold")]
mod segment;
#[cfg(feature = "cold")]
mod tier;
pub(crate) mod view;

#[cfg(feature = "cold")]
pub use tier::ColdTier;
pub use view::ColdWindow;

/// Without feature `cold` no queue has a tier: the type has no values, so code that
/// takes an `Option<&ColdTier>` is the same in every build.
#[cfg(not(feature = "cold"))]
#[derive(Clone, Debug)]
pub(crate) enum ColdTier {}
