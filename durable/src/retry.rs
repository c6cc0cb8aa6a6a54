//! How long a leader or a worker waits before trying again after an error.
//!
//! While Redis is away (refused, reset, restarting, loading its data: [`Error::is_away`])
//! the loops try again every [`AWAY_RETRY`], a steady pace: each try costs a down Redis
//! one refused connection, and one comes within `AWAY_RETRY` of Redis answering again,
//! so deliveries resume within about that. A growing backoff would leave a loop asleep
//! for seconds after Redis came back. Every other error (a key holding garbage, a
//! permission missing) waits [`FIRST`] doubling to [`LONGEST`]: trying again soon cannot
//! cure it, and each try is an error reported.
//!
//! The queue's shared connection makes no attempts of its own (`rdb/single.rs`): a call
//! that finds it broken makes one, so these loops
//! set the pace for it too.

use crate::error::Error;
use std::time::Duration;

/// The pause between tries while Redis is away: at most 10 tries a second per loop.
pub(crate) const AWAY_RETRY: Duration = Duration::from_millis(100);
/// The first pause after any other error.
pub(crate) const FIRST: Duration = Duration::from_millis(100);
/// The longest pause after other errors.
pub(crate) const LONGEST: Duration = Duration::from_secs(2);

/// The pauses of one loop: see the module docs.
#[derive(Debug)]
pub(crate) struct Retry {
    next: Duration,
}

impl Retry {
    pub(crate) fn new() -> Retry {
        Retry { next: FIRST }
    }

    /// The pause before trying again after `err`.
    pub(crate) fn after(&mut self, err: &Error) -> Duration {
        self.after_error(err.is_away())
    }

    /// The pause before trying again after an error that is (`away`) or is not Redis
    /// being away.
    pub(crate) fn after_error(&mut self, away: bool) -> Duration {
        if away {
            return AWAY_RETRY;
        }
        let pause = self.next;
        self.next = (self.next * 2).min(LONGEST);
        pause
    }

    /// A call succeeded: the next error starts from [`FIRST`] again.
    pub(crate) fn reset(&mut self) {
        self.next = FIRST;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn while_redis_is_away_the_pause_stays_at_the_steady_pace() {
        let mut retry = Retry::new();
        for _ in 0..50 {
            assert_eq!(retry.after_error(true), AWAY_RETRY);
        }
        // And being away does not grow the pause for other errors either.
        assert_eq!(retry.after_error(false), FIRST);
    }

    #[test]
    fn other_errors_double_the_pause_up_to_the_longest_and_a_success_resets_it() {
        let mut retry = Retry::new();
        let pauses: Vec<u64> = (0..7)
            .map(|_| retry.after_error(false).as_millis() as u64)
            .collect();
        assert_eq!(pauses, [100, 200, 400, 800, 1600, 2000, 2000]);
        retry.reset();
        assert_eq!(retry.after_error(false), FIRST);
    }
}
