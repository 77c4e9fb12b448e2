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
//! PostgreSQL receives other sessions' invalidations when a transaction starts and when it takes
//! a lock it did not hold: `nextval()` does, at a sequence's first call in each transaction,
//! before its check. So an entry also remembers the transaction it was last used in, and
//! [`PrivilegeCache::allows`] receives the invalidations (its caller's closure) before it answers
//! with an entry from another transaction: as fresh as `nextval()`'s own check, without paying
//! for it on every call of a statement.
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
    /// The transaction each entry was last used in (PostgreSQL's local transaction id).
    transactions: [AtomicU32; CACHE_ENTRIES],
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

    /// Whether PostgreSQL allowed `role` to draw from `sequence` since the last
    /// [`Self::forget_all`], asked in transaction `transaction`. When the pair was last used in
    /// another transaction, `receive_invalidations` runs first (it may call
    /// [`Self::forget_all`]), as `nextval()` receives them before its first check in a
    /// transaction.
    #[inline(always)]
    pub fn allows(
        &self,
        sequence: u32,
        role: u32,
        transaction: u32,
        receive_invalidations: impl FnOnce(),
    ) -> bool {
        let entry = Self::entry(sequence);
        let key = Self::key(sequence, role);
        if sequence == 0 || self.entries[entry].load(Ordering::Relaxed) != key {
            return false;
        }
        if self.transactions[entry].load(Ordering::Relaxed) != transaction {
            receive_invalidations();
            if self.entries[entry].load(Ordering::Relaxed) != key {
                return false;
            }
            self.transactions[entry].store(transaction, Ordering::Relaxed);
        }
        true
    }

    /// Remembers that PostgreSQL allowed `role` to draw from `sequence`, checked in transaction
    /// `transaction` (replacing whatever pair shared its entry).
    #[inline]
    pub fn remember(&self, sequence: u32, role: u32, transaction: u32) {
        let entry = Self::entry(sequence);
        self.transactions[entry].store(transaction, Ordering::Relaxed);
        self.entries[entry].store(Self::key(sequence, role), Ordering::Relaxed);
    }

    /// Forgets every pair: a catalog changed that may take a privilege away.
    pub fn forget_all(&self) {
        for entry in &self.entries {
            entry.store(0, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::cell::Cell;

    #[test]
    fn remembers_a_yes_for_that_role_and_sequence_only() {
        let cache = PrivilegeCache::new();
        assert!(!cache.allows(16_384, 10, 1, || {}));
        cache.remember(16_384, 10, 1);
        assert!(cache.allows(16_384, 10, 1, || {}));
        assert!(!cache.allows(16_384, 11, 1, || {}), "another role");
        assert!(!cache.allows(16_385, 10, 1, || {}), "another sequence");
        cache.forget_all();
        assert!(!cache.allows(16_384, 10, 1, || {}), "forgotten");
    }

    #[test]
    fn an_empty_entry_allows_nothing() {
        let cache = PrivilegeCache::new();
        assert!(!cache.allows(0, 0, 0, || {}), "the empty key is not a pair");
    }

    #[test]
    fn invalidations_are_received_once_per_transaction_before_the_answer() {
        let cache = PrivilegeCache::new();
        let received = Cell::new(0);
        cache.remember(16_384, 10, 1);
        assert!(cache.allows(16_384, 10, 1, || received.set(received.get() + 1)));
        assert_eq!(received.get(), 0, "the transaction of the check itself");
        assert!(cache.allows(16_384, 10, 2, || received.set(received.get() + 1)));
        assert!(cache.allows(16_384, 10, 2, || received.set(received.get() + 1)));
        assert_eq!(received.get(), 1, "once in transaction 2");
        // an invalidation received at the start of transaction 3 answers that very call
        assert!(!cache.allows(16_384, 10, 3, || cache.forget_all()));
        assert!(!cache.allows(16_384, 10, 3, || {}));
    }

    #[test]
    fn a_pair_that_takes_the_entry_pushes_the_last_one_out() {
        let cache = PrivilegeCache::new();
        let a = 16_384;
        let b = (a + 1..)
            .find(|&s| PrivilegeCache::entry(s) == PrivilegeCache::entry(a))
            .unwrap();
        cache.remember(a, 10, 1);
        cache.remember(b, 10, 1);
        assert!(cache.allows(b, 10, 1, || {}));
        assert!(!cache.allows(a, 10, 1, || {}), "b took a's entry");
    }

    #[test]
    fn consecutive_oids_spread_over_the_entries() {
        let used: std::collections::HashSet<usize> = (0..CACHE_ENTRIES as u32)
            .map(|n| PrivilegeCache::entry(16_384 + n))
            .collect();
        assert!(used.len() > CACHE_ENTRIES / 2, "{} entries used", used.len());
    }

    proptest! {
        /// Against a model of PostgreSQL's invalidations: a catalog change is *pending* until the
        /// backend receives it (at a transaction's first use of a pair through the closure, or
        /// whenever PostgreSQL itself does), which forgets every pair. Never allowed: a pair not
        /// remembered since the last received change, or a pair at its first use in a transaction
        /// with a change still pending. Always allowed: a pair remembered in this transaction,
        /// nothing received since, its entry not taken by another pair.
        #[test]
        fn allows_only_pairs_no_received_or_pending_change_followed(
            ops in proptest::collection::vec((0u8..5, 1u32..100, 1u32..4), 1..400)
        ) {
            use std::collections::{HashMap, HashSet};
            let cache = PrivilegeCache::new();
            let pending = Cell::new(false);
            let received = Cell::new(0u32);
            let mut transaction = 1u32;
            // pairs remembered since the last received change, with the count of receipts then
            let mut remembered: HashMap<(u32, u32), u32> = HashMap::new();
            let mut owner: HashMap<usize, (u32, u32)> = HashMap::new();
            let mut used: HashSet<(u32, u32)> = HashSet::new();
            let mut remembered_now: HashSet<(u32, u32)> = HashSet::new();
            for (op, sequence, role) in ops {
                let pair = (sequence, role);
                let receive = || {
                    if pending.replace(false) {
                        cache.forget_all();
                        received.set(received.get() + 1);
                    }
                };
                match op {
                    0 => {
                        cache.remember(sequence, role, transaction);
                        remembered.insert(pair, received.get());
                        owner.insert(PrivilegeCache::entry(sequence), pair);
                        used.insert(pair);
                        remembered_now.insert(pair);
                    }
                    1 => pending.set(true),
                    2 => receive(),
                    3 => {
                        transaction += 1;
                        used.clear();
                        remembered_now.clear();
                    }
                    _ => {
                        let first_use = !used.contains(&pair);
                        let before = received.get();
                        let allowed = cache.allows(sequence, role, transaction, receive);
                        if allowed {
                            prop_assert_eq!(remembered.get(&pair), Some(&received.get()),
                                "allowed without being remembered since the last receipt");
                            prop_assert!(!(first_use && pending.get()), "a pending change was not received");
                            used.insert(pair);
                        } else if received.get() == before
                            && remembered_now.contains(&pair)
                            && remembered.get(&pair) == Some(&received.get())
                            && owner.get(&PrivilegeCache::entry(sequence)) == Some(&pair)
                        {
                            prop_assert!(false, "a pair remembered in this transaction was refused");
                        }
                    }
                }
            }
        }
    }
}
