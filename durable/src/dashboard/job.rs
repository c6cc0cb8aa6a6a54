//! A job's page: state, due time, attempts, last error, the payload as text or hex.

use super::html::{ago, esc, page, unix_ms, Ctx};
use crate::{JobInfo, JobState, Queue};
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
) -> String {
    let name = queue.name();
    let mut body = format!(
        "<p><a href=\"{}\">queue {}</a></p><h1>Job <span id=\"job-id\">{}</span></h1>",
        esc(&ctx.queue_url(name)),
        esc(name),
        esc(id)
    );
    let Some(info) = info else {
        body.push_str(
            "<p id=\"state\">No such job (it completed, was cancelled, or never was).</p>",
        );
        return page(ctx, id, &body);
    };
    let state = format!("{:?}", info.state).to_lowercase();
    let _ = write!(
        body,
        "<table><tr><th>state</th><td id=\"state\">{state}</td></tr>\
         <tr><th>due</th><td>{} <small>({} ms since the epoch)</small></td></tr>\
         <tr><th>attempts</th><td id=\"attempts\">{} of {}</td></tr>",
        ago(now, info.due),
        unix_ms(info.due),
        info.attempts,
        info.max_attempts
    );
    if let Some(ends) = info.lease_ends {
        let _ = write!(
            body,
            "<tr><th>lease ends</th><td>{}</td></tr>",
            ago(now, ends)
        );
    }
    if let Some(error) = &info.last_error {
        let _ = write!(
            body,
            "<tr><th>last error</th><td id=\"last-error\">{}</td></tr>",
            esc(error)
        );
    }
    body.push_str("</table>");
    let (kind, preview) = payload_preview(&info.payload);
    let _ = write!(
        body,
        "<h2>Payload ({} bytes, as {kind}{})</h2><pre id=\"payload\">{}</pre>",
        info.payload.len(),
        if info.payload.len() > 4096 {
            ", the first 4 KiB"
        } else {
            ""
        },
        esc(&preview)
    );
    let dead = info.state == JobState::Dead;
    body.push_str("<p>");
    if dead {
        body.push_str(&ctx.button(name, "retry", Some(id), "Retry"));
    } else if info.state != JobState::InFlight {
        body.push_str(&ctx.button(name, "run-now", Some(id), "Run now"));
    }
    body.push_str(&ctx.button(name, "cancel", Some(id), "Cancel"));
    body.push_str("</p>");
    page(ctx, id, &body)
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
