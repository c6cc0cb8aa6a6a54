//! Standard Webhooks signatures: the secrets, the `webhook-id` of a job, and the
//! `webhook-signature` header.
//!
//! The signed content is `"{webhook-id}.{webhook-timestamp}.{body}"`, signed with
//! HMAC-SHA256 under the bytes the secret's base64 (after `whsec_`) decodes to; the
//! header holds `v1,` and the standard base64 of the MAC, one such item per current
//! secret, separated by spaces (the specification's form for rotation).

use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine;
use std::fmt;

/// The fewest bytes a secret's key may have (the specification asks 24 to 64).
pub(crate) const MIN_KEY_BYTES: usize = 24;
/// The most bytes a secret's key may have.
pub(crate) const MAX_KEY_BYTES: usize = 64;

/// A target's signing secret, `whsec_` and base64. Never shown: `Debug` reads
/// `Secret(whsec_***)`.
#[derive(Clone)]
pub struct Secret {
    key: ring::hmac::Key,
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(whsec_***)")
    }
}

impl Secret {
    /// A secret from its text, `whsec_` and the standard base64 of 24 to 64 bytes.
    /// Padded base64 is the form every reference library reads (Rust's
    /// `standardwebhooks` crate refuses an unpadded one); this reads both.
    ///
    /// # Errors
    ///
    /// A message that says what is wrong with the text, never quoting it.
    pub fn parse(text: &str) -> Result<Secret, String> {
        let Some(encoded) = text.strip_prefix("whsec_") else {
            return Err("a webhook secret starts with whsec_".into());
        };
        let key = STANDARD
            .decode(encoded)
            .or_else(|_| base64::engine::general_purpose::STANDARD_NO_PAD.decode(encoded))
            .map_err(|_| "a webhook secret is whsec_ and standard base64".to_string())?;
        if !(MIN_KEY_BYTES..=MAX_KEY_BYTES).contains(&key.len()) {
            return Err(format!(
                "a webhook secret's base64 decodes to {MIN_KEY_BYTES} to {MAX_KEY_BYTES} bytes, not {}",
                key.len()
            ));
        }
        Ok(Secret {
            key: ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &key),
        })
    }

    /// `v1,` and the base64 of the HMAC-SHA256 of `id.timestamp.body`.
    fn sign(&self, id: &str, timestamp: u64, body: &[u8]) -> String {
        let mut context = ring::hmac::Context::with_key(&self.key);
        context.update(id.as_bytes());
        context.update(format!(".{timestamp}.").as_bytes());
        context.update(body);
        format!("v1,{}", STANDARD.encode(context.sign().as_ref()))
    }
}

/// The `webhook-signature` header's value: one `v1,` signature per secret, in the order
/// given, separated by spaces.
pub(crate) fn signature(secrets: &[Secret], id: &str, timestamp: u64, body: &[u8]) -> String {
    let signed: Vec<String> = secrets
        .iter()
        .map(|secret| secret.sign(id, timestamp, body))
        .collect();
    signed.join(" ")
}

/// The `webhook-id` of job `id` of queue `queue`: `msg_` and the unpadded URL-safe base64
/// of the SHA-256 of the queue's name, a zero byte and the job's id.
///
/// It is the same for every delivery of the job (a retry after a failure, a delivery
/// again after a dispatcher died mid-request), so a receiver that remembers the ids it
/// handled drops repeats; the job's id and delivery number come in headers of their own.
/// A job id scheduled again after its job completed gets the same `webhook-id`: the
/// queue treats an id as one piece of work, and so should a receiver.
///
/// # Examples
///
/// ```
/// let id = tickless_durable::hook::webhook_id("emails", "welcome:7");
/// assert!(id.starts_with("msg_") && id.len() == 47);
/// assert_eq!(id, tickless_durable::hook::webhook_id("emails", "welcome:7"));
/// assert_ne!(id, tickless_durable::hook::webhook_id("emails", "welcome:8"));
/// ```
pub fn webhook_id(queue: &str, id: &str) -> String {
    let mut context = ring::digest::Context::new(&ring::digest::SHA256);
    context.update(queue.as_bytes());
    context.update(&[0]);
    context.update(id.as_bytes());
    format!("msg_{}", URL_SAFE_NO_PAD.encode(context.finish().as_ref()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The example of the Standard Webhooks specification's reference libraries
    /// (their test suites sign this message with this secret).
    #[test]
    fn signs_as_the_reference_libraries_do() {
        let secret = Secret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let body = br#"{"test": 2432232314}"#;
        assert_eq!(
            signature(&[secret], "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
    }

    #[test]
    fn several_secrets_sign_each_separated_by_spaces() {
        let a = Secret::parse(&format!("whsec_{}", STANDARD.encode([1u8; 32]))).unwrap();
        let b = Secret::parse(&format!("whsec_{}", STANDARD.encode([2u8; 32]))).unwrap();
        let both = signature(&[a.clone(), b.clone()], "msg_1", 5, b"x");
        let items: Vec<&str> = both.split(' ').collect();
        assert_eq!(items, [a.sign("msg_1", 5, b"x"), b.sign("msg_1", 5, b"x")]);
        assert_ne!(items[0], items[1]);
    }

    #[test]
    fn bad_secrets_are_refused_without_being_quoted() {
        for text in ["abc", "whsec_!!!", "whsec_AAAA", "whsec_"] {
            let err = Secret::parse(text).unwrap_err();
            let tail = text.trim_start_matches("whsec_");
            assert!(tail.is_empty() || !err.contains(tail), "{err}");
        }
        let unpadded = STANDARD.encode([7u8; 32]).trim_end_matches('=').to_string();
        assert!(Secret::parse(&format!("whsec_{unpadded}")).is_ok());
        let secret = Secret::parse(&format!("whsec_{}", STANDARD.encode([7u8; 32]))).unwrap();
        assert_eq!(format!("{secret:?}"), "Secret(whsec_***)");
    }
}
