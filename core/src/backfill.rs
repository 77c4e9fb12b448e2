//! Reservations for ids at past times (`next_shard_id_at`, issue 37): which of a millisecond's
//! 1,024 remainders are taken, for one sequence and one shard, shared by every session.
//!
//! An id at a past millisecond `ms` of shard `s` is `ms | s | r`: the DEFAULT's guard left that
//! millisecond behind long ago, so the only ids that can equal it are the ones already **stored**
//! (the indexes of the sequence's columns say which remainders: the extension reads them) and the
//! ones other calls **handed out** and not yet stored. This table records the second kind, per
//! (sequence, shard, millisecond), in a fixed block of memory (shared memory in the extension):
//!
//! * An entry holds `used` (remainders stored when it was filled, and every one handed out since)
//!   and `handed` (the ones handed out), and the newest transaction that took one.
//! * **The entry is made before the indexes are read.** A call that finds no entry claims one,
//!   leaves the table's lock, reads the indexes and [`fill`](Reservations::fill)s it; a call that
//!   finds it unfilled reads them too (no call waits for another). So every remainder is either
//!   in the entry or was stored before the entry existed, which the read sees.
//! * **An entry is evicted only when nothing it protects can be lost**: nothing was handed out,
//!   or every transaction that took from it has ended (its newest taker precedes the oldest
//!   running transaction: the ids were stored and committed, or are void), or every remainder
//!   it handed out is **kept** now ([`evict_if_kept`](Reservations::evict_if_kept), after the
//!   caller read the indexes again): in a row that only the end of its whole transaction can
//!   undo, or stored by the very (sub)transaction that drew it. A row stored in a savepoint
//!   that is still open does not count: rolled back, its index entry is dead, VACUUM removes it,
//!   and the transaction may store the same id again (the 27th review: 1,000 ids repeated).
//!   An id drawn in a savepoint that is rolled back is void, as one drawn by a transaction that
//!   aborts; an id that a transaction takes and stores only in a *later* transaction is
//!   protected only until the entry is evicted: store it where you draw it.
//! * Entries live in buckets of [`WAYS`] (a key's hash names its bucket), so no call reads more
//!   than [`WAYS`] entries under the lock, whatever the table's size; when a bucket holds only
//!   entries it may not evict yet, the call gets their keys to check ([`Step::NoRoom`]).
//!
//! Plain Rust: no PostgreSQL, tested with `cargo test` (unit and property tests below).

use crate::layout::{SEQ_BITS, SEQ_VALUES};
use crate::slots::spinlock::SpinLock;
use crate::slots::SlotKey;
use std::cell::UnsafeCell;

/// Entries per bucket: what one call reads under the lock.
pub const WAYS: usize = 8;

/// Entries of the extension's shared table: 4,096 (about 1.2 MB of shared memory). A backfill
/// that draws ids for more milliseconds than this in one transaction still works as long as it
/// stores each id right away (`INSERT ... SELECT`, `UPDATE ... SET`): entries whose ids are all
/// stored are evicted.
pub const SHARED_ENTRIES: usize = 4096;

const WORDS: usize = (SEQ_VALUES as usize) / 64;

/// [`Entry::drawn_in`] when draws of more than one (sub)transaction took from it.
const MIXED: u64 = u64::MAX;

/// A set of remainders (0..1023): one bit each.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct Remainders([u64; WORDS]);

impl Remainders {
    pub fn contains(&self, r: u16) -> bool {
        self.0[usize::from(r) / 64] & (1 << (r % 64)) != 0
    }
    pub fn insert(&mut self, r: u16) {
        debug_assert!(i64::from(r) < SEQ_VALUES);
        self.0[usize::from(r) / 64] |= 1 << (r % 64);
    }
    pub fn union_with(&mut self, other: &Remainders) {
        self.0.iter_mut().zip(other.0).for_each(|(a, b)| *a |= b);
    }
    pub fn is_subset_of(&self, other: &Remainders) -> bool {
        self.0.iter().zip(other.0).all(|(a, b)| a & !b == 0)
    }
    pub fn is_empty(&self) -> bool {
        self.0.iter().all(|w| *w == 0)
    }
    pub fn len(&self) -> usize {
        self.0.iter().map(|w| w.count_ones() as usize).sum()
    }
    /// The first remainder not in the set at or after `start`, wrapping after 1023.
    pub fn first_free_from(&self, start: u16) -> Option<u16> {
        let n = SEQ_VALUES as u16;
        (0..n)
            .map(|i| (start % n + i) % n)
            .find(|r| !self.contains(*r))
    }
}

impl FromIterator<u16> for Remainders {
    fn from_iter<I: IntoIterator<Item = u16>>(iter: I) -> Self {
        let mut set = Remainders::default();
        iter.into_iter().for_each(|r| set.insert(r));
        set
    }
}

/// The remainder field of an id (its low [`SEQ_BITS`] bits).
pub fn remainder_of(id: i64) -> u16 {
    (id & ((1 << SEQ_BITS) - 1)) as u16
}

/// One millisecond of one shard of one sequence.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(C)]
pub struct MsKey {
    /// The sequence's slot key (database and sequence oids).
    pub sequence: SlotKey,
    pub shard: u16,
    /// Milliseconds since the epoch.
    pub ms: i64,
}

impl MsKey {
    fn bucket(&self, buckets: usize) -> usize {
        // FNV-1a over the fields: cheap, and spreads consecutive milliseconds over buckets
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for byte in self
            .sequence
            .to_le_bytes()
            .into_iter()
            .chain(self.shard.to_le_bytes())
            .chain(self.ms.to_le_bytes())
        {
            h = (h ^ u64::from(byte)).wrapping_mul(0x100_0000_01b3);
        }
        (h % buckets as u64) as usize
    }
}

/// Where an entry was, when the lock was let go: it is still the same entry if its generation is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ticket {
    slot: usize,
    generation: u64,
}

/// Who draws: the transaction (its 64-bit top-level id, never 0) and the (sub)transaction the
/// draw runs in (its 64-bit id, the top-level one's outside any savepoint; `None` for a
/// savepoint that has no id of its own yet, whose rows are then not told apart from others').
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Taker {
    pub top: u64,
    pub level: Option<u64>,
}

/// An entry [`Step::NoRoom`] names: evict it with [`Reservations::evict_if_kept`] if the rows
/// holding its ids can no longer go while their transaction goes on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Held {
    pub ticket: Ticket,
    pub key: MsKey,
    /// The (sub)transaction that made every draw from the entry; `None` when more than one did.
    pub drawn_in: Option<u64>,
}

/// What [`Reservations::reserve`] says.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// This remainder is the caller's.
    Reserved(u16),
    /// Nobody has read yet which remainders the indexes hold: read them for the key, then
    /// [`Reservations::fill`] and ask again.
    Fill(Ticket),
    /// Every remainder of the millisecond is used: ask for the next millisecond.
    MillisecondFull,
    /// An entry must be evicted and none may be without knowing the oldest running transaction:
    /// ask again with it.
    NeedOldestRunning,
    /// The entry holds the draws of one other transaction, this one: ask again knowing whether it
    /// has ended ([`Database::has_ended`]).
    NeedTakerState(u64),
    /// Every entry of the key's bucket protects ids of running transactions: read which of their
    /// remainders are kept now, [`Reservations::evict_if_kept`] each, and ask again.
    NoRoom(Vec<Held>),
}

#[derive(Clone, Copy, Default)]
#[repr(C)]
struct Entry {
    key: MsKey,
    in_use: bool,
    filled: bool,
    generation: u64,
    /// Remainders stored when filled, and every one handed out since.
    used: Remainders,
    handed: Remainders,
    /// The newest (64-bit) transaction id that took a remainder; 0: none.
    newest_taker: u64,
    /// Whether every remainder in `handed` went to `newest_taker`'s transaction.
    one_taker: bool,
    /// The (sub)transaction of every draw from the entry; 0: none yet, [`MIXED`]: more than one.
    drawn_in: u64,
    last_use: u64,
}

/// What the caller of [`Reservations::reserve`] knows of transaction `top`: `Some(true)` ended,
/// `Some(false)` running, `None` not asked yet.
fn known(ended: &[(u64, bool)], top: u64) -> Option<bool> {
    ended
        .iter()
        .find(|(t, _)| *t == top)
        .map(|&(_, has_ended)| has_ended)
}

#[repr(C)]
struct Inner<const N: usize> {
    tick: u64,
    evictions: u64,
    entries: [Entry; N],
}

/// The reservation table: `N` entries in buckets of [`WAYS`], behind one spinlock. All zero bytes
/// is an empty table, so shared memory needs no other initialisation.
#[repr(C)]
pub struct Reservations<const N: usize> {
    lock: SpinLock,
    inner: UnsafeCell<Inner<N>>,
}

// SAFETY: `inner` is only touched with `lock` held.
unsafe impl<const N: usize> Sync for Reservations<N> {}

/// The extension's table.
pub type SharedReservations = Reservations<SHARED_ENTRIES>;

impl<const N: usize> Reservations<N> {
    const BUCKETS: usize = {
        assert!(N >= WAYS && N.is_multiple_of(WAYS));
        N / WAYS
    };

    /// An empty table on the heap (tests, and a session without shared memory).
    pub fn new_boxed() -> Box<Self> {
        // SAFETY: all zero bytes is a valid, empty table (see the type's documentation).
        unsafe { Box::<Self>::new_zeroed().assume_init() }
    }

    /// # Safety
    /// `mem` points to `size_of::<Self>()` bytes, aligned for `Self`, that were all zero when
    /// first used, and that live as long as the reference is used.
    pub unsafe fn attach<'a>(mem: *mut u8) -> &'a Self {
        // SAFETY: the caller's contract.
        unsafe { &*mem.cast::<Self>() }
    }

    fn with<R>(&self, f: impl FnOnce(&mut Inner<N>) -> R) -> R {
        let _guard = self.lock.lock();
        // SAFETY: the lock is held, so no other reference to `inner` exists.
        f(unsafe { &mut *self.inner.get() })
    }

    /// Reserves a remainder of `key` for `taker`, the first free one at or after `start`
    /// (wrapping). `oldest_running`: the oldest 64-bit transaction id still running, when the
    /// caller knows it (an eviction needs it); `ended`: transactions the caller knows to have
    /// ended (`true`) or to be running (`false`).
    pub fn reserve(
        &self,
        key: MsKey,
        start: u16,
        taker: Taker,
        oldest_running: Option<u64>,
        ended: &[(u64, bool)],
    ) -> Step {
        debug_assert!(taker.top != 0 && taker.level.is_none_or(|l| l != 0 && l != MIXED));
        self.with(|t| {
            t.tick += 1;
            let tick = t.tick;
            let first = key.bucket(Self::BUCKETS) * WAYS;
            let bucket = first..first + WAYS;
            let slot = match bucket
                .clone()
                .find(|&i| t.entries[i].in_use && t.entries[i].key == key)
            {
                Some(slot) => slot,
                None => {
                    // a free entry, else the least recently used one that may be evicted
                    let free = bucket.clone().find(|&i| !t.entries[i].in_use);
                    let slot = match free {
                        Some(slot) => slot,
                        None => {
                            // An entry being filled is not taken here: two calls would
                            // take each other's in turn and neither would ever fill its own
                            // (seen with two sessions: 1,000 retries, then "no room").
                            // (an entry one transaction drew from may go once that one has
                            // ended, whatever older transaction is left open elsewhere: the third
                            // review of the savepoint fix, 54000 for everyone after one rollback)
                            let taker_ended = |e: &Entry| {
                                e.one_taker && known(ended, e.newest_taker) == Some(true)
                            };
                            let evictable = |e: &Entry| {
                                e.filled
                                    && (e.handed.is_empty()
                                        || taker_ended(e)
                                        || oldest_running.is_some_and(|o| e.newest_taker < o))
                            };
                            let victim = bucket
                                .clone()
                                .filter(|&i| evictable(&t.entries[i]))
                                .min_by_key(|&i| t.entries[i].last_use);
                            let unasked = bucket.clone().map(|i| &t.entries[i]).find(|e| {
                                e.filled
                                    && e.one_taker
                                    && e.newest_taker != taker.top
                                    && known(ended, e.newest_taker).is_none()
                            });
                            match victim {
                                Some(slot) => {
                                    t.evictions += 1;
                                    slot
                                }
                                None if unasked.is_some() => {
                                    return Step::NeedTakerState(unasked.unwrap().newest_taker)
                                }
                                None if oldest_running.is_none() => return Step::NeedOldestRunning,
                                None => {
                                    // filled entries first (least recently used first), then
                                    // entries being filled (evicted only when every other one
                                    // protects ids not stored yet)
                                    let mut held: Vec<usize> = bucket.clone().collect();
                                    held.sort_by_key(|&i| {
                                        (!t.entries[i].filled, t.entries[i].last_use)
                                    });
                                    return Step::NoRoom(
                                        held.into_iter()
                                            .map(|i| {
                                                let e = &t.entries[i];
                                                Held {
                                                    ticket: Ticket {
                                                        slot: i,
                                                        generation: e.generation,
                                                    },
                                                    key: e.key,
                                                    drawn_in: (e.drawn_in != MIXED
                                                        && e.drawn_in != 0)
                                                        .then_some(e.drawn_in),
                                                }
                                            })
                                            .collect(),
                                    );
                                }
                            }
                        }
                    };
                    let e = &mut t.entries[slot];
                    *e = Entry {
                        key,
                        in_use: true,
                        generation: e.generation + 1,
                        last_use: tick,
                        ..Entry::default()
                    };
                    slot
                }
            };
            let e = &mut t.entries[slot];
            e.last_use = tick;
            if !e.filled {
                return Step::Fill(Ticket {
                    slot,
                    generation: e.generation,
                });
            }
            // Draws of transactions that have all ended are forgotten before another one draws:
            // their ids are stored and committed (and stay in `used`), or void. Without that, a
            // millisecond drawn from again by a later transaction (the conversion's next batch)
            // would stay held by both until the later one ends (the review of the savepoint fix:
            // 54000 in the conversion's batches).
            // Asked of the one transaction that drew, when only one did: the oldest running
            // transaction of the whole server is no test there (any older transaction left open,
            // in any database, would keep every entry mixed: the second review of the fix).
            if e.newest_taker != 0 && e.newest_taker != taker.top {
                let taker_ended = if e.one_taker {
                    match known(ended, e.newest_taker) {
                        Some(has_ended) => has_ended,
                        None => return Step::NeedTakerState(e.newest_taker),
                    }
                } else {
                    match oldest_running {
                        None => return Step::NeedOldestRunning,
                        Some(oldest) => e.newest_taker < oldest,
                    }
                };
                if taker_ended {
                    e.handed = Remainders::default();
                    e.drawn_in = 0;
                    e.newest_taker = 0;
                }
            }
            match e.used.first_free_from(start) {
                None => Step::MillisecondFull,
                Some(r) => {
                    e.used.insert(r);
                    e.drawn_in = match (e.drawn_in, taker.level) {
                        (0, Some(level)) => level,
                        (same, Some(level)) if same == level => same,
                        _ => MIXED,
                    };
                    e.handed.insert(r);
                    e.one_taker =
                        e.newest_taker == 0 || (e.one_taker && e.newest_taker == taker.top);
                    e.newest_taker = e.newest_taker.max(taker.top);
                    Step::Reserved(r)
                }
            }
        })
    }

    /// Records what the indexes hold (`stored`, read after the entry of `ticket` was made) in the
    /// entry of `key`; `false` when it was evicted meanwhile (ask again).
    pub fn fill(&self, ticket: Ticket, key: MsKey, stored: &Remainders) -> bool {
        self.with(|t| {
            let e = &mut t.entries[ticket.slot];
            let same = e.in_use && e.generation == ticket.generation && e.key == key;
            if same {
                e.used.union_with(stored);
                e.filled = true;
            }
            same
        })
    }

    /// Evicts the entry of `ticket` if every remainder it handed out is in `kept` (read from the
    /// indexes after [`Step::NoRoom`] named it: [`Database::kept`]). `true` when it was evicted,
    /// or is gone already.
    pub fn evict_if_kept(&self, ticket: Ticket, key: MsKey, kept: &Remainders) -> bool {
        self.with(|t| {
            let e = &mut t.entries[ticket.slot];
            if !(e.in_use && e.generation == ticket.generation && e.key == key) {
                return true;
            }
            if !e.handed.is_subset_of(kept) {
                return false;
            }
            e.in_use = false;
            e.generation += 1;
            t.evictions += 1;
            true
        })
    }

    /// (entries in use, evictions so far)
    pub fn usage(&self) -> (usize, u64) {
        self.with(|t| (t.entries.iter().filter(|e| e.in_use).count(), t.evictions))
    }
}

/// The 64-bit form of `xid`, a 32-bit transaction id at or before the next one to be assigned
/// (`next_full`, 64-bit): transactions running now are less than 2^31 ids old.
pub fn widen_xid(next_full: u64, xid: u32) -> u64 {
    next_full.saturating_sub(u64::from((next_full as u32).wrapping_sub(xid)))
}

/// What [`draw`] needs from the database.
pub trait Database {
    type Error;
    /// The remainders of `key`'s millisecond and shard stored now in every column that holds ids
    /// of `key`'s sequence, counting rows being inserted or deleted by running transactions.
    fn stored(&mut self, key: MsKey) -> Result<Remainders, Self::Error>;
    /// The remainders of `key` stored now in rows that can no longer go while their transaction
    /// goes on: inserted by a committed transaction, by a running one outside any savepoint, or
    /// by the (sub)transaction `drawn_in` that drew them (rolled back, it voids them too). A row
    /// of a savepoint still open, or rolled back, does not count.
    fn kept(&mut self, key: MsKey, drawn_in: Option<u64>) -> Result<Remainders, Self::Error>;
    /// The oldest 64-bit transaction id still running (the next one to be assigned when none).
    fn oldest_running(&mut self) -> u64;
    /// Whether transaction `top` (a 64-bit top-level id) has ended: committed or aborted.
    fn has_ended(&mut self, top: u64) -> bool;
}

/// Why [`draw`] gave no id.
#[derive(Debug, PartialEq, Eq)]
pub enum DrawError<E> {
    /// Reading the indexes failed (a column that cannot be read, a lock).
    Database(E),
    /// Every remainder of every millisecond up to the last one allowed is used.
    PastLastMs,
    /// Every entry the key could take holds ids that running transactions have not stored yet.
    NoRoom,
}

/// How many times [`draw`] may fill or evict for one millisecond before it gives up: once is the
/// rule; more only when other calls keep taking entries from under it.
const MAX_RETRIES: u32 = 1000;

/// Draws an id's millisecond and remainder for `taker`: the first free remainder at
/// or after `start` of `key`'s millisecond, or of the first later millisecond with one, up to
/// `last_ms`. The one way the extension uses the table: plain Rust, so that the property tests
/// below run exactly this.
pub fn draw<const N: usize, D: Database>(
    table: &Reservations<N>,
    mut key: MsKey,
    start: u16,
    taker: Taker,
    last_ms: i64,
    db: &mut D,
) -> Result<(i64, u16), DrawError<D::Error>> {
    let mut oldest = None;
    let mut ended = Vec::new();
    let mut retries = 0;
    loop {
        if key.ms > last_ms {
            return Err(DrawError::PastLastMs);
        }
        match table.reserve(key, start, taker, oldest, &ended) {
            Step::Reserved(r) => return Ok((key.ms, r)),
            Step::MillisecondFull => {
                key.ms += 1;
                retries = 0;
            }
            Step::Fill(ticket) => {
                let stored = db.stored(key).map_err(DrawError::Database)?;
                table.fill(ticket, key, &stored);
                // (counted whether or not the entry was still there: a filled entry with nothing
                // handed out may be taken by another call before this one reserves from it)
                retries += 1;
            }
            Step::NeedOldestRunning => oldest = Some(db.oldest_running()),
            Step::NeedTakerState(top) => ended.push((top, db.has_ended(top))),
            Step::NoRoom(held) => {
                let mut evicted = false;
                for entry in held {
                    // (a column of another sequence that cannot be read keeps its entry)
                    let Ok(kept) = db.kept(entry.key, entry.drawn_in) else {
                        continue;
                    };
                    if table.evict_if_kept(entry.ticket, entry.key, &kept) {
                        evicted = true;
                        break;
                    }
                }
                if !evicted {
                    return Err(DrawError::NoRoom);
                }
                retries += 1;
            }
        }
        if retries > MAX_RETRIES {
            return Err(DrawError::NoRoom);
        }
    }
}

#[cfg(test)]
mod tests;
