//! Routing keys to logical shards, the way Instagram did (`user_id % 2000`).
//!
//! Text keys are hashed with 64-bit FNV-1a over their UTF-8 bytes: a published, fixed function
//! (offset basis 0xcbf29ce484222325, prime 0x100000001b3) that an application in any language can
//! reproduce in five lines, with no seed, so the shard of a key is the same on every version,
//! platform and restart. The known answers below pin it.

use crate::layout::SHARD_COUNT;

/// Largest shard count: one per value of the shard field.
pub const MAX_SHARD_COUNT: i64 = SHARD_COUNT;

/// Why a shard count is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShardCountOutOfRange(pub i64);

impl std::fmt::Display for ShardCountOutOfRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "shard_count {} is out of range (1 .. {MAX_SHARD_COUNT})",
            self.0
        )
    }
}

fn check_count(shard_count: i64) -> Result<u64, ShardCountOutOfRange> {
    if (1..=MAX_SHARD_COUNT).contains(&shard_count) {
        Ok(shard_count as u64)
    } else {
        Err(ShardCountOutOfRange(shard_count))
    }
}

/// `key mod shard_count`, always in `0 .. shard_count` (also for negative keys).
pub fn shard_for_int(key: i64, shard_count: i64) -> Result<i64, ShardCountOutOfRange> {
    Ok(key.rem_euclid(check_count(shard_count)? as i64))
}

pub use crate::hash::fnv1a64;

/// `fnv1a64(key) mod shard_count`. `key` is the text's UTF-8 bytes (the SQL layer converts from
/// the database encoding first, so a key routes the same in every database).
pub fn shard_for_text(key: &[u8], shard_count: i64) -> Result<i64, ShardCountOutOfRange> {
    Ok((fnv1a64(key) % check_count(shard_count)?) as i64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn instagram_modulo() {
        assert_eq!(shard_for_int(31341, 2000), Ok(1341));
        assert_eq!(shard_for_int(-1, 2000), Ok(1999));
        assert_eq!(shard_for_int(5, 1), Ok(0));
    }

    #[test]
    fn fnv1a_known_answers() {
        // the published FNV-1a 64 test vectors, and a few of our own
        assert_eq!(fnv1a64(b""), 0xcbf29ce484222325);
        assert_eq!(fnv1a64(b"a"), 0xaf63dc4c8601ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x85944171f73967e8);
        assert_eq!(fnv1a64("ünïcode".as_bytes()), 0xb1b0d40350a25beb);
        assert_eq!(shard_for_text(b"alice@example.com", 2000), Ok(198));
        assert_eq!(shard_for_text(b"", 2000), Ok(37));
        assert_eq!(shard_for_text(b"a", 2000), Ok(1996));
    }

    #[test]
    fn the_largest_count_is_the_layouts_shard_count_and_every_result_fits_the_shard_field() {
        use crate::layout::{check_shard, MAX_SHARD};
        assert_eq!(MAX_SHARD_COUNT, MAX_SHARD + 1);
        for key in [0, 1, -1, i64::MIN, i64::MAX, 8191, 8192] {
            let s = shard_for_int(key, MAX_SHARD_COUNT).unwrap();
            assert_eq!(check_shard(s), Ok(s));
        }
        assert!(shard_for_int(1, MAX_SHARD_COUNT + 1).is_err());
    }

    #[test]
    fn counts_outside_1_to_8192_are_refused() {
        for bad in [0, -1, 8193, i64::MAX] {
            assert_eq!(shard_for_int(1, bad), Err(ShardCountOutOfRange(bad)));
            assert_eq!(shard_for_text(b"x", bad), Err(ShardCountOutOfRange(bad)));
        }
        assert!(shard_for_int(1, 8192).is_ok());
    }

    proptest! {
        #[test]
        fn always_a_valid_shard(key in any::<i64>(), text in ".*", count in 1i64..=8192) {
            let s = shard_for_int(key, count).unwrap();
            prop_assert!((0..count).contains(&s));
            let t = shard_for_text(text.as_bytes(), count).unwrap();
            prop_assert!((0..count).contains(&t));
        }
    }
}
