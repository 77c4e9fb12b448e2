//! Asking the guard for an id's millisecond: the fast path in plain Rust, the slow path inside
//! pgrx's guard, told apart by type.
//!
//! One id, in order:
//! 1. [`fast`] makes a [`Request`] and, if the table is ready (among other things: this
//!    transaction published its draws of the sequence, `crate::open_draws`) ([`ready_table`]), asks the guard
//!    ([`Request::ask_guard`]). A plain decision to issue at a millisecond the lease covers is
//!    the answer: `Ok(ms)`. Plain Rust, no call into PostgreSQL, no ERROR.
//! 2. Anything else comes back as `Err(`[`Slow`]`)`, carrying the request and the guard's
//!    decision if one was taken. The caller must finish it with [`Slow::finish`] inside pgrx's
//!    guard (`crate::errors::Boundary` says where that is): it makes the session table if need
//!    be, checks the database's origin, publishes the transaction's draws of the sequence (before
//!    the guard decides), asks the guard if it was not asked, and
//!    [`Request::carry_out`]s the decision: raise its error, wait and ask again, read a fresh
//!    guard's data floor (`crate::data_floor`) and ask again, warn of a clock step, extend the
//!    lease.

use crate::{data_floor, errors, open_draws, origin, shmem};
use pg_shard_id_core::guard::{Decision, Overflow, Previous};
use pg_shard_id_core::layout::LayoutError;
use pg_shard_id_core::slot_cache::SlotCache;
use pg_shard_id_core::slots::{SlotKey, SlotTable};
use std::sync::atomic::Ordering;

/// The slot of each sequence this backend used recently, so that an id needs no lookup in the
/// table, and the last id it took from it: bounded (`pg_shard_id_core::slot_cache`), a hint the
/// table re-checks.
static SLOT_CACHE: SlotCache = SlotCache::new();

/// What one id asks the guard for: a millisecond for `remainder` of sequence `key`, under
/// `overflow`, with `clock` reading ms since the epoch that starts at `epoch_unix_ms`.
pub struct Request<C> {
    pub key: SlotKey,
    pub remainder: u16,
    pub overflow: Overflow,
    pub epoch_unix_ms: i64,
    pub clock: C,
}

/// The millisecond for `request` when the common case decides it: an id at a millisecond the
/// lease already covers, in a backend that has checked its database's origin, with no clock step
/// to report. Plain Rust: never calls into PostgreSQL, never raises an ERROR, so it may run
/// outside pgrx's guard. Everything else is [`Slow`].
#[inline]
pub fn fast<C: Fn() -> i64>(request: Request<C>) -> Result<i64, Slow<C>> {
    let Some(table) = ready_table(request.key) else {
        return Err(Slow {
            request,
            decided: None,
        });
    };
    match request.ask_guard(&table) {
        Ok(Decision::Issue {
            ms,
            clock_stepped_back_by: None,
            ..
        }) if covered(&table, ms, request.epoch_unix_ms) => Ok(ms),
        other => Err(Slow {
            request,
            decided: Some(other),
        }),
    }
}

/// Whether an id at `ms` may be returned without extending the lease (always, in guard mode
/// `session`, which has none).
#[inline]
fn covered(table: &SlotTable, ms: i64, epoch_unix_ms: i64) -> bool {
    !shmem::is_cluster() || table.lease().load(Ordering::Acquire) >= ms + epoch_unix_ms
}

/// The table, when it exists, this transaction published its draws of sequence `key` (so this
/// backend checked its database's origin before: [`Slow::finish`] does both), and ids are not
/// refused; `None` sends the caller to the slow path. Never calls into PostgreSQL.
#[inline]
fn ready_table(key: SlotKey) -> Option<SlotTable> {
    // (one comparison for both: a transaction's first id of a sequence is the slow path's)
    if !open_draws::published(key) {
        return None;
    }
    if let Some(table) = shmem::shared_table() {
        return table.refused_epoch().is_none().then_some(table);
    }
    if shmem::is_cluster() {
        return None;
    }
    shmem::session_table().copied()
}

/// A request [`fast`] could not finish by plain Rust, and the guard's decision if one was taken
/// (it is final: the remainder is already marked used at its millisecond).
#[must_use = "a Slow request may hold a decision of the guard; finish it inside pgrx's guard"]
pub struct Slow<C> {
    request: Request<C>,
    decided: Option<Result<Decision, LayoutError>>,
}

impl<C: Fn() -> i64> Slow<C> {
    /// Finishes the request and returns its millisecond. May raise an ERROR (55000 when the epoch
    /// is later than the recorded one; 22008 when the clock is before the epoch or the id would
    /// pass the horizon, naming the lease file when it is the cause; 58030 when the lease file
    /// cannot be written; 57014 when cancelled while waiting) and calls into PostgreSQL: call it
    /// only inside pgrx's guard.
    #[cold]
    #[inline(never)]
    pub fn finish(self) -> i64 {
        let table = shmem::table();
        if let Some(recorded) = table.refused_epoch() {
            errors::epoch_later_than_recorded(
                recorded,
                self.request.epoch_unix_ms,
                errors::Recorded::Lease,
            );
        }
        origin::check(&table, self.request.epoch_unix_ms);
        let decision = self.decided.unwrap_or_else(|| {
            // before the guard decides: next_shard_id_at waits for this transaction while its ids
            // may be in no index yet (`crate::open_draws`), from a second below this reading on
            let published = (self.request.clock)();
            open_draws::publish(self.request.key, published);
            // The guard issues at or above the clock it reads: never below the published
            // millisecond, even when the clock steps back more than the margin between the two
            // readings (the outside review of issue 55). A reading raised so is one the guard may
            // take anyway: within the margin of one just made.
            let lowest = published - crate::backfill::LIVE_MARGIN_MS;
            self.request
                .ask_guard_with(&table, || (self.request.clock)().max(lowest))
        });
        self.request.carry_out(&table, decision)
    }
}

impl<C: Fn() -> i64> Request<C> {
    /// The guard's decision, in the slot this backend last used for the sequence (or one found or
    /// claimed now). Plain Rust: no call into PostgreSQL, no ERROR. Inlined, so that the common
    /// case is one function with the generator's own (`bench/cost_gate.sh` counts it).
    ///
    /// The backend's previous id from the sequence goes with it, so that the guard's wrap rule
    /// looks at this session's own remainders, and the id it issues is remembered as the next
    /// previous one (`GuardState::issue_after`).
    #[inline(always)]
    fn ask_guard(&self, table: &SlotTable) -> Result<Decision, LayoutError> {
        self.ask_guard_with(table, &self.clock)
    }

    /// [`Request::ask_guard`] with another clock.
    #[inline(always)]
    fn ask_guard_with(
        &self,
        table: &SlotTable,
        clock: impl FnOnce() -> i64,
    ) -> Result<Decision, LayoutError> {
        let cached = SLOT_CACHE.get(self.key);
        let previous = cached.map_or(Previous::UNKNOWN, |e| e.previous);
        let (index, decision) = table.issue(
            cached.map(|e| e.slot),
            self.key,
            self.remainder,
            previous,
            self.overflow,
            clock,
        );
        let issued = match decision {
            Ok(Decision::Issue { ms, .. }) => Previous::issued(ms, self.remainder),
            _ => previous,
        };
        if cached.map(|e| e.slot) == Some(index) {
            SLOT_CACHE.set_previous(self.key, issued);
        } else {
            SLOT_CACHE.put(self.key, index, issued);
        }
        decision
    }

    /// Acts on a decision: raises its error; or warns of a clock step and covers the millisecond
    /// by the lease before returning it; or waits and asks the guard again.
    fn carry_out(&self, table: &SlotTable, mut decision: Result<Decision, LayoutError>) -> i64 {
        loop {
            let decided = decision.unwrap_or_else(|e| {
                errors::raise_layout_error(e, table.floor(), self.epoch_unix_ms)
            });
            match decided {
                Decision::Issue {
                    ms,
                    clock_stepped_back_by,
                    ..
                } => {
                    if let Some(step) = clock_stepped_back_by {
                        errors::warn_clock_step(self.key, step, ms);
                        open_draws::lower(ms);
                    }
                    cover_by_lease(table, self.key, ms, self.epoch_unix_ms);
                    return ms;
                }
                Decision::ReadDataFloor(request) => {
                    // a fresh guard: its ids start above the rows already stored
                    let now = (self.clock)();
                    data_floor::settle(table, self.key, Some(request), self.epoch_unix_ms, now);
                    decision = self.ask_guard(table);
                }
                Decision::WaitUntilPast(ms) => {
                    let started = std::time::Instant::now();
                    wait_until_past(ms, &self.clock);
                    let waited = started.elapsed().as_nanos() as u64;
                    table.count(self.key, |c| c.wait_ns += waited);
                    decision = self.ask_guard(table);
                }
            }
        }
    }
}

/// Ids at past times of sequence `key` are about to be handed out (`next_shard_id_at`), in
/// milliseconds up to `ms`, with the clock reading `now` (both since the epoch): the sequence's
/// guard issues only above `ms` from here on (`SlotTable::keep_above`), and the lease covers `ms`,
/// so that neither a clock that steps back afterwards nor a restart lets the DEFAULT issue where
/// they were handed out (issue 50). Before the ids are drawn, so that no DEFAULT can slip in
/// between. Calls into PostgreSQL when it writes the lease (58030 when it cannot): inside pgrx's
/// guard only.
pub fn keep_above(key: SlotKey, ms: i64, now: i64, epoch_unix_ms: i64) {
    let table = shmem::table();
    table.keep_above(key, ms, now);
    cover_by_lease(&table, key, ms, epoch_unix_ms);
}

/// Extends the lease to cover `ms` (ms since the epoch that starts at `epoch_unix_ms`) if it does
/// not yet, counting the write against sequence `key`. Calls into PostgreSQL when it writes the
/// lease (58030 when it cannot): inside pgrx's guard only.
fn cover_by_lease(table: &SlotTable, key: SlotKey, ms: i64, epoch_unix_ms: i64) {
    if !covered(table, ms, epoch_unix_ms)
        && crate::lease::extend(table, ms + epoch_unix_ms, epoch_unix_ms)
    {
        table.count(key, |c| c.lease_writes += 1);
    }
}

/// The guard is as far ahead of the clock as its policy allows and its millisecond has no room
/// (full, or the sequence wrapped), so wait until the clock passes `ms`, or steps back
/// (`pg_shard_id_core::guard::wait_until_past`). Usually that is less than a millisecond away, so
/// spin (a sleep would oversleep by far more); if the guard is further ahead (`wait` after
/// `borrow` made a lead), sleep in short steps. Interrupts are checked on every round.
#[cold]
#[inline(never)]
fn wait_until_past(ms: i64, clock: &impl Fn() -> i64) {
    pg_shard_id_core::guard::wait_until_past(ms, clock, |left| {
        pgrx::check_for_interrupts!();
        if left > 2 {
            // SAFETY: a plain sleep.
            unsafe { pgrx::pg_sys::pg_usleep(500) };
        } else {
            std::hint::spin_loop();
        }
    });
}
