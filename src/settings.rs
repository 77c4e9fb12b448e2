//! The extension's settings (GUCs).
//!
//! | setting                       | who may change it                | default                  |
//! |-------------------------------|----------------------------------|--------------------------|
//! | `pg_shard_id.epoch`           | server start (postgresql.conf)   | `2026-01-01 00:00:00+00` |
//! | `pg_shard_id.overflow`        | superuser                        | `wait`                   |
//! | `pg_shard_id.max_sequences`   | server start                     | `8192`                   |
//! | `pg_shard_id.node`            | postgresql.conf, reload          | `-1` (not set)           |
//!
//! The epoch is a property of the whole installation, like Instagram's: no `SET`, `ALTER ROLE`,
//! `ALTER DATABASE` or `PGOPTIONS` can change it. Loaded from `shared_preload_libraries` it is a
//! `PGC_POSTMASTER` setting; otherwise (a setting of that kind can only be defined by the
//! postmaster) it is `PGC_SIGHUP` and frozen in each process once the library is loaded, so a
//! session never changes epoch half-way. A restart with a different epoch is checked against the
//! epoch recorded in the lease file (`lease`).
//!
//! `pg_shard_id.overflow` changes ids too, so it is `SUSET`: a superuser sets it in
//! `postgresql.conf`, `ALTER SYSTEM` or `ALTER ROLE` (for example a role that does bulk loads with
//! `borrow`); an ordinary user cannot.
//!
//! `pg_shard_id.node` is the shard field of `next_shard_id(seq)` (see `node`): what keeps one
//! server's ids apart from another's, so it is `PGC_SIGHUP` (postgresql.conf or `ALTER SYSTEM`
//! and a reload); no session, role or database can set it.

use pg_shard_id_core::guard::{Overflow, MAX_LEAD_MS};
use pg_shard_id_core::layout::{MAX_SHARD, SEQ_VALUES};
use pg_shard_id_core::slots::{BYTES_PER_SLOT, KEPT_PER_SLOT};
use pg_shard_id_core::time::{parse_epoch, DEFAULT_EPOCH, DEFAULT_EPOCH_UNIX_MS};
use pgrx::prelude::*;
use pgrx::{GucContext, GucEnum, GucFlags, GucRegistry, GucSetting, PostgresGucEnum};
use std::ffi::{c_char, c_void, CStr, CString};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

/// `pg_shard_id.overflow`: what happens when a millisecond has no free remainder left.
#[derive(PostgresGucEnum, Clone, Copy, PartialEq, Eq, Debug)]
pub enum OverflowSetting {
    #[name = c"wait"]
    Wait,
    #[name = c"borrow"]
    Borrow,
}

static EPOCH_TEXT: GucSetting<Option<CString>> =
    GucSetting::<Option<CString>>::new(Some(DEFAULT_EPOCH));
static OVERFLOW: GucSetting<OverflowSetting> =
    GucSetting::<OverflowSetting>::new(OverflowSetting::Wait);
static MAX_SEQUENCES: GucSetting<i32> = GucSetting::<i32>::new(8192);
static NODE: GucSetting<i32> = GucSetting::<i32>::new(-1);

/// Smallest and largest `pg_shard_id.max_sequences`.
pub const MAX_SEQUENCES_RANGE: (i32, i32) = (16, 1 << 20);

/// The epoch in Unix ms, kept in step with `pg_shard_id.epoch` by its assign hook so that
/// generation never parses text. Process-local like every setting (an atomic only to be a safe
/// `static`).
static EPOCH_UNIX_MS: AtomicI64 = AtomicI64::new(DEFAULT_EPOCH_UNIX_MS);
/// Without preloading: set once `_PG_init` has defined the epoch (and applied `postgresql.conf`),
/// and from then on this process refuses any other epoch. (Preloaded, the setting is
/// `PGC_POSTMASTER` and PostgreSQL itself refuses changes while `ALTER SYSTEM` still works.)
static EPOCH_FROZEN: AtomicBool = AtomicBool::new(false);

/// The epoch in force, in Unix milliseconds.
pub fn epoch_unix_ms() -> i64 {
    EPOCH_UNIX_MS.load(Ordering::Relaxed)
}

/// `pg_shard_id.overflow` is borrow: kept in step by the setting's assign hook, so that
/// generation reads one plain flag (`GucSetting::get` checks the thread on every read, which costs
/// a `__tls_get_addr` call per id, `bench/profile.sh`).
static OVERFLOW_BORROW: AtomicBool = AtomicBool::new(false);

/// The overflow policy in force.
#[inline]
pub fn overflow() -> Overflow {
    if OVERFLOW_BORROW.load(Ordering::Relaxed) {
        Overflow::Borrow
    } else {
        Overflow::Wait
    }
}

/// Keeps [`OVERFLOW_BORROW`] in step with `pg_shard_id.overflow`. Cannot fail.
unsafe extern "C-unwind" fn assign_overflow(newval: std::ffi::c_int, _extra: *mut c_void) {
    OVERFLOW_BORROW.store(
        newval == OverflowSetting::Borrow.to_ordinal(),
        Ordering::Relaxed,
    );
}

/// The overflow policy's name, as `SHOW` prints it.
pub fn overflow_name() -> &'static str {
    match OVERFLOW.get() {
        OverflowSetting::Wait => "wait",
        OverflowSetting::Borrow => "borrow",
    }
}

/// `pg_shard_id.node`: this server's node number, or -1 when it is not set.
pub fn node() -> i64 {
    i64::from(NODE.get())
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
        // SAFETY: PostgreSQL's GUC values are NUL-terminated C strings.
        unsafe { CStr::from_ptr(value) }
            .to_string_lossy()
            .into_owned()
    }
}

/// Refuses an epoch that is unparseable, lacks a UTC offset, is finer than a millisecond or is in
/// the future (SQLSTATE 22023), and any change once this process has frozen its epoch (55P02).
/// PostgreSQL reports the refusal and nothing changes.
#[pg_guard]
unsafe extern "C-unwind" fn check_epoch(
    newval: *mut *mut c_char,
    _extra: *mut *mut c_void,
    _source: pg_sys::GucSource::Type,
) -> bool {
    // SAFETY: PostgreSQL passes a valid pointer to the proposed value (a C string or NULL).
    let text = unsafe { text_of(*newval) };
    let refusal = match parse_epoch(&text) {
        Err(e) => (
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            e.to_string(),
        ),
        Ok(ms) if EPOCH_FROZEN.load(Ordering::Relaxed) && ms != epoch_unix_ms() => (
            PgSqlErrorCode::ERRCODE_CANT_CHANGE_RUNTIME_PARAM,
            "without shared_preload_libraries, pg_shard_id.epoch takes effect when a session loads \
             pg_shard_id: change it in postgresql.conf, for new sessions"
                .to_string(),
        ),
        Ok(_) => return true,
    };
    let detail = CString::new(refusal.1).unwrap_or_default();
    // SAFETY: the documented way for a check hook to report why it refused; the detail is copied
    // into PostgreSQL's memory.
    unsafe {
        pg_sys::GUC_check_errcode(refusal.0 as i32);
        pg_sys::GUC_check_errdetail_string = pg_sys::pstrdup(detail.as_ptr());
    }
    false
}

#[pg_guard]
unsafe extern "C-unwind" fn assign_epoch(newval: *const c_char, _extra: *mut c_void) {
    // The check hook accepted the value moments ago. Parse with no upper bound: an assign hook
    // must not fail, and a value that was accepted stays in force when it is re-assigned later
    // (e.g. on transaction abort).
    // SAFETY: PostgreSQL passes the accepted value (a C string or NULL).
    if let Ok(ms) = parse_epoch(&unsafe { text_of(newval) }) {
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

/// A description computed at start-up, kept for the life of the process as GUCs require.
fn leaked(text: String) -> &'static CStr {
    Box::leak(CString::new(text).unwrap_or_default().into_boxed_c_str())
}

/// Defines the settings. Called once from `_PG_init`.
pub fn register() {
    // SAFETY: read while PostgreSQL loads the library, in the process that loads it.
    let preloading = unsafe { pg_sys::process_shared_preload_libraries_in_progress };
    // A PGC_POSTMASTER setting can only be defined while the postmaster loads the library
    // (defining it later is FATAL).
    let epoch_context = if preloading {
        GucContext::Postmaster
    } else {
        GucContext::Sighup
    };
    // SAFETY: the hooks have the signatures PostgreSQL expects and never raise an ERROR.
    unsafe {
        GucRegistry::define_string_guc_with_hooks(
            c"pg_shard_id.epoch",
            c"Start of time for the millisecond field of shard ids; set once, at server start.",
            c"A timestamp with an explicit UTC offset. A restart with a later \
              epoch than the one recorded in the lease file is refused (new ids could repeat old \
              ones); an earlier one is allowed and logged.",
            &EPOCH_TEXT,
            epoch_context,
            GucFlags::default(),
            Some(check_epoch),
            Some(assign_epoch),
            None,
        );
    }
    if !preloading {
        EPOCH_FROZEN.store(true, Ordering::Relaxed);
    }
    // SAFETY: the assign hook has the signature PostgreSQL expects and cannot panic.
    unsafe {
        GucRegistry::define_enum_guc_with_hooks(
            c"pg_shard_id.overflow",
            leaked(format!(
            "What next_shard_id does when {SEQ_VALUES} ids of one sequence share a millisecond."
        )),
            leaked(format!(
            "wait: wait for the next millisecond (timestamps stay true, at most {SEQ_VALUES} ids \
             per ms per sequence). borrow: use the next millisecond at once (timestamps may run \
             up to {} s ahead of the clock).",
            MAX_LEAD_MS / 1000
        )),
            &OVERFLOW,
            GucContext::Suset,
            GucFlags::default(),
            None,
            Some(assign_overflow),
            None,
        );
    }
    GucRegistry::define_int_guc(
        c"pg_shard_id.node",
        c"This server's node number, the shard field of next_shard_id(seq).",
        leaked(format!(
            "0 to {MAX_SHARD}, distinct on every server that writes ids of the same tables; -1: \
             not set (on Citus the node's group id is used then)."
        )),
        &NODE,
        -1,
        MAX_SHARD as i32,
        GucContext::Sighup,
        GucFlags::default(),
    );
    // Without preloading the per-session table uses the default.
    if preloading {
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
    // SAFETY: called from _PG_init, after the settings are defined.
    unsafe { reserve_prefix() };
}

fn define_max_sequences() {
    GucRegistry::define_int_guc(
        c"pg_shard_id.max_sequences",
        c"Sequences the cluster-wide uniqueness guard tracks at once.",
        leaked(format!(
            "One slot per sequence, {BYTES_PER_SLOT} bytes of shared memory with room to keep \
             {KEPT_PER_SLOT} evicted sequences; when the 32 slots a sequence may use are taken, \
             their least recently used one is reused, safely, and the sequence it held comes \
             back without a catalog read while it is kept. Needs a restart."
        )),
        &MAX_SEQUENCES,
        MAX_SEQUENCES_RANGE.0,
        MAX_SEQUENCES_RANGE.1,
        GucContext::Postmaster,
        GucFlags::default(),
    );
}

unsafe fn reserve_prefix() {
    // SAFETY: a plain call with a static C string.
    unsafe { pg_sys::MarkGUCPrefixReserved(c"pg_shard_id".as_ptr()) }
}
