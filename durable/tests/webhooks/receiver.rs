//! A webhook receiver for the tests: an axum server on loopback that checks each
//! request's Standard Webhooks signature by hand (HMAC-SHA256 with ring), records it,
//! and answers as the test says (a status per request, or held until released).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::Semaphore;

/// One request as received.
#[derive(Clone, Debug)]
pub struct Received {
    pub webhook_id: String,
    pub job_id: String,
    pub delivery: u64,
    pub attempt: u32,
    pub body: Vec<u8>,
    /// Which of the receiver's secrets a signature of the request verified under.
    pub verified: Vec<bool>,
    /// When it came.
    pub at: std::time::Instant,
}

#[derive(Default)]
struct State {
    received: Vec<Received>,
    /// Statuses to answer, in order; 204 when empty.
    statuses: VecDeque<u16>,
    in_flight: usize,
    most_in_flight: usize,
    /// Answers 307 to this URL instead, when set.
    redirect: Option<String>,
}

/// A running receiver.
#[derive(Clone)]
pub struct Receiver {
    pub url: String,
    state: Arc<Mutex<State>>,
    /// When set, each request waits for a permit (the test adds them).
    pub hold: Option<Arc<Semaphore>>,
}

impl Receiver {
    /// A receiver on 127.0.0.1 that verifies with `keys` (the secrets' decoded bytes).
    pub async fn start(keys: Vec<Vec<u8>>, hold: bool) -> Receiver {
        Receiver::start_at("127.0.0.1:0", keys, hold).await
    }

    /// As [`start`](Receiver::start), listening on `addr`.
    pub async fn start_at(addr: &str, keys: Vec<Vec<u8>>, hold: bool) -> Receiver {
        let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let receiver = Receiver {
            url: format!("http://{addr}/hook"),
            state: Arc::default(),
            hold: hold.then(|| Arc::new(Semaphore::new(0))),
        };
        let shared = receiver.clone();
        let app = axum::Router::new().fallback(move |request: axum::extract::Request| {
            let (receiver, keys) = (shared.clone(), keys.clone());
            async move { receiver.handle(request, &keys).await }
        });
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        receiver
    }

    async fn handle(
        &self,
        request: axum::extract::Request,
        keys: &[Vec<u8>],
    ) -> axum::response::Response {
        use axum::response::IntoResponse;
        let (parts, body) = request.into_parts();
        let body = axum::body::to_bytes(body, 1 << 20).await.unwrap().to_vec();
        let header = |name: &str| {
            parts
                .headers
                .get(name)
                .unwrap_or_else(|| panic!("no {name} header"))
                .to_str()
                .unwrap()
                .to_string()
        };
        let webhook_id = header("webhook-id");
        let timestamp: u64 = header("webhook-timestamp").parse().unwrap();
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs();
        assert!(
            now.abs_diff(timestamp) < 300,
            "timestamp {timestamp} far from now {now}"
        );
        let signatures = header("webhook-signature");
        let verified = keys
            .iter()
            .map(|key| {
                let expected = sign(key, &webhook_id, timestamp, &body);
                signatures.split(' ').any(|s| s == expected)
            })
            .collect();
        let received = Received {
            webhook_id,
            job_id: header("tickless-job-id"),
            delivery: header("tickless-delivery").parse().unwrap(),
            attempt: header("tickless-attempt").parse().unwrap(),
            body,
            verified,
            at: std::time::Instant::now(),
        };
        let (status, redirect) = {
            let mut state = self.state.lock().unwrap();
            state.received.push(received);
            state.in_flight += 1;
            state.most_in_flight = state.most_in_flight.max(state.in_flight);
            (
                state.statuses.pop_front().unwrap_or(204),
                state.redirect.clone(),
            )
        };
        if let Some(hold) = &self.hold {
            hold.acquire().await.unwrap().forget();
        }
        self.state.lock().unwrap().in_flight -= 1;
        match redirect {
            Some(to) => axum::response::Redirect::temporary(&to).into_response(),
            None => axum::http::StatusCode::from_u16(status)
                .unwrap()
                .into_response(),
        }
    }

    /// Answers 307 to `to` from now on.
    pub fn redirect(&self, to: &str) {
        self.state.lock().unwrap().redirect = Some(to.to_string());
    }

    /// Answers `statuses` to the next requests, in order.
    pub fn answer(&self, statuses: &[u16]) {
        self.state.lock().unwrap().statuses.extend(statuses);
    }

    pub fn received(&self) -> Vec<Received> {
        self.state.lock().unwrap().received.clone()
    }

    pub fn in_flight(&self) -> (usize, usize) {
        let state = self.state.lock().unwrap();
        (state.in_flight, state.most_in_flight)
    }

    /// Waits until `count` requests came, 10 s at most.
    pub async fn wait_for(&self, count: usize, what: &str) -> Vec<Received> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let received = self.received();
            if received.len() >= count {
                return received;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "waited 10 s for {what}: {} of {count} requests came",
                received.len()
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

/// `v1,` and the base64 of HMAC-SHA256(key, "id.timestamp.body"), by hand.
pub fn sign(key: &[u8], id: &str, timestamp: u64, body: &[u8]) -> String {
    use base64::Engine;
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, key);
    let mut signed = format!("{id}.{timestamp}.").into_bytes();
    signed.extend_from_slice(body);
    let tag = ring::hmac::sign(&key, &signed);
    format!(
        "v1,{}",
        base64::engine::general_purpose::STANDARD.encode(tag.as_ref())
    )
}
