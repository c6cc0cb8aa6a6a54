//! Bearer tokens: each with a name, scopes and the queues it may touch.

use super::problem::Problem;
use crate::dashboard::same_token;
use axum::http::{header, HeaderMap};
use std::fmt;
use std::sync::Arc;

/// The shortest secret a [`Token`] may have, in bytes: guessing one must be hopeless.
pub const MIN_SECRET_BYTES: usize = 16;

/// What a token may do. [`Admin`](Scope::Admin) may do everything.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Scope {
    /// Schedule, schedule in a batch, cancel, reschedule; set and remove recurring
    /// schedules.
    Schedule,
    /// Claim, ack, fail and extend: a pull worker.
    Work,
    /// Look a job up; list recurring schedules and dead jobs; counts.
    Read,
    /// All of the above, and retrying dead jobs.
    Admin,
}

impl Scope {
    /// The scope's name in a tokens file: `schedule`, `work`, `read`, `admin`.
    pub fn name(self) -> &'static str {
        match self {
            Scope::Schedule => "schedule",
            Scope::Work => "work",
            Scope::Read => "read",
            Scope::Admin => "admin",
        }
    }

    fn parse(name: &str) -> Option<Scope> {
        [Scope::Schedule, Scope::Work, Scope::Read, Scope::Admin]
            .into_iter()
            .find(|scope| scope.name() == name)
    }
}

/// A bearer token of the API: a name (shown in logs and metrics, never the secret), its
/// scopes, and the queues it may touch (all of them when none is named).
///
/// `Debug` shows the name, scopes and queues, never the secret.
///
/// # Examples
///
/// ```
/// use tickless_durable::api::{Scope, Token};
///
/// let token = Token::new("billing", "0123456789abcdef-billing")
///     .scopes([Scope::Schedule, Scope::Read])
///     .queues(["invoices"]);
/// assert!(!format!("{token:?}").contains("0123456789abcdef"));
/// ```
#[derive(Clone)]
pub struct Token {
    /// Shared with each request's [`TokenName`](super::track::TokenName): no copy a request.
    name: Arc<str>,
    secret: String,
    scopes: Vec<Scope>,
    queues: Option<Vec<String>>,
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Token")
            .field("name", &self.name)
            .field("secret", &"<redacted>")
            .field("scopes", &self.scopes)
            .field("queues", &self.queues)
            .finish()
    }
}

impl Token {
    /// A token named `name` with secret `secret`, no scope yet, for every queue.
    pub fn new(name: impl Into<String>, secret: impl Into<String>) -> Token {
        Token {
            name: Arc::from(name.into()),
            secret: secret.into(),
            scopes: Vec::new(),
            queues: None,
        }
    }

    /// What it may do.
    pub fn scopes(mut self, scopes: impl IntoIterator<Item = Scope>) -> Token {
        self.scopes = scopes.into_iter().collect();
        self
    }

    /// The only queues it may touch (by default, every queue the API serves).
    pub fn queues<S: Into<String>>(mut self, queues: impl IntoIterator<Item = S>) -> Token {
        self.queues = Some(queues.into_iter().map(Into::into).collect());
        self
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its name, shared.
    pub(crate) fn shared_name(&self) -> Arc<str> {
        self.name.clone()
    }

    /// Tokens from the text of a tokens file: one token a line, four fields separated by
    /// spaces or tabs: name, scopes (comma-separated: `schedule`, `work`, `read`,
    /// `admin`), queues (comma-separated, or `*` for all), secret (at least
    /// [`MIN_SECRET_BYTES`] bytes, no spaces). Empty lines and lines starting with `#`
    /// are skipped.
    ///
    /// ```text
    /// # name    scopes           queues           secret
    /// billing   schedule,read    invoices,dunning 3f9c2a...
    /// ops       admin            *                b71e0d...
    /// ```
    ///
    /// # Errors
    ///
    /// A message naming the line (and never its secret) when a line does not have four
    /// fields, names an unknown scope, has a short secret, or repeats a name or secret.
    ///
    /// ```
    /// use tickless_durable::api::Token;
    ///
    /// let tokens = Token::parse_lines("w work * 0123456789abcdef0123\n").unwrap();
    /// assert_eq!(tokens[0].name(), "w");
    /// let err = Token::parse_lines("w work * tiny").unwrap_err();
    /// assert!(err.contains("line 1") && !err.contains("tiny"), "{err}");
    /// ```
    pub fn parse_lines(text: &str) -> Result<Vec<Token>, String> {
        let mut tokens: Vec<Token> = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let at = format!("tokens, line {}", n + 1);
            let fields: Vec<&str> = line.split_whitespace().collect();
            let [name, scopes, queues, secret] = fields[..] else {
                return Err(format!(
                    "{at}: {} fields, not 4 (name scopes queues secret)",
                    fields.len()
                ));
            };
            let mut parsed = Vec::new();
            for scope in scopes.split(',') {
                parsed.push(Scope::parse(scope).ok_or_else(|| {
                    format!("{at}: unknown scope {scope:?} (schedule, work, read, admin)")
                })?);
            }
            if secret.len() < MIN_SECRET_BYTES {
                return Err(format!(
                    "{at}: the secret is shorter than {MIN_SECRET_BYTES} bytes"
                ));
            }
            if tokens.iter().any(|t| &*t.name == name) {
                return Err(format!("{at}: a second token named {name:?}"));
            }
            if tokens.iter().any(|t| t.secret == secret) {
                return Err(format!("{at}: the same secret as an earlier line"));
            }
            let mut token = Token::new(name, secret).scopes(parsed);
            if queues != "*" {
                token = token.queues(queues.split(',').filter(|q| !q.is_empty()));
            }
            tokens.push(token);
        }
        Ok(tokens)
    }

    /// Whether it names `queue` in its queue set (a token for every queue names none).
    pub(crate) fn names(&self, queue: &str) -> bool {
        (self.queues.as_ref()).is_some_and(|queues| queues.iter().any(|q| q == queue))
    }

    fn allows(&self, scope: Scope, queue: &str) -> bool {
        let scoped = self.scopes.contains(&Scope::Admin) || self.scopes.contains(&scope);
        let queued = self
            .queues
            .as_ref()
            .is_none_or(|queues| queues.iter().any(|q| q == queue));
        scoped && queued
    }
}

/// The token a request's `Authorization: Bearer` names, compared with every token in
/// constant time (each comparison takes the same time wherever the bytes differ, and
/// every token is compared, so the time tells nothing of which matched).
pub(crate) fn caller(tokens: &[Token], headers: &HeaderMap) -> Result<usize, Problem> {
    if tokens.is_empty() {
        return Err(Problem::unauthorized(
            "the server has no API token configured: every request is refused",
        ));
    }
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .ok_or_else(|| Problem::unauthorized("send Authorization: Bearer <token>"))?;
    let mut found = None;
    for (i, token) in tokens.iter().enumerate() {
        if same_token(given.as_bytes(), token.secret.as_bytes()) {
            found = Some(i);
        }
    }
    found.ok_or_else(|| Problem::unauthorized("the bearer token is not one of the server's"))
}

/// Whether `token` may do `scope` on `queue`: a 403 problem if not.
pub(crate) fn check(token: &Token, scope: Scope, queue: &str) -> Result<(), Problem> {
    if token.allows(scope, queue) {
        return Ok(());
    }
    Err(Problem::forbidden(format!(
        "token {:?} may not {} on queue {queue:?}",
        token.name,
        scope.name()
    )))
}

#[cfg(test)]
mod tests {
    use super::{Scope, Token};

    #[test]
    fn admin_may_do_all_and_queue_sets_hold() {
        let t = Token::new("a", "x").scopes([Scope::Admin]).queues(["q"]);
        assert!(t.allows(Scope::Work, "q") && t.allows(Scope::Read, "q"));
        assert!(!t.allows(Scope::Read, "other"));
        let r = Token::new("r", "x").scopes([Scope::Read]);
        assert!(r.allows(Scope::Read, "any") && !r.allows(Scope::Schedule, "any"));
    }

    #[test]
    fn tokens_file_errors_name_the_line_never_the_secret() {
        let ok = Token::parse_lines(
            "# c\n\na schedule,read q1,q2 0123456789abcdefXYZ\nb admin * 0123456789abcdefABC\n",
        )
        .unwrap();
        assert_eq!(ok.len(), 2);
        assert_eq!(
            ok[0].queues.as_deref(),
            Some(&["q1".to_string(), "q2".to_string()][..])
        );
        assert_eq!(ok[1].queues, None);
        for (text, says) in [
            ("a read q", "3 fields"),
            ("a reed q 0123456789abcdefSECRET", "unknown scope"),
            ("a read q SECRETshort", "shorter"),
            (
                "a read q 0123456789abcdefSECRET\na read q 0123456789abcdefOTHER",
                "second token",
            ),
            (
                "a read q 0123456789abcdefSECRET\nb read q 0123456789abcdefSECRET",
                "same secret",
            ),
        ] {
            let err = Token::parse_lines(text).unwrap_err();
            assert!(err.contains(says), "{err}");
            assert!(!err.contains("SECRET"), "{err}");
        }
    }
}
