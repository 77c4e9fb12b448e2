//! Whether a database has defaults that name no sequence, remembered across backends until a
//! catalog change (issue 51).
//!
//! A sequence's data floor reads the columns that can hold its ids: those whose DEFAULT names it,
//! which `pg_depend` lists against the sequence itself (a few index entries, whatever the size of
//! the database), and those whose DEFAULT names *no* sequence (it is chosen from text at run time,
//! or inside a function of the user's own), which count for every sequence. Finding the second
//! kind means reading every default of the database: 1.8 s with 20,000 tables here. Almost no
//! database has one, so the answer "none" is worth remembering, per database, for every backend:
//! that is this module.
//!
//! * An answer is recorded with the count of catalog changes it was read under ([`Ticket`]), and
//!   holds while that count has not moved. The extension counts a change for every object created
//!   or altered (PostgreSQL's `object_access_hook`, which every backend of a preloaded library
//!   runs), whatever the object: over-counting costs one more read, under-counting a repeat.
//! * A change is counted when it is made, before it commits: an answer read before it (with the
//!   count before it) is not recorded, and one read after it, while it runs, cannot see it (but
//!   in its own transaction). So the transaction that made it stays *pending* until it ends:
//!   while any change is pending nothing is trusted or recorded. Pending transactions are
//!   listed ([`PENDING_LISTED`]); beyond the list, the newest unlisted one is kept, and it ends
//!   for this purpose when every transaction up to it has (a long transaction started before it
//!   delays that: reads stay correct, only slower).
//! * All zero bytes are an empty watch (the extension's shared memory starts so): nothing known.

use crate::slots::spinlock::SpinLock;
use std::cell::UnsafeCell;

/// Transactions with pending changes that are listed one by one.
pub const PENDING_LISTED: usize = 64;

/// Databases whose answer is remembered at once (the least recently recorded is replaced).
pub const DATABASES: usize = 64;

/// What [`CatalogWatch`] needs to know about transactions. Ids are 64-bit (never reused).
pub trait Transactions {
    /// Whether transaction `xid` is still running (a prepared one counts as running).
    fn running(&self, xid: u64) -> bool;
    /// The oldest transaction still running (the next to be assigned when none runs).
    fn oldest_running(&self) -> u64;
}

#[derive(Clone, Copy)]
#[repr(C)]
struct Answer {
    /// 0: no entry.
    database: u32,
    /// Whether the database has no default that names no sequence.
    none: bool,
    /// The count of changes the answer was read under.
    changes: u64,
    /// When it was recorded (a count of records), to replace the oldest.
    recorded: u64,
}

#[repr(C)]
struct Inner {
    /// Catalog changes counted.
    changes: u64,
    /// Transactions whose changes may not be visible yet; 0: a free entry.
    pending: [u64; PENDING_LISTED],
    /// The newest pending transaction not in `pending` (0: none).
    unlisted: u64,
    records: u64,
    answers: [Answer; DATABASES],
}

/// The watch, laid out to live in shared memory (all zero bytes: nothing known).
#[repr(C)]
pub struct CatalogWatch {
    lock: SpinLock,
    inner: UnsafeCell<Inner>,
}

// SAFETY: `inner` is only touched with `lock` held.
unsafe impl Sync for CatalogWatch {}

/// What [`CatalogWatch::known`] says when it knows nothing current: how to record the answer the
/// caller reads now, if it may be recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ticket(Option<u64>);

impl Ticket {
    /// A ticket that records nothing: for a caller with no watch (the library not preloaded, a
    /// server in recovery).
    pub const fn never() -> Ticket {
        Ticket(None)
    }
}

impl CatalogWatch {
    /// An empty watch on the heap (tests).
    pub fn new_boxed() -> Box<Self> {
        // SAFETY: all zero bytes are a valid, empty watch (an unlocked lock, no entries).
        unsafe { Box::<Self>::new_zeroed().assume_init() }
    }

    /// # Safety
    /// `mem` points to `size_of::<Self>()` bytes, aligned for `Self`, that were all zero when
    /// first used, and that live as long as the reference is used.
    pub unsafe fn attach<'a>(mem: *mut u8) -> &'a Self {
        // SAFETY: the caller's contract.
        unsafe { &*mem.cast::<Self>() }
    }

    fn with<R>(&self, f: impl FnOnce(&mut Inner) -> R) -> R {
        let _guard = self.lock.lock();
        // SAFETY: the lock is held, so no other reference to `inner` exists.
        f(unsafe { &mut *self.inner.get() })
    }

    /// Transaction `xid` created or altered a catalog object (0: one without a transaction id:
    /// counted, not pending). Never blocks but for the spinlock; never fails.
    pub fn changed(&self, xid: u64) {
        self.with(|w| {
            w.changes = w.changes.wrapping_add(1);
            if xid == 0 || w.pending.contains(&xid) || w.unlisted >= xid {
                return;
            }
            match w.pending.iter_mut().find(|p| **p == 0) {
                Some(free) => *free = xid,
                None => w.unlisted = xid,
            }
        })
    }

    /// The answer recorded for `database` if it still holds: `Ok(true)` when it has no default
    /// that names no sequence, `Ok(false)` when it has one; else the [`Ticket`] to record the
    /// answer the caller is about to read (with a snapshot taken after this call).
    pub fn known(&self, database: u32, transactions: &impl Transactions) -> Result<bool, Ticket> {
        // ended transactions, asked outside the lock (PostgreSQL takes its own locks to answer)
        let (pending, unlisted) = self.with(|w| (w.pending, w.unlisted));
        let ended: Vec<u64> = pending
            .iter()
            .copied()
            .filter(|&x| x != 0 && !transactions.running(x))
            .collect();
        let unlisted_ended = unlisted != 0 && transactions.oldest_running() > unlisted;
        self.with(|w| {
            for p in w.pending.iter_mut().filter(|p| ended.contains(p)) {
                *p = 0;
            }
            if unlisted_ended && w.unlisted == unlisted {
                w.unlisted = 0;
            }
            if w.unlisted != 0 || w.pending.iter().any(|&p| p != 0) {
                return Err(Ticket(None));
            }
            match w
                .answers
                .iter()
                .find(|a| a.database == database && database != 0)
            {
                Some(a) if a.changes == w.changes => Ok(a.none),
                _ => Err(Ticket(Some(w.changes))),
            }
        })
    }

    /// Records `none` (whether `database` has no default that names no sequence), read after
    /// [`CatalogWatch::known`] gave `ticket`, unless the catalog changed since.
    pub fn record(&self, database: u32, ticket: Ticket, none: bool) {
        let Ticket(Some(changes)) = ticket else {
            return;
        };
        if database == 0 {
            return;
        }
        self.with(|w| {
            if w.changes != changes {
                return;
            }
            w.records = w.records.wrapping_add(1);
            let recorded = w.records;
            let entry = match w.answers.iter().position(|a| a.database == database) {
                Some(i) => i,
                None => (0..DATABASES)
                    .min_by_key(|&i| (w.answers[i].database != 0, w.answers[i].recorded))
                    .expect("DATABASES > 0"),
            };
            w.answers[entry] = Answer {
                database,
                none,
                changes,
                recorded,
            };
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::cell::RefCell;
    use std::collections::BTreeSet;

    /// Transactions as a set of running ids.
    #[derive(Default)]
    struct Running(RefCell<BTreeSet<u64>>);

    impl Transactions for Running {
        fn running(&self, xid: u64) -> bool {
            self.0.borrow().contains(&xid)
        }
        fn oldest_running(&self) -> u64 {
            self.0.borrow().first().copied().unwrap_or(u64::MAX)
        }
    }

    impl Running {
        fn start(&self, xid: u64) {
            self.0.borrow_mut().insert(xid);
        }
        fn end(&self, xid: u64) {
            self.0.borrow_mut().remove(&xid);
        }
    }

    const DB: u32 = 5;

    #[test]
    fn nothing_is_known_at_first_and_an_answer_holds_until_a_change() {
        let w = CatalogWatch::new_boxed();
        let tx = Running::default();
        let ticket = w.known(DB, &tx).unwrap_err();
        w.record(DB, ticket, true);
        assert_eq!(w.known(DB, &tx), Ok(true));
        assert!(
            w.known(DB + 1, &tx).is_err(),
            "another database knows nothing"
        );
        tx.start(10);
        w.changed(10);
        assert_eq!(
            w.known(DB, &tx),
            Err(Ticket(None)),
            "pending: nothing trusted"
        );
        tx.end(10);
        let ticket = w.known(DB, &tx).unwrap_err();
        assert!(ticket.0.is_some(), "ended: a new answer may be recorded");
        w.record(DB, ticket, false);
        assert_eq!(w.known(DB, &tx), Ok(false));
    }

    #[test]
    fn an_answer_read_across_a_change_is_not_recorded() {
        let w = CatalogWatch::new_boxed();
        let tx = Running::default();
        let ticket = w.known(DB, &tx).unwrap_err();
        // a transaction changes the catalog after the ticket, before the answer is recorded
        tx.start(7);
        w.changed(7);
        w.record(DB, ticket, true);
        tx.end(7);
        assert!(w.known(DB, &tx).is_err(), "the answer missed the change");
    }

    #[test]
    fn a_pending_transaction_past_the_list_holds_until_every_older_one_ended() {
        let w = CatalogWatch::new_boxed();
        let tx = Running::default();
        let n = PENDING_LISTED as u64 + 3;
        for xid in 100..100 + n {
            tx.start(xid);
            w.changed(xid);
        }
        for xid in 100..100 + PENDING_LISTED as u64 {
            tx.end(xid);
        }
        assert_eq!(
            w.known(DB, &tx),
            Err(Ticket(None)),
            "unlisted ones still run"
        );
        tx.start(50); // older than the unlisted ones, and running
        for xid in 100 + PENDING_LISTED as u64..100 + n {
            tx.end(xid);
        }
        assert_eq!(
            w.known(DB, &tx),
            Err(Ticket(None)),
            "an older transaction runs"
        );
        tx.end(50);
        let ticket = w.known(DB, &tx).unwrap_err();
        w.record(DB, ticket, true);
        assert_eq!(w.known(DB, &tx), Ok(true));
    }

    #[test]
    fn the_oldest_answer_makes_room() {
        let w = CatalogWatch::new_boxed();
        let tx = Running::default();
        for db in 1..=DATABASES as u32 + 1 {
            let ticket = w.known(db, &tx).unwrap_err();
            w.record(db, ticket, true);
        }
        assert!(w.known(1, &tx).is_err(), "the first recorded was replaced");
        assert_eq!(w.known(DATABASES as u32 + 1, &tx), Ok(true));
        assert_eq!(w.known(2, &tx), Ok(true));
    }

    #[derive(Clone, Debug)]
    enum Step {
        Begin,
        Change(usize),
        End(usize),
        /// A reader: `known`, then it reads the catalog (the changes committed so far), then
        /// possibly more steps happen before it records (`delay` steps later).
        Read {
            delay: usize,
        },
        /// A reader inside open transaction `k`: it sees its own changes too.
        ReadIn(usize),
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            Just(Step::Begin),
            (0usize..8).prop_map(Step::Change),
            (0usize..8).prop_map(Step::End),
            (0usize..3).prop_map(|delay| Step::Read { delay }),
            (0usize..8).prop_map(Step::ReadIn),
        ]
    }

    proptest! {
        /// The promise: whenever the watch answers, the answer is what the reader's catalog
        /// says: the committed one, and its own transaction's changes. The catalog here is
        /// whether a transaction added a default that names no sequence; each change may add
        /// one (the watch cannot tell which do).
        #[test]
        fn an_answer_given_is_the_committed_catalogs(steps in prop::collection::vec(step(), 1..200),
                                                       adds in prop::collection::vec(any::<bool>(), 200)) {
            let w = CatalogWatch::new_boxed();
            let tx = Running::default();
            let mut next_xid = 1u64;
            let mut open: Vec<(u64, bool)> = Vec::new(); // (xid, added one)
            let mut committed_has = false;
            // readers waiting to record: (steps left, ticket, what they read)
            let mut readers: Vec<(usize, Ticket, bool)> = Vec::new();
            for (i, s) in steps.iter().enumerate() {
                match s {
                    Step::Begin => {
                        tx.start(next_xid);
                        open.push((next_xid, false));
                        next_xid += 1;
                    }
                    Step::Change(k) if !open.is_empty() => {
                        let k = k % open.len();
                        w.changed(open[k].0);
                        open[k].1 |= adds[i];
                    }
                    Step::End(k) if !open.is_empty() => {
                        let (xid, added) = open.remove(k % open.len());
                        committed_has |= added;
                        tx.end(xid);
                    }
                    Step::ReadIn(k) if !open.is_empty() => {
                        let sees = committed_has || open[k % open.len()].1;
                        match w.known(DB, &tx) {
                            Ok(none) => prop_assert_eq!(none, !sees, "read in its own transaction"),
                            Err(ticket) => readers.push((0, ticket, !sees)),
                        }
                    }
                    Step::Read { delay } => {
                        match w.known(DB, &tx) {
                            Ok(none) => prop_assert_eq!(none, !committed_has),
                            Err(ticket) => readers.push((*delay, ticket, !committed_has)),
                        }
                    }
                    _ => {}
                }
                for r in readers.iter_mut() {
                    if r.0 == 0 {
                        w.record(DB, r.1, r.2);
                    }
                    r.0 = r.0.wrapping_sub(1);
                }
                readers.retain(|r| r.0 != usize::MAX);
            }
        }
    }
}
