//! Ids made once and never coordinated: a leader's name, a cold tier's deployment id, a
//! schedule call's resend token. 64 bits from the process's random hasher keys, the time
//! and the pid: not secret, only unlikely to repeat.

use std::hash::{BuildHasher, Hasher};

/// 64 random bits.
pub(crate) fn random_u64() -> u64 {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    hasher.write_u32(std::process::id());
    hasher.finish()
}

/// 64 random bits as 16 hex digits.
pub(crate) fn random_hex() -> String {
    format!("{:016x}", random_u64())
}

#[cfg(test)]
mod tests {
    #[test]
    fn ids_are_16_hex_digits_and_differ() {
        let (a, b) = (super::random_hex(), super::random_hex());
        assert_eq!(a.len(), 16);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }
}
