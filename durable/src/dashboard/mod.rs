//! A web dashboard and Prometheus metrics for durable queues (cargo feature `dashboard`).
//!
//! [`Dashboard`] builds an [`axum::Router`]: serve it on its own
//! (`tickless-durable serve <url> [queues...]` does) or mount it in your own app with
//! [`Router::nest`](axum::Router::nest). Its pages work offline: plain HTML and inline
//! SVG drawn by the server, no script, nothing from another site.
//!
//! | path | what |
//! | --- | --- |
//! | `/` | every queue: jobs scheduled, ready, in flight, dead; its leader; the HTTP API's tokens by name, when used ([`Dashboard::api_tokens`]) |
//! | `/queue/{name}` | one queue: the wheel by level, the leader and its token, promotion lag and throughput over time, when jobs come due over the next hour, day and week, its delivery (the ready list, or the stream outlet's length and groups' pending entries; the webhook target and its recent failures by status, [`Dashboard::webhooks`]), the ready, in-flight and dead jobs (`?dead_from=N`: the dead jobs after the N oldest, 50 a page) |
//! | `/queue/{name}/job?id=...` | one job: state, due time, attempts, last error, payload as text or hex (the last two with the token) |
//! | `POST /queue/{name}/action` | cancel, run now, retry a dead job, retry all dead |
//! | `POST /login`, `POST /logout` | open a session with the token; end it |
//! | `/metrics` | Prometheus text format |
//!
//! Actions need an access token ([`Dashboard::action_token`]); without one, or with
//! [`Dashboard::read_only`], the dashboard shows no buttons and refuses every action. A
//! browser logs in with the token (a form on every page) and gets a session: its
//! `HttpOnly`, `SameSite=Strict` cookie holds a random id, never the token; logging out
//! ends the session on the server, and so do 12 hours without a request (at most 1024
//! sessions are kept, the least recently used dropped first). A script sends
//! `Authorization: Bearer <token>` instead.
//!
//! Payloads and job errors (which often carry data) show only to a logged-in browser or a
//! request with the token; other readers see "hidden" in their place. Without a token
//! they show to no one. [`Dashboard::public_read`] shows them to anyone who can reach the
//! dashboard. Everything else (counts, ids, due times, the leader) is readable without
//! a token: serve the dashboard on loopback or behind a proxy that checks who comes.
//!
//! ```no_run
//! use tickless_durable::{dashboard::Dashboard, Queue};
//!
//! # #[tokio::main]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let queue = Queue::connect("redis://127.0.0.1/", "reviews").await?;
//! let app = axum::Router::new()
//!     .route("/", axum::routing::get(|| async { "my app" }))
//!     .nest("/jobs", Dashboard::new([queue]).action_token("s3cret").router());
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! axum::serve(listener, app).await?;
//! # Ok(())
//! # }
//! ```
//!
//! Queues created later: with [`Dashboard::every_queue`], the dashboard shows every queue
//! on one Redis server and looks for new ones (a `SCAN`, at most every 5 s) when its home
//! page or `/metrics` is read, when a page names a queue it does not know (at most every
//! second), and once a minute while it samples. `tickless-durable serve <url>` without
//! queue names is such a dashboard.
//!
//! Over time: the dashboard samples each queue's [`Stats`](super::Stats) every few
//! seconds (while a tokio runtime runs it, and on each page view) and keeps the last
//! hour, for the lag and throughput pictures. Throughput is the leader's promotions per
//! second (jobs reaching the ready list).
//!
//! The page never shows a Redis password: queues show [`Queue::url`], which is
//! redacted. Pages are built with `maud`, whose `html!` escapes every value it inserts:
//! job ids, errors and payloads show as text, never as markup.

mod cold;
mod due;
mod history;
mod hooks;
mod html;
mod job;
pub(crate) mod metrics;
mod queue;
mod routes;
mod session;
mod svg;
mod tokens;

use super::{ConnectOptions, Queue};
use history::History;
pub use hooks::WebhookView;
use session::Sessions;
use std::fmt;
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::{Duration, Instant};
pub use tokens::TokenUse;

/// A dashboard over some queues; [`router`](Dashboard::router) makes it an axum
/// [`Router`](axum::Router). See the [module docs](self).
#[derive(Clone)]
pub struct Dashboard {
    queues: Vec<Queue>,
    /// Where to look for the queues not named: see [`Dashboard::every_queue`].
    every_queue: Option<ConnectOptions>,
    token: Option<String>,
    read_only: bool,
    public_read: bool,
    secure_cookie: bool,
    sample_every: Duration,
    /// Who used the HTTP API: see [`Dashboard::api_tokens`].
    api_tokens: Option<tokens::Source>,
    /// What the webhook dispatchers did: see [`Dashboard::webhooks`].
    webhooks: Option<hooks::Source>,
}

impl fmt::Debug for Dashboard {
    /// Whether a token is set, never the token.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Dashboard")
            .field("queues", &self.queues)
            .field(
                "every_queue",
                &self.every_queue.as_ref().map(|o| o.shown_url()),
            )
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("read_only", &self.read_only)
            .field("public_read", &self.public_read)
            .field("secure_cookie", &self.secure_cookie)
            .field("sample_every", &self.sample_every)
            .field("api_tokens", &self.api_tokens.is_some())
            .field("webhooks", &self.webhooks.is_some())
            .finish()
    }
}

impl Dashboard {
    /// A dashboard over `queues`, read-only until an [`action_token`] is given.
    ///
    /// [`action_token`]: Dashboard::action_token
    pub fn new(queues: impl IntoIterator<Item = Queue>) -> Dashboard {
        Dashboard {
            queues: queues.into_iter().collect(),
            every_queue: None,
            token: None,
            read_only: false,
            public_read: false,
            secure_cookie: false,
            sample_every: Duration::from_secs(5),
            api_tokens: None,
            webhooks: None,
        }
    }

    /// Also shows every other queue on the Redis server `options` reaches, those created
    /// after the dashboard started too: it looks for them (a `SCAN` for their meta keys,
    /// as [`ConnectOptions::queue_names`]) when its home page or `/metrics` is read (at
    /// most every 5 s), when a page names a queue it does not know (at most every
    /// second), and once a minute while it samples. A queue whose keys are all gone leaves
    /// the list; the queues given to [`new`](Dashboard::new) always stay. One server only:
    /// on a Redis Cluster, name the queues (the home page says why it found none). The
    /// Redis user needs `+scan`.
    ///
    /// ```no_run
    /// use tickless_durable::{dashboard::Dashboard, ConnectOptions};
    ///
    /// let app = Dashboard::new([])
    ///     .every_queue(ConnectOptions::new("redis://127.0.0.1/"))
    ///     .router();
    /// # let _: axum::Router = app;
    /// ```
    pub fn every_queue(mut self, options: ConnectOptions) -> Dashboard {
        self.every_queue = Some(options);
        self
    }

    /// The token that allows actions (cancel, run now, retry) and shows payloads and job
    /// errors. Without one, the dashboard is read-only and shows neither (unless
    /// [`public_read`](Dashboard::public_read)). An empty token counts as none.
    pub fn action_token(mut self, token: impl Into<String>) -> Dashboard {
        let token = token.into();
        self.token = (!token.is_empty()).then_some(token);
        self
    }

    /// Read-only (`true`): no buttons, every action refused, even with a token.
    pub fn read_only(mut self, read_only: bool) -> Dashboard {
        self.read_only = read_only;
        self
    }

    /// Payloads and job errors shown to anyone who can reach the dashboard (`true`), not
    /// only to those with the token (the default: "hidden" in their place).
    pub fn public_read(mut self, public_read: bool) -> Dashboard {
        self.public_read = public_read;
        self
    }

    /// The login cookie marked `Secure` (`true`), for a dashboard reached over HTTPS (a
    /// proxy's TLS): the browser then never sends it over plain HTTP. Off by default,
    /// since the dashboard itself serves plain HTTP.
    pub fn secure_cookie(mut self, secure: bool) -> Dashboard {
        self.secure_cookie = secure;
        self
    }

    /// How often the stats of each queue are sampled for the pictures over time (default
    /// 5 s; at least 100 ms). The last 720 samples are kept.
    pub fn sample_every(mut self, every: Duration) -> Dashboard {
        self.sample_every = every.max(Duration::from_millis(100));
        self
    }

    /// Shows on the home page which HTTP API tokens were used, by name (never the
    /// secret): requests, the last one's time, counts by status and operation, as
    /// `uses` gives them when the page is read. `tickless-durable serve` passes its API's
    /// ([`ApiMetrics::token_use`](crate::api::ApiMetrics::token_use)).
    pub fn api_tokens(
        mut self,
        uses: impl Fn() -> Vec<TokenUse> + Send + Sync + 'static,
    ) -> Dashboard {
        self.api_tokens = Some(std::sync::Arc::new(uses));
        self
    }

    /// Shows on each queue's page the webhook target its due jobs are posted to (by name
    /// and origin, never its path, query or secret) and its recent failures by status
    /// code, timeout or connection error, with the latest error, as `view` gives them
    /// for the queue's name when the page is read (`None`: no dispatcher for it).
    /// `tickless-durable serve --webhooks-file` passes its dispatchers'
    /// ([`HookMetrics::view`](crate::hook::HookMetrics::view), feature `webhooks`).
    pub fn webhooks(
        mut self,
        view: impl Fn(&str) -> Option<WebhookView> + Send + Sync + 'static,
    ) -> Dashboard {
        self.webhooks = Some(std::sync::Arc::new(view));
        self
    }

    /// The axum router of the dashboard. Called inside a tokio runtime, it also starts a
    /// task that samples the queues' stats, which ends when the router is dropped.
    pub fn router(self) -> axum::Router {
        let state = self.state();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(sample_forever(Arc::downgrade(&state)));
        }
        routes::router(state)
    }
}

impl Dashboard {
    /// What the router's handlers share.
    fn state(self) -> Arc<State> {
        let shown = self
            .queues
            .iter()
            .map(|queue| Arc::new(Shown::new(queue.clone(), true)))
            .collect();
        Arc::new(State {
            shown: RwLock::new(shown),
            look: tokio::sync::Mutex::new(None),
            problems: Mutex::new(Vec::new()),
            actions: !self.read_only && self.token.is_some(),
            sessions: Sessions::new(session::IDLE, session::MAX_SESSIONS),
            dashboard: self,
        })
    }
}

/// How old the last look for queues may be when the home page or `/metrics` is read,
/// when a page names an unknown queue, and when the sampler comes round: each look is a
/// `SCAN` of the server's keys, so a page read often does not make one each time.
const LOOK_INDEX: Duration = Duration::from_secs(5);
const LOOK_MISS: Duration = Duration::from_secs(1);
const LOOK_IDLE: Duration = Duration::from_secs(60);

/// A queue on the dashboard, and its stats over the last hour.
#[derive(Debug)]
struct Shown {
    queue: Queue,
    history: Mutex<History>,
    /// Given to [`Dashboard::new`]: never dropped by a look.
    named: bool,
}

impl Shown {
    fn new(queue: Queue, named: bool) -> Shown {
        Shown {
            queue,
            history: Mutex::new(History::default()),
            named,
        }
    }
}

/// What the handlers share.
///
/// `shown` is read by every handler and replaced by a look for queues; its lock is never
/// held across an `await` (handlers clone the `Arc`s they need). `look` is held for the
/// whole of a look, so that concurrent requests make one `SCAN`, not one each: the others
/// wait, then find the look fresh. `problems` is what the latest look could not do.
#[derive(Debug)]
struct State {
    dashboard: Dashboard,
    /// The queues, in order: the named ones, then those found, by name.
    shown: RwLock<Vec<Arc<Shown>>>,
    /// When the last look for queues started.
    look: tokio::sync::Mutex<Option<Instant>>,
    problems: Mutex<Vec<String>>,
    actions: bool,
    /// The logged-in browsers.
    sessions: Sessions,
}

impl State {
    /// The queues shown now.
    fn shown(&self) -> Vec<Arc<Shown>> {
        self.shown.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Queue `name`; if the dashboard does not know it, after looking again (at most
    /// every second) when it shows every queue on the server.
    async fn queue(&self, name: &str) -> Option<Arc<Shown>> {
        let find = |state: &State| state.shown().into_iter().find(|s| s.queue.name() == name);
        if let Some(shown) = find(self) {
            return Some(shown);
        }
        self.look_again(LOOK_MISS).await;
        find(self)
    }

    /// Looks for the queues on the server, unless the last look is younger than
    /// `fresh` (or the dashboard shows only named queues): keeps the named ones and those
    /// still found (with their history), adds the new ones, drops the rest.
    async fn look_again(&self, fresh: Duration) {
        let Some(options) = &self.dashboard.every_queue else {
            return;
        };
        let mut last = self.look.lock().await;
        if last.is_some_and(|at| at.elapsed() < fresh) {
            return;
        }
        *last = Some(Instant::now());
        let mut problems = Vec::new();
        match options.queue_names().await {
            Ok(names) => {
                let known = self.shown();
                let mut next: Vec<Arc<Shown>> = known.iter().filter(|s| s.named).cloned().collect();
                for name in names {
                    if next.iter().any(|s| s.queue.name() == name) {
                        continue;
                    }
                    if let Some(old) = known.iter().find(|s| s.queue.name() == name) {
                        next.push(old.clone());
                        continue;
                    }
                    match options.connect(&name).await {
                        Ok(queue) => next.push(Arc::new(Shown::new(queue, false))),
                        Err(err) => problems.push(format!("cannot open queue {name:?}: {err}")),
                    }
                }
                *self.shown.write().unwrap_or_else(|e| e.into_inner()) = next;
            }
            Err(err) => problems.push(format!("cannot look for queues: {err}")),
        }
        *self.problems.lock().unwrap_or_else(|e| e.into_inner()) = problems;
    }

    /// What the latest look for queues could not do.
    fn problems(&self) -> Vec<String> {
        self.problems
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Samples a queue if its last sample is older than the sampling period.
    async fn sample(&self, shown: &Shown) {
        let due = {
            let history = shown.history.lock().unwrap_or_else(|e| e.into_inner());
            history.due(self.dashboard.sample_every)
        };
        if due {
            if let Ok(stats) = shown.queue.stats().await {
                shown
                    .history
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(&stats);
            }
        }
    }
}

async fn sample_forever(state: Weak<State>) {
    loop {
        let every = {
            let Some(state) = state.upgrade() else { return };
            state.look_again(LOOK_IDLE).await;
            for shown in state.shown() {
                state.sample(&shown).await;
            }
            state.dashboard.sample_every
        };
        tokio::time::sleep(every).await;
    }
}

/// Compares without an early exit, so that the time taken tells nothing of the token.
pub(crate) fn same_token(given: &[u8], token: &[u8]) -> bool {
    let mut diff = given.len() ^ token.len();
    for (i, &b) in token.iter().enumerate() {
        diff |= usize::from(b ^ given.get(i).copied().unwrap_or(!b));
    }
    diff == 0
}

#[cfg(test)]
mod tests {
    use super::{same_token, Dashboard};

    #[test]
    fn debug_shows_no_token() {
        let debug = format!("{:?}", Dashboard::new([]).action_token("s3cret-t0ken"));
        assert!(!debug.contains("s3cret-t0ken"), "{debug}");
        assert!(debug.contains("token: Some(\"<redacted>\")"), "{debug}");
    }

    /// The router's own sessions end as the module docs say: after 12 hours without a
    /// request, and the least recently used first beyond 1024 (not only `Sessions` with
    /// parameters, as session.rs tests it).
    #[test]
    fn the_routers_sessions_end_after_12_idle_hours_and_beyond_1024() {
        let state = Dashboard::new([]).action_token("t").state();
        let sessions = &state.sessions;
        let t0 = std::time::Instant::now();
        let hour = std::time::Duration::from_secs(3600);
        let kept = sessions.open(t0).unwrap();
        let idle = sessions.open(t0).unwrap();
        assert!(sessions.check(&kept, t0 + 12 * hour - hour / 3600));
        assert!(!sessions.check(&idle, t0 + 12 * hour), "open 12 h idle");

        let first = sessions.open(t0 + 13 * hour).unwrap();
        let later: Vec<String> = (1..1024)
            .map(|i| sessions.open(t0 + 13 * hour + hour / 3600 * i).unwrap())
            .collect();
        // 1024 open: `kept`, used least recently, made room for the last of them.
        assert!(
            !sessions.check(&kept, t0 + 14 * hour),
            "the least recently used"
        );
        assert!(sessions.check(&first, t0 + 14 * hour));
        let one_more = sessions.open(t0 + 14 * hour).unwrap();
        assert!(sessions.check(&first, t0 + 14 * hour), "used last: kept");
        assert!(
            !sessions.check(&later[0], t0 + 14 * hour),
            "the least recently used"
        );
        assert!(sessions.check(&later[1], t0 + 14 * hour));
        assert!(sessions.check(&one_more, t0 + 14 * hour));
    }

    #[test]
    fn tokens_compare_whole() {
        assert!(same_token(b"abc", b"abc"));
        assert!(!same_token(b"abd", b"abc"));
        assert!(!same_token(b"ab", b"abc"));
        assert!(!same_token(b"abcd", b"abc"));
        assert!(!same_token(b"", b"abc"));
    }
}
