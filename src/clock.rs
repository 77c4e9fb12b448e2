//! The clock the generator reads: the wall clock (`CLOCK_REALTIME`), in milliseconds since the
//! id epoch.
//!
//! Test builds (feature `pg_test`, which `cargo pgrx test` turns on and `cargo pgrx install`
//! never does) add `pg_shard_id.test_clock_offset_ms`, so that tests can step the clock back and
//! forth; the generator and the start-up floor both read it. In a release build the setting does
//! not exist and this is the plain wall clock.

use pg_shard_id_core::time::wall_clock_unix_ms;

/// Milliseconds since the Unix epoch, by the wall clock (plus the test offset in test builds).
#[inline]
pub fn now_unix_ms() -> i64 {
    #[cfg(feature = "pg_test")]
    let offset = crate::settings::test_clock_offset_ms();
    #[cfg(not(feature = "pg_test"))]
    let offset = 0;
    wall_clock_unix_ms() + offset
}

/// Milliseconds since the epoch `epoch_unix_ms`, by the wall clock.
#[inline]
pub fn now_since_epoch(epoch_unix_ms: i64) -> i64 {
    now_unix_ms() - epoch_unix_ms
}
