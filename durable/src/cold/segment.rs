//! A segment's bytes: what one object of the store holds.

use crate::contract::MAX_BATCH;
use crate::error::Error;

const MAGIC: &[u8; 8] = b"TKCOLD01";

/// A segment's jobs: (id, record) pairs.
pub(crate) type Jobs = Vec<(Vec<u8>, Vec<u8>)>;

/// A segment: `TKCOLD01`, the job count (u32, little-endian), then per job its id and
/// its record (`jobs`'s value, lib/jobs.lua's I1), each as a u32 length and the bytes,
/// then the FNV-1a 64-bit hash of everything before it (u64): a truncated or altered
/// object is refused rather than loaded.
pub(crate) fn encode(jobs: &[(Vec<u8>, Vec<u8>)]) -> Vec<u8> {
    let size: usize = jobs.iter().map(|(id, rec)| 8 + id.len() + rec.len()).sum();
    let mut out = Vec::with_capacity(8 + 4 + size + 8);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&(jobs.len() as u32).to_le_bytes());
    for (id, rec) in jobs {
        out.extend_from_slice(&(id.len() as u32).to_le_bytes());
        out.extend_from_slice(id);
        out.extend_from_slice(&(rec.len() as u32).to_le_bytes());
        out.extend_from_slice(rec);
    }
    let hash = fnv1a(&out);
    out.extend_from_slice(&hash.to_le_bytes());
    out
}

/// The jobs of a segment [`encode`] wrote; an error naming `path` for anything else.
pub(crate) fn decode(bytes: &[u8], path: &str) -> Result<Jobs, Error> {
    let bad = |why: &str| Error::store("read", path, format!("not a segment: {why}"));
    if bytes.len() < MAGIC.len() + 12 || &bytes[..MAGIC.len()] != MAGIC {
        return Err(bad("no TKCOLD01 header"));
    }
    let (body, tail) = bytes.split_at(bytes.len() - 8);
    let hash = u64::from_le_bytes(tail.try_into().expect("8 bytes"));
    if fnv1a(body) != hash {
        return Err(bad("its checksum does not match (truncated or altered)"));
    }
    let mut rest = &body[MAGIC.len()..];
    let mut take = |n: usize| -> Result<&[u8], Error> {
        if rest.len() < n {
            return Err(bad("shorter than its lengths say"));
        }
        let (head, tail) = rest.split_at(n);
        rest = tail;
        Ok(head)
    };
    let count = u32::from_le_bytes(take(4)?.try_into().expect("4 bytes")) as usize;
    let mut jobs = Vec::with_capacity(count.min(MAX_BATCH));
    for _ in 0..count {
        let n = u32::from_le_bytes(take(4)?.try_into().expect("4 bytes")) as usize;
        let id = take(n)?.to_vec();
        let n = u32::from_le_bytes(take(4)?.try_into().expect("4 bytes")) as usize;
        jobs.push((id, take(n)?.to_vec()));
    }
    if !rest.is_empty() {
        return Err(bad("bytes after its last job"));
    }
    Ok(jobs)
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &b| {
        (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_segment_reads_back_as_written_and_refuses_damage() {
        let jobs = vec![
            (b"a".to_vec(), b"100|3|0|5|0|payload".to_vec()),
            (b"order:\xff".to_vec(), Vec::new()),
        ];
        let bytes = encode(&jobs);
        assert_eq!(decode(&bytes, "p").unwrap(), jobs);
        assert_eq!(decode(&encode(&[]), "p").unwrap(), vec![]);
        for cut in [0, 5, 12, bytes.len() - 1] {
            let err = decode(&bytes[..cut], "seg/1.seg").unwrap_err();
            assert!(
                err.is_store() && err.to_string().contains("seg/1.seg"),
                "{err}"
            );
        }
        let mut flipped = bytes.clone();
        flipped[20] ^= 1;
        assert!(decode(&flipped, "p")
            .unwrap_err()
            .to_string()
            .contains("checksum"));
    }
}
