//! The 64-bit id layout, from the top bit down:
//!
//! ```text
//!  63                        23 22          10 9          0
//! +----------------------------+--------------+------------+
//! | 41 bits: ms since epoch    | 13 bits:     | 10 bits:   |
//! | (top bit is the sign bit)  | logical shard| seq % 1024 |
//! +----------------------------+--------------+------------+
//! ```
//!
//! The timestamp field is 41 bits wide, but its top bit is the sign bit of a `bigint`. An id must
//! never be negative, so the usable range of the field is `0 ..= 2^40 - 1` ms (about 34.8 years
//! after the epoch). Past that, generation and composition fail instead of returning a negative id.

/// Width of the millisecond field.
pub const TIMESTAMP_BITS: u32 = 41;
/// Width of the logical shard field.
pub const SHARD_BITS: u32 = 13;
/// Width of the per-millisecond sequence field.
pub const SEQ_BITS: u32 = 10;

// The three fields fill a bigint exactly.
const _: () = assert!(TIMESTAMP_BITS + SHARD_BITS + SEQ_BITS == 64);

/// Where the shard field starts.
pub const SHARD_SHIFT: u32 = SEQ_BITS;
/// Where the millisecond field starts.
pub const TIMESTAMP_SHIFT: u32 = SEQ_BITS + SHARD_BITS;

/// Number of logical shards the shard field can name (8192).
pub const SHARD_COUNT: i64 = 1 << SHARD_BITS;
/// Largest logical shard number (8191).
pub const MAX_SHARD: i64 = SHARD_COUNT - 1;
/// Number of distinct sequence-field values in one millisecond (1024).
pub const SEQ_VALUES: i64 = 1 << SEQ_BITS;
/// Largest value of the sequence field (1023).
pub const MAX_SEQ: i64 = SEQ_VALUES - 1;
/// Largest millisecond offset that still gives a positive id: 2^40 - 1.
pub const MAX_MS: i64 = (1 << (TIMESTAMP_BITS - 1)) - 1;

/// The three fields of an id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IdParts {
    /// Milliseconds since the epoch, `0 ..= MAX_MS`.
    pub ms: i64,
    /// Logical shard, `0 ..= MAX_SHARD`.
    pub shard: i64,
    /// Sequence field, `0 ..= MAX_SEQ`.
    pub seq: i64,
}

/// Why a value does not fit the layout. The extension maps each to an SQLSTATE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayoutError {
    /// The shard is outside `0 ..= MAX_SHARD` (SQLSTATE 22003).
    ShardOutOfRange(i64),
    /// The sequence field is outside `0 ..= MAX_SEQ` (SQLSTATE 22003).
    SeqOutOfRange(i64),
    /// The timestamp is before the epoch (SQLSTATE 22008).
    BeforeEpoch(i64),
    /// The timestamp is past the last millisecond that keeps ids positive (SQLSTATE 22008).
    PastHorizon(i64),
    /// A negative bigint is not an id of this layout (SQLSTATE 22003).
    NegativeId(i64),
}

impl std::fmt::Display for LayoutError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LayoutError::ShardOutOfRange(v) => {
                write!(f, "shard {v} is out of range (0 .. {MAX_SHARD})")
            }
            LayoutError::SeqOutOfRange(v) => write!(f, "seq {v} is out of range (0 .. {MAX_SEQ})"),
            LayoutError::BeforeEpoch(ms) => {
                write!(
                    f,
                    "timestamp is {} ms before the pg_shard_id epoch",
                    ms.unsigned_abs()
                )
            }
            LayoutError::PastHorizon(ms) => write!(
                f,
                "timestamp is {ms} ms after the epoch, past the layout's horizon of {MAX_MS} ms"
            ),
            LayoutError::NegativeId(id) => {
                write!(f, "{id} is not a shard id: ids are never negative")
            }
        }
    }
}

/// Checks a shard number.
pub fn check_shard(shard: i64) -> Result<i64, LayoutError> {
    if (0..=MAX_SHARD).contains(&shard) {
        Ok(shard)
    } else {
        Err(LayoutError::ShardOutOfRange(shard))
    }
}

/// Checks a sequence-field value.
pub fn check_seq(seq: i64) -> Result<i64, LayoutError> {
    if (0..=MAX_SEQ).contains(&seq) {
        Ok(seq)
    } else {
        Err(LayoutError::SeqOutOfRange(seq))
    }
}

/// Checks a millisecond offset from the epoch.
pub fn check_ms(ms: i64) -> Result<i64, LayoutError> {
    if ms < 0 {
        Err(LayoutError::BeforeEpoch(ms))
    } else if ms > MAX_MS {
        Err(LayoutError::PastHorizon(ms))
    } else {
        Ok(ms)
    }
}

/// Packs the three fields into an id, checking each.
pub fn compose(parts: IdParts) -> Result<i64, LayoutError> {
    let ms = check_ms(parts.ms)?;
    let shard = check_shard(parts.shard)?;
    let seq = check_seq(parts.seq)?;
    Ok((ms << TIMESTAMP_SHIFT) | (shard << SHARD_SHIFT) | seq)
}

/// The sequence field for a value drawn from a sequence: `value mod SEQ_VALUES`, always in range,
/// also for negative values of a descending sequence (Instagram's `%` would go negative there and
/// corrupt the shard bits).
pub fn seq_field(sequence_value: i64) -> i64 {
    sequence_value.rem_euclid(SEQ_VALUES)
}

fn check_id(id: i64) -> Result<i64, LayoutError> {
    if id < 0 {
        Err(LayoutError::NegativeId(id))
    } else {
        Ok(id)
    }
}

/// Milliseconds since the epoch of an id.
pub fn ms_of(id: i64) -> Result<i64, LayoutError> {
    Ok(check_id(id)? >> TIMESTAMP_SHIFT)
}

/// Logical shard of an id.
pub fn shard_of(id: i64) -> Result<i64, LayoutError> {
    Ok((check_id(id)? >> SHARD_SHIFT) & MAX_SHARD)
}

/// Sequence field of an id.
pub fn seq_of(id: i64) -> Result<i64, LayoutError> {
    Ok(check_id(id)? & MAX_SEQ)
}

/// Splits an id into its fields; the exact inverse of [`compose`].
pub fn decode(id: i64) -> Result<IdParts, LayoutError> {
    Ok(IdParts {
        ms: ms_of(id)?,
        shard: shard_of(id)?,
        seq: seq_of(id)?,
    })
}

/// The smallest id whose millisecond is `ms` or later. Offsets before the epoch give 0 (every id
/// qualifies); offsets past the horizon are an error (no id qualifies).
pub fn lower_bound(ms: i64) -> Result<i64, LayoutError> {
    compose(IdParts {
        ms: ms.max(0),
        shard: 0,
        seq: 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn instagram_worked_example() {
        // Instagram's engineering blog: epoch 2011-01-01, 1387263000 ms later, user 31341 on
        // shard 31341 % 2000 = 1341, sequence value 5001 -> 5001 % 1024 = 905.
        let parts = IdParts {
            ms: 1_387_263_000,
            shard: 31341 % 2000,
            seq: seq_field(5001),
        };
        assert_eq!(parts.shard, 1341);
        assert_eq!(parts.seq, 905);
        assert_eq!(compose(parts), Ok(11_637_205_501_278_089));
        assert_eq!(decode(11_637_205_501_278_089), Ok(parts));
    }

    #[test]
    fn field_positions_are_exact() {
        assert_eq!(
            compose(IdParts {
                ms: 0,
                shard: 0,
                seq: 1
            }),
            Ok(1)
        );
        assert_eq!(
            compose(IdParts {
                ms: 0,
                shard: 0,
                seq: 1023
            }),
            Ok(0x3ff)
        );
        assert_eq!(
            compose(IdParts {
                ms: 0,
                shard: 1,
                seq: 0
            }),
            Ok(1 << 10)
        );
        assert_eq!(
            compose(IdParts {
                ms: 0,
                shard: 8191,
                seq: 0
            }),
            Ok(0x1fff << 10)
        );
        assert_eq!(
            compose(IdParts {
                ms: 1,
                shard: 0,
                seq: 0
            }),
            Ok(1 << 23)
        );
        assert_eq!(
            compose(IdParts {
                ms: MAX_MS,
                shard: 8191,
                seq: 1023
            }),
            Ok(i64::MAX)
        );
        assert_eq!(MAX_MS, 1_099_511_627_775);
    }

    #[test]
    fn boundaries_are_rejected() {
        let ok = IdParts {
            ms: 0,
            shard: 0,
            seq: 0,
        };
        assert_eq!(
            compose(IdParts { shard: -1, ..ok }),
            Err(LayoutError::ShardOutOfRange(-1))
        );
        assert_eq!(
            compose(IdParts { shard: 8192, ..ok }),
            Err(LayoutError::ShardOutOfRange(8192))
        );
        assert_eq!(
            compose(IdParts { seq: -1, ..ok }),
            Err(LayoutError::SeqOutOfRange(-1))
        );
        assert_eq!(
            compose(IdParts { seq: 1024, ..ok }),
            Err(LayoutError::SeqOutOfRange(1024))
        );
        assert_eq!(
            compose(IdParts { ms: -1, ..ok }),
            Err(LayoutError::BeforeEpoch(-1))
        );
        assert_eq!(
            compose(IdParts {
                ms: MAX_MS + 1,
                ..ok
            }),
            Err(LayoutError::PastHorizon(MAX_MS + 1))
        );
        assert_eq!(decode(-1), Err(LayoutError::NegativeId(-1)));
        assert_eq!(shard_of(i64::MIN), Err(LayoutError::NegativeId(i64::MIN)));
    }

    #[test]
    fn seq_field_of_negative_values_stays_in_range() {
        assert_eq!(seq_field(-1), 1023);
        assert_eq!(seq_field(-1024), 0);
        assert_eq!(seq_field(1024), 0);
        assert_eq!(seq_field(i64::MIN), 0);
        assert_eq!(seq_field(i64::MAX), 1023);
    }

    #[test]
    fn lower_bound_clamps_before_epoch_and_rejects_past_horizon() {
        assert_eq!(lower_bound(-5), Ok(0));
        assert_eq!(lower_bound(7), Ok(7 << 23));
        assert_eq!(
            lower_bound(MAX_MS + 1),
            Err(LayoutError::PastHorizon(MAX_MS + 1))
        );
    }

    proptest! {
        #[test]
        fn compose_decode_round_trip(ms in 0..=MAX_MS, shard in 0..=MAX_SHARD, seq in 0..=MAX_SEQ) {
            let parts = IdParts { ms, shard, seq };
            let id = compose(parts).unwrap();
            prop_assert!(id >= 0);
            prop_assert_eq!(decode(id).unwrap(), parts);
        }

        #[test]
        fn every_nonnegative_bigint_decodes_and_recomposes(id in 0..=i64::MAX) {
            prop_assert_eq!(compose(decode(id).unwrap()).unwrap(), id);
        }

        #[test]
        fn ids_sort_by_time_first(a in 0..MAX_MS, s1 in 0..=MAX_SHARD, q1 in 0..=MAX_SEQ,
                                   s2 in 0..=MAX_SHARD, q2 in 0..=MAX_SEQ) {
            let earlier = compose(IdParts { ms: a, shard: s1, seq: q1 }).unwrap();
            let later = compose(IdParts { ms: a + 1, shard: s2, seq: q2 }).unwrap();
            prop_assert!(earlier < later);
            prop_assert!(lower_bound(a + 1).unwrap() > earlier);
            prop_assert!(lower_bound(a + 1).unwrap() <= later);
        }
    }
}
