//! The lease on the server's side: the file in the data directory, the WAL record that carries it
//! to crash recovery, standbys and restores, and what a starting server makes of both.
//!
//! The rule (see `pg_shard_id_core::lease`): no id is issued above the lease in force,
//! `SlotTable::lease`. Extending it writes the file, then a WAL record of this extension's own
//! resource manager, flushes that record, and only then publishes the new value. So every id that
//! can be in a committed row (whose commit record comes later in the WAL) is covered by a lease
//! record that any server replaying that WAL has replayed first:
//!
//! * crash recovery replays the records after the last checkpoint; the file holds the rest;
//! * a streaming standby replays every record as it comes, writes it to its own file (so a
//!   restart from a restartpoint keeps it) and raises its table's floor, so a promoted standby
//!   starts above every id its WAL could hold;
//! * point-in-time recovery replays the archive over the base backup's copy of the file.
//!
//! Only with `shared_preload_libraries` (guard mode `cluster`): the resource manager must be
//! registered while the postmaster loads libraries. A server that replays these records without
//! the library stops recovery with PostgreSQL's own error, "resource manager with ID 211 not
//! registered", and the hint to put the library in `shared_preload_libraries` (README, "Replicas
//! and backups").

use crate::settings;
use pg_shard_id_core::lease::{self, Level, Record, LEASE_FILE};
use pg_shard_id_core::slots::SlotTable;
use pg_shard_id_core::time::format_unix_ms;
use pgrx::prelude::*;
use std::ffi::CString;
use std::path::Path;

/// This extension's custom WAL resource manager id.
///
/// The PostgreSQL wiki's registry ("CustomWALResourceManagers") asks extensions to develop with
/// 128 (`RM_EXPERIMENTAL_ID`) and, close to release, to pick an id nobody has listed and add it
/// there. 211 is not listed in the newest copy of that page we could read (128-140 and 241 are
/// taken); it must be added to the page before a release (this project's machines cannot reach
/// it). The id is in every record written, so it can never change once released.
pub const RMGR_ID: u8 = 211;
const RMGR_NAME: &std::ffi::CStr = c"pg_shard_id";
/// The one record type: "the lease is now at least this". The low 4 bits of `xl_info` belong to
/// PostgreSQL (`XLR_INFO_MASK`).
const XLOG_LEASE: u8 = 0x10;

/// Registers the resource manager. Call from `_PG_init` while shared_preload_libraries load.
pub fn register_wal() {
    let rmgr = pg_sys::RmgrData {
        rm_name: RMGR_NAME.as_ptr(),
        rm_redo: Some(redo),
        rm_desc: Some(desc),
        rm_identify: Some(identify),
        ..Default::default()
    };
    // SAFETY: called by _PG_init during shared_preload_libraries, as RegisterCustomRmgr requires;
    // PostgreSQL copies the struct, and the name it points to is a static.
    unsafe { pg_sys::RegisterCustomRmgr(RMGR_ID, &raw const rmgr as _) };
}

/// Makes the lease cover `unix_ms` before an id at that millisecond is returned (see the module
/// docs); returns whether this call wrote it (false: another backend's lease already covers it).
/// Raises 58030 when the file cannot be written; a WAL error is PostgreSQL's own.
#[cold]
#[inline(never)]
pub fn extend(table: &SlotTable, unix_ms: i64, epoch_unix_ms: i64) -> bool {
    let written = lease::cover(
        Path::new(LEASE_FILE),
        table.lease(),
        unix_ms,
        epoch_unix_ms,
        |record| {
            log_record(record);
            Ok(())
        },
    );
    match written {
        Ok(true) => {
            table.count_lease_write();
            true
        }
        Ok(false) => false,
        Err(e) => crate::errors::raise_with_hint(
            PgSqlErrorCode::ERRCODE_IO_ERROR,
            format!("pg_shard_id: could not write the lease file \"{LEASE_FILE}\": {e}"),
            "Every id is recorded in the lease before it is used; check the data directory.",
        ),
    }
}

/// Writes and flushes the WAL record of `record`. Only on a server that can write WAL: ids are
/// drawn after `nextval`, which refuses on a standby and in a read-only transaction.
fn log_record(record: &Record) {
    let bytes = record.to_wal_bytes();
    // SAFETY: the documented insertion protocol; the data outlives XLogInsert, which copies it.
    unsafe {
        pg_sys::XLogBeginInsert();
        pg_sys::XLogRegisterData(
            bytes.as_ptr() as *mut std::ffi::c_char as _,
            bytes.len() as _,
        );
        let lsn = pg_sys::XLogInsert(RMGR_ID, XLOG_LEASE);
        pg_sys::XLogFlush(lsn);
    }
}

/// The record in a WAL record being replayed or described.
///
/// # Safety
/// `record` must be the reader state PostgreSQL passes to a resource manager's callbacks.
unsafe fn record_of(record: *mut pg_sys::XLogReaderState) -> Option<Record> {
    // SAFETY: the caller's contract: a decoded record with its main data.
    unsafe {
        let decoded = (*record).record;
        let data = (*decoded).main_data;
        let len = (*decoded).main_data_len as usize;
        if data.is_null() {
            return None;
        }
        Record::from_wal_bytes(std::slice::from_raw_parts(data.cast::<u8>(), len))
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn redo(record: *mut pg_sys::XLogReaderState) {
    // SAFETY: PostgreSQL calls redo with the record being replayed.
    let Some(replayed) = (unsafe { record_of(record) }) else {
        error!("pg_shard_id: a lease WAL record that is not 16 bytes; was it written by another extension with resource manager id {RMGR_ID}?");
    };
    let merged = match lease::write_replayed(Path::new(LEASE_FILE), replayed) {
        Ok(merged) => merged,
        Err(e) => error!(
            "pg_shard_id: could not write the lease file \"{LEASE_FILE}\" while replaying WAL: {e}"
        ),
    };
    if let Some(table) = crate::shmem::shared_table() {
        adopt(&table, merged);
    }
}

/// Makes the shared table follow a lease record that is now in force: the lease, the floor one
/// past it, and a refusal if this server's epoch is later than the recorded one.
fn adopt(table: &SlotTable, record: Record) {
    let epoch = settings::epoch_unix_ms();
    table.put_lease_in_force(
        record.lease_unix_ms,
        Some(record.lease_unix_ms.saturating_sub(epoch).saturating_add(1)),
        record.epoch_unix_ms.filter(|&recorded| recorded < epoch),
    );
}

#[pg_guard]
unsafe extern "C-unwind" fn desc(buf: pg_sys::StringInfo, record: *mut pg_sys::XLogReaderState) {
    // SAFETY: PostgreSQL passes the record being described.
    let text = match unsafe { record_of(record) } {
        Some(r) => format!(
            "lease {} epoch {}",
            format_unix_ms(r.lease_unix_ms),
            r.epoch_unix_ms
                .map_or("unknown".to_string(), format_unix_ms)
        ),
        None => "malformed".to_string(),
    };
    let text = CString::new(text).unwrap_or_default();
    // SAFETY: `buf` is PostgreSQL's StringInfo for the description; the text is NUL-terminated.
    unsafe { pg_sys::appendStringInfoString(buf, text.as_ptr()) };
}

#[pg_guard]
unsafe extern "C-unwind" fn identify(info: u8) -> *const std::ffi::c_char {
    if info & !(pg_sys::XLR_INFO_MASK as u8) == XLOG_LEASE {
        c"LEASE".as_ptr()
    } else {
        std::ptr::null()
    }
}

/// Reads the lease file into a new shared table: its floor, the lease in force, an epoch that
/// moved. Never fails: a damaged file becomes a safe floor and a WARNING (an id helper must never
/// keep the database from starting). Called from the shared-memory start-up hook.
pub fn start(table: &SlotTable) {
    let epoch = settings::epoch_unix_ms();
    let path = Path::new(LEASE_FILE);
    let found = lease::read(path);
    if found == lease::Found::Missing {
        table.mark_started_without_lease();
    }
    let plan = lease::plan_start(found, epoch, crate::clock::now_unix_ms());
    for (level, message) in &plan.messages {
        match level {
            Level::Log => log!("{message}"),
            Level::Warning => warning!("{message}"),
        }
    }
    table.put_lease_in_force(
        plan.lease_unix_ms,
        plan.floor_unix_ms.map(|floor| floor.saturating_sub(epoch)),
        plan.refused_epoch_unix_ms,
    );
    if let Some(record) = plan.write {
        if let Err(e) = lease::write(path, &record) {
            warning!(
                "pg_shard_id: could not write the lease file \"{LEASE_FILE}\": {e}; \
                 next_shard_id fails with SQLSTATE 58030 until it can be written"
            );
        }
    }
}
