//! The uniqueness guard for one sequence.
//!
//! An id's low bits are `nextval(seq) mod SEQ_VALUES` (1024 with the default layout), so two ids
//! of one sequence (and one shard) are equal exactly when they share the millisecond and the
//! remainder. The guard remembers, for the last millisecond it issued, which remainders are taken,
//! and never hands out a (millisecond, remainder) pair twice:
//!
//! ```text
//!                    clock > ms                      remainder free, no wrap
//!        +------------------------------+       +----------------------------+
//!        v                              |       v                            |
//!   [ issue at the clock ] -------> [ guard at ms ] -----------------> [ issue at ms ]
//!                                       |
//!                                       | remainder taken, or the sequence wrapped
//!                                       v
//!        recovering, or ms + 1 within the policy's lead  --> issue at ms + 1
//!        otherwise                                        --> WaitUntilPast(ms - lead)
//! ```
//!
//! * the clock moved past the guard's millisecond: start a fresh millisecond;
//! * the remainder is free in the guard's millisecond: take it (even if that millisecond is ahead
//!   of the clock);
//! * it is taken, or the caller's sequence wrapped around (the remainder fell 512 or more below
//!   the caller's own previous id in this millisecond, or, when the caller does not know its
//!   previous id, below the highest one of the millisecond; moving on then makes one session's
//!   stream of `nextval` values give strictly increasing ids, see [`GuardState::issue_after`]):
//!   move on to the next millisecond if that is at most the policy's lead ahead of the
//!   clock ([`Overflow::Wait`]: 1 ms, [`Overflow::Borrow`]: [`MAX_LEAD_MS`]), and otherwise tell
//!   the caller to wait until the clock gets close enough;
//! * except while *recovering*: after the clock stepped back (or after a restart, or an eviction,
//!   whose floor is ahead of the clock), both policies move on at once until the clock catches up.
//!   Waiting for a clock that stepped back could take hours, so the guard never does.
//!
//! The issued millisecond therefore never decreases, whatever the clock does. All values here are
//! milliseconds since the id epoch (the id's own timestamp field).

use crate::layout::{check_ms, LayoutError, MAX_MS, MAX_SEQ, SEQ_VALUES};
use std::num::NonZeroU64;

/// What to do when the current millisecond has no free remainder left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overflow {
    /// Wait for the clock to reach the next millisecond: timestamps stay true, at most
    /// `SEQ_VALUES` ids per millisecond per sequence.
    Wait,
    /// Use the next millisecond at once: timestamps may run ahead of the clock, by at most
    /// [`MAX_LEAD_MS`].
    Borrow,
}

/// The furthest `borrow` runs ahead of the clock by itself (10 minutes). Past it, `borrow` waits
/// for the clock like `wait` does. The bound is what makes a lost lease file recoverable: a fresh
/// floor of "clock + `MAX_LEAD_MS` + one lease step" is above every id the lost lease could have
/// covered (see [`crate::lease`]). At 1024 ids per ms a sequence reaches it only after drawing
/// more than 600 million ids faster than the layout's rate.
pub const MAX_LEAD_MS: i64 = 600_000;

impl Overflow {
    /// How far ahead of the clock this policy moves on by itself.
    pub const fn max_lead_ms(self) -> i64 {
        match self {
            Overflow::Wait => 1,
            Overflow::Borrow => MAX_LEAD_MS,
        }
    }
}

/// The caller's own previous id from this guard's sequence: the millisecond and remainder of the
/// last id a session took from it, or [`Previous::UNKNOWN`] ([`GuardState::issue_after`]). One
/// word, `(ms + 1) << 16 | remainder` (0: unknown), so that it travels in a register and a
/// backend keeps it in one atomic (`crate::slot_cache`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Previous(u64);

impl Previous {
    /// The caller does not know its previous id.
    pub const UNKNOWN: Previous = Previous(0);

    /// The id at (`ms`, `remainder`); unknown for a millisecond outside `0 .. 2^47`, which no id
    /// has. For tests, which make previous ids of any kind; the extension only records ids the
    /// guard issued ([`Previous::issued`]).
    #[cfg(test)]
    pub const fn new(ms: i64, remainder: u16) -> Previous {
        // one unsigned comparison: a negative ms is a huge u64
        if (ms as u64) < 1 << 47 {
            Previous(Previous::word(ms, remainder))
        } else {
            Previous::UNKNOWN
        }
    }

    /// The id the guard just issued at (`ms`, `remainder`), for the hot path (`bench/cost_gate.sh`
    /// counts it): no range check, since the guard issues only milliseconds of the layout (41
    /// bits); a word made from anything else could only mislead the wrap rule of the caller's next
    /// id, never uniqueness.
    #[inline(always)]
    pub const fn issued(ms: i64, remainder: u16) -> Previous {
        debug_assert!(ms >= 0 && ms <= MAX_MS);
        Previous(Previous::word(ms, remainder))
    }

    /// `(ms + 1) << 16 | remainder`: the one packing, which [`GuardState::issue_after`]'s wrap
    /// rule reads back field by field.
    #[inline(always)]
    const fn word(ms: i64, remainder: u16) -> u64 {
        ((ms as u64 + 1) << 16) | remainder as u64
    }

    /// (ms, remainder), if known. For tests: the wrap rule reads the word itself (one shift
    /// and compare fewer on a path the cost gate counts).
    #[cfg(test)]
    pub const fn get(self) -> Option<(i64, u16)> {
        if self.0 == 0 {
            None
        } else {
            Some(((self.0 >> 16) as i64 - 1, self.0 as u16))
        }
    }

    /// The word (for `crate::slot_cache`).
    pub const fn to_bits(self) -> u64 {
        self.0
    }

    /// Back from [`Previous::to_bits`].
    pub const fn from_bits(bits: u64) -> Previous {
        Previous(bits)
    }
}

/// What [`GuardState::issue`] decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Put millisecond `ms` in the id.
    Issue {
        ms: i64,
        /// The clock reading the decision was made with.
        clock: i64,
        /// The clock reading was this many ms behind the previous reading seen by this guard.
        /// Reported once per step, by the call that first sees it.
        clock_stepped_back_by: Option<i64>,
    },
    /// Nothing was issued: wait until the clock passes this millisecond, then ask again with the
    /// same remainder.
    WaitUntilPast(i64),
    /// Nothing was issued: the guard is fresh and has not been told the newest id already stored
    /// for its sequence. Read it, [`GuardState::settle_data_floor`] with this request, then ask
    /// again.
    ReadDataFloor(FloorRequest),
}

/// Which request for its data floor a guard waits on. A guard takes the answer to its current
/// request only: a read begun before `shard_id_resync()` made the guard wait again (it may not
/// see the rows just loaded), or before the guard's slot was given away and claimed again, cannot
/// settle it. Numbered by the slot table, never reused while the server runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FloorRequest(NonZeroU64);

impl FloorRequest {
    /// Request number `n` (`None` for 0, which means "no request").
    pub const fn new(n: u64) -> Option<Self> {
        match NonZeroU64::new(n) {
            Some(n) => Some(FloorRequest(n)),
            None => None,
        }
    }
}

const BITS_PER_WORD: usize = u64::BITS as usize;
/// Words of the per-millisecond bit set: one bit per remainder.
const WORDS: usize = (SEQ_VALUES as usize).div_ceil(BITS_PER_WORD);
/// A remainder this far below the caller's own previous one in the millisecond (or, unknown, the
/// highest one issued in it) means the caller's sequence wrapped around; smaller gaps are
/// reorderings (a descending sequence, concurrent sessions).
const WRAP_DISTANCE: u64 = SEQ_VALUES as u64 / 2;
const NEVER: i64 = i64::MIN;
// Remainders travel as u16.
const _: () = assert!(crate::layout::SEQ_BITS <= u16::BITS);

/// What one sequence's guard counted since its slot was claimed or the statistics were reset
/// (`pg_shard_id_stats`). Kept in the guard's own state, which every id already writes under the
/// slot's lock, so counting adds no shared cache line to the hot path.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Counts {
    /// Ids issued.
    pub ids: u64,
    /// Times the guard moved on to the next millisecond before the clock did, because the id's
    /// remainder was taken there or a session's values passed a multiple of 1024: milliseconds the
    /// sequence used up. A sequence drawing faster than a few ids per ms wraps once per 1024 ids
    /// (with `CACHE` above 1, up to once per session and 1024 ids, since each session passes the
    /// multiple by itself), so at `CACHE 1` this is about ids/ms / 1024 x 1000 per second: the
    /// share of the layout's cap in use.
    pub exhausted_ms: u64,
    /// Times a caller was told to wait for the clock.
    pub waits: u64,
    /// Nanoseconds callers spent waiting (added by the caller after a wait).
    pub wait_ns: u64,
    /// Times the clock was seen stepping back.
    pub clock_steps: u64,
    /// Lease extensions (file + WAL record) this sequence's ids caused (added by the caller).
    pub lease_writes: u64,
}

/// The guard's memory for one sequence. Plain data (`#[repr(C)]`, no pointers) so that it can live
/// in PostgreSQL shared memory.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GuardState {
    /// The last millisecond issued ([`i64::MIN`] before the first id).
    ms: i64,
    /// The last clock reading seen ([`i64::MIN`] before the first id).
    clock: i64,
    /// 1 while the guard is ahead of a clock that stepped back (or of a floor): no waiting until
    /// the clock passes `ms`. (A `u64` to keep the layout free of padding.)
    recovering: u64,
    /// One more than the highest remainder issued in `ms` (0: none).
    high: u64,
    /// Statistics, see [`Counts`]. Here, before the bit set: every id writes `counts.ids`, and
    /// in a slot (`crate::slots`, 64-byte aligned) the lock, the key, the fields above and
    /// `counts.ids` share one cache line, so an id writes that line and one of the bit set's.
    pub counts: Counts,
    /// Remainders already issued in `ms`, one bit each.
    used: [u64; WORDS],
    /// While the guard waits to be told the newest id stored for its sequence (its *data floor*),
    /// which it must issue above, the number of the [`FloorRequest`] it waits on; 0: it does not
    /// wait. A fresh guard of a table that asks for data floors waits.
    data_floor_request: u64,
    /// The data floor it was told (ms since the epoch; [`i64::MIN`]: none, or none above the
    /// other floors), for `shard_id_check()` to say why ids run ahead of the clock.
    data_floor: i64,
}

impl Default for GuardState {
    fn default() -> Self {
        Self::new()
    }
}

impl GuardState {
    /// A guard that has issued nothing.
    pub const fn new() -> Self {
        GuardState {
            ms: NEVER,
            clock: NEVER,
            recovering: 0,
            high: 0,
            used: [0; WORDS],
            data_floor_request: 0,
            data_floor: NEVER,
            counts: Counts {
                ids: 0,
                exhausted_ms: 0,
                waits: 0,
                wait_ns: 0,
                clock_steps: 0,
                lease_writes: 0,
            },
        }
    }

    /// A guard that must not issue below millisecond `floor`: for a sequence first seen after a
    /// restart or after its slot was given to another sequence, when earlier ids may be ahead of
    /// the clock. It behaves as if recovering from a clock step until the clock passes `floor`.
    /// A floor of `i64::MIN` is no floor.
    pub const fn with_floor(floor: i64) -> Self {
        if floor == NEVER {
            return Self::new();
        }
        GuardState {
            ms: floor,
            recovering: 1,
            ..Self::new()
        }
    }

    /// A guard like [`GuardState::with_floor`] that issues nothing until it is told the newest id
    /// already stored for its sequence ([`GuardState::settle_data_floor`]): until then every
    /// [`GuardState::issue`] answers [`Decision::ReadDataFloor`]. Ids copied in by logical
    /// replication, a dump or COPY carry no lease and (but for a `FOR ALL TABLES` publication) no
    /// origin: the data itself is the only record of them. It waits on `request`.
    pub const fn awaiting_data_floor(floor: i64, request: FloorRequest) -> Self {
        GuardState {
            data_floor_request: request.0.get(),
            ..Self::with_floor(floor)
        }
    }

    /// Whether the guard waits for its data floor.
    pub fn is_awaiting_data_floor(&self) -> bool {
        self.data_floor_request != 0
    }

    /// Answers `request`: tells a guard that waits on it where its ids must start: at `floor` (ms
    /// since the epoch; one above the newest stored id's millisecond) or later; `None`: nothing is
    /// stored. A guard that waits on no request (another caller settled it first), or on a later
    /// one, is left as it is.
    pub fn settle_data_floor(&mut self, request: FloorRequest, floor: Option<i64>) {
        if self.data_floor_request != request.0.get() {
            return;
        }
        self.data_floor_request = 0;
        if let Some(floor) = floor.filter(|&f| f > self.ms) {
            self.start_ms(floor);
            self.recovering = 1;
            self.data_floor = floor;
        }
    }

    /// The data floor this guard was told, when it raised the guard above its other floors.
    pub fn data_floor(&self) -> Option<i64> {
        (self.data_floor != NEVER).then_some(self.data_floor)
    }

    /// Ids at past times (`next_shard_id_at`) were handed out in milliseconds up to `ms`, with the
    /// clock reading `now`: from here on the guard issues only above `ms`. A guard below it moves
    /// to `ms + 1` (an empty millisecond: nothing was issued there), and `now` counts as a
    /// reading of the clock, so that a clock that later steps back into the milliseconds handed
    /// out is seen as a step (recovering, with its WARNING) and never as a clock moving on into
    /// them. A guard above both is unchanged. Its data floor, if awaited, is still awaited.
    pub fn keep_above(&mut self, ms: i64, now: i64) {
        if ms >= self.ms {
            self.start_ms(ms.saturating_add(1));
        }
        self.clock = self.clock.max(now);
    }

    /// The last millisecond issued (or the floor it starts from), if any.
    pub fn last_ms(&self) -> Option<i64> {
        (self.ms != NEVER).then_some(self.ms)
    }

    /// Decides the millisecond for an id whose sequence field is `remainder` (`0..=MAX_SEQ`),
    /// given the clock reading `now`. Callers that share one guard must read the clock while
    /// holding the guard's lock, so that readings reach the guard in order.
    ///
    /// A clock outside the layout (before the epoch, past the horizon), or a guard that would have
    /// to move past the horizon, is an error and leaves the guard as it was.
    ///
    /// The common case ([`GuardState::issue_common`], small enough to inline into the caller's
    /// critical section) is tried first; [`GuardState::decide`] takes every case, the common one
    /// included, and decides the same there (property test
    /// `the_common_case_decides_as_the_full_decision`).
    #[inline]
    pub fn issue(
        &mut self,
        now: i64,
        remainder: u16,
        overflow: Overflow,
    ) -> Result<Decision, LayoutError> {
        self.issue_after(Previous::UNKNOWN, now, remainder, overflow)
    }

    /// [`GuardState::issue`] for a caller that remembers its own previous id from this sequence
    /// (`previous`; [`Previous::UNKNOWN`]: it does not). Only the wrap rule uses it: a remainder far below the
    /// caller's *own* previous one in this millisecond is its sequence wrapping, while a remainder
    /// below another session's is not. Sessions that hold different blocks of a sequence
    /// (`CACHE` above 1) then share a millisecond instead of pushing each other into the next
    /// one whenever their blocks lie on both sides of a multiple of 1024. Without `previous`, the
    /// highest remainder any caller took in the millisecond stands in for it.
    #[inline]
    pub fn issue_after(
        &mut self,
        previous: Previous,
        now: i64,
        remainder: u16,
        overflow: Overflow,
    ) -> Result<Decision, LayoutError> {
        match self.issue_common(now, remainder, previous) {
            Some(ms) => Ok(Decision::Issue {
                ms,
                clock: now,
                clock_stepped_back_by: None,
            }),
            None => self.decide(now, remainder, previous, overflow),
        }
    }

    /// The millisecond for `remainder` at clock reading `now` when the decision is the common
    /// one: no data floor awaited, a clock inside the layout that did not step back, and either a
    /// new millisecond or a remainder not yet used (nor wrapped) in the guard's millisecond, which
    /// is inside the layout. The state changes exactly as [`GuardState::decide`] would change it.
    /// `None`: not the common case, and the guard is left as it was.
    #[inline(always)]
    fn issue_common(&mut self, now: i64, remainder: u16, previous: Previous) -> Option<i64> {
        if self.data_floor_request != 0 || !(0..=MAX_MS).contains(&now) || now < self.clock {
            return None;
        }
        if now > self.ms {
            self.start_ms(now);
            self.recovering = 0;
        } else if self.is_used(remainder) || self.wrapped(remainder, previous) || self.ms > MAX_MS {
            return None;
        }
        self.clock = now;
        self.mark_used(remainder);
        self.counts.ids += 1;
        Some(self.ms)
    }

    /// [`GuardState::issue`]'s decision in every case.
    #[cold]
    #[inline(never)]
    fn decide(
        &mut self,
        now: i64,
        remainder: u16,
        previous: Previous,
        overflow: Overflow,
    ) -> Result<Decision, LayoutError> {
        debug_assert!(i64::from(remainder) <= MAX_SEQ);
        if let Some(request) = FloorRequest::new(self.data_floor_request) {
            return Ok(Decision::ReadDataFloor(request));
        }
        check_ms(now)?;
        let clock_stepped_back_by =
            (self.clock != NEVER && now < self.clock).then(|| self.clock - now);

        if now > self.ms {
            self.start_ms(now);
            self.recovering = 0;
        } else if self.is_used(remainder) || self.wrapped(remainder, previous) {
            let recovering = self.recovering != 0 || clock_stepped_back_by.is_some();
            let lead = overflow.max_lead_ms();
            if !recovering && self.ms >= now + lead {
                // Moving on would put the guard more than `lead` ahead of the clock: wait until
                // the clock is close enough to take the next millisecond.
                self.clock = now;
                self.counts.waits += 1;
                return Ok(Decision::WaitUntilPast(self.ms - lead));
            }
            self.start_ms(check_ms(self.ms + 1)?);
            self.counts.exhausted_ms += 1;
        } else {
            // Only a floor (from the lease file) can have put the guard past the horizon.
            check_ms(self.ms)?;
        }
        if clock_stepped_back_by.is_some() {
            self.recovering = 1;
            self.counts.clock_steps += 1;
        }
        self.clock = now;
        self.mark_used(remainder);
        self.counts.ids += 1;
        Ok(Decision::Issue {
            ms: self.ms,
            clock: now,
            clock_stepped_back_by,
        })
    }

    fn start_ms(&mut self, ms: i64) {
        self.ms = ms;
        self.high = 0;
        self.used = [0; WORDS];
    }

    /// The caller's sequence wrapped around (its remainder fell far below the caller's own
    /// previous one in this millisecond): give it the next millisecond, as for a used remainder,
    /// so that one session's stream of `nextval` values gives strictly increasing ids. B-tree
    /// inserts then stay at the right edge of the primary key instead of splitting pages in the
    /// middle. A caller whose previous id is in an earlier millisecond cannot go below it here.
    /// A caller that does not know its previous id is measured against the highest remainder of
    /// the millisecond, whoever took it; small reorderings between concurrent sessions (less than
    /// half the range) do not count.
    #[inline(always)]
    fn wrapped(&self, remainder: u16, previous: Previous) -> bool {
        // On the word itself (`(ms + 1) << 16 | remainder`, 0: unknown), the common case first:
        // this hot path is counted by bench/cost_gate.sh. Both callers come here only with
        // `self.ms` at or above a clock reading inside the layout, so `self.ms + 1` is positive.
        let own_ms = previous.0 >> 16;
        let high = if own_ms == (self.ms + 1) as u64 {
            (previous.0 & 0xFFFF) + 1
        } else if own_ms != 0 && own_ms < (self.ms + 1) as u64 {
            // its previous id is in an earlier millisecond
            return false;
        } else {
            // unknown, or (never left by a floor, which is above every id) ahead of the guard
            self.high
        };
        u64::from(remainder) + WRAP_DISTANCE < high
    }

    fn bit(remainder: u16) -> (usize, u64) {
        let r = usize::from(remainder);
        (r / BITS_PER_WORD, 1 << (r % BITS_PER_WORD))
    }

    fn is_used(&self, remainder: u16) -> bool {
        let (word, bit) = Self::bit(remainder);
        self.used[word] & bit != 0
    }

    #[inline]
    fn mark_used(&mut self, remainder: u16) {
        self.high = self.high.max(u64::from(remainder) + 1);
        let (word, bit) = Self::bit(remainder);
        self.used[word] |= bit;
    }
}

/// Waits, for a [`Decision::WaitUntilPast`]`(target)`, until a clock reading passes `target`, or
/// until the clock steps back. A step back ends the wait at once: asked again, the guard sees the
/// step and moves on without waiting (recovering), as for any other step; waiting for a clock that
/// went back an hour would take the hour. `pause(ms_left)` runs between readings (the extension
/// checks for interrupts there, and spins or sleeps by how far the target is). Returns the last
/// reading.
pub fn wait_until_past(
    target: i64,
    mut clock: impl FnMut() -> i64,
    mut pause: impl FnMut(i64),
) -> i64 {
    let mut previous = clock();
    while previous <= target {
        pause(target - previous);
        let now = clock();
        if now < previous {
            return now;
        }
        previous = now;
    }
    previous
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashSet;

    fn issued(g: &mut GuardState, now: i64, r: u16, o: Overflow) -> i64 {
        match g.issue(now, r, o).unwrap() {
            Decision::Issue { ms, .. } => ms,
            wait => panic!("expected an id, not {wait:?}"),
        }
    }

    /// The millisecond issued, or `None` for a wait.
    fn ms_of(d: Decision) -> Option<i64> {
        match d {
            Decision::Issue { ms, .. } => Some(ms),
            Decision::WaitUntilPast(_) | Decision::ReadDataFloor(_) => None,
        }
    }

    #[test]
    fn a_guard_awaiting_its_data_floor_issues_nothing_until_told() {
        const TABLE_FLOOR: i64 = 1_000;
        let request = FloorRequest::new(7).unwrap();
        for overflow in [Overflow::Wait, Overflow::Borrow] {
            let mut g = GuardState::awaiting_data_floor(TABLE_FLOOR, request);
            assert!(g.is_awaiting_data_floor());
            for _ in 0..3 {
                assert_eq!(
                    g.issue(500, 7, overflow).unwrap(),
                    Decision::ReadDataFloor(request)
                );
            }
            // an answer to another request (a read begun before the guard waited on this one)
            // settles nothing
            g.settle_data_floor(FloorRequest::new(6).unwrap(), Some(2_000));
            assert_eq!(
                g.issue(500, 7, overflow).unwrap(),
                Decision::ReadDataFloor(request)
            );
            // told: the newest stored id is at 4_999, so ids start at 5_000, ahead of the clock
            g.settle_data_floor(request, Some(5_000));
            assert_eq!(g.data_floor(), Some(5_000));
            assert_eq!(issued(&mut g, 500, 7, overflow), 5_000, "{overflow:?}");
            assert_eq!(
                issued(&mut g, 500, 7, overflow),
                5_001,
                "recovering: moves on at once, never waits for a clock 4.5 s behind"
            );
            // a second caller that read the data too changes nothing
            g.settle_data_floor(request, Some(9_000));
            assert_eq!(issued(&mut g, 500, 8, overflow), 5_001);
        }
        // nothing stored, or stored below the table's floor: the table's floor holds
        for data in [None, Some(10)] {
            let mut g = GuardState::awaiting_data_floor(TABLE_FLOOR, request);
            g.settle_data_floor(request, data);
            assert_eq!(g.data_floor(), None);
            assert_eq!(issued(&mut g, 500, 1, Overflow::Wait), TABLE_FLOOR);
        }
        // no table floor at all, data behind the clock: ids at the clock
        let mut g = GuardState::awaiting_data_floor(NEVER, request);
        g.settle_data_floor(request, Some(400));
        assert_eq!(issued(&mut g, 500, 1, Overflow::Wait), 500);
    }

    proptest! {
        /// Whatever the data floor, the table's floor and the clock: no id below the data floor,
        /// none below the table's floor.
        #[test]
        fn ids_start_at_or_above_every_floor(
            table_floor in prop_oneof![Just(NEVER), 0i64..100_000],
            data_floor in proptest::option::of(0i64..100_000),
            clock in 0i64..100_000,
            remainders in proptest::collection::vec(0u16..1024, 1..200),
        ) {
            let request = FloorRequest::new(1).unwrap();
            let mut g = GuardState::awaiting_data_floor(table_floor, request);
            prop_assert_eq!(g.issue(clock, 0, Overflow::Wait).unwrap(), Decision::ReadDataFloor(request));
            g.settle_data_floor(request, data_floor);
            let floor = table_floor.max(data_floor.unwrap_or(NEVER)).max(clock);
            for r in remainders {
                let ms = loop {
                    match g.issue(clock, r, Overflow::Borrow).unwrap() {
                        Decision::Issue { ms, .. } => break ms,
                        other => prop_assert!(false, "{:?}", other),
                    }
                };
                prop_assert!(ms >= floor, "{} below the floor {}", ms, floor);
            }
        }
    }

    #[test]
    fn fresh_remainders_share_the_clock_millisecond() {
        let mut g = GuardState::new();
        assert_eq!(issued(&mut g, 100, 0, Overflow::Wait), 100);
        assert_eq!(issued(&mut g, 100, 1, Overflow::Wait), 100);
        assert_eq!(issued(&mut g, 101, 0, Overflow::Wait), 101);
    }

    #[test]
    fn a_repeated_remainder_waits_in_wait_mode_when_already_1_ms_ahead() {
        let mut g = GuardState::new();
        issued(&mut g, 99, 7, Overflow::Wait);
        assert_eq!(
            issued(&mut g, 99, 7, Overflow::Wait),
            100,
            "1 ms ahead is allowed"
        );
        assert_eq!(
            g.issue(99, 7, Overflow::Wait).unwrap(),
            Decision::WaitUntilPast(99)
        );
        assert_eq!(issued(&mut g, 100, 7, Overflow::Wait), 101);
    }

    #[test]
    fn a_repeated_remainder_borrows_the_next_millisecond_in_borrow_mode() {
        let mut g = GuardState::new();
        issued(&mut g, 100, 7, Overflow::Borrow);
        assert_eq!(issued(&mut g, 100, 7, Overflow::Borrow), 101);
        // the clock is now behind the guard: free remainders stay in the borrowed millisecond
        assert_eq!(issued(&mut g, 100, 8, Overflow::Borrow), 101);
        // wait uses the free room borrow made, but does not grow the lead: it waits for the clock
        assert_eq!(issued(&mut g, 100, 9, Overflow::Wait), 101);
        assert_eq!(ms_of(g.issue(100, 8, Overflow::Wait).unwrap()), None);
        assert_eq!(issued(&mut g, 102, 8, Overflow::Wait), 102);
    }

    #[test]
    fn wait_mode_never_waits_for_a_clock_that_stepped_back() {
        let mut g = GuardState::new();
        issued(&mut g, 5_000, 1, Overflow::Wait);
        assert_eq!(issued(&mut g, 3_000, 1, Overflow::Wait), 5_001);
        assert_eq!(
            issued(&mut g, 3_001, 1, Overflow::Wait),
            5_002,
            "still recovering"
        );
        assert_eq!(issued(&mut g, 5_003, 1, Overflow::Wait), 5_003, "caught up");
        assert_eq!(
            issued(&mut g, 5_003, 1, Overflow::Wait),
            5_004,
            "1 ms ahead, as usual"
        );
        assert_eq!(
            ms_of(g.issue(5_003, 1, Overflow::Wait).unwrap()),
            None,
            "waits again"
        );
    }

    #[test]
    fn a_floor_keeps_a_fresh_guard_above_ids_made_before_a_restart() {
        let mut g = GuardState::with_floor(9_000);
        assert_eq!(issued(&mut g, 1_000, 4, Overflow::Wait), 9_000);
        assert_eq!(
            issued(&mut g, 1_000, 4, Overflow::Wait),
            9_001,
            "no waiting below the floor"
        );
        assert_eq!(issued(&mut g, 9_500, 4, Overflow::Wait), 9_500);
    }

    #[test]
    fn a_clock_step_back_is_reported_once_and_never_decreases_the_millisecond() {
        let mut g = GuardState::new();
        issued(&mut g, 5_000, 1, Overflow::Wait);
        assert_eq!(
            g.issue(3_000, 1, Overflow::Wait).unwrap(),
            Decision::Issue {
                ms: 5_001,
                clock: 3_000,
                clock_stepped_back_by: Some(2_000)
            }
        );
        assert_eq!(
            g.issue(3_001, 2, Overflow::Wait).unwrap(),
            Decision::Issue {
                ms: 5_001,
                clock: 3_001,
                clock_stepped_back_by: None
            }
        );
    }

    #[test]
    fn a_wrapped_sequence_moves_to_the_next_millisecond() {
        let mut g = GuardState::new();
        assert_eq!(issued(&mut g, 7, 1000, Overflow::Borrow), 7);
        assert_eq!(issued(&mut g, 7, 1023, Overflow::Borrow), 7);
        assert_eq!(
            issued(&mut g, 7, 0, Overflow::Borrow),
            8,
            "0 after 1023: next ms"
        );
        assert_eq!(ms_of(g.issue(8, 1, Overflow::Wait).unwrap()), Some(8));
        // a small reordering between sessions stays in the millisecond
        assert_eq!(issued(&mut g, 8, 600, Overflow::Wait), 8);
        assert_eq!(issued(&mut g, 8, 300, Overflow::Wait), 8);
        // in wait mode a wrap in the clock's millisecond takes the next one (1 ms ahead) ...
        assert_eq!(issued(&mut g, 8, 2, Overflow::Wait), 9);
        assert_eq!(issued(&mut g, 8, 900, Overflow::Wait), 9);
        // ... but a second wrap while 1 ms ahead waits for the clock to reach that millisecond
        assert_eq!(
            g.issue(8, 3, Overflow::Wait).unwrap(),
            Decision::WaitUntilPast(8)
        );
        assert_eq!(issued(&mut g, 9, 3, Overflow::Wait), 10);
    }

    #[test]
    fn a_previous_id_round_trips_through_its_word() {
        for (ms, r) in [
            (0, 0),
            (0, 1023),
            (1, 5),
            (MAX_MS, 1023),
            ((1 << 47) - 1, 7),
        ] {
            let p = Previous::new(ms, r);
            assert_eq!(p.get(), Some((ms, r)), "{ms} {r}");
            assert_eq!(Previous::from_bits(p.to_bits()), p);
            if ms <= MAX_MS {
                assert_eq!(Previous::issued(ms, r), p);
            }
        }
        assert_eq!(Previous::UNKNOWN.get(), None);
        assert_eq!(
            Previous::new(-1, 3),
            Previous::UNKNOWN,
            "no id is before the epoch"
        );
        assert_eq!(Previous::new(1 << 47, 3), Previous::UNKNOWN);
    }

    /// Two sessions holding blocks of a `CACHE 32` sequence on both sides of a multiple of 1024
    /// (one at 993..1024, the other at 1025..1056), drawing in turn within one clock
    /// millisecond. Measured against the millisecond's highest remainder, each turn looked like
    /// a wrap and pushed the other into the next millisecond (issue 40's waits at CACHE 32);
    /// against each session's own previous id, they share it, and only the first session's own
    /// wrap (1023 to 1024) moves on. (A session that has never drawn, or forgot, is still
    /// measured against the millisecond's highest remainder.)
    #[test]
    fn sessions_on_both_sides_of_a_wrap_share_the_millisecond() {
        let run = |remember: bool| {
            let mut g = GuardState::new();
            // both sessions drew before, in an earlier millisecond
            let earlier = Previous::new(6, 0);
            let mut previous = [earlier; 2];
            let mut ids = Vec::new();
            for i in 0..32i64 {
                for (session, value) in [(0usize, 993 + i), (1, 1025 + i)] {
                    let remainder = (value % SEQ_VALUES) as u16;
                    let known = if remember {
                        previous[session]
                    } else {
                        Previous::UNKNOWN
                    };
                    let ms = ms_of(
                        g.issue_after(known, 7, remainder, Overflow::Borrow)
                            .unwrap(),
                    )
                    .unwrap();
                    previous[session] = Previous::new(ms, remainder);
                    ids.push((session, ms, remainder));
                }
            }
            (g.counts.exhausted_ms, ids)
        };
        let (moves, ids) = run(true);
        assert_eq!(moves, 1, "one move: the first session's own wrap");
        for session in 0..2 {
            let own: Vec<_> = ids
                .iter()
                .filter(|id| id.0 == session)
                .map(|id| (id.1, id.2))
                .collect();
            assert!(
                own.windows(2).all(|w| w[1] > w[0]),
                "session {session}: {own:?}"
            );
        }
        let (moves, _) = run(false);
        assert!(moves > 30, "without the own previous id, {moves} moves");
    }

    #[test]
    fn a_full_millisecond_holds_exactly_seq_values_ids() {
        // Catches a bit set or wrap threshold out of step with the layout: every value of the
        // sequence field fits once into one millisecond, the next one moves on.
        let mut g = GuardState::new();
        for r in 0..=MAX_SEQ as u16 {
            assert_eq!(issued(&mut g, 0, r, Overflow::Borrow), 0, "remainder {r}");
        }
        for r in 0..=MAX_SEQ as u16 {
            assert_eq!(issued(&mut g, 0, r, Overflow::Borrow), 1, "remainder {r}");
        }
        assert_eq!(issued(&mut g, 0, 0, Overflow::Borrow), 2);
        assert_eq!(WORDS * BITS_PER_WORD, SEQ_VALUES as usize);
    }

    #[test]
    fn borrow_runs_at_most_max_lead_ahead_of_the_clock() {
        let mut g = GuardState::new();
        issued(&mut g, 0, 0, Overflow::Borrow);
        let mut ms = 0;
        // the same remainder again and again: one new millisecond per id
        while ms < MAX_LEAD_MS {
            ms = issued(&mut g, 0, 0, Overflow::Borrow);
        }
        assert_eq!(ms, MAX_LEAD_MS);
        assert_eq!(
            g.issue(0, 0, Overflow::Borrow).unwrap(),
            Decision::WaitUntilPast(0)
        );
        assert_eq!(issued(&mut g, 1, 0, Overflow::Borrow), MAX_LEAD_MS + 1);
    }

    #[test]
    fn a_floor_past_the_horizon_is_an_error_that_leaves_the_guard_as_it_was() {
        use crate::layout::MAX_MS;
        let mut g = GuardState::with_floor(MAX_MS + 5);
        let before = g;
        assert_eq!(
            g.issue(100, 1, Overflow::Wait),
            Err(LayoutError::PastHorizon(MAX_MS + 5))
        );
        assert_eq!(g, before);
    }

    #[test]
    fn a_floor_of_never_is_no_floor() {
        assert_eq!(GuardState::with_floor(i64::MIN), GuardState::new());
    }

    #[test]
    fn a_clock_outside_the_layout_is_refused_without_changing_the_guard() {
        use crate::layout::MAX_MS;
        let mut g = GuardState::new();
        assert_eq!(
            g.issue(-1, 0, Overflow::Wait),
            Err(LayoutError::BeforeEpoch(-1))
        );
        assert_eq!(
            g.issue(MAX_MS + 1, 0, Overflow::Wait),
            Err(LayoutError::PastHorizon(MAX_MS + 1))
        );
        assert_eq!(g, GuardState::new());
        assert_eq!(issued(&mut g, MAX_MS, 0, Overflow::Borrow), MAX_MS);
        let before = g;
        assert_eq!(
            g.issue(MAX_MS, 0, Overflow::Borrow),
            Err(LayoutError::PastHorizon(MAX_MS + 1))
        );
        assert_eq!(
            g, before,
            "no room past the horizon, and the guard is unchanged"
        );
        assert_eq!(
            issued(&mut g, 5, 1, Overflow::Borrow),
            MAX_MS,
            "a free remainder still fits"
        );
    }

    /// One step of a random schedule: which clock move, which remainder, which policy.
    #[derive(Debug, Clone)]
    struct Step {
        clock_delta: i64,
        remainder: u16,
        borrow: bool,
        /// The caller's previous id, as (offset from the guard's millisecond, remainder).
        previous: Option<(i64, u16)>,
    }

    impl Step {
        fn previous(&self, g: &GuardState) -> Previous {
            match (self.previous, g.last_ms()) {
                (Some((offset, remainder)), Some(ms)) => Previous::new(ms + offset, remainder),
                _ => Previous::UNKNOWN,
            }
        }
    }

    fn steps() -> impl Strategy<Value = Vec<Step>> {
        let step = (
            prop_oneof![8 => Just(0i64), 4 => Just(1), 1 => -3000i64..3000],
            prop_oneof![3 => 0u16..8, 1 => 0u16..1024],
            any::<bool>(),
            proptest::option::of((-2i64..2, 0u16..1024)),
        )
            .prop_map(|(clock_delta, remainder, borrow, previous)| Step {
                clock_delta,
                remainder,
                borrow,
                previous,
            });
        proptest::collection::vec(step, 1..2000)
    }

    /// Ids of one stream of `nextval` values with `INCREMENT increment`, drawn as fast as the
    /// guard allows (`wait`; the clock ticks only when asked to wait): (ms, remainder) pairs. The
    /// drawing session passes its previous id if it `remember`s it (as sessions do), or not.
    fn stream(increment: i64, start: i64, count: usize, remember: bool) -> Vec<(i64, u16)> {
        let mut g = GuardState::new();
        let mut clock = 1_000_000i64;
        let mut previous = Previous::UNKNOWN;
        (0..count as i64)
            .map(|i| {
                let r = crate::layout::seq_field(start + i * increment) as u16;
                loop {
                    match g.issue_after(previous, clock, r, Overflow::Wait).unwrap() {
                        Decision::Issue { ms, .. } => {
                            if remember {
                                previous = Previous::issued(ms, r);
                            }
                            break (ms, r);
                        }
                        Decision::WaitUntilPast(_) => clock += 1,
                        Decision::ReadDataFloor(_) => unreachable!("a new guard waits for no data"),
                    }
                }
            })
            .collect()
    }

    /// The semantics the README states for sequences that do not count up by 1 (issue 24):
    /// * any INCREMENT, up or down: no pair repeats and the millisecond never decreases;
    /// * INCREMENT mod 1024 in 1 to 512 (so 1 to 512, or -513 to -1023...): one stream's ids
    ///   strictly increase;
    /// * a descending sequence: 1024 ids per millisecond like an ascending one (after the first
    ///   millisecond), not in order within a millisecond;
    /// * INCREMENT a multiple of 1024: every id has the same remainder, one id per millisecond;
    /// * other steps: unique, not in order within a millisecond.
    #[test]
    fn increments_other_than_one() {
        let per_ms = |ids: &[(i64, u16)]| {
            let mut counts = std::collections::BTreeMap::new();
            for &(ms, _) in ids {
                *counts.entry(ms).or_insert(0usize) += 1;
            }
            counts.into_values().max().unwrap()
        };
        for increment in [
            1i64, 2, 7, 511, 512, 513, 600, 1000, 1023, 1024, 3072, -1, -2, -513, -1024,
        ] {
            for (start, remember) in [0i64, 5, 1023, -77, 1 << 40]
                .into_iter()
                .flat_map(|start| [(start, false), (start, true)])
            {
                let ids = stream(increment, start, 5_000, remember);
                let unique: HashSet<_> = ids.iter().collect();
                assert_eq!(
                    unique.len(),
                    ids.len(),
                    "INCREMENT {increment}: a pair repeated"
                );
                assert!(
                    ids.windows(2).all(|w| w[1].0 >= w[0].0),
                    "INCREMENT {increment}: the millisecond went back"
                );
                let increasing = ids.windows(2).all(|w| w[1] > w[0]);
                // Only the remainder's step counts: INCREMENT mod 1024 in 1..=512 (or 0, trivially:
                // one id per millisecond). -513 steps like 511.
                let step = increment.rem_euclid(SEQ_VALUES);
                if (1..=SEQ_VALUES / 2).contains(&step) || step == 0 {
                    assert!(
                        increasing,
                        "INCREMENT {increment}: ids must strictly increase"
                    );
                } else {
                    assert!(
                        !increasing,
                        "INCREMENT {increment}: said not to, but increased"
                    );
                }
            }
        }
        for remember in [false, true] {
            assert_eq!(per_ms(&stream(1, 0, 5_000, remember)), 1024);
            // Descending: a millisecond holds 1024 consecutive values counting down (unknown
            // previous ids: the first millisecond may close after 512, measured against the
            // highest remainder; then each holds 511..0 then 1023..512).
            assert_eq!(per_ms(&stream(-1, 0, 5_000, remember)), 1024);
            let ms_used = |ids: &[(i64, u16)]| ids.last().unwrap().0 - ids[0].0 + 1;
            assert!(
                ms_used(&stream(-1, 1023, 10_240, remember))
                    <= ms_used(&stream(1, 0, 10_240, remember)) + 1
            );
            assert_eq!(
                per_ms(&stream(2, 0, 5_000, remember)),
                512,
                "INCREMENT 2: 512 remainders"
            );
            assert_eq!(
                per_ms(&stream(1024, 0, 5_000, remember)),
                1,
                "INCREMENT 1024: one remainder"
            );
        }
    }

    /// A guard to start a schedule from: new, above a floor, waiting for its data floor, or at the
    /// horizon, or above it (a lease file's floor); and a clock to start it with.
    fn start() -> impl Strategy<Value = (GuardState, i64)> {
        use crate::layout::MAX_MS;
        let request = FloorRequest::new(7).unwrap();
        prop_oneof![
            Just((GuardState::new(), 1_000_000)),
            Just((GuardState::new(), 1_000)),
            (0i64..3_000_000).prop_map(|f| (GuardState::with_floor(f), 1_000_000)),
            (0i64..3_000_000)
                .prop_map(move |f| (GuardState::awaiting_data_floor(f, request), 1_000_000)),
            Just((GuardState::new(), MAX_MS - 2)),
            // a lease file's floor past the horizon
            Just((GuardState::with_floor(MAX_MS + 5), MAX_MS - 2)),
        ]
    }

    proptest! {
        /// The inlined common case is a shortcut of the full decision, never a second opinion:
        /// wherever it answers, the full decision gives the same millisecond and leaves the guard
        /// in the same state; where it does not, it leaves the guard untouched. Schedules cross
        /// new milliseconds, used and wrapped remainders, clock steps, waits, floors, a data floor
        /// awaited and settled, the epoch and the horizon.
        #[test]
        fn the_common_case_decides_as_the_full_decision(
            (mut g, mut clock) in start(), schedule in steps(), floors in proptest::collection::vec(0i64..4_000_000, 8)
        ) {
            let (mut common, mut full) = (0usize, 0usize);
            for (i, step) in schedule.into_iter().enumerate() {
                clock += step.clock_delta;
                let overflow = if step.borrow { Overflow::Borrow } else { Overflow::Wait };
                for _ in 0..3 {
                    let (mut shortcut, mut decided) = (g, g);
                    let previous = step.previous(&g);
                    let answer = decided.decide(clock, step.remainder, previous, overflow);
                    match shortcut.issue_common(clock, step.remainder, previous) {
                        Some(ms) => {
                            common += 1;
                            let expected = Decision::Issue { ms, clock, clock_stepped_back_by: None };
                            prop_assert_eq!(answer, Ok(expected));
                            prop_assert_eq!(shortcut, decided);
                        }
                        None => {
                            full += 1;
                            prop_assert_eq!(shortcut, g, "no answer, yet the guard changed");
                        }
                    }
                    g = decided;
                    match answer {
                        Ok(Decision::Issue { .. }) | Err(_) => break,
                        Ok(Decision::WaitUntilPast(_)) => clock += 1,
                        Ok(Decision::ReadDataFloor(request)) => {
                            g.settle_data_floor(request, Some(floors[i % floors.len()]))
                        }
                    }
                }
            }
            prop_assert!(common + full > 0);
        }

        /// Whatever the clock does and whichever remainders arrive, no (ms, remainder) pair is
        /// issued twice, the millisecond never decreases, and `wait` never issues ahead of a
        /// clock that only moves forward.
        #[test]
        fn never_repeats_never_goes_back(schedule in steps()) {
            let mut g = GuardState::new();
            let mut clock = 1_000_000i64;
            let mut seen = HashSet::new();
            let mut last = i64::MIN;
            for step in schedule {
                clock += step.clock_delta;
                let overflow = if step.borrow { Overflow::Borrow } else { Overflow::Wait };
                let ms = loop {
                    // any previous id the caller claims, true or not, only moves an id later
                    match g.issue_after(step.previous(&g), clock, step.remainder, overflow).unwrap() {
                        Decision::Issue { ms, .. } => break ms,
                        Decision::WaitUntilPast(ms) => {
                            prop_assert!(ms >= clock, "asked to wait for a clock already past {}", ms);
                            clock += 1; // the caller waits for the clock to tick
                        }
                        Decision::ReadDataFloor(_) => unreachable!("a new guard waits for no data"),
                    }
                };
                prop_assert!(ms >= last, "millisecond went back from {} to {}", last, ms);
                prop_assert!(seen.insert((ms, step.remainder)), "repeat of ({}, {})", ms, step.remainder);
                last = ms;
            }
        }

        /// With a clock that never steps back, `wait` never issues more than 1 ms ahead of the
        /// clock by itself: beyond that, only free room that `borrow` made ahead of it is used.
        #[test]
        fn wait_never_grows_a_lead(
            schedule in proptest::collection::vec((0i64..3, 0u16..64, any::<bool>()), 1..3000)
        ) {
            let mut g = GuardState::new();
            let mut clock = 0i64;
            for (delta, r, borrow) in schedule {
                clock += delta;
                let overflow = if borrow { Overflow::Borrow } else { Overflow::Wait };
                let before = g.last_ms().unwrap_or(i64::MIN);
                let ms = loop {
                    match ms_of(g.issue(clock, r, overflow).unwrap()) {
                        Some(ms) => break ms,
                        None => clock += 1,
                    }
                };
                if !borrow {
                    prop_assert!(ms <= (clock + 1).max(before), "wait ran ahead: {} > {}", ms, (clock + 1).max(before));
                }
            }
        }

        /// One session's stream of consecutive sequence values, however fast, gives strictly
        /// increasing ids (millisecond, then remainder).
        #[test]
        fn one_stream_gives_increasing_ids(
            start in 0i64..100_000, ticks in proptest::collection::vec(0i64..2, 1..5000), borrow in any::<bool>()
        ) {
            let mut g = GuardState::new();
            let overflow = if borrow { Overflow::Borrow } else { Overflow::Wait };
            let mut clock = 1_000i64;
            let mut last = (i64::MIN, 0u16);
            for (i, tick) in ticks.into_iter().enumerate() {
                clock += tick;
                let r = ((start + i as i64) % SEQ_VALUES) as u16;
                let ms = loop {
                    match ms_of(g.issue(clock, r, overflow).unwrap()) {
                        Some(ms) => break ms,
                        None => clock += 1,
                    }
                };
                prop_assert!((ms, r) > last, "({}, {}) after {:?}", ms, r, last);
                last = (ms, r);
            }
        }

        /// Sessions drawing from one sequence with `CACHE` blocks (each takes the next `cache`
        /// values when its block runs out), in a random order, with a clock that ticks at random,
        /// each passing its own previous id unless it forgot it (a slot cache entry pushed out):
        /// no pair repeats, the millisecond never decreases, and a session whose previous id was
        /// remembered and at most 512 values back gets a larger id.
        #[test]
        fn sessions_with_cached_blocks_stay_unique_and_each_in_order(
            sessions in 1usize..8,
            cache in prop_oneof![Just(1i64), Just(2), Just(32), Just(100), Just(1024)],
            schedule in proptest::collection::vec((0usize..8, prop_oneof![9 => Just(0i64), 1 => Just(1)], 0u8..20), 1..4000),
            borrow in any::<bool>(),
        ) {
            let overflow = if borrow { Overflow::Borrow } else { Overflow::Wait };
            let mut g = GuardState::new();
            let mut clock = 1_000i64;
            let mut next_block = 0i64;
            // per session: next value, end of block, previous (value, ms, remainder) remembered
            let mut held: Vec<(i64, i64)> = vec![(0, 0); sessions];
            let mut previous: Vec<Option<(i64, i64, u16)>> = vec![None; sessions];
            let mut seen = HashSet::new();
            let mut last_ms = i64::MIN;
            for (who, tick, forget) in schedule {
                let s = who % sessions;
                clock += tick;
                if held[s].0 == held[s].1 {
                    held[s] = (next_block, next_block + cache);
                    next_block += cache;
                }
                let value = held[s].0;
                held[s].0 += 1;
                let remainder = (value % SEQ_VALUES) as u16;
                if forget == 0 {
                    previous[s] = None;
                }
                let known = previous[s].map_or(Previous::UNKNOWN, |(_, ms, r)| Previous::new(ms, r));
                let ms = loop {
                    match ms_of(g.issue_after(known, clock, remainder, overflow).unwrap()) {
                        Some(ms) => break ms,
                        None => clock += 1,
                    }
                };
                prop_assert!(seen.insert((ms, remainder)), "repeat of ({}, {})", ms, remainder);
                prop_assert!(ms >= last_ms, "millisecond went back");
                if let Some((before, p_ms, p_r)) = previous[s] {
                    if value - before <= SEQ_VALUES / 2 {
                        prop_assert!((ms, remainder) > (p_ms, p_r),
                            "session {}: ({}, {}) after ({}, {})", s, ms, remainder, p_ms, p_r);
                    }
                }
                last_ms = ms;
                previous[s] = Some((value, ms, remainder));
            }
        }

        /// Ids at past times handed out while the guard issues, then the clock stepping back
        /// into them (issue 50: a backfill just behind the clock, then NTP steps the clock back):
        /// the guard never issues in a millisecond a backfill handed out, whatever the clock
        /// does afterwards, and it sees a clock that comes back below the backfill's reading as
        /// a step.
        #[test]
        fn never_issues_where_ids_at_past_times_were_handed_out(
            schedule in proptest::collection::vec(
                (prop_oneof![6 => Just(0i64), 3 => Just(1), 1 => -3000i64..3000], 0u16..1024,
                 proptest::option::of(1i64..20_000), any::<bool>()),
                1..3000)
        ) {
            let mut g = GuardState::new();
            let mut clock = 1_000_000i64;
            let mut handed_out_up_to = i64::MIN;  // the newest millisecond a backfill handed out
            let mut last_reading = i64::MIN;  // the clock reading the guard saw last
            for (delta, r, backfill_behind, borrow) in schedule {
                clock += delta;
                if let Some(behind) = backfill_behind {
                    // next_shard_id_at at a time at least 1 s behind the clock
                    let ms = clock - 1_000 - behind;
                    g.keep_above(ms, clock);
                    handed_out_up_to = handed_out_up_to.max(ms);
                    last_reading = last_reading.max(clock);
                    continue;
                }
                let overflow = if borrow { Overflow::Borrow } else { Overflow::Wait };
                let decision = loop {
                    match g.issue(clock, r, overflow).unwrap() {
                        Decision::WaitUntilPast(_) => clock += 1,
                        other => break other,
                    }
                };
                let Decision::Issue { ms, clock_stepped_back_by, .. } = decision else {
                    unreachable!("a new guard waits for no data")
                };
                prop_assert!(ms > handed_out_up_to, "issued at {} where a backfill handed out ids (up to {})",
                             ms, handed_out_up_to);
                prop_assert_eq!(clock_stepped_back_by.is_some(), clock < last_reading,
                                "a clock back below the last reading (a backfill's too) is a step, and only that");
                last_reading = clock;
            }
        }

        #[test]
        fn wait_mode_with_a_forward_clock_stays_within_1_ms_of_it(
            deltas in proptest::collection::vec((0i64..3, 0u16..1024), 1..3000)
        ) {
            let mut g = GuardState::new();
            let mut clock = 0i64;
            for (delta, r) in deltas {
                clock += delta;
                let ms = loop {
                    match ms_of(g.issue(clock, r, Overflow::Wait).unwrap()) {
                        Some(ms) => break ms,
                        None => clock += 1,
                    }
                };
                prop_assert!(ms == clock || ms == clock + 1, "ms {} with the clock at {}", ms, clock);
            }
        }
    }

    #[test]
    fn a_wait_ends_when_the_clock_steps_back_and_the_guard_moves_on_at_once() {
        // `wait` after `borrow` left the guard 5 ms ahead: the call must wait for the clock...
        const T: i64 = 10_000_000;
        let mut g = GuardState::new();
        for r in 0..5 * 1024u32 {
            g.issue(T, (r % 1024) as u16, Overflow::Borrow).unwrap();
        }
        let ahead = g.last_ms().unwrap();
        assert_eq!(ahead, T + 4);
        let target = match g.issue(T, 0, Overflow::Wait).unwrap() {
            Decision::WaitUntilPast(ms) => ms,
            other => panic!("{other:?}"),
        };
        // ...then, 3 readings into the wait, NTP steps the clock back an hour
        let readings = std::cell::Cell::new(0);
        let clock = || {
            readings.set(readings.get() + 1);
            if readings.get() < 3 {
                T
            } else {
                T - 3_600_000
            }
        };
        let mut pauses = 0;
        let now = wait_until_past(target, clock, |_| {
            pauses += 1;
            assert!(pauses < 1_000, "still waiting an hour-long step out");
        });
        assert!(pauses < 10, "waited {pauses} rounds after the step");
        match g.issue(now, 0, Overflow::Wait).unwrap() {
            Decision::Issue {
                ms,
                clock_stepped_back_by: Some(_),
                ..
            } => assert_eq!(ms, ahead + 1),
            other => panic!("expected an id after the step, got {other:?}"),
        }
    }

    #[test]
    fn a_wait_ends_when_the_clock_passes_the_target() {
        let mut t = 0;
        let now = wait_until_past(
            5,
            || {
                t += 1;
                t
            },
            |left| assert!(left >= 0),
        );
        assert_eq!(now, 6);
    }
}
