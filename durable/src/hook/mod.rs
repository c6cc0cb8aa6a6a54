//! Push delivery (cargo feature `webhooks`): due jobs POSTed to HTTP targets, signed as
//! [Standard Webhooks](https://www.standardwebhooks.com/).
//!
//! The operator names the targets and which queue delivers to which ([`Webhooks`], the
//! file `tickless-durable serve --webhooks-file` reads); [`Webhooks::spawn`] starts a
//! dispatcher per queue: four claim loops (fewer if the target's concurrency is lower)
//! over the queue's public [`Worker`] calls like any user's, sharing the target's
//! limits. A job cannot choose its target: a queue has one, so that what a request may
//! reach is decided by the operator alone.
//!
//! # A request
//!
//! `POST` to the target's URL, the job's payload as the body (`content-type` the
//! target's, `application/json` by default), and these headers:
//!
//! | header | value |
//! | --- | --- |
//! | `webhook-id` | [`webhook_id`]: the same for every delivery of the job, for deduplication |
//! | `webhook-timestamp` | when the request was signed, Unix seconds (the wall clock) |
//! | `webhook-signature` | `v1,<base64 HMAC-SHA256 of "id.timestamp.body">`, one per secret, space-separated |
//! | `tickless-queue`, `tickless-job-id` | the queue's name and the job's id (percent-encoded beyond visible ASCII) |
//! | `tickless-delivery`, `tickless-attempt` | the delivery number ([`Job::delivery`](crate::Job::delivery)) and the attempt (1 for the first) |
//!
//! A 2xx answer acks the delivery. 410 Gone sends the job to the dead set at once. Any
//! other status, a timeout or a failed connection fails the delivery: retried after the
//! target's backoff (jittered), dead after the job's last attempt, with the status and
//! the first 200 bytes of the answer (or the connection's error) as the job's error.
//! Redirects are not followed (a 3xx is a failure).
//!
//! Delivery is at least once, as for workers: a dispatcher that dies mid-request (or
//! whose ack is lost) leaves the job to be delivered again at its lease end, with the
//! same `webhook-id`. A receiver deduplicates by `webhook-id`.
//!
//! # Where requests may go
//!
//! Only `https` (and schemes named by `allow-scheme`), only to hosts named by
//! `allow-host` (`*` for any), and never to a loopback, private, link-local, unspecified,
//! shared, multicast or documentation address unless its network is named by
//! `allow-net`. Names are resolved by the client's own resolver, which hands the
//! connection only the addresses it allowed (no second resolution for DNS rebinding);
//! IP-literal URLs are checked before the request. A refused request is not sent: the
//! delivery fails with the reason. HTTPS is verified against the system's roots, or
//! against the certificates of `ca-file` only.
//!
//! # The file
//!
//! One setting a line; `#` starts a comment line:
//!
//! ```text
//! # target NAME URL settings...: secret= (one or more), concurrency= (8), rate= (per
//! # second; none by default), timeout-ms= (10000), backoff-ms= (1000), backoff-max-ms=
//! # (3600000), jitter= (1.0: each retry anywhere from 0 to its delay), content-type=
//! target orders https://hooks.example.com/orders secret=whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw rate=50
//! # queue QUEUE TARGET
//! queue emails orders
//! allow-host hooks.example.com
//! # allow-scheme http       # plain HTTP too
//! # allow-net 10.0.0.0/8    # addresses refused by default
//! # ca-file /etc/ssl/private-ca.pem
//! ```
//!
//! Secrets rotate without a lost delivery: give the target a second `secret=` (every
//! request is then signed with both), move receivers to the new one, then drop the old
//! one. A receiver that knows only the old secret refuses every request signed after it
//! was dropped. Secrets are never shown: not in `Debug`, errors, logs, the dashboard or
//! `/metrics`, which name a target by its name only.
//!
//! [`Worker`]: crate::Worker

mod dispatch;
mod guard;
mod metrics;
mod sign;

pub use metrics::HookMetrics;
pub use sign::{webhook_id, Secret};

use crate::queue::Queue;
use crate::worker::backoff::Backoff;
use guard::{Guard, Net};
use std::fmt;
use std::future::Future;
use std::num::NonZeroU32;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Claim loops per routed queue (at most the target's concurrency). A loop claims as
/// many jobs as its target has free permits, one Redis round trip a claim, and permits
/// come back one delivery at a time: one loop took 1-2 jobs a round trip and fell
/// seconds behind 4,000 jobs/s on the callbacks benchmark (BENCHMARKS.md, issue 39);
/// four claim while the others' answers are on their way.
const CLAIM_LOOPS: usize = 4;

/// One target: where, signed with what, within which limits.
#[derive(Clone)]
pub(crate) struct Target {
    pub(crate) name: String,
    pub(crate) url: reqwest::Url,
    pub(crate) secrets: Vec<Secret>,
    pub(crate) concurrency: usize,
    pub(crate) rate: Option<NonZeroU32>,
    pub(crate) timeout: Duration,
    pub(crate) backoff: Backoff,
    pub(crate) content_type: String,
}

impl fmt::Debug for Target {
    /// The name, host and limits; never the URL's path or query, nor a secret.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Target")
            .field("name", &self.name)
            .field("host", &self.url.host_str())
            .field("secrets", &self.secrets.len())
            .field("concurrency", &self.concurrency)
            .field("rate", &self.rate)
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// The operator's webhook configuration: targets, which queue delivers to which, and
/// where requests may go. See the [module docs](self) for the file it parses.
#[derive(Clone, Debug, Default)]
pub struct Webhooks {
    targets: Vec<Target>,
    routes: Vec<(String, String)>,
    guard: Guard,
    ca_file: Option<PathBuf>,
}

impl Webhooks {
    /// The configuration in `text` (the [module docs](self) show the lines).
    ///
    /// # Errors
    ///
    /// The first wrong line's number and what is wrong; a secret is never quoted.
    pub fn parse(text: &str) -> Result<Webhooks, String> {
        let mut webhooks = Webhooks::default();
        for (at, line) in text.lines().enumerate() {
            let words: Vec<&str> = line.split_whitespace().collect();
            let Some((&first, rest)) = words.split_first() else {
                continue;
            };
            let fail = |why: String| format!("line {}: {why}", at + 1);
            match first {
                _ if first.starts_with('#') => {}
                "target" => webhooks.targets.push(target(rest).map_err(fail)?),
                "queue" => match rest {
                    [queue, target] => webhooks
                        .routes
                        .push((queue.to_string(), target.to_string())),
                    _ => return Err(fail("queue QUEUE TARGET".into())),
                },
                "allow-host" => webhooks
                    .guard
                    .hosts
                    .extend(rest.iter().map(|h| h.to_ascii_lowercase())),
                "allow-scheme" => webhooks
                    .guard
                    .schemes
                    .extend(rest.iter().map(|s| s.to_ascii_lowercase())),
                "allow-net" => {
                    for net in rest {
                        webhooks.guard.nets.push(Net::parse(net).map_err(fail)?);
                    }
                }
                "ca-file" => match rest {
                    [path] => webhooks.ca_file = Some(PathBuf::from(path)),
                    _ => return Err(fail("ca-file PATH".into())),
                },
                other => return Err(fail(format!("unknown setting {other:?}"))),
            }
        }
        for (queue, name) in &webhooks.routes {
            if !webhooks.targets.iter().any(|t| t.name == *name) {
                return Err(format!("queue {queue} names no target {name:?}"));
            }
        }
        Ok(webhooks)
    }

    /// The queues that deliver to a target, in the order given.
    pub fn queues(&self) -> Vec<&str> {
        self.routes
            .iter()
            .map(|(queue, _)| queue.as_str())
            .collect()
    }

    /// The targets' names.
    pub fn targets(&self) -> Vec<&str> {
        self.targets.iter().map(|t| t.name.as_str()).collect()
    }

    /// Starts a dispatcher for each routed queue among `queues` (a queue not given is
    /// not dispatched), on the current tokio runtime; they run until the returned
    /// [`Dispatchers`] is dropped.
    ///
    /// # Errors
    ///
    /// The CA file cannot be read, or the system's roots cannot be loaded.
    pub fn spawn(&self, queues: impl IntoIterator<Item = Queue>) -> Result<Dispatchers, String> {
        let tls = tls(self.ca_file.as_deref())?;
        let guard = Arc::new(self.guard.clone());
        let metrics = HookMetrics::default();
        let mut lives = Vec::new();
        for target in &self.targets {
            lives.push(Arc::new(dispatch::Live::new(
                target.clone(),
                guard.clone(),
                tls.clone(),
            )?));
        }
        let (stage, _) = watch::channel(dispatch::Stage::Running);
        let mut dispatchers = Dispatchers {
            claimers: Vec::new(),
            senders: Vec::new(),
            lives: lives.clone(),
            stage,
            metrics: metrics.clone(),
        };
        for queue in queues {
            for (name, target) in &self.routes {
                if name != queue.name() {
                    continue;
                }
                let live = lives.iter().find(|l| l.target.name == *target).unwrap();
                metrics.route(
                    queue.name(),
                    target,
                    &live.target.url.origin().ascii_serialization(),
                );
                let acks = Arc::new(dispatch::Acks::default());
                let sender = tokio::spawn(dispatch::send_acks(queue.clone(), acks.clone()));
                dispatchers.senders.push((acks.clone(), sender));
                for _ in 0..CLAIM_LOOPS.min(live.target.concurrency) {
                    dispatchers.claimers.push(tokio::spawn(dispatch::run(
                        queue.clone(),
                        live.clone(),
                        metrics.clone(),
                        acks.clone(),
                        dispatchers.stage.subscribe(),
                    )));
                }
            }
        }
        Ok(dispatchers)
    }
}

/// How long a stop waits for the last acks once its deliveries are done or its grace is
/// over: an ack sent is a delivery not repeated.
const ACK_FLUSH: Duration = Duration::from_secs(5);

/// Running dispatchers ([`Webhooks::spawn`]). [`stop`](Dispatchers::stop) ends them
/// cleanly; dropping this ends them at once (requests in flight are dropped, and their
/// jobs delivered again at their lease end).
pub struct Dispatchers {
    claimers: Vec<JoinHandle<()>>,
    senders: Vec<(Arc<dispatch::Acks>, JoinHandle<()>)>,
    lives: Vec<Arc<dispatch::Live>>,
    stage: watch::Sender<dispatch::Stage>,
    metrics: HookMetrics,
}

impl Dispatchers {
    /// Their figures, for `/metrics`: [`HookMetrics::render`].
    pub fn metrics(&self) -> HookMetrics {
        self.metrics.clone()
    }

    /// Stops as a deploy wants: no job is claimed from this call on (a claim under way
    /// ends first, and its jobs are delivered); the deliveries in flight have `grace` to
    /// end, and every ack of those that did is sent (up to 5 s more); what is left then
    /// is dropped, as by a drop. The future returns how many deliveries were still in
    /// flight at the grace's end (0: none), each to be delivered again at its lease end.
    /// A stop that returns 0 delivers nothing twice.
    pub fn stop(mut self, grace: Duration) -> impl Future<Output = usize> + Send {
        let deadline = tokio::time::Instant::now() + grace;
        self.stage.send_replace(dispatch::Stage::Stopping);
        async move {
            for claimer in &mut self.claimers {
                let _ = tokio::time::timeout_at(deadline, claimer).await;
            }
            let mut left = 0;
            for live in &self.lives {
                let all = live.target.concurrency as u32;
                let done = tokio::time::timeout_at(deadline, live.permits.acquire_many(all)).await;
                if !matches!(done, Ok(Ok(_))) {
                    left += live.target.concurrency - live.permits.available_permits();
                }
            }
            let flush = tokio::time::Instant::now().max(deadline) + ACK_FLUSH;
            for (acks, sender) in &mut self.senders {
                acks.close();
                let _ = tokio::time::timeout_at(flush, sender).await;
            }
            left
        }
    }
}

impl fmt::Debug for Dispatchers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Dispatchers")
            .field("claim_loops", &self.claimers.len())
            .field("queues", &self.senders.len())
            .field("targets", &self.lives.len())
            .field("stage", &*self.stage.borrow())
            .finish()
    }
}

impl Drop for Dispatchers {
    fn drop(&mut self) {
        self.stage.send_replace(dispatch::Stage::Aborted);
        for task in self
            .claimers
            .iter()
            .chain(self.senders.iter().map(|(_, t)| t))
        {
            task.abort();
        }
    }
}

/// A target from `NAME URL key=value...`.
fn target(words: &[&str]) -> Result<Target, String> {
    let [name, url, settings @ ..] = words else {
        return Err("target NAME URL settings...".into());
    };
    let url = reqwest::Url::parse(url).map_err(|e| format!("target {name}: its URL: {e}"))?;
    let mut target = Target {
        name: name.to_string(),
        url,
        secrets: Vec::new(),
        concurrency: 8,
        rate: None,
        timeout: Duration::from_secs(10),
        backoff: Backoff::exponential(Duration::from_secs(1), Duration::from_secs(3600)),
        content_type: "application/json".into(),
    };
    let (mut base_ms, mut max_ms, mut jitter) = (1000u64, 3_600_000u64, 1.0f64);
    for setting in settings {
        let Some((key, value)) = setting.split_once('=') else {
            return Err(format!("target {name}: a setting is key=value"));
        };
        let number = || {
            value
                .parse::<u64>()
                .map_err(|_| format!("target {name}: {key} is a whole number"))
        };
        match key {
            "secret" => target
                .secrets
                .push(Secret::parse(value).map_err(|e| format!("target {name}: {e}"))?),
            "concurrency" => target.concurrency = number()?.clamp(1, 10_000) as usize,
            "rate" => target.rate = NonZeroU32::new(number()?.min(u64::from(u32::MAX)) as u32),
            "timeout-ms" => target.timeout = Duration::from_millis(number()?.clamp(1, 3_600_000)),
            "backoff-ms" => base_ms = number()?,
            "backoff-max-ms" => max_ms = number()?,
            "jitter" => {
                jitter = value
                    .parse::<f64>()
                    .ok()
                    .filter(|j| (0.0..=1.0).contains(j))
                    .ok_or_else(|| format!("target {name}: jitter is 0 to 1"))?;
            }
            "content-type" => {
                reqwest::header::HeaderValue::from_str(value)
                    .map_err(|_| format!("target {name}: content-type is no header value"))?;
                target.content_type = value.to_string();
            }
            other => return Err(format!("target {name}: unknown setting {other:?}")),
        }
    }
    if target.secrets.is_empty() {
        return Err(format!("target {name}: give it a secret=whsec_..."));
    }
    target.backoff = Backoff::exponential(
        Duration::from_millis(base_ms),
        Duration::from_millis(max_ms),
    )
    .with_jitter(jitter);
    Ok(target)
}

/// The client's TLS: rustls on ring (the provider this crate builds), verifying against
/// `ca_file`'s certificates if given, else the system's roots.
fn tls(ca_file: Option<&std::path::Path>) -> Result<rustls::ClientConfig, String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::CertificateDer;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("webhooks' TLS: {e}"))?;
    let config = match ca_file {
        Some(path) => {
            let mut roots = rustls::RootCertStore::empty();
            let certs = CertificateDer::pem_file_iter(path)
                .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
                .map_err(|e| format!("cannot read the certificates of {}: {e}", path.display()))?;
            for cert in certs {
                roots
                    .add(cert)
                    .map_err(|e| format!("{}: {e}", path.display()))?;
            }
            builder.with_root_certificates(roots).with_no_client_auth()
        }
        None => {
            let verifier = rustls_platform_verifier::Verifier::new(provider)
                .map_err(|e| format!("the system's TLS roots: {e}"))?;
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(verifier))
                .with_no_client_auth()
        }
    };
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

    #[test]
    fn a_file_parses_and_its_debug_shows_no_secret() {
        let text = format!(
            "# targets\ntarget orders https://hooks.example.com/o?key=k1 secret={SECRET} rate=5 timeout-ms=2000\n\
             queue emails orders\nallow-host hooks.example.com\nallow-net 10.0.0.0/8\n"
        );
        let webhooks = Webhooks::parse(&text).unwrap();
        assert_eq!(
            (webhooks.queues(), webhooks.targets()),
            (vec!["emails"], vec!["orders"])
        );
        let shown = format!("{webhooks:?}");
        assert!(
            !shown.contains("MfKQ9r8G") && !shown.contains("key=k1"),
            "{shown}"
        );
        assert!(shown.contains("hooks.example.com"));
    }

    #[test]
    fn wrong_lines_are_named_without_quoting_a_secret() {
        for (text, says) in [
            (
                "target t https://a.example secret=whsec_c2hvcnQ=".to_string(),
                "line 1: target t: a webhook secret",
            ),
            ("target t https://a.example".to_string(), "give it a secret"),
            (
                format!("target t https://a.example secret={SECRET} rate=x"),
                "rate is a whole number",
            ),
            (
                format!("target t https://a.example secret={SECRET} content-type=a\u{1}b"),
                "no header value",
            ),
            ("queue q nowhere".to_string(), "names no target"),
            ("allow-net 10.0.0.0/40".to_string(), "line 1"),
            ("bogus".to_string(), "unknown setting \"bogus\""),
        ] {
            let err = Webhooks::parse(&text).unwrap_err();
            assert!(err.contains(says), "{text}: {err}");
            assert!(
                !err.contains("MfKQ9r8G") && !err.contains("c2hvcnQ"),
                "{err}"
            );
        }
    }
}
