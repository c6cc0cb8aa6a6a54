//! The turn token: at most one thread does the driver's work at a time (turning the
//! wheel, arming the alarm), and work asked for while another thread holds the token is
//! done by that thread before it lets go, so no request is lost.
//!
//! The token is not a lock anyone waits for while the work runs: [`Token::request`] only
//! records the work and returns at once when another thread holds the token. The work
//! (which wakes wakers, and so runs user code) is done with no lock held; the mutex here
//! is held only for a few instructions at a time. Only [`Token::wait_done`] blocks, for a
//! manual clock's `advance` that must not return before its timers have fired, and it
//! waits for another thread's work, never its own: a request made from inside the work
//! (a waker that advances the clock it was woken by) returns [`Requested::Mine`] instead.

use crate::sync::{lock, thread_id, Condvar, Mutex, ThreadId};

/// Work: the alarm went off, or the manual clock moved; turn the wheel.
pub(crate) const FIRE: u8 = 1;
/// Work: an insert needs the alarm earlier than it is armed.
pub(crate) const REARM: u8 = 2;
/// Work: the runtime is gone; let go of the alarm.
pub(crate) const STOP: u8 = 4;

pub(crate) struct Token {
    state: Mutex<State>,
    done: Condvar,
}

struct State {
    holder: Option<ThreadId>,
    /// Work asked for and not yet taken by the holder.
    pending: u8,
    /// How many times the holder has taken pending work.
    taken: u64,
    /// The last take whose work is done.
    completed: u64,
}

/// What [`Token::request`] found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Requested {
    /// The caller holds the token now: it must call [`Token::next`] until it returns
    /// `None`, doing the work each call hands it.
    Holder,
    /// The caller already holds the token (it asked from inside its own work): the work
    /// is done before its outer loop lets go.
    Mine,
    /// Another thread holds the token and will do the work; [`Token::wait_done`] with this
    /// ticket waits for it.
    Busy { ticket: u64 },
}

impl Token {
    pub(crate) fn new() -> Self {
        Token {
            state: Mutex::new(State {
                holder: None,
                pending: 0,
                taken: 0,
                completed: 0,
            }),
            done: Condvar::new(),
        }
    }

    /// Asks for `work` (a set of the flags above) to be done.
    pub(crate) fn request(&self, work: u8) -> Requested {
        let me = thread_id();
        let mut state = lock(&self.state);
        state.pending |= work;
        match state.holder {
            None => {
                state.holder = Some(me);
                Requested::Holder
            }
            Some(holder) if holder == me => Requested::Mine,
            Some(_) => Requested::Busy {
                ticket: state.taken,
            },
        }
    }

    /// Whether the calling thread holds the token (asks from inside its own work).
    pub(crate) fn held_here(&self) -> bool {
        lock(&self.state).holder == Some(thread_id())
    }

    /// For the holder: marks the work of the previous call done, and takes the work asked
    /// for since; `None` (and the token is let go) when there is none.
    pub(crate) fn next(&self) -> Option<u8> {
        let mut state = lock(&self.state);
        state.completed = state.taken;
        self.done.notify_all();
        if state.pending == 0 {
            state.holder = None;
            return None;
        }
        state.taken += 1;
        Some(std::mem::take(&mut state.pending))
    }

    /// For a holder whose work panicked: lets go of the token, the work not taken left
    /// for the next asker, so that no one waits for it forever.
    pub(crate) fn abandon(&self) {
        let mut state = lock(&self.state);
        state.completed = state.taken;
        state.holder = None;
        self.done.notify_all();
    }

    /// Blocks until the work asked for before `ticket` was handed out has been done.
    pub(crate) fn wait_done(&self, ticket: u64) {
        let mut state = lock(&self.state);
        // Work asked for while take `ticket` ran is taken by take `ticket + 1` or later.
        while state.completed <= ticket {
            state = self
                .done
                .wait(state)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
    }
}

#[cfg(all(test, not(tickless_loom)))]
mod tests {
    use super::*;

    #[test]
    fn work_asked_while_held_is_handed_to_the_holder_then_the_token_is_free() {
        let token = Token::new();
        assert_eq!(token.request(FIRE), Requested::Holder);
        assert_eq!(token.next(), Some(FIRE));
        assert_eq!(
            token.request(REARM),
            Requested::Mine,
            "asked from inside the work"
        );
        assert_eq!(token.next(), Some(REARM));
        assert_eq!(token.next(), None);
        assert_eq!(
            token.request(STOP),
            Requested::Holder,
            "let go: the next asker holds it"
        );
        assert_eq!(token.next(), Some(STOP));
        assert_eq!(token.next(), None);
    }

    #[test]
    fn a_waiter_returns_once_the_holder_has_done_its_work() {
        let token = std::sync::Arc::new(Token::new());
        assert_eq!(token.request(FIRE), Requested::Holder);
        assert_eq!(token.next(), Some(FIRE));
        let waiter = {
            let token = token.clone();
            std::thread::spawn(move || match token.request(FIRE) {
                Requested::Busy { ticket } => token.wait_done(ticket),
                other => panic!("expected busy, got {other:?}"),
            })
        };
        while lock(&token.state).pending == 0 {
            std::thread::yield_now();
        }
        assert!(!waiter.is_finished(), "returned before its work was done");
        assert_eq!(
            token.next(),
            Some(FIRE),
            "the holder takes the waiter's work"
        );
        assert_eq!(token.next(), None, "done: the waiter may return");
        waiter.join().unwrap();
    }
}
