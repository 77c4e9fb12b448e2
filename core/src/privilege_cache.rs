//! A process's memory of which roles PostgreSQL allowed to draw from which sequences.
//!
//! `nextval()` checks the role's USAGE or UPDATE privilege on every call: 348 of its 2,476
//! instructions per id at CACHE 1 (a catalog cache lookup and an ACL walk; `bench/cost_peers.sh`,
//! PostgreSQL 15), the same answer every time until a catalog changes. The generator asks
//! PostgreSQL's own check the first time a role draws from a sequence and remembers a *yes* here;
//! the pgrx layer (`src/privilege.rs`) forgets everything whenever PostgreSQL invalidates a
//! relation, a role, a role membership or a database, which is every catalog change that can turn
//! that answer into a no. A *no* is never remembered: it is an ERROR, and the next call asks again.
//!
//! Two rules keep the remembered yes exactly PostgreSQL's (an outside review found both missing
//! from a first version):
//! * **One check per sequence per transaction.** An entry answers only in the transaction whose
//!   check made it. `nextval()` locks the sequence before it checks, and the lock receives other
//!   sessions' invalidations (a REVOKE committed while the lock waited, behind an ALTER SEQUENCE,
//!   is seen by the check). The first call of each transaction therefore runs PostgreSQL's full
//!   path; later calls of that transaction hold the lock already, so nothing can arrive between
//!   the answer and its use that `nextval()`'s own check would have seen.
//! * **A check that an invalidation interrupted is not remembered.** PostgreSQL's check can
//!   receive invalidations itself (a catalog it reads for the first time in the transaction is
//!   locked), after it read the sequence's ACL: it answers from the old ACL, and the caller must
//!   not keep that answer. [`PrivilegeCache::generation`] counts [`PrivilegeCache::forget_all`]s;
//!   [`PrivilegeCache::remember`] stores nothing when one happened since the check began.
//!
//! [`CACHE_ENTRIES`] entries, direct-mapped by the sequence's oid: it stays the same size however
//! many sequences a backend goes through, and a miss only costs the full check. Atomics only so
//! that a `static` can hold it: a backend is one thread.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// How many (sequence, role) pairs a process remembers.
pub const CACHE_ENTRIES: usize = 64;

/// See the module documentation.
pub struct PrivilegeCache {
    /// `role << 32 | sequence`; 0 is empty (no relation has oid 0).
    entries: [AtomicU64; CACHE_ENTRIES],
    /// The transaction whose check made each entry (PostgreSQL's local transaction id).
    transactions: [AtomicU32; CACHE_ENTRIES],
    /// How many times everything was forgotten.
    generation: AtomicU64,
}

impl Default for PrivilegeCache {
    fn default() -> Self {
        Self::new()
    }
}

impl PrivilegeCache {
    pub const fn new() -> Self {
        PrivilegeCache {
            entries: [const { AtomicU64::new(0) }; CACHE_ENTRIES],
            transactions: [const { AtomicU32::new(0) }; CACHE_ENTRIES],
            generation: AtomicU64::new(0),
        }
    }

    #[inline(always)]
    fn key(sequence: u32, role: u32) -> u64 {
        (u64::from(role) << 32) | u64::from(sequence)
    }

    #[inline(always)]
    fn entry(sequence: u32) -> usize {
        (sequence.wrapping_mul(0x9E37_79B9) >> (u32::BITS - CACHE_ENTRIES.ilog2())) as usize
    }

    /// Whether PostgreSQL's check allowed `role` to draw from `sequence` in transaction
    /// `transaction`, with nothing forgotten since.
    #[inline(always)]
    pub fn allows(&self, sequence: u32, role: u32, transaction: u32) -> bool {
        let entry = Self::entry(sequence);
        sequence != 0
            && self.entries[entry].load(Ordering::Relaxed) == Self::key(sequence, role)
            && self.transactions[entry].load(Ordering::Relaxed) == transaction
    }

    /// The number of [`Self::forget_all`]s so far: read it before asking PostgreSQL's check, and
    /// give it to [`Self::remember`].
    #[inline(always)]
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Relaxed)
    }

    /// Remembers that PostgreSQL's check, begun at `generation`, allowed `role` to draw from
    /// `sequence` in transaction `transaction` (replacing whatever pair shared its entry); nothing
    /// if everything was forgotten since the check began.
    #[inline]
    pub fn remember(&self, sequence: u32, role: u32, transaction: u32, generation: u64) {
        if self.generation() != generation {
            return;
        }
        let entry = Self::entry(sequence);
        self.transactions[entry].store(transaction, Ordering::Relaxed);
        self.entries[entry].store(Self::key(sequence, role), Ordering::Relaxed);
    }

    /// Forgets every pair: a catalog changed that may take a privilege away.
    pub fn forget_all(&self) {
        self.generation.fetch_add(1, Ordering::Relaxed);
        for entry in &self.entries {
            entry.store(0, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn remembers_a_yes_for_that_role_sequence_and_transaction_only() {
        let cache = PrivilegeCache::new();
        assert!(!cache.allows(16_384, 10, 1));
        cache.remember(16_384, 10, 1, cache.generation());
        assert!(cache.allows(16_384, 10, 1));
        assert!(!cache.allows(16_384, 11, 1), "another role");
        assert!(!cache.allows(16_385, 10, 1), "another sequence");
        assert!(
            !cache.allows(16_384, 10, 2),
            "another transaction checks again"
        );
        cache.forget_all();
        assert!(!cache.allows(16_384, 10, 1), "forgotten");
    }

    #[test]
    fn an_empty_entry_allows_nothing() {
        let cache = PrivilegeCache::new();
        assert!(!cache.allows(0, 0, 0), "the empty key is not a pair");
    }

    #[test]
    fn a_check_interrupted_by_a_forget_is_not_remembered() {
        let cache = PrivilegeCache::new();
        let before = cache.generation();
        cache.forget_all(); // an invalidation received inside PostgreSQL's check
        cache.remember(16_384, 10, 1, before);
        assert!(!cache.allows(16_384, 10, 1));
        cache.remember(16_384, 10, 1, cache.generation());
        assert!(cache.allows(16_384, 10, 1));
    }

    #[test]
    fn a_pair_that_takes_the_entry_pushes_the_last_one_out() {
        let cache = PrivilegeCache::new();
        let a = 16_384;
        let b = (a + 1..)
            .find(|&s| PrivilegeCache::entry(s) == PrivilegeCache::entry(a))
            .unwrap();
        cache.remember(a, 10, 1, cache.generation());
        cache.remember(b, 10, 1, cache.generation());
        assert!(cache.allows(b, 10, 1));
        assert!(!cache.allows(a, 10, 1), "b took a's entry");
    }

    #[test]
    fn consecutive_oids_spread_over_the_entries() {
        let used: std::collections::HashSet<usize> = (0..CACHE_ENTRIES as u32)
            .map(|n| PrivilegeCache::entry(16_384 + n))
            .collect();
        assert!(
            used.len() > CACHE_ENTRIES / 2,
            "{} entries used",
            used.len()
        );
    }

    proptest! {
        /// Against a model of PostgreSQL: a check of a pair takes a moment, during which an
        /// invalidation may be received (op 1: the check is interrupted); invalidations are also
        /// received between calls (op 2). Never allowed: a pair whose last check in this
        /// transaction was interrupted or followed by a received invalidation, or that was not
        /// checked in this transaction at all. Always allowed: a pair checked in this
        /// transaction, uninterrupted, nothing received since, its entry not taken since.
        #[test]
        fn allows_only_pairs_checked_in_this_transaction_with_nothing_received_since(
            ops in proptest::collection::vec((0u8..4, 1u32..100, 1u32..4), 1..400)
        ) {
            use std::collections::HashMap;
            let cache = PrivilegeCache::new();
            let mut transaction = 1u32;
            // pairs whose uninterrupted check in this transaction nothing received has followed
            let mut fresh: HashMap<(u32, u32), ()> = HashMap::new();
            let mut owner: HashMap<usize, (u32, u32)> = HashMap::new();
            for (op, sequence, role) in ops {
                let pair = (sequence, role);
                match op {
                    0 | 1 => {
                        let began = cache.generation();
                        if op == 1 {
                            cache.forget_all();
                            fresh.clear();
                        }
                        cache.remember(sequence, role, transaction, began);
                        if op == 0 {
                            fresh.insert(pair, ());
                            owner.insert(PrivilegeCache::entry(sequence), pair);
                        }
                    }
                    2 => {
                        cache.forget_all();
                        fresh.clear();
                    }
                    _ => {
                        if sequence % 7 == 0 {
                            transaction += 1;
                            fresh.clear();
                            continue;
                        }
                        let allowed = cache.allows(sequence, role, transaction);
                        let expected = fresh.contains_key(&pair)
                            && owner.get(&PrivilegeCache::entry(sequence)) == Some(&pair);
                        prop_assert_eq!(allowed, expected);
                    }
                }
            }
        }
    }
}
