//! What claiming a slot costs, by table size: `cargo run --release -p pg_shard_id_core --example
//! claim_cost`. Fills a table of each size with sequences, then measures, per call:
//! * `claim (filling)`: the first id of a new sequence while free slots remain (the last 1000);
//! * `claim (evicting)`: the first id of a new sequence when every slot is taken;
//! * `lookup (no cache)`: the next id of a sequence whose slot this caller does not know;
//! * `cached`: the next id of a sequence whose slot index the caller passes.
//!
//! Numbers for ARCHITECTURE.md / issue 24 (the claim lock is held for the whole claim, so its
//! cost is also how long every other claimer waits).
use pg_shard_id_core::guard::{Overflow, Previous};
use pg_shard_id_core::slots::{slot_key, OwnedSlotTable};
use std::time::Instant;

fn percentile(sorted: &[u128], p: f64) -> u128 {
    sorted[((sorted.len() - 1) as f64 * p) as usize]
}

fn report(what: &str, capacity: usize, mut ns: Vec<u128>) {
    ns.sort_unstable();
    println!(
        "{capacity:>8} slots  {what:<18} median {:>9} ns   p99 {:>9} ns   max {:>9} ns   ({} calls)",
        percentile(&ns, 0.5),
        percentile(&ns, 0.99),
        ns[ns.len() - 1],
        ns.len()
    );
}

/// Evictions while a table of `capacity` slots takes `count` sequences with scattered oids: a
/// claim evicts when its key's window is full, even if other slots are free.
fn evictions_at(capacity: usize, count: usize) -> u64 {
    let owned = OwnedSlotTable::new(capacity);
    let t = owned.table();
    for n in 0..count as u64 {
        let key = slot_key(16_384 + (n % 7) as u32, (16_384 + n * 13) as u32);
        let _ = t.issue(None, key, 0, Previous::UNKNOWN, Overflow::Borrow, || {
            1_000_000
        });
    }
    t.evictions()
}

fn main() {
    for percent in [25, 50, 75, 90, 100] {
        let capacity = 8192;
        let count = capacity * percent / 100;
        println!(
            "{capacity:>8} slots  {count:>5} sequences ({percent:>3}% full): {} evictions",
            evictions_at(capacity, count)
        );
    }
    let clock = || 1_000_000i64;
    for capacity in [8192usize, 1 << 20] {
        let owned = OwnedSlotTable::new(capacity);
        let t = owned.table();
        let mut filling = Vec::new();
        for key in 1..=capacity as u64 {
            let start = Instant::now();
            let _ = t.issue(None, key, 0, Previous::UNKNOWN, Overflow::Borrow, clock);
            if key as usize > capacity - 1000 {
                filling.push(start.elapsed().as_nanos());
            }
        }
        report("claim (filling)", capacity, filling);
        let rounds = if capacity > 100_000 { 200 } else { 2000 };
        let mut evicting = Vec::new();
        for key in 0..rounds as u64 {
            let start = Instant::now();
            let _ = t.issue(
                None,
                (1 << 40) + key,
                0,
                Previous::UNKNOWN,
                Overflow::Borrow,
                clock,
            );
            evicting.push(start.elapsed().as_nanos());
        }
        report("claim (evicting)", capacity, evicting);
        let mut lookup = Vec::new();
        let mut cached = Vec::new();
        for key in (capacity as u64 / 2)..(capacity as u64 / 2 + 1000) {
            let start = Instant::now();
            let (index, _) = t.issue(None, key, 1, Previous::UNKNOWN, Overflow::Borrow, clock);
            lookup.push(start.elapsed().as_nanos());
            let start = Instant::now();
            let _ = t.issue(
                Some(index),
                key,
                2,
                Previous::UNKNOWN,
                Overflow::Borrow,
                clock,
            );
            cached.push(start.elapsed().as_nanos());
        }
        report("lookup (no cache)", capacity, lookup);
        report("cached", capacity, cached);
    }
}
