//! The slot table's tests: one key one slot, eviction within a window, floors, data floors,
//! threads standing in for backends.

use super::*;
use crate::guard::{Counts, FloorRequest, GuardState};
use crate::layout::{seq_field, SEQ_VALUES};
use proptest::prelude::*;
use std::collections::HashSet;
use std::sync::atomic::AtomicI64;
use std::sync::Arc;

/// [`SlotTable::issue`] for a caller that does not know its previous id (the guard's tests cover
/// the wrap rule with one).
fn ask(
    t: &SlotTable,
    cached: Option<usize>,
    key: SlotKey,
    remainder: u16,
    overflow: Overflow,
    clock: impl FnOnce() -> i64,
) -> (usize, Result<Decision, LayoutError>) {
    t.issue(cached, key, remainder, Previous::UNKNOWN, overflow, clock)
}

/// Issues one id for `key` at clock `now` (borrow) and returns its millisecond.
fn issue_now(t: &SlotTable, key: SlotKey, r: u16, now: i64) -> i64 {
    match ask(t, None, key, r, Overflow::Borrow, || now).1.unwrap() {
        Decision::Issue { ms, .. } => ms,
        wait => panic!("borrow never waits here: {wait:?}"),
    }
}

/// The request a decision asks the caller to read the data floor for.
fn floor_request(d: Result<Decision, crate::layout::LayoutError>) -> FloorRequest {
    match d.unwrap() {
        Decision::ReadDataFloor(request) => request,
        other => panic!("expected a request for the data floor, got {other:?}"),
    }
}

#[test]
fn fresh_guards_wait_for_their_data_floor_when_the_table_asks() {
    let owned = OwnedSlotTable::new(WINDOW_SLOTS);
    let t = owned.table();
    t.ask_for_data_floors();
    let key = slot_key(1, 100);
    let (index, d) = ask(t, None, key, 0, Overflow::Wait, || 50);
    let request = floor_request(d);
    assert_eq!(
        floor_request(ask(t, Some(index), key, 0, Overflow::Wait, || 50).1),
        request,
        "asked again, the same request"
    );
    t.settle_data_floor(key, request, Some(3_000));
    assert_eq!(issue_now(t, key, 0, 50), 3_000);
    assert_eq!(t.stats()[0].data_floor, Some(3_000));
    // rows loaded into the live table later: asked again, and never below what it issued
    let again = t.forget_data_floor(key).unwrap();
    assert_ne!(again, request);
    assert_eq!(
        floor_request(ask(t, Some(index), key, 1, Overflow::Wait, || 50).1),
        again
    );
    t.settle_data_floor(key, again, None);
    assert_eq!(
        issue_now(t, key, 0, 50),
        3_001,
        "the used remainders of 3_000 are forgotten"
    );
    // every other key of the window evicts it; coming back, it issues above what it issued,
    // without reading its data floor again (it was read before: issue 51)
    let evict = |t: &SlotTable, clock: i64| {
        for seq in 0..WINDOW_SLOTS as u32 {
            let other = slot_key(2, 1_000 + seq);
            if let Decision::ReadDataFloor(r) =
                ask(t, None, other, 0, Overflow::Wait, || clock).1.unwrap()
            {
                t.settle_data_floor(other, r, None);
            }
        }
    };
    evict(t, 60);
    assert_eq!(t.find(key), None, "evicted");
    assert_eq!(
        issue_now(t, key, 2, 60),
        3_002,
        "at once, above what it issued"
    );
    // rows loaded while it was evicted (shard_id_resync()): coming back, it reads them
    evict(t, 70);
    assert_eq!(t.find(key), None, "evicted again");
    assert_eq!(t.forget_data_floor(key), None, "no guard to make wait now");
    let (_, d) = ask(t, None, key, 3, Overflow::Wait, || 70);
    let reclaimed = floor_request(d);
    assert!(reclaimed != request && reclaimed != again);
    t.settle_data_floor(key, reclaimed, Some(5_000));
    assert_eq!(issue_now(t, key, 3, 70), 5_000);
    // one whose data floor was never read when it was evicted reads it when it comes back
    let unread = slot_key(1, 101);
    let first = floor_request(ask(t, None, unread, 0, Overflow::Wait, || 80).1);
    evict(t, 90);
    let next = floor_request(ask(t, None, unread, 0, Overflow::Wait, || 90).1);
    assert_ne!(first, next);
    // a table that does not ask (the core tests' default) issues at once
    let plain = OwnedSlotTable::new(4);
    assert_eq!(issue_now(plain.table(), key, 0, 50), 50);
    assert_eq!(plain.table().forget_data_floor(key), None);
}

/// shard_id_resync() against a backend whose read began before the load committed: the backend's
/// read (stale: it saw no loaded row) must not settle the guard that resync made wait again, or
/// the next ids start below the loaded rows.
#[test]
fn a_read_begun_before_a_resync_does_not_settle_the_guard_it_made_wait() {
    let owned = OwnedSlotTable::new(WINDOW_SLOTS);
    let t = owned.table();
    t.ask_for_data_floors();
    let key = slot_key(1, 100);
    // backend A's first id: it is told to read, and reads the rows before the load commits
    let a = floor_request(ask(t, None, key, 0, Overflow::Wait, || 50).1);
    let stale = Some(2_001);
    // the load commits rows up to 9_000 ms; shard_id_resync() makes the guard wait, and reads
    let resync = t.forget_data_floor(key).unwrap();
    let fresh = Some(9_001);
    // A settles first with what it read before the load, then resync with what it read after
    t.settle_data_floor(key, a, stale);
    t.settle_data_floor(key, resync, fresh);
    assert_eq!(issue_now(t, key, 0, 50), 9_001);
}

/// The same with the slot given away while A reads: the key's guard, claimed again, waits on a
/// new request, which only a read begun after the claim answers.
#[test]
fn a_read_begun_before_the_slot_was_given_away_does_not_settle_its_next_guard() {
    let owned = OwnedSlotTable::new(WINDOW_SLOTS);
    let t = owned.table();
    t.ask_for_data_floors();
    let key = slot_key(1, 100);
    let a = floor_request(ask(t, None, key, 0, Overflow::Wait, || 50).1);
    for seq in 0..WINDOW_SLOTS as u32 {
        let other = slot_key(2, 1_000 + seq);
        // used later than A's key (at 60): A's slot is the least recently used
        let r = floor_request(ask(t, None, other, 0, Overflow::Wait, || 60).1);
        t.settle_data_floor(other, r, None);
    }
    let b = floor_request(ask(t, None, key, 0, Overflow::Wait, || 60).1);
    assert_ne!(a, b);
    t.settle_data_floor(key, a, Some(2_001));
    assert_eq!(
        floor_request(ask(t, None, key, 0, Overflow::Wait, || 60).1),
        b
    );
    t.settle_data_floor(key, b, Some(9_001));
    assert_eq!(issue_now(t, key, 0, 60), 9_001);
}

#[test]
fn slot_size_is_what_the_docs_quote() {
    // pg_shard_id.max_sequences' description reads SLOT_BYTES; the docs quote 256 bytes
    // for the default layout (10-bit sequence field: a 1024-bit set per slot; 48 bytes of
    // statistics; the data floor: 16).
    assert_eq!(SLOT_BYTES, 256);
    // and 4 kept evicted sequences of 24 bytes per slot: 352 bytes per slot in all
    assert_eq!(
        SlotTable::size_of(8192),
        8192 * (SLOT_BYTES + KEPT_PER_SLOT * 24) + slots_offset()
    );
}

#[test]
fn one_key_one_slot_and_separate_guards_per_key() {
    let owned = OwnedSlotTable::new(4);
    let t = owned.table();
    let (a, b) = (slot_key(1, 100), slot_key(1, 101));
    let (ia, _) = ask(t, None, a, 5, Overflow::Borrow, || 10);
    let (ia2, _) = ask(t, None, a, 6, Overflow::Borrow, || 10);
    let (ib, _) = ask(t, Some(ia), b, 5, Overflow::Borrow, || 10);
    assert_eq!(ia, ia2);
    assert_ne!(ia, ib, "a cached index of another key is not used");
    assert_eq!(t.in_use(), 2);
    assert_eq!(
        issue_now(t, b, 7, 10),
        10,
        "another sequence has its own remainders"
    );
    assert_eq!(issue_now(t, a, 5, 10), 11);
    assert_eq!(t.last_ms(a), Some(11));
    assert_eq!((database_of(a), sequence_of(a)), (1, 100));
}

#[test]
fn a_full_table_evicts_the_least_recently_used_and_keeps_its_last_ms_for_its_sequence() {
    let owned = OwnedSlotTable::new(2);
    let t = owned.table();
    let (a, b, c) = (slot_key(1, 1), slot_key(1, 2), slot_key(1, 3));
    issue_now(t, a, 0, 1_000);
    // b borrows far ahead of the clock: its last ms is 5_002
    for _ in 0..3 {
        issue_now(t, b, 9, 5_000);
    }
    issue_now(t, a, 1, 6_000); // a is now the more recently used
                               // c evicts b (least recently used); b's last ms is kept for b, not put under everyone
    assert_eq!(issue_now(t, c, 0, 100), 100, "c does not inherit b's lead");
    assert_eq!(t.evictions(), 1);
    assert_eq!(t.last_ms(b), None, "b lost its slot");
    assert_eq!(t.floor(), i64::MIN);
    // b comes back (evicting a) with the clock stepped far back: it still issues above all its
    // old ids
    assert_eq!(issue_now(t, b, 9, 100), 5_003);
    // and so does a (evicting c)
    assert_eq!(issue_now(t, a, 1, 100), 6_001);
    assert_eq!(t.in_use(), 2, "never more slots than the capacity");
}

#[test]
fn one_sequences_lead_moves_no_other_until_more_are_kept_than_there_is_room_for() {
    let owned = OwnedSlotTable::new(1);
    let t = owned.table();
    // a sequence an hour ahead (its data floor said so), then evicted: the next is not moved
    let ahead = slot_key(1, 1);
    assert_eq!(issue_now(t, ahead, 0, 3_600_000), 3_600_000);
    assert_eq!(issue_now(t, slot_key(1, 2), 0, 1_000), 1_000);
    // a one-slot table keeps KEPT_PER_SLOT evicted sequences (the loop's keys evict one another)...
    for n in 0..KEPT_PER_SLOT as u32 - 1 {
        issue_now(t, slot_key(2, n), 0, 10_000 + i64::from(n));
    }
    assert_eq!(
        t.floor(),
        i64::MIN,
        "{KEPT_PER_SLOT} kept, the floor untouched"
    );
    // ...one more puts the smallest kept value (slot_key(1, 2)'s) into the floor
    assert_eq!(issue_now(t, slot_key(3, 1), 0, 1_000), 1_001);
    assert_eq!(t.floor(), 1_001);
    // the one an hour ahead is still kept for itself
    assert_eq!(issue_now(t, ahead, 0, 1_000), 3_600_001);
}

#[test]
fn a_key_lives_in_its_window_and_a_full_window_evicts_within_it() {
    let capacity = 1 << 12;
    let owned = OwnedSlotTable::new(capacity);
    let t = owned.table();
    // keys whose windows start at the same slot, until that window is full
    let home = |k: SlotKey| t.window(k).next().unwrap();
    let first = slot_key(1, 1);
    let same: Vec<SlotKey> = (1..)
        .map(|o| slot_key(1, o))
        .filter(|&k| home(k) == home(first))
        .take(WINDOW_SLOTS + 1)
        .collect();
    for (n, &k) in same[..WINDOW_SLOTS].iter().enumerate() {
        issue_now(t, k, 0, 1_000 + n as i64);
    }
    assert_eq!(t.in_use(), WINDOW_SLOTS);
    assert_eq!(t.evictions(), 0);
    let window: HashSet<usize> = t.window(first).collect();
    let (index, _) = ask(t, None, same[WINDOW_SLOTS], 0, Overflow::Borrow, || 5_000);
    assert!(window.contains(&index), "claimed inside its window");
    assert_eq!(
        t.evictions(),
        1,
        "a full window evicts, though the table has room"
    );
    assert_eq!(
        t.last_ms(first),
        None,
        "the least recently used of the window went"
    );
    assert_eq!(t.floor(), i64::MIN, "kept for its own sequence");
    assert_eq!(t.in_use(), WINDOW_SLOTS);
    // every other key is still found where it was, without a claim
    for &k in &same[1..] {
        assert_eq!(t.find(k).map(|i| window.contains(&i)), Some(true));
    }
    // the evicted key comes back with the clock far back: above its own last id
    assert_eq!(issue_now(t, first, 0, 5), 1_001);
}

proptest! {
    /// Any mix of sequences, more than the table holds, with a clock that moves on: a key is
    /// never in two slots, and no sequence ever gets one (ms, remainder) twice.
    #[test]
    fn keys_are_unique_and_pairs_never_repeat_under_churn(
        capacity in 16usize..80,
        draws in proptest::collection::vec((1u32..300, 0u16..4, 0i64..3), 1..3_000),
    ) {
        let owned = OwnedSlotTable::new(capacity);
        let t = owned.table();
        let mut now = 1_000;
        let mut seen = HashSet::new();
        let mut cached = std::collections::HashMap::new();
        for (sequence, r, tick) in draws {
            now += tick;
            let key = slot_key(7, sequence);
            let (index, d) = ask(t, cached.get(&key).copied(), key, r, Overflow::Borrow, || now);
            cached.insert(key, index);
            let Decision::Issue { ms, .. } = d.unwrap() else { panic!("borrow waited") };
            prop_assert!(seen.insert((key, ms, r)), "{key} issued ({ms}, {r}) twice");
            let keys = t.keys();
            let taken: HashSet<_> = keys.iter().filter(|&&k| k != 0).collect();
            prop_assert_eq!(taken.len(), keys.iter().filter(|&&k| k != 0).count());
            prop_assert!(taken.len() <= capacity);
        }
    }
}

#[test]
fn a_cached_index_of_an_evicted_key_is_not_used_for_it() {
    let owned = OwnedSlotTable::new(1);
    let t = owned.table();
    let (a, b) = (slot_key(1, 1), slot_key(1, 2));
    let (ia, _) = ask(t, None, a, 3, Overflow::Wait, || 50);
    let (ib, _) = ask(t, None, b, 3, Overflow::Wait, || 60);
    assert_eq!(ia, ib, "one slot: b took a's");
    // a's caller still has the index cached: the slot is b's now, so a is claimed again
    let (_, d) = ask(t, Some(ia), a, 3, Overflow::Wait, || 70);
    assert_eq!(
        d.unwrap(),
        Decision::Issue {
            ms: 70,
            clock: 70,
            clock_stepped_back_by: None
        }
    );
    assert_eq!(
        t.floor(),
        i64::MIN,
        "each last ms is kept for its own sequence"
    );
    assert_eq!(t.evictions(), 2);
}

#[test]
fn statistics_count_per_sequence_and_reset() {
    let owned = OwnedSlotTable::new(8);
    let t = owned.table();
    let (a, b) = (slot_key(1, 1), slot_key(1, 2));
    // a: remainder 5 three times at clock 100 under wait: 100, then 101 (moved on), then wait
    let mut decisions = Vec::new();
    for _ in 0..3 {
        decisions.push(ask(t, None, a, 5, Overflow::Wait, || 100).1.unwrap());
    }
    assert!(matches!(decisions[2], Decision::WaitUntilPast(100)));
    issue_now(t, b, 1, 200);
    issue_now(t, b, 2, 150); // the clock stepped back
    t.count(a, |c| c.wait_ns += 1_500);
    t.count(b, |c| c.lease_writes += 1);
    t.count(slot_key(1, 3), |c| c.ids += 1_000); // no slot: nothing counted
    let mut stats = t.stats();
    stats.sort_by_key(|s| s.key);
    let counts: Vec<_> = stats.iter().map(|s| (s.key, s.last_ms, s.counts)).collect();
    assert_eq!(
        counts,
        vec![
            (
                a,
                Some(101),
                Counts {
                    ids: 2,
                    exhausted_ms: 1,
                    waits: 1,
                    wait_ns: 1_500,
                    ..Counts::default()
                }
            ),
            (
                b,
                Some(200),
                Counts {
                    ids: 2,
                    clock_steps: 1,
                    lease_writes: 1,
                    ..Counts::default()
                }
            ),
        ]
    );
    t.reset_stats();
    assert!(t.stats().iter().all(|s| s.counts == Counts::default()));
    assert_eq!(
        t.stats().len(),
        2,
        "a reset keeps the sequences and their guards"
    );
    assert_eq!(issue_now(t, a, 5, 100), 102, "and the guard's state");
}

#[test]
fn a_lease_in_force_never_goes_down_and_a_refusal_stays() {
    let owned = OwnedSlotTable::new(4);
    let t = owned.table();
    t.put_lease_in_force(5_000, Some(3_001), None);
    t.put_lease_in_force(4_000, Some(2_001), Some(77));
    t.put_lease_in_force(4_500, None, None);
    assert_eq!(t.lease().load(Ordering::Relaxed), 5_000);
    assert_eq!(t.floor(), 3_001);
    assert_eq!(
        t.refused_epoch(),
        Some(77),
        "a later record without a refusal keeps it"
    );
}

#[test]
fn slots_claimed_below_the_floor_start_at_the_floor() {
    let owned = OwnedSlotTable::new(4);
    let t = owned.table();
    t.raise_floor(7_000);
    t.raise_floor(6_000);
    assert_eq!(t.floor(), 7_000, "the floor never goes down");
    assert_eq!(issue_now(t, slot_key(1, 1), 3, 100), 7_000);
    assert_eq!(issue_now(t, slot_key(1, 2), 3, 8_000), 8_000);
}

/// Threads stand in for backends. Four "victims" draw from one shared sequence (a CACHE-like
/// pattern: blocks of SEQ_VALUES values, so their remainders coincide all the time) under a
/// shared clock that sometimes steps back; four "churners" claim fresh keys as fast as they
/// can in a table of 8 slots, so the victims' slot is evicted again and again. No
/// (ms, remainder) pair of the victims' sequence may repeat, and nobody fails. Every fresh
/// guard waits for its data floor, which the caller settles (nothing stored), as the extension
/// does.
#[test]
fn concurrent_backends_never_repeat_while_others_churn_the_table() {
    for overflow in [Overflow::Wait, Overflow::Borrow] {
        let owned = Arc::new(OwnedSlotTable::new(8));
        owned.table().ask_for_data_floors();
        let clock = Arc::new(AtomicI64::new(10_000));
        let sequence = Arc::new(AtomicI64::new(0));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let key = slot_key(5, 16_384);
        let churners: Vec<_> = (0..4u32)
            .map(|thread| {
                let (owned, clock, stop) = (owned.clone(), clock.clone(), stop.clone());
                std::thread::spawn(move || {
                    let t = owned.table();
                    let mut n = 0u32;
                    while !stop.load(Ordering::Relaxed) {
                        n += 1;
                        let k = slot_key(9, 1 + thread * 1_000_000 + n);
                        let (_, d) = ask(t, None, k, 0, overflow, || clock.load(Ordering::Relaxed));
                        if let Decision::ReadDataFloor(r) = d.unwrap() {
                            t.settle_data_floor(k, r, None);
                        }
                    }
                    n
                })
            })
            .collect();
        let victims: Vec<_> = (0..4)
            .map(|thread| {
                let (owned, clock, sequence) = (owned.clone(), clock.clone(), sequence.clone());
                std::thread::spawn(move || {
                    let t = owned.table();
                    let mut out = Vec::with_capacity(20_000);
                    let mut block = 0;
                    let mut cached = None;
                    for i in 0..20_000i64 {
                        if i % SEQ_VALUES == 0 {
                            block = sequence.fetch_add(SEQ_VALUES, Ordering::Relaxed);
                        }
                        let r = seq_field(block + i % SEQ_VALUES) as u16;
                        if thread == 0 && i % 5_000 == 2_500 {
                            clock.fetch_sub(2_000, Ordering::Relaxed); // a step back
                        } else if i % 64 == 0 {
                            clock.fetch_add(1, Ordering::Relaxed);
                        }
                        let ms = loop {
                            let (index, d) = ask(t, cached, key, r, overflow, || {
                                clock.load(Ordering::Relaxed)
                            });
                            cached = Some(index);
                            match d.unwrap() {
                                Decision::Issue { ms, .. } => break ms,
                                Decision::WaitUntilPast(_) => {
                                    clock.fetch_add(1, Ordering::Relaxed);
                                }
                                Decision::ReadDataFloor(r) => t.settle_data_floor(key, r, None),
                            }
                        };
                        out.push((ms, r));
                    }
                    out
                })
            })
            .collect();
        let mut all = HashSet::new();
        for thread in victims {
            for pair in thread.join().unwrap() {
                assert!(all.insert(pair), "{overflow:?}: {pair:?} issued twice");
            }
        }
        stop.store(true, Ordering::Relaxed);
        let churned: u32 = churners.into_iter().map(|c| c.join().unwrap()).sum();
        assert_eq!(all.len(), 80_000);
        let t = owned.table();
        assert!(
            churned > 8 && t.evictions() > 8,
            "{overflow:?}: the table was churned ({churned} keys, {} evictions)",
            t.evictions()
        );
        assert_eq!(t.in_use(), 8);
    }
}

#[test]
fn an_id_writes_two_cache_lines_of_its_slot() {
    // the lock, key, last use, the guard's millisecond fields and its id count in the first line
    assert_eq!(SLOT_BYTES % 64, 0, "{SLOT_BYTES}");
    assert_eq!(std::mem::align_of::<Slot>(), 64);
    let state = std::mem::offset_of!(Slot, state);
    let ids = state + std::mem::offset_of!(GuardState, counts) + std::mem::offset_of!(Counts, ids);
    assert!(ids + 8 <= 64, "the id count ends at byte {}", ids + 8);
}

#[test]
fn ids_at_past_times_keep_the_guard_above_them_with_a_slot_or_without() {
    let owned = OwnedSlotTable::new(2);
    let t = owned.table();
    let (a, b) = (slot_key(1, 1), slot_key(1, 2));
    // a issues at 1_000, then a backfill hands out ids up to 9_000 while the clock reads 11_000,
    // then the clock steps back to 3_000: a's next id is above the backfill's, and seen as a step
    assert_eq!(issue_now(t, a, 0, 1_000), 1_000);
    t.keep_above(a, 9_000, 11_000);
    match ask(t, None, a, 0, Overflow::Wait, || 3_000).1.unwrap() {
        Decision::Issue {
            ms,
            clock_stepped_back_by,
            ..
        } => {
            assert_eq!(ms, 9_001);
            assert_eq!(clock_stepped_back_by, Some(8_000));
        }
        other => panic!("{other:?}"),
    }
    // a guard above the backfill is left where it is
    t.keep_above(a, 5_000, 11_000);
    assert_eq!(issue_now(t, a, 1, 3_000), 9_001);
    // b has no slot: what it keeps costs none, and its guard starts above it when it gets one
    t.keep_above(b, 7_000, 9_000);
    assert_eq!(t.in_use(), 1);
    assert_eq!(issue_now(t, b, 0, 2_000), 7_001);
}
