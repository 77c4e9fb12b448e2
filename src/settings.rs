//! The extension's settings (GUCs).
//!
//! | setting                       | who may change it | default                  |
//! |-------------------------------|-------------------|--------------------------|
//! | `pg_shard_id.epoch`           | superuser         | `2026-01-01 00:00:00+00` |
//! | `pg_shard_id.overflow`        | superuser         | `wait`                   |
//! | `pg_shard_id.max_sequences`   | server start      | `8192`                   |
//!
//! The first two change the ids that are issued, so they are `SUSET`: a superuser sets them in
//! `postgresql.conf`, `ALTER SYSTEM`, `ALTER DATABASE` or `ALTER ROLE` (for example a role that does
//! bulk loads with `borrow`), an ordinary user cannot.

use pg_shard_id_core::guard::Overflow;
use pg_shard_id_core::time::{parse_epoch, wall_clock_unix_ms, DEFAULT_EPOCH_UNIX_MS};
use pgrx::prelude::*;
use pgrx::{GucContext, GucFlags, GucRegistry, GucSetting, PostgresGucEnum};
use std::ffi::{c_char, c_void, CStr, CString};
use std::sync::atomic::{AtomicI64, Ordering};

/// `pg_shard_id.overflow`: what happens when a millisecond has no free remainder left.
#[derive(PostgresGucEnum, Clone, Copy, PartialEq, Eq, Debug)]
pub enum OverflowSetting {
    #[name = c"wait"]
    Wait,
    #[name = c"borrow"]
    Borrow,
}

static EPOCH_TEXT: GucSetting<Option<CString>> =
    GucSetting::<Option<CString>>::new(Some(c"2026-01-01 00:00:00+00"));
static OVERFLOW: GucSetting<OverflowSetting> =
    GucSetting::<OverflowSetting>::new(OverflowSetting::Wait);
static MAX_SEQUENCES: GucSetting<i32> = GucSetting::<i32>::new(8192);

/// Smallest and largest `pg_shard_id.max_sequences`.
pub const MAX_SEQUENCES_RANGE: (i32, i32) = (16, 1 << 20);

/// The epoch in Unix ms, kept in step with `pg_shard_id.epoch` by its assign hook so that
/// generation never parses text. Backend-local like every setting (an atomic only to be a safe
/// `static`).
static EPOCH_UNIX_MS: AtomicI64 = AtomicI64::new(DEFAULT_EPOCH_UNIX_MS);

/// The epoch in force, in Unix milliseconds.
pub fn epoch_unix_ms() -> i64 {
    EPOCH_UNIX_MS.load(Ordering::Relaxed)
}

/// The overflow policy in force.
pub fn overflow() -> Overflow {
    match OVERFLOW.get() {
        OverflowSetting::Wait => Overflow::Wait,
        OverflowSetting::Borrow => Overflow::Borrow,
    }
}

/// The overflow policy's name, as `SHOW` prints it.
pub fn overflow_name() -> &'static str {
    match OVERFLOW.get() {
        OverflowSetting::Wait => "wait",
        OverflowSetting::Borrow => "borrow",
    }
}

/// Slots in the cluster-wide guard table (fixed at server start).
pub fn max_sequences() -> usize {
    MAX_SEQUENCES
        .get()
        .clamp(MAX_SEQUENCES_RANGE.0, MAX_SEQUENCES_RANGE.1) as usize
}

unsafe fn text_of(value: *const c_char) -> String {
    if value.is_null() {
        String::new()
    } else {
        unsafe { CStr::from_ptr(value) }
            .to_string_lossy()
            .into_owned()
    }
}

/// Refuses an epoch that is unparseable, lacks a UTC offset, is finer than a millisecond or is in
/// the future. PostgreSQL reports the refusal with SQLSTATE 22023 and nothing changes.
#[pg_guard]
unsafe extern "C-unwind" fn check_epoch(
    newval: *mut *mut c_char,
    _extra: *mut *mut c_void,
    _source: pg_sys::GucSource::Type,
) -> bool {
    let text = unsafe { text_of(*newval) };
    match parse_epoch(&text, wall_clock_unix_ms()) {
        Ok(_) => true,
        Err(e) => {
            let detail = CString::new(e.to_string()).unwrap_or_default();
            unsafe {
                pg_sys::GUC_check_errcode(PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE as i32);
                pg_sys::GUC_check_errdetail_string = pg_sys::pstrdup(detail.as_ptr());
            }
            false
        }
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn assign_epoch(newval: *const c_char, _extra: *mut c_void) {
    // The check hook accepted the value moments ago. Parse with no upper bound: an assign hook
    // must not fail, and a value that was accepted stays in force when it is re-assigned later
    // (e.g. on transaction abort).
    if let Ok(ms) = parse_epoch(&unsafe { text_of(newval) }, i64::MAX) {
        EPOCH_UNIX_MS.store(ms, Ordering::Relaxed);
    }
}

#[cfg(feature = "pg_test")]
static TEST_CLOCK_OFFSET_MS: GucSetting<f64> = GucSetting::<f64>::new(0.0);

/// Test builds only: milliseconds added to the wall clock, to step it back and forth.
#[cfg(feature = "pg_test")]
pub fn test_clock_offset_ms() -> i64 {
    TEST_CLOCK_OFFSET_MS.get() as i64
}

/// Defines the settings. Called once from `_PG_init`.
pub fn register() {
    unsafe {
        GucRegistry::define_string_guc_with_hooks(
            c"pg_shard_id.epoch",
            c"Start of time for the 41-bit millisecond field of shard ids.",
            c"A timestamp with an explicit UTC offset, not in the future. Changing it changes the \
              timestamp that every existing id decodes to.",
            &EPOCH_TEXT,
            GucContext::Suset,
            GucFlags::default(),
            Some(check_epoch),
            Some(assign_epoch),
            None,
        );
    }
    GucRegistry::define_enum_guc(
        c"pg_shard_id.overflow",
        c"What next_shard_id does when 1024 ids of one sequence share a millisecond.",
        c"wait: wait for the next millisecond (timestamps stay true, at most 1024 ids per ms per \
          sequence). borrow: use the next millisecond at once (timestamps may run ahead of the clock).",
        &OVERFLOW,
        GucContext::Suset,
        GucFlags::default(),
    );
    // A PGC_POSTMASTER setting can only be defined while the postmaster loads the library
    // (defining it later is FATAL); without preloading the per-session table uses the default.
    if unsafe { pg_sys::process_shared_preload_libraries_in_progress } {
        define_max_sequences();
    }
    #[cfg(feature = "pg_test")]
    GucRegistry::define_float_guc(
        c"pg_shard_id.test_clock_offset_ms",
        c"TEST BUILDS ONLY: milliseconds added to the wall clock.",
        c"Exists only when the extension is compiled with the pg_test feature.",
        &TEST_CLOCK_OFFSET_MS,
        -1e13,
        1e13,
        GucContext::Suset,
        GucFlags::default(),
    );
    unsafe { reserve_prefix() };
}

fn define_max_sequences() {
    GucRegistry::define_int_guc(
        c"pg_shard_id.max_sequences",
        c"Sequences the cluster-wide uniqueness guard can track at once.",
        c"One slot of 176 bytes of shared memory per sequence. Needs a restart.",
        &MAX_SEQUENCES,
        MAX_SEQUENCES_RANGE.0,
        MAX_SEQUENCES_RANGE.1,
        GucContext::Postmaster,
        GucFlags::default(),
    );
}

#[cfg(any(feature = "pg13", feature = "pg14"))]
unsafe fn reserve_prefix() {
    unsafe { pg_sys::EmitWarningsOnPlaceholders(c"pg_shard_id".as_ptr()) }
}

#[cfg(not(any(feature = "pg13", feature = "pg14")))]
unsafe fn reserve_prefix() {
    unsafe { pg_sys::MarkGUCPrefixReserved(c"pg_shard_id".as_ptr()) }
}
