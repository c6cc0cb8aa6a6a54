//! Redis URLs as they may be shown: in errors, `Debug`, accessors and the operator's
//! output, a URL's secrets (the password, and a user part with no password, which some
//! clients take for one) read `***`.
//!
//! The rule is by shape, so it holds for a URL that does not parse as well as for one
//! that does: the user part runs from after the scheme's `//` (or the start) to the
//! *last* `@` (a password may hold an unescaped `@`, `/` or `?`); within it, everything
//! after the first `:` is the password. `redis+unix` URLs carry theirs in the query
//! (`?pass=…`, and redis-rs's `password=`), which is hidden too.

/// Query parameters whose value is a secret.
const SECRET_PARAMS: [&str; 2] = ["pass", "password"];

/// `url` with every secret in it replaced by `***`: `redis://user:***@host:6379/0`. Only
/// the secrets' own places change, so a short password that also spells part of the
/// host leaves the host alone.
pub(crate) fn redact(url: &str) -> String {
    let mut spans = secret_spans(url);
    spans.sort_unstable();
    let mut shown = String::with_capacity(url.len());
    let mut from = 0;
    for (start, end) in spans {
        if start >= from {
            shown.push_str(&url[from..start]);
            shown.push_str("***");
            from = end;
        }
    }
    shown.push_str(&url[from..]);
    shown
}

/// `message` (a client's error text, say) with every secret of `url` in it replaced by
/// `***`, wherever it appears.
pub(crate) fn scrub(message: &str, url: &str) -> String {
    let mut secrets: Vec<&str> = secret_spans(url)
        .into_iter()
        .map(|(start, end)| &url[start..end])
        .collect();
    // Longest first, so that a secret that contains another is replaced whole.
    secrets.sort_by_key(|secret| std::cmp::Reverse(secret.len()));
    let mut scrubbed = message.to_string();
    for secret in secrets {
        scrubbed = scrubbed.replace(secret, "***");
    }
    scrubbed
}

/// Where the secrets of `url` are, as byte ranges; empty ones are left out (there is
/// nothing to hide).
fn secret_spans(url: &str) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    let start = url.find("://").map_or(0, |i| i + 3);
    if let Some(at) = url[start..].rfind('@') {
        let user_part = &url[start..start + at];
        match user_part.find(':') {
            Some(colon) => spans.push((start + colon + 1, start + at)),
            None => spans.push((start, start + at)),
        }
    }
    let user_end = spans.first().map_or(0, |&(_, end)| end);
    if let Some(question) = url[user_end..].find('?') {
        let mut at = user_end + question + 1;
        for pair in url[at..].split('&') {
            if let Some((name, value)) = pair.split_once('=') {
                if SECRET_PARAMS.contains(&name) {
                    let value_start = at + name.len() + 1;
                    spans.push((value_start, value_start + value.len()));
                }
            }
            at += pair.len() + 1;
        }
    }
    spans.retain(|&(start, end)| start < end);
    spans
}

#[cfg(test)]
mod tests {
    use super::{redact, scrub};

    #[test]
    fn passwords_and_bare_user_parts_are_hidden_and_nothing_else() {
        let cases = [
            (
                "redis://:S3cret@127.0.0.1:6379/",
                "redis://:***@127.0.0.1:6379/",
            ),
            ("redis://app:S3cret@host/0", "redis://app:***@host/0"),
            (
                "rediss://app:S3cret@host:6380/#insecure",
                "rediss://app:***@host:6380/#insecure",
            ),
            ("redis://S3cret@host", "redis://***@host"),
            ("redis://app:p@ss/w?rd@host:1/", "redis://app:***@host:1/"),
            (
                "redis+unix:///tmp/r.sock?db=1&pass=S3cret",
                "redis+unix:///tmp/r.sock?db=1&pass=***",
            ),
            (
                "redis+unix:///tmp/r.sock?password=S3cret",
                "redis+unix:///tmp/r.sock?password=***",
            ),
            ("not a url :S3cret@x", "not a url :***@x"),
            ("redis://host:6379/", "redis://host:6379/"),
            ("redis://:@host", "redis://:@host"),
            ("redis://:a@localhost:1/", "redis://:***@localhost:1/"),
        ];
        for (url, shown) in cases {
            assert_eq!(redact(url), shown, "{url}");
        }
    }

    #[test]
    fn a_message_quoting_the_url_or_its_password_is_scrubbed() {
        let url = "redis://app:S3cret@host/";
        let message = format!("cannot parse {url:?}: bad password S3cret");
        let scrubbed = scrub(&message, url);
        assert!(!scrubbed.contains("S3cret"), "{scrubbed}");
        assert!(scrubbed.contains("app:***@host"), "{scrubbed}");
    }
}
