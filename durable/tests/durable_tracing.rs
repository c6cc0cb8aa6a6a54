//! With the `tracing` feature, a subscriber sees the durable queue's events (schedule,
//! leadership, promotion, delivery and ack, failure) and each handler runs in a `job`
//! span. A minimal subscriber of the test's own records them.

use tickless_test_support as support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};
use support::RedisServer;
use tickless_durable::{LeaderOptions, Queue, WorkerOptions};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

/// Keeps "message" of every event, prefixed by the names of the spans it is in.
#[derive(Clone, Default)]
struct Recorder {
    seen: Arc<Mutex<Vec<String>>>,
    spans: Arc<Mutex<Vec<(u64, String)>>>,
    stack: Arc<Mutex<Vec<u64>>>,
    next: Arc<AtomicU64>,
}

struct Message(String);

impl Visit for Message {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        }
    }
}

impl Subscriber for Recorder {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, span: &Attributes<'_>) -> Id {
        let id = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        self.spans
            .lock()
            .unwrap()
            .push((id, span.metadata().name().to_string()));
        Id::from_u64(id)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        let mut message = Message(String::new());
        event.record(&mut message);
        let spans = self.spans.lock().unwrap();
        let mut path: Vec<String> = self
            .stack
            .lock()
            .unwrap()
            .iter()
            .filter_map(|id| spans.iter().find(|(s, _)| s == id).map(|(_, n)| n.clone()))
            .collect();
        path.push(message.0);
        self.seen.lock().unwrap().push(path.join("/"));
    }
    fn enter(&self, span: &Id) {
        self.stack.lock().unwrap().push(span.into_u64());
    }
    fn exit(&self, span: &Id) {
        let mut stack = self.stack.lock().unwrap();
        if let Some(i) = stack.iter().rposition(|s| *s == span.into_u64()) {
            stack.remove(i);
        }
    }
}

#[test]
fn subscribers_see_schedule_leadership_promotion_delivery_and_failure() {
    let recorder = Recorder::default();
    let _guard = tracing::subscriber::set_default(recorder.clone());
    let server = RedisServer::start();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let queue = Queue::connect(&server.url(), "traced").await.unwrap();
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        queue.set_manual_clock(Some(t0)).await.unwrap();
        queue
            .schedule("a", b"x", t0 + Duration::from_secs(2))
            .await
            .unwrap();
        queue
            .with_max_attempts(1)
            .schedule("b", b"x", t0)
            .await
            .unwrap();
        let mut leader = queue.leader(LeaderOptions::default());
        leader.step().await.unwrap();
        queue
            .advance_manual_clock(Duration::from_secs(2))
            .await
            .unwrap();
        leader.step().await.unwrap();
        let worker = queue.worker(WorkerOptions::default());
        let jobs = worker.try_claim(2).await.unwrap();
        let b = jobs.iter().find(|j| j.id() == "b").unwrap();
        worker.fail(b, "no").await.unwrap();
        queue.schedule("c", b"x", t0).await.unwrap();
        // A handler's own event, inside the `job` span.
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let run = tokio::spawn(queue.worker(WorkerOptions::default()).run(move |job| {
            let tx = tx.clone();
            async move {
                tracing::info!("handling");
                let _ = tx.send(job.id().to_string());
                Ok::<(), std::io::Error>(())
            }
        }));
        assert_eq!(rx.recv().await.as_deref(), Some("c"));
        run.abort();
    });
    let seen = recorder.seen.lock().unwrap().clone();
    for want in [
        "schedule",
        "acquired",
        "promote",
        "ack and deliver",
        "failed",
        "job/handling",
    ] {
        assert!(seen.iter().any(|s| s == want), "no {want:?} in {seen:?}");
    }
}
