//! Login sessions: what the dashboard's cookie carries instead of the access token.
//!
//! A login with the right token opens a session: 32 bytes from the operating system's
//! CSPRNG (`getrandom`), hex-encoded, kept here and nowhere else. The cookie holds only
//! that id, so whoever reads a cookie holds a session that logging out (or 12 hours
//! without a request) ends, never the token itself.
//!
//! At most [`MAX_SESSIONS`] are kept: opening one more first drops the expired ones, then
//! the one least recently used, so a flood of logins cannot grow memory without bound.
//!
//! Every method takes "now" from its caller, so tests drive expiry without waiting.

use std::collections::HashMap;
use std::fmt;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A session ends after this long without a request.
pub(super) const IDLE: Duration = Duration::from_secs(12 * 3600);

/// Sessions kept at once; the least recently used goes first.
pub(super) const MAX_SESSIONS: usize = 1024;

/// Bytes of randomness in a session id (64 hex digits).
const ID_BYTES: usize = 32;

/// The open sessions: id → when it was last used.
pub(super) struct Sessions {
    last_used: Mutex<HashMap<String, Instant>>,
    idle: Duration,
    max: usize,
}

impl fmt::Debug for Sessions {
    /// The number of sessions, never their ids (each is as good as the token).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sessions")
            .field("open", &self.lock().len())
            .field("idle", &self.idle)
            .field("max", &self.max)
            .finish()
    }
}

impl Sessions {
    pub(super) fn new(idle: Duration, max: usize) -> Sessions {
        Sessions {
            last_used: Mutex::new(HashMap::new()),
            idle,
            max: max.max(1),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Instant>> {
        self.last_used.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A new session's id, or `None` when the operating system gave no randomness.
    pub(super) fn open(&self, now: Instant) -> Option<String> {
        let mut bytes = [0u8; ID_BYTES];
        getrandom::getrandom(&mut bytes).ok()?;
        let id: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let mut sessions = self.lock();
        if sessions.len() >= self.max {
            sessions.retain(|_, used| now.saturating_duration_since(*used) < self.idle);
        }
        while sessions.len() >= self.max {
            let Some(oldest) = sessions
                .iter()
                .min_by_key(|(_, used)| **used)
                .map(|(id, _)| id.clone())
            else {
                break;
            };
            sessions.remove(&oldest);
        }
        sessions.insert(id.clone(), now);
        Some(id)
    }

    /// Whether `id` is an open session; if so, it counts as used `now`. An expired one is
    /// dropped.
    pub(super) fn check(&self, id: &str, now: Instant) -> bool {
        let mut sessions = self.lock();
        match sessions.get_mut(id) {
            Some(used) if now.saturating_duration_since(*used) < self.idle => {
                *used = now;
                true
            }
            Some(_) => {
                sessions.remove(id);
                false
            }
            None => false,
        }
    }

    /// Ends session `id`; whether it was open.
    pub(super) fn close(&self, id: &str) -> bool {
        self.lock().remove(id).is_some()
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_64_hex_digits_and_differ() {
        let sessions = Sessions::new(IDLE, 8);
        let now = Instant::now();
        let a = sessions.open(now).unwrap();
        let b = sessions.open(now).unwrap();
        assert_eq!(a.len(), 64);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()), "{a}");
        assert_ne!(a, b);
        assert!(sessions.check(&a, now) && sessions.check(&b, now));
        assert!(!sessions.check("", now) && !sessions.check(&a[1..], now));
    }

    #[test]
    fn sessions_end_after_the_idle_time_and_use_renews_them() {
        let sessions = Sessions::new(Duration::from_secs(60), 8);
        let t0 = Instant::now();
        let id = sessions.open(t0).unwrap();
        assert!(sessions.check(&id, t0 + Duration::from_secs(59)));
        // Used at 59 s: still open at 118 s.
        assert!(sessions.check(&id, t0 + Duration::from_secs(118)));
        assert!(!sessions.check(&id, t0 + Duration::from_secs(178)));
        // Dropped, not just refused.
        assert_eq!(sessions.len(), 0);
        assert!(!sessions.check(&id, t0 + Duration::from_secs(118)));
    }

    #[test]
    fn closing_ends_a_session_and_only_that_one() {
        let sessions = Sessions::new(IDLE, 8);
        let now = Instant::now();
        let (a, b) = (sessions.open(now).unwrap(), sessions.open(now).unwrap());
        assert!(sessions.close(&a));
        assert!(!sessions.close(&a));
        assert!(!sessions.check(&a, now));
        assert!(sessions.check(&b, now));
    }

    #[test]
    fn a_login_flood_keeps_at_most_max_sessions_dropping_the_least_recently_used() {
        let sessions = Sessions::new(IDLE, 3);
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let first = sessions.open(at(0)).unwrap();
        let second = sessions.open(at(1)).unwrap();
        let third = sessions.open(at(2)).unwrap();
        // The first is used again: the second is now the least recently used.
        assert!(sessions.check(&first, at(3)));
        let fourth = sessions.open(at(4)).unwrap();
        assert_eq!(sessions.len(), 3);
        assert!(!sessions.check(&second, at(5)));
        for id in [&first, &third, &fourth] {
            assert!(sessions.check(id, at(5)));
        }
        for i in 0..1000 {
            sessions.open(at(6 + i)).unwrap();
        }
        assert_eq!(sessions.len(), 3);
    }

    #[test]
    fn expired_sessions_go_before_live_ones_when_full() {
        let sessions = Sessions::new(Duration::from_secs(10), 2);
        let t0 = Instant::now();
        let old = sessions.open(t0).unwrap();
        let live = sessions.open(t0 + Duration::from_secs(15)).unwrap();
        sessions.open(t0 + Duration::from_secs(16)).unwrap();
        assert!(!sessions.check(&old, t0 + Duration::from_secs(16)));
        assert!(sessions.check(&live, t0 + Duration::from_secs(16)));
    }
}
