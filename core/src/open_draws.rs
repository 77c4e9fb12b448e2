//! Which transactions hold DEFAULT ids that may not be in an index yet (issue 55).
//!
//! `next_shard_id_at` hands out ids at past milliseconds, and finds the ids already taken there
//! by reading the indexes of the sequence's columns. An id the DEFAULT drew is in those indexes
//! only once its row is: after the row's BEFORE triggers, its other unique indexes' waits, the
//! rest of a long `INSERT ... SELECT`, or a later statement of the same transaction. Until the
//! drawing transaction ends, its ids may be nowhere an index read can see.
//!
//! So every backend publishes, in one record of its own, the transaction (its local transaction
//! id, the second half of a virtual transaction id) that draws DEFAULT ids, from which sequence
//! (or [`ANY_SEQUENCE`] when it drew from several) and the lowest millisecond they can be at. It
//! publishes **before** the guard decides its first id of that sequence in that transaction, with
//! the clock read then (the guard never issues behind the clock it reads next), so:
//!
//! * A call of `next_shard_id_at` first raises the sequence's guard above the milliseconds it may
//!   hand out (`keep_above`), then reads these records. A draw that published after that read
//!   decides after the guard was raised, so it issues above them (both sides are sequentially
//!   consistent: the record's store before the draw's decision, the guard's raise before the
//!   record's load, and one of the two sees the other).
//! * A record read at or below a millisecond the call would hand out names a transaction to
//!   wait for; once it ended, its rows are in the indexes (committed, or dead and still indexed).
//!   A record of a transaction that already ended is stale and costs nothing: waiting for an
//!   ended virtual transaction returns at once.
//!
//! The owner writes its record once per transaction and sequence; an id costs a load and two
//! comparisons ([`covers`]: the extension forgets what it published when a transaction ends).
//! Plain Rust: no PostgreSQL, tested with `cargo test`.

use crate::slots::SlotKey;
use std::sync::atomic::{AtomicI64, AtomicU32, AtomicU64, Ordering::SeqCst};

/// The key of a transaction that drew from more than one sequence: it matches every sequence.
pub const ANY_SEQUENCE: SlotKey = u64::MAX;

/// One backend's record. All zero bytes: no transaction (local transaction id 0 is invalid).
#[derive(Default)]
#[repr(C)]
pub struct Record {
    transaction: AtomicU32,
    key: AtomicU64,
    lowest_ms: AtomicI64,
}

/// The records, one per backend, indexed by the backend's number.
#[derive(Clone, Copy)]
pub struct OpenDraws<'a> {
    records: &'a [Record],
}

/// A transaction that may hold ids not in an index yet: backend `backend`'s local transaction
/// `transaction`, whose ids of the sequence are at `lowest_ms` or later.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpenDraw {
    pub backend: usize,
    pub transaction: u32,
    pub lowest_ms: i64,
}

impl<'a> OpenDraws<'a> {
    /// Bytes for `backends` records.
    pub fn size_of(backends: usize) -> usize {
        backends * std::mem::size_of::<Record>()
    }

    /// # Safety
    /// `mem` points to [`size_of`](Self::size_of)`(backends)` bytes, aligned for [`Record`], that
    /// were all zero when first used and live as long as the value is used.
    pub unsafe fn attach(mem: *mut u8, backends: usize) -> Self {
        // SAFETY: the caller's contract; all zero bytes are valid records.
        let records = unsafe { std::slice::from_raw_parts(mem.cast::<Record>(), backends) };
        OpenDraws { records }
    }

    /// Records on the heap (tests).
    pub fn over(records: &'a [Record]) -> Self {
        OpenDraws { records }
    }

    pub fn backends(&self) -> usize {
        self.records.len()
    }

    /// Backend `backend` (the only writer of its record) is about to draw DEFAULT ids of sequence
    /// `key` in its transaction `transaction`, none below `ms`. Call it before the guard decides
    /// the first such id; returns the key the backend's record now covers (`key`, or
    /// [`ANY_SEQUENCE`]), to remember until the transaction ends (0: nothing, past the table).
    pub fn publish(&self, backend: usize, transaction: u32, key: SlotKey, ms: i64) -> SlotKey {
        let Some(record) = self.records.get(backend) else {
            // (a backend number past the table: none is, MaxBackends sized it)
            return 0;
        };
        if record.transaction.load(SeqCst) == transaction && transaction != 0 {
            let mine = record.key.load(SeqCst);
            if mine == ANY_SEQUENCE && record.lowest_ms.load(SeqCst) <= ms {
                // covered already (a transaction drawing from several sequences in turn)
                return ANY_SEQUENCE;
            }
            // another sequence in the same transaction: lower first, then widen the key, so that
            // a reader never sees the wider key with the higher millisecond
            let lowest = record.lowest_ms.load(SeqCst).min(ms);
            record.lowest_ms.store(lowest, SeqCst);
            let key = if mine == key { key } else { ANY_SEQUENCE };
            record.key.store(key, SeqCst);
            return key;
        }
        // a new transaction: the millisecond and key first, the transaction last, so that a
        // reader that sees the new transaction sees its millisecond and key
        record.lowest_ms.store(ms, SeqCst);
        record.key.store(key, SeqCst);
        record.transaction.store(transaction, SeqCst);
        key
    }

    /// Backend `backend`'s transaction `transaction` was given an id at `ms`, lower than the clock
    /// it published (the clock stepped back in between): its record goes down to it.
    pub fn lower(&self, backend: usize, transaction: u32, ms: i64) {
        if let Some(record) = self.records.get(backend) {
            if record.transaction.load(SeqCst) == transaction {
                record.lowest_ms.fetch_min(ms, SeqCst);
            }
        }
    }

    /// Backend `backend`'s transaction ended, or prepared: every row it wrote is in its indexes.
    pub fn clear(&self, backend: usize) {
        if let Some(record) = self.records.get(backend) {
            record.transaction.store(0, SeqCst);
        }
    }

    /// The lowest millisecond backend `me`'s transaction `transaction` published for sequence
    /// `key` (its own DEFAULT ids, which it cannot wait for), if it did.
    pub fn own(&self, key: SlotKey, me: usize, transaction: u32) -> Option<i64> {
        let record = self.records.get(me)?;
        let published = record.key.load(SeqCst);
        (transaction != 0
            && record.transaction.load(SeqCst) == transaction
            && (published == key || published == ANY_SEQUENCE))
            .then(|| record.lowest_ms.load(SeqCst))
    }

    /// The transactions of backends other than `me` that published draws of sequence `key` at or
    /// below `ms`. Some may have ended (the caller checks, and waits for the others).
    pub fn at_or_below(&self, key: SlotKey, ms: i64, me: usize) -> Vec<OpenDraw> {
        std::sync::atomic::fence(SeqCst);
        self.records
            .iter()
            .enumerate()
            .filter(|&(backend, _)| backend != me)
            .filter_map(|(backend, record)| {
                let transaction = record.transaction.load(SeqCst);
                if transaction == 0 {
                    return None;
                }
                let published = record.key.load(SeqCst);
                let lowest_ms = record.lowest_ms.load(SeqCst);
                (lowest_ms <= ms && (published == key || published == ANY_SEQUENCE)).then_some(
                    OpenDraw {
                        backend,
                        transaction,
                        lowest_ms,
                    },
                )
            })
            .collect()
    }
}

/// Whether a transaction that published `published` (0: nothing yet) covers a draw of `key`: the
/// hot path's check.
#[inline(always)]
pub fn covers(published: SlotKey, key: SlotKey) -> bool {
    published == key || published == ANY_SEQUENCE
}

#[cfg(test)]
mod tests {
    use super::*;

    fn records(n: usize) -> Vec<Record> {
        (0..n).map(|_| Record::default()).collect()
    }

    #[test]
    fn a_published_transaction_is_found_at_or_above_its_lowest_millisecond_only() {
        let r = records(4);
        let draws = OpenDraws::over(&r);
        let p = draws.publish(2, 7, 100, 5_000);
        assert_eq!(p, 100);
        assert!(covers(p, 100));
        assert!(!covers(0, 100), "a new transaction publishes again");
        assert!(!covers(p, 101), "another sequence publishes again");
        let found = vec![OpenDraw {
            backend: 2,
            transaction: 7,
            lowest_ms: 5_000,
        }];
        assert_eq!(draws.at_or_below(100, 5_000, 0), found);
        assert_eq!(draws.at_or_below(100, 9_000, 0), found);
        assert!(draws.at_or_below(100, 4_999, 0).is_empty());
        assert!(
            draws.at_or_below(101, 9_000, 0).is_empty(),
            "another sequence"
        );
        assert!(
            draws.at_or_below(100, 9_000, 2).is_empty(),
            "the caller's own"
        );
    }

    #[test]
    fn a_second_sequence_in_one_transaction_matches_every_sequence_at_the_lower_millisecond() {
        let r = records(2);
        let draws = OpenDraws::over(&r);
        draws.publish(1, 3, 100, 5_000);
        let p = draws.publish(1, 3, 200, 4_000);
        assert_eq!(p, ANY_SEQUENCE);
        assert!(covers(p, 300));
        for key in [100, 200, 300] {
            assert_eq!(draws.at_or_below(key, 4_000, 0).len(), 1, "key {key}");
        }
        // the same sequence again keeps the key
        draws.publish(0, 9, 100, 10);
        assert_eq!(draws.publish(0, 9, 100, 20), 100);
        assert_eq!(draws.at_or_below(100, 10, 1)[0].lowest_ms, 10);
    }

    #[test]
    fn a_new_transaction_replaces_the_record() {
        let r = records(1);
        let draws = OpenDraws::over(&r);
        draws.publish(0, 3, 100, 1_000);
        draws.publish(0, 4, 200, 9_000);
        assert!(draws.at_or_below(100, 100_000, 5).is_empty());
        assert_eq!(draws.at_or_below(200, 9_000, 5)[0].transaction, 4);
        assert!(draws.at_or_below(200, 8_999, 5).is_empty());
    }

    #[test]
    fn a_clock_step_lowers_the_record_of_its_own_transaction_only() {
        let r = records(1);
        let draws = OpenDraws::over(&r);
        draws.publish(0, 3, 100, 1_000);
        draws.lower(0, 2, 10);
        assert!(draws.at_or_below(100, 999, 5).is_empty());
        draws.lower(0, 3, 500);
        assert_eq!(draws.at_or_below(100, 500, 5)[0].lowest_ms, 500);
        assert_eq!(draws.publish(7, 1, 1, 1), 0, "past the table");
    }

    #[test]
    fn an_ended_transaction_is_cleared_and_a_caller_sees_its_own() {
        let r = records(2);
        let draws = OpenDraws::over(&r);
        draws.publish(1, 5, 100, 1_000);
        assert_eq!(draws.own(100, 1, 5), Some(1_000));
        assert_eq!(
            draws.own(100, 1, 6),
            None,
            "another transaction of the backend"
        );
        assert_eq!(draws.own(200, 1, 5), None, "another sequence");
        draws.publish(1, 5, 200, 900);
        assert_eq!(draws.own(300, 1, 5), Some(900), "several sequences: any");
        draws.clear(1);
        assert_eq!(draws.own(100, 1, 5), None);
        assert!(draws.at_or_below(100, i64::MAX, 0).is_empty());
    }

    #[test]
    fn zeroed_memory_holds_no_transaction() {
        let mut bytes = vec![0u64; OpenDraws::size_of(8) / 8];
        // SAFETY: zeroed, aligned for u64 (and so for Record), alive for the test.
        let draws = unsafe { OpenDraws::attach(bytes.as_mut_ptr().cast(), 8) };
        assert_eq!(draws.backends(), 8);
        assert!(draws.at_or_below(1, i64::MAX, 99).is_empty());
    }
}
