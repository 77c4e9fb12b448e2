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
//! * An answer is recorded with the watch's clock when it was asked for ([`Ticket`]), and holds
//!   while no change was counted in its database since. The extension counts a change for every
//!   object created, altered or dropped in the database (PostgreSQL's `object_access_hook`, which
//!   every backend of a preloaded library runs), but indexes, sequences and TOAST tables: over-
//!   counting costs one more read, under-counting a repeated id.
//! * A change is counted when it is made, before it commits: an answer asked for before it is not
//!   recorded, and one read after it, while it runs, cannot see it (but in its own transaction).
//!   So the transaction that made it stays *pending* until it ends, and its end counts as a
//!   change: an answer read while it runs (which cannot see it) holds for every other
//!   transaction until then, never for the pending one itself (issue 57: without that, one
//!   role's `CREATE TEMP TABLE` in an open transaction made every first id of the database read
//!   every default). Pending transactions are listed
//!   ([`PENDING_LISTED`]); beyond the list, the newest unlisted one is kept, and it ends for this
//!   purpose when every transaction up to it has (a long transaction started before it delays
//!   that, in every database: reads stay correct, only slower).
//! * A server starts knowing nothing of the transactions before it: a transaction prepared for
//!   two-phase commit survives a restart (and a standby's promotion) with its changes unseen by
//!   any hook. The first question makes the newest prepared one pending, unlisted: nothing is
//!   trusted until every transaction up to it has ended. (Any other transaction of before the
//!   start ended with it; every later change is counted by the hook.)
//! * All zero bytes are an empty watch (the extension's shared memory starts so): nothing known.

use crate::slots::spinlock::SpinLock;
use std::cell::UnsafeCell;

/// Transactions with pending changes that are listed one by one.
pub const PENDING_LISTED: usize = 64;

/// Databases whose answer is remembered at once (the least recently used is replaced).
pub const DATABASES: usize = 64;

/// What [`CatalogWatch`] needs to know about transactions. Ids are 64-bit (never reused).
pub trait Transactions {
    /// Whether transaction `xid` is still running (a prepared one counts as running).
    fn running(&self, xid: u64) -> bool;
    /// The oldest transaction still running (the next to be assigned when none runs).
    fn oldest_running(&self) -> u64;
    /// The newest transaction prepared for two-phase commit and not yet committed or rolled
    /// back (0: none).
    fn newest_prepared(&self) -> u64;
}

#[derive(Clone, Copy)]
#[repr(C)]
struct Entry {
    /// 0: a free entry.
    database: u32,
    /// The answer: the database has no default that names no sequence.
    none: bool,
    /// The clock of the last change counted in it (or of the entry's making: what came before
    /// is not known).
    last_change: u64,
    /// The clock its answer was asked for at (0: no answer).
    answer_at: u64,
    /// The clock of its last use, to replace the least recently used.
    used: u64,
}

#[derive(Clone, Copy)]
#[repr(C)]
struct Pending {
    database: u32,
    /// 0: a free entry.
    xid: u64,
}

#[repr(C)]
struct Inner {
    /// 1 once the first question made the transactions prepared before it pending.
    started: u64,
    /// Counts changes and questions: every one gets its own value.
    clock: u64,
    pending: [Pending; PENDING_LISTED],
    /// The newest pending transaction not in `pending`, of any database (0: none).
    unlisted: u64,
    entries: [Entry; DATABASES],
}

impl Inner {
    /// Whether nothing may be trusted for `own` in `database`: a pending transaction past the
    /// list (any database), or one of `own`'s own changes pending there (its reads see it).
    fn trusts_nothing_for(&self, database: u32, own: u64) -> bool {
        self.unlisted != 0
            || (own != 0
                && self
                    .pending
                    .iter()
                    .any(|p| p.xid == own && p.database == database))
    }

    fn tick(&mut self) -> u64 {
        self.clock = self.clock.wrapping_add(1);
        self.clock
    }

    /// The entry of `database`, made if need be (replacing the least recently used one).
    fn entry(&mut self, database: u32) -> &mut Entry {
        let now = self.tick();
        let index = match self.entries.iter().position(|e| e.database == database) {
            Some(i) => i,
            None => {
                let i = (0..DATABASES)
                    .min_by_key(|&i| (self.entries[i].database != 0, self.entries[i].used))
                    .expect("DATABASES > 0");
                self.entries[i] = Entry {
                    database,
                    none: false,
                    last_change: now,
                    answer_at: 0,
                    used: now,
                };
                i
            }
        };
        let entry = &mut self.entries[index];
        entry.used = now;
        entry
    }
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

    /// Transaction `xid` created, altered or dropped a catalog object of `database` (xid 0: one
    /// without a transaction id: counted, not pending). Never blocks but for the spinlock;
    /// never fails.
    pub fn changed(&self, database: u32, xid: u64) {
        self.with(|w| {
            let now = w.tick();
            w.entry(database).last_change = now;
            if xid == 0 || w.unlisted >= xid {
                return;
            }
            if w.pending
                .iter()
                .any(|p| p.xid == xid && p.database == database)
            {
                return;
            }
            match w.pending.iter_mut().find(|p| p.xid == 0) {
                Some(free) => *free = Pending { database, xid },
                None => w.unlisted = xid,
            }
        })
    }

    /// The answer recorded for `database` if it still holds: `Ok(true)` when it has no default
    /// that names no sequence, `Ok(false)` when it has one; else the [`Ticket`] to record the
    /// answer the caller is about to read (with a snapshot taken after this call). `own`: the
    /// caller's transaction (0: it has no id), whose own pending changes its reads see.
    ///
    /// A change pending in another transaction is not visible to the caller's read, so an answer
    /// read while it runs holds for every other transaction until it ends: its end counts as a
    /// change (found here, before any answer is given). A caller that uses `Ok(true)` to read
    /// less asks [`CatalogWatch::unchanged_since`] after its read (issue 57: a role holding
    /// `CREATE TEMP TABLE` open made every first id read every default).
    pub fn known(
        &self,
        database: u32,
        own: u64,
        transactions: &impl Transactions,
    ) -> Result<bool, Ticket> {
        self.known_at(database, own, transactions)
            .map(|(none, _)| none)
    }

    /// [`CatalogWatch::known`], with the watch's clock when it answered.
    pub fn known_at(
        &self,
        database: u32,
        own: u64,
        transactions: &impl Transactions,
    ) -> Result<(bool, u64), Ticket> {
        self.settle(transactions);
        self.with(|w| {
            if w.trusts_nothing_for(database, own) {
                return Err(Ticket(None));
            }
            let entry = w.entry(database);
            if entry.answer_at != 0 && entry.answer_at >= entry.last_change {
                let none = entry.none;
                return Ok((none, w.clock));
            }
            Err(Ticket(Some(w.tick())))
        })
    }

    /// Whether nothing was counted in `database` since [`CatalogWatch::known_at`] answered at
    /// `since`: no change, and no end of a pending one (found here first). Asked by a caller
    /// that read less on that answer, after its read: then no change that its snapshot could see
    /// was missed. (Asking only whether an answer holds again is not enough: a change that
    /// ended before the snapshot, then another one undoing it, and a new answer recorded since,
    /// would pass; the review of issue 57's change.)
    pub fn unchanged_since(
        &self,
        database: u32,
        own: u64,
        since: u64,
        transactions: &impl Transactions,
    ) -> bool {
        self.settle(transactions);
        self.with(|w| {
            !w.trusts_nothing_for(database, own)
                && w.entries
                    .iter()
                    .any(|e| e.database == database && e.last_change <= since)
        })
    }

    /// Counts the end of every pending transaction that has ended as a change of its database,
    /// and marks the transactions prepared before the first question pending (unlisted).
    fn settle(&self, transactions: &impl Transactions) {
        // (PostgreSQL is asked outside the lock: it takes its own locks to answer)
        if self.with(|w| w.started == 0) {
            let newest = transactions.newest_prepared();
            self.with(|w| {
                if w.started == 0 {
                    w.started = 1;
                    w.unlisted = w.unlisted.max(newest);
                }
            });
        }
        let (pending, unlisted) = self.with(|w| (w.pending, w.unlisted));
        let ended: Vec<Pending> = pending
            .iter()
            .filter(|p| p.xid != 0 && !transactions.running(p.xid))
            .copied()
            .collect();
        let unlisted_ended = unlisted != 0 && transactions.oldest_running() > unlisted;
        self.with(|w| {
            for gone in &ended {
                for p in w.pending.iter_mut().filter(|p| p.xid == gone.xid) {
                    *p = Pending {
                        database: 0,
                        xid: 0,
                    };
                }
                // its changes are visible from now on: what was read while it ran is not
                let now = w.tick();
                for e in w.entries.iter_mut().filter(|e| e.database == gone.database) {
                    e.last_change = now;
                }
            }
            if unlisted_ended && w.unlisted == unlisted {
                w.unlisted = 0;
            }
        })
    }

    /// Records `none` (whether `database` has no default that names no sequence), read after
    /// [`CatalogWatch::known`] gave `ticket`, unless a change was counted there since.
    pub fn record(&self, database: u32, ticket: Ticket, none: bool) {
        let Ticket(Some(asked)) = ticket else { return };
        self.with(|w| {
            // (an entry replaced since the ticket was made anew, with a later last change)
            if let Some(entry) = w.entries.iter_mut().find(|e| e.database == database) {
                if entry.last_change <= asked {
                    entry.answer_at = asked;
                    entry.none = none;
                }
            }
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
        fn newest_prepared(&self) -> u64 {
            // (the tests' running transactions stand for prepared ones too)
            self.0.borrow().last().copied().unwrap_or(0)
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
        let ticket = w.known(DB, 0, &tx).unwrap_err();
        w.record(DB, ticket, true);
        assert_eq!(w.known(DB, 0, &tx), Ok(true));
        assert!(
            w.known(DB + 1, 0, &tx).is_err(),
            "another database knows nothing"
        );
        tx.start(10);
        w.changed(DB, 10);
        let ticket = w.known(DB, 0, &tx).unwrap_err();
        assert!(
            ticket.0.is_some(),
            "a change: read again, and record what is read"
        );
        w.record(DB, ticket, true);
        assert_eq!(
            w.known(DB, 0, &tx),
            Ok(true),
            "pending: what others read holds for them"
        );
        assert_eq!(
            w.known(DB, 10, &tx),
            Err(Ticket(None)),
            "not for the transaction that made the change (it sees it)"
        );
        assert_eq!(w.known(DB, 11, &tx), Ok(true), "another transaction");
        tx.end(10);
        let ticket = w.known(DB, 0, &tx).unwrap_err();
        assert!(
            ticket.0.is_some(),
            "ended: its change is visible, read again"
        );
        w.record(DB, ticket, false);
        assert_eq!(w.known(DB, 0, &tx), Ok(false));
    }

    #[test]
    fn a_change_and_its_undoing_after_an_answer_are_not_missed() {
        // (the review of issue 57's change) a reader told "none" at `at` reads less; meanwhile a
        // default naming no sequence is added and committed before its snapshot, then taken away
        // again and a new "none" recorded before its second question
        let w = CatalogWatch::new_boxed();
        let tx = Running::default();
        let ticket = w.known(DB, 0, &tx).unwrap_err();
        w.record(DB, ticket, true);
        let (none, at) = w.known_at(DB, 0, &tx).unwrap();
        assert!(none);
        tx.start(30);
        w.changed(DB, 30); // adds one
        tx.end(30); // ... and commits: the reader's snapshot sees it
        assert!(w.known(DB, 0, &tx).is_err(), "its end is found");
        tx.start(31);
        w.changed(DB, 31); // takes it away
        tx.end(31);
        let ticket = w.known(DB, 0, &tx).unwrap_err();
        w.record(DB, ticket, true);
        assert_eq!(w.known(DB, 0, &tx), Ok(true), "an answer holds again");
        assert!(
            !w.unchanged_since(DB, 0, at, &tx),
            "but the reader's snapshot saw the default: it must read every default"
        );
        let (_, now) = w.known_at(DB, 0, &tx).unwrap();
        assert!(
            w.unchanged_since(DB, 0, now, &tx),
            "nothing since the new answer"
        );
    }

    #[test]
    fn an_answer_read_while_a_change_was_pending_goes_when_it_ends() {
        let w = CatalogWatch::new_boxed();
        let tx = Running::default();
        tx.start(20);
        w.changed(DB, 20);
        let ticket = w.known(DB, 0, &tx).unwrap_err();
        // the read happens; the change commits before the answer is recorded
        tx.end(20);
        w.record(DB, ticket, true);
        assert!(
            w.known(DB, 0, &tx).is_err(),
            "the answer was read before the change was visible"
        );
        // and one recorded first, then the change ends
        tx.start(21);
        w.changed(DB, 21);
        let ticket = w.known(DB, 0, &tx).unwrap_err();
        w.record(DB, ticket, true);
        assert_eq!(w.known(DB, 0, &tx), Ok(true));
        tx.end(21);
        assert!(w.known(DB, 0, &tx).is_err(), "ended: read again");
    }

    #[test]
    fn an_answer_read_across_a_change_is_not_recorded() {
        let w = CatalogWatch::new_boxed();
        let tx = Running::default();
        let ticket = w.known(DB, 0, &tx).unwrap_err();
        // a transaction changes the catalog after the ticket, before the answer is recorded
        tx.start(7);
        w.changed(DB, 7);
        w.record(DB, ticket, true);
        tx.end(7);
        assert!(w.known(DB, 0, &tx).is_err(), "the answer missed the change");
    }

    #[test]
    fn a_pending_transaction_past_the_list_holds_until_every_older_one_ended() {
        let w = CatalogWatch::new_boxed();
        let tx = Running::default();
        let n = PENDING_LISTED as u64 + 3;
        for xid in 100..100 + n {
            tx.start(xid);
            w.changed(DB, xid);
        }
        for xid in 100..100 + PENDING_LISTED as u64 {
            tx.end(xid);
        }
        assert_eq!(
            w.known(DB, 0, &tx),
            Err(Ticket(None)),
            "unlisted ones still run"
        );
        tx.start(50); // older than the unlisted ones, and running
        for xid in 100 + PENDING_LISTED as u64..100 + n {
            tx.end(xid);
        }
        assert_eq!(
            w.known(DB, 0, &tx),
            Err(Ticket(None)),
            "an older transaction runs"
        );
        tx.end(50);
        let ticket = w.known(DB, 0, &tx).unwrap_err();
        w.record(DB, ticket, true);
        assert_eq!(w.known(DB, 0, &tx), Ok(true));
    }

    #[test]
    fn the_least_recently_used_answer_makes_room() {
        let w = CatalogWatch::new_boxed();
        let tx = Running::default();
        for db in 1..=DATABASES as u32 + 1 {
            let ticket = w.known(db, 0, &tx).unwrap_err();
            w.record(db, ticket, true);
        }
        assert_eq!(w.known(DATABASES as u32 + 1, 0, &tx), Ok(true));
        assert_eq!(w.known(2, 0, &tx), Ok(true));
        assert!(
            w.known(1, 0, &tx).is_err(),
            "the first recorded was replaced"
        );
    }

    #[test]
    fn a_change_in_another_database_leaves_an_answer_alone() {
        let w = CatalogWatch::new_boxed();
        let tx = Running::default();
        let ticket = w.known(DB, 0, &tx).unwrap_err();
        w.record(DB, ticket, true);
        tx.start(4);
        w.changed(DB + 1, 4);
        assert_eq!(w.known(DB, 0, &tx), Ok(true), "pending in another database");
        tx.end(4);
        assert_eq!(w.known(DB, 0, &tx), Ok(true));
        assert!(w.known(DB + 1, 0, &tx).is_err());
    }

    #[test]
    fn transactions_from_before_the_first_question_are_pending() {
        // a transaction prepared before a restart, or replayed by a standby: no hook saw it
        let w = CatalogWatch::new_boxed();
        let tx = Running::default();
        tx.start(3);
        assert_eq!(w.known(DB, 0, &tx), Err(Ticket(None)));
        tx.end(3);
        let ticket = w.known(DB, 0, &tx).unwrap_err();
        assert!(ticket.0.is_some());
        w.record(DB, ticket, true);
        assert_eq!(w.known(DB, 0, &tx), Ok(true));
    }

    /// Databases of the property test.
    const DBS: u32 = 3;

    #[derive(Clone, Debug)]
    enum Step {
        Begin,
        /// Open transaction `k` changes database `db`'s catalog.
        Change(usize, u32),
        End(usize),
        /// A reader of `db`: `known`, then it reads the catalog (the changes committed so far),
        /// then possibly more steps happen before it records (`delay` steps later).
        Read {
            delay: usize,
            db: u32,
        },
        /// A reader of `db` inside open transaction `k`: it sees its own changes too.
        ReadIn(usize, u32),
        /// A reader of `db` that reads less on `Ok(true)`: `known_at`, its snapshot `delay`
        /// steps later, then `check` steps after that `unchanged_since`; it keeps what it read
        /// only if that says so.
        Use {
            delay: usize,
            check: usize,
            db: u32,
        },
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            Just(Step::Begin),
            (0usize..8, 1..=DBS).prop_map(|(k, db)| Step::Change(k, db)),
            (0usize..8).prop_map(Step::End),
            (0usize..3, 1..=DBS).prop_map(|(delay, db)| Step::Read { delay, db }),
            (0usize..8, 1..=DBS).prop_map(|(k, db)| Step::ReadIn(k, db)),
            (0usize..6, 0usize..8, 1..=DBS).prop_map(|(delay, check, db)| Step::Use {
                delay,
                check,
                db
            }),
        ]
    }

    proptest! {
        /// The promise: whenever the watch answers for a database, the answer is what the
        /// reader's catalog of that database says: the committed one, and its own transaction's
        /// changes; and a reader that read less on `Ok(true)` and then found nothing changed
        /// since ([`CatalogWatch::unchanged_since`]) read a catalog with no such default. The
        /// catalog here is how many defaults of a database name no sequence; each change may add
        /// one, take one away, or neither (the watch cannot tell which).
        #[test]
        fn an_answer_given_is_the_committed_catalogs(steps in prop::collection::vec(step(), 1..200),
                                                       kinds in prop::collection::vec(0u8..3, 200)) {
            let w = CatalogWatch::new_boxed();
            let tx = Running::default();
            let mut next_xid = 1u64;
            // (xid, what it added (+1) or took away (-1), by database)
            let mut open: Vec<(u64, Vec<(u32, i32)>)> = Vec::new();
            let mut committed: Vec<(u32, i32)> = Vec::new();
            let count = |changes: &[(u32, i32)], db: u32| -> i32 {
                changes.iter().filter(|c| c.0 == db).map(|c| c.1).sum()
            };
            // readers waiting to record: (steps left, database, ticket, what they read)
            let mut readers: Vec<(usize, u32, Ticket, bool)> = Vec::new();
            // readers that were told "none" and read less: (steps to their snapshot, then to
            // their second question, database, the clock of the answer, what the snapshot had)
            let mut users: Vec<(usize, usize, u32, u64, Option<bool>)> = Vec::new();
            for (i, s) in steps.iter().enumerate() {
                match *s {
                    Step::Begin => {
                        tx.start(next_xid);
                        open.push((next_xid, Vec::new()));
                        next_xid += 1;
                    }
                    Step::Change(k, db) if !open.is_empty() => {
                        let k = k % open.len();
                        w.changed(db, open[k].0);
                        let seen = count(&committed, db) + count(&open[k].1, db);
                        match kinds[i] {
                            1 => open[k].1.push((db, 1)),
                            2 if seen > 0 => open[k].1.push((db, -1)),
                            _ => {}
                        }
                    }
                    Step::End(k) if !open.is_empty() => {
                        let (xid, changes) = open.remove(k % open.len());
                        for (db, d) in changes {
                            // (two transactions taking the same one away: the second finds none)
                            if d > 0 || count(&committed, db) > 0 {
                                committed.push((db, d));
                            }
                        }
                        tx.end(xid);
                    }
                    Step::ReadIn(k, db) if !open.is_empty() => {
                        let k = k % open.len();
                        let none = count(&committed, db) + count(&open[k].1, db) <= 0;
                        match w.known(db, open[k].0, &tx) {
                            Ok(answer) => prop_assert_eq!(answer, none, "read in its own transaction"),
                            Err(ticket) => readers.push((0, db, ticket, none)),
                        }
                    }
                    Step::Read { delay, db } => {
                        let none = count(&committed, db) <= 0;
                        match w.known(db, 0, &tx) {
                            Ok(answer) => prop_assert_eq!(answer, none),
                            Err(ticket) => readers.push((delay, db, ticket, none)),
                        }
                    }
                    Step::Use { delay, check, db } => {
                        if let Ok((true, at)) = w.known_at(db, 0, &tx) {
                            users.push((delay, check, db, at, None));
                        }
                    }
                    _ => {}
                }
                for u in users.iter_mut() {
                    if u.0 == 0 && u.4.is_none() {
                        u.4 = Some(count(&committed, u.2) <= 0); // its snapshot
                    }
                    if u.0 == 0 && u.1 == 0 {
                        if w.unchanged_since(u.2, 0, u.3, &tx) {
                            prop_assert_eq!(u.4, Some(true), "read less, and the second question let it");
                        }
                        u.1 = usize::MAX;
                    } else if u.0 == 0 {
                        u.1 -= 1;
                    } else {
                        u.0 -= 1;
                    }
                }
                users.retain(|u| u.1 != usize::MAX);
                for r in readers.iter_mut() {
                    if r.0 == 0 {
                        w.record(r.1, r.2, r.3);
                    }
                    r.0 = r.0.wrapping_sub(1);
                }
                readers.retain(|r| r.0 != usize::MAX);
            }
        }
    }
}
