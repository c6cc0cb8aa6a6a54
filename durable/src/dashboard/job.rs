//! A job's page: state, due time, attempts, last error, the payload as text or hex.

use super::html::{ago, page, unix_ms, Ctx};
use crate::{JobInfo, JobState, Queue};
use maud::{html, Markup};
use std::fmt::Write;
use std::time::SystemTime;

/// The payload as text when it is UTF-8 without control characters (but newlines and
/// tabs), else as a hex dump; at most 4 KiB of it.
pub(super) fn payload_preview(payload: &[u8]) -> (&'static str, String) {
    const MAX: usize = 4096;
    let shown = &payload[..payload.len().min(MAX)];
    let text = match std::str::from_utf8(shown) {
        Ok(text) => Some(text),
        // Cut inside a character: the part before it.
        Err(err) if err.error_len().is_none() => {
            std::str::from_utf8(&shown[..err.valid_up_to()]).ok()
        }
        Err(_) => None,
    };
    if let Some(text) =
        text.filter(|t| !t.chars().any(|c| c.is_control() && c != '\n' && c != '\t'))
    {
        return ("text", text.to_string());
    }
    let mut hex = String::new();
    for (i, line) in shown.chunks(16).enumerate() {
        let _ = write!(hex, "{:08x} ", i * 16);
        for b in line {
            let _ = write!(hex, " {b:02x}");
        }
        hex.push_str(&"   ".repeat(16 - line.len()));
        hex.push_str("  ");
        hex.extend(line.iter().map(|&b| {
            if b.is_ascii_graphic() || b == b' ' {
                b as char
            } else {
                '.'
            }
        }));
        hex.push('\n');
    }
    ("hex", hex)
}

pub(super) fn job_page(
    ctx: &Ctx<'_>,
    queue: &Queue,
    now: SystemTime,
    id: &str,
    info: Option<&JobInfo>,
) -> Markup {
    let name = queue.name();
    let body = html! {
        p { a href=(ctx.queue_url(name)) { "queue " (name) } }
        h1 { "Job " span id="job-id" { (id) } }
        @match info {
            Some(info) => (details(ctx, name, now, id, info)),
            None => p id="state" { "No such job (it completed, was cancelled, or never was)." },
        }
    };
    page(ctx, id, body)
}

/// A job that exists: its state and times, its last error and payload (if this request
/// may read them), and the actions its state allows.
fn details(ctx: &Ctx<'_>, queue: &str, now: SystemTime, id: &str, info: &JobInfo) -> Markup {
    let state = format!("{:?}", info.state).to_lowercase();
    // Not even computed for a request that may not read it.
    let (kind, preview) = if ctx.readable {
        payload_preview(&info.payload)
    } else {
        ("", String::new())
    };
    let cut = if info.payload.len() > 4096 {
        ", the first 4 KiB"
    } else {
        ""
    };
    html! {
        table {
            tr { th { "state" } td id="state" { (state) } }
            tr {
                th { "due" }
                td { (ago(now, info.due)) " " small { "(" (unix_ms(info.due)) " ms since the epoch)" } }
            }
            tr { th { "attempts" } td id="attempts" { (info.attempts) " of " (info.max_attempts) } }
            @if let Some(ends) = info.lease_ends {
                tr { th { "lease ends" } td { (ago(now, ends)) } }
            }
            @if let Some(error) = &info.last_error {
                @if ctx.readable {
                    tr { th { "last error" } td id="last-error" { (error) } }
                } @else {
                    tr { th { "last error" } td id="last-error-hidden" { (ctx.hidden()) } }
                }
            }
        }
        @if ctx.readable {
            h2 { "Payload (" (info.payload.len()) " bytes, as " (kind) (cut) ")" }
            pre id="payload" { (preview) }
        } @else {
            h2 { "Payload (" (info.payload.len()) " bytes)" }
            p id="payload-hidden" { (ctx.hidden()) }
        }
        p {
            @if info.state == JobState::Dead {
                (ctx.button(queue, "retry", Some(id), "Retry"))
            } @else if info.state == JobState::Cold {
                // "Run now" is a reschedule, which reads the job from the cold tier's
                // store: the leader's process has it, the dashboard's may not.
                "Kept in the queue's cold tier: the leader loads it before its window. "
            } @else if info.state != JobState::InFlight {
                (ctx.button(queue, "run-now", Some(id), "Run now"))
            }
            (ctx.button(queue, "cancel", Some(id), "Cancel"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_show_as_text_or_hex() {
        assert_eq!(
            payload_preview(b"5 stars\n"),
            ("text", "5 stars\n".to_string())
        );
        let (kind, hex) = payload_preview(&[0, 1, b'A', 0xff]);
        assert_eq!(kind, "hex");
        assert!(hex.starts_with("00000000  00 01 41 ff"), "{hex}");
        assert!(hex.trim_end().ends_with("..A."), "{hex}");
    }
}
