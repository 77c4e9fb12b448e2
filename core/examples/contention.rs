//! Two threads (standing in for two backends on two cores) draw ids of one sequence from one
//! slot table, `borrow`, reading the wall clock under the slot's lock as the extension does:
//! `cargo run --release -p pg_shard_id_core --example contention [seconds]`. The slot's lock and
//! the guard's state move between the two cores on every id, so every cache line an id writes
//! costs a transfer: this shows what the slot's layout costs under contention, without PostgreSQL.
//!
//! Measured here (2 vCPU, 4 interleaved runs of 2 s each, M ids/s): 0.4.0's 184-byte slots 15.6 to
//! 16.8; 0.5.0's 232-byte slots, with the statistics, 15.1 to 17.0; a tried 256-byte layout with
//! the slots on cache lines and the statistics' `ids` on the lock's line, 12.7 to 13.5 (spinning on
//! the line the holder writes slows the holder), so it was not kept.
use pg_shard_id_core::guard::{Decision, Overflow, Previous};
use pg_shard_id_core::slots::{slot_key, OwnedSlotTable, SLOT_BYTES};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
        - 1_767_225_600_000
}

fn main() {
    let seconds: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let owned = Arc::new(OwnedSlotTable::new(8192));
    let sequence = Arc::new(AtomicI64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let key = slot_key(16_384, 16_385);
    let threads: Vec<_> = (0..2)
        .map(|_| {
            let (owned, sequence, stop) = (owned.clone(), sequence.clone(), stop.clone());
            std::thread::spawn(move || {
                let t = owned.table();
                let mut cached = None;
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let r = (sequence.fetch_add(1, Ordering::Relaxed) % 1024) as u16;
                    let (index, d) =
                        t.issue(cached, key, r, Previous::UNKNOWN, Overflow::Borrow, now_ms);
                    cached = Some(index);
                    if let Ok(Decision::Issue { .. }) = d {
                        n += 1;
                    }
                }
                n
            })
        })
        .collect();
    let started = Instant::now();
    std::thread::sleep(Duration::from_secs(seconds));
    stop.store(true, Ordering::Relaxed);
    let ids: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    let rate = ids as f64 / started.elapsed().as_secs_f64();
    println!(
        "2 threads, one sequence, slots of {SLOT_BYTES} bytes: {:.2} M ids/s ({:.0} ns/id)",
        rate / 1e6,
        1e9 / rate
    );
}
