//! A minimal `tracing` subscriber of the tests' own: every event and span, with every
//! field (not only `message`), as text.

use std::fmt::Debug;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

/// What a subscriber saw.
#[derive(Clone, Default)]
pub struct Recorder {
    /// Each event's `message`, after the names of the spans it is in: `job/handling`.
    messages: Arc<Mutex<Vec<String>>>,
    /// Each event and span: its kind, target and name, then every field as `name=value`,
    /// each value as `Debug` shows it and, for strings, as they are.
    records: Arc<Mutex<Vec<String>>>,
    spans: Arc<Mutex<Vec<(u64, String)>>>,
    stack: Arc<Mutex<Vec<u64>>>,
    next: Arc<AtomicU64>,
}

/// Every field of one event or span, as text; and its `message`.
struct Fields(String, String);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn Debug) {
        if field.name() == "message" {
            self.1 = format!("{value:?}");
        }
        self.0.push_str(&format!(" {}={value:?}", field.name()));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        // Raw too: `Debug` escapes what a secret may hold (a quote, a backslash).
        self.0
            .push_str(&format!(" {}={value:?} {0}(raw)={value}", field.name()));
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        let mut text = format!(" {}={value} {0}(debug)={value:?}", field.name());
        let mut source = value.source();
        while let Some(err) = source {
            text.push_str(&format!(" caused by {err} ({err:?})"));
            source = err.source();
        }
        self.0.push_str(&text);
    }
}

impl Recorder {
    /// Each event's span path and message (`job/handling`).
    pub fn messages(&self) -> Vec<String> {
        self.messages.lock().unwrap().clone()
    }

    /// Every event and span with all its fields, one line each.
    pub fn records(&self) -> Vec<String> {
        self.records.lock().unwrap().clone()
    }

    fn head(kind: &str, metadata: &Metadata<'_>) -> String {
        format!(
            "{kind} {} {} {}",
            metadata.target(),
            metadata.level(),
            metadata.name()
        )
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
        let mut fields = Fields(Recorder::head("span", span.metadata()), String::new());
        span.record(&mut fields);
        self.records.lock().unwrap().push(fields.0);
        Id::from_u64(id)
    }

    fn record(&self, span: &Id, values: &Record<'_>) {
        let mut fields = Fields(format!("span record {}", span.into_u64()), String::new());
        values.record(&mut fields);
        self.records.lock().unwrap().push(fields.0);
    }

    fn record_follows_from(&self, _: &Id, _: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let mut fields = Fields(Recorder::head("event", event.metadata()), String::new());
        event.record(&mut fields);
        let Fields(record, message) = fields;
        self.records.lock().unwrap().push(record);
        let spans = self.spans.lock().unwrap();
        let mut path: Vec<String> = self
            .stack
            .lock()
            .unwrap()
            .iter()
            .filter_map(|id| spans.iter().find(|(s, _)| s == id).map(|(_, n)| n.clone()))
            .collect();
        path.push(message);
        self.messages.lock().unwrap().push(path.join("/"));
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
