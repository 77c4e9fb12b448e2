//! `next_shard_id_at`: unique ids at past times, for history, imports and converting a table's
//! keys (issue 37). The reservation logic is plain Rust (`pg_shard_id_core::backfill`); this
//! module gives it the database: the sequence's columns and their indexes, transaction ids, the
//! clock, privileges and errors.
//!
//! Why an id at a past millisecond is unique:
//! * **Against the DEFAULT's ids**: the time must be at least [`LIVE_MARGIN_MS`] before the
//!   clock, and the sequence's guard is raised above it first, so no DEFAULT id drawn from then
//!   on is at it. A DEFAULT id drawn before is in an index once its transaction ends; until then
//!   (a slow trigger, a long statement, an open transaction) its transaction's record says so,
//!   and the call waits for it or stays below it (`crate::open_draws`, issue 55).
//! * **Against stored ids**: the remainders of that millisecond and shard in the index of every
//!   column whose DEFAULT draws from the sequence (the data floor's columns) are read, counting
//!   rows being inserted, deleted or dead. A column no index can read exactly is refused.
//!   A reservation another call holds is let go only for rows that can no longer go while their
//!   transaction runs (`Count::Kept`): a row stored in a savepoint still open does not free it.
//! * **Against other calls**, in any session: the shared reservations (`pg_shard_id_core::backfill`).

use crate::data_floor::{columns_of, remainders_in, Column, Count, Locking};
use crate::decode::ms_since_epoch;
use crate::errors;
use crate::generate::nextval_internal;
use crate::{clock, settings, shmem};
use pg_shard_id_core::backfill::{draw, widen_xid, Database, DrawError, MsKey, Remainders, Taker};
use pg_shard_id_core::layout::{check_shard, compose, seq_field, IdParts, LayoutError};
use pg_shard_id_core::slots::{database_of, sequence_of, slot_key};
use pg_shard_id_core::time::format_unix_ms;
use pgrx::pg_sys::panic::ErrorReport;
use pgrx::prelude::*;
use std::cell::RefCell;

/// How far behind the clock the newest time `next_shard_id_at` accepts is: 1 second. Ids from
/// then on belong to the DEFAULT.
pub const LIVE_MARGIN_MS: i64 = 1_000;

/// An id of sequence `seq` and logical shard `shard` at time `ts` (a time at least 1 second in
/// the past), unique by construction: for history, imports and converting a table's keys.
///
/// ```sql
/// next_shard_id_at(seq regclass, shard integer, ts timestamptz) RETURNS bigint
///     VOLATILE STRICT PARALLEL UNSAFE
/// ```
///
/// The id is in `ts`'s millisecond, or the first later one with a free remainder when all 1,024
/// of it are taken (never earlier). It equals no id stored in a column whose DEFAULT draws from
/// `seq` (read from their indexes), none the DEFAULT issues, and none another call hands out in
/// any session while the transaction that drew it runs. Store the id in the transaction that
/// draws it, in one of those columns. The remainder search starts at `nextval(seq) % 1024`, so
/// the sequence's privileges apply.
///
/// ```sql
/// INSERT INTO photos (id, url, created_at)
/// SELECT next_shard_id_at('photos_id_seq', 5, created_at), url, created_at FROM old_photos;
/// ```
///
/// Errors: 22003 for a shard outside 0..8191; 22008 for a time before the epoch, past the
/// horizon, or infinite; 22023 for a time less than 1 second before the clock; whatever
/// `nextval(seq)` raises (42809, 42501, 25006, 2200H); 55000 without `shared_preload_libraries`,
/// when no column draws from `seq`, or when one cannot be read exactly (named, with why); 54000
/// when every remainder up to 1 second ago is taken, or the shared reservations are all held by
/// transactions that have not stored their ids.
#[pg_extern(sql = r#"
CREATE FUNCTION next_shard_id_at("seq" regclass, "shard" integer, "ts" timestamptz) RETURNS bigint
    VOLATILE STRICT PARALLEL UNSAFE
    LANGUAGE c AS 'MODULE_PATHNAME', 'next_shard_id_at_wrapper';
"#)]
fn next_shard_id_at(seq: pg_sys::Oid, shard: i32, ts: TimestampWithTimeZone) -> i64 {
    let epoch = settings::epoch_unix_ms();
    let shard = check_shard(i64::from(shard)).unwrap_or_else(|e| errors::raise(e, epoch));
    let ms = ms_since_epoch(ts, epoch, false);
    if ms < 0 {
        errors::raise(LayoutError::BeforeEpoch(ms), epoch);
    }
    let last_ms = clock::now_since_epoch(epoch) - LIVE_MARGIN_MS;
    if ms > last_ms {
        ErrorReport::new(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            "pg_shard_id: next_shard_id_at takes times at least 1 second in the past",
            "pg_shard_id",
        )
        .set_detail(format!(
            "It was given {}; the clock reads {}.",
            format_unix_ms(ms + epoch),
            format_unix_ms(last_ms + LIVE_MARGIN_MS + epoch)
        ))
        .set_hint(
            "Ids from 1 second ago on belong to the DEFAULT next_shard_id(seq, shard): use it for \
             rows made now.",
        )
        .report(PgLogLevel::ERROR);
    }
    let Some(table) = shmem::reservations() else {
        errors::raise_with_hint(
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            "pg_shard_id: next_shard_id_at needs pg_shard_id in shared_preload_libraries".into(),
            "Its reservations are shared by every session; without them two sessions could \
             hand out the same id. Add pg_shard_id to shared_preload_libraries and restart.",
        );
    };
    // SAFETY: PostgreSQL's own function (declared in crate::generate); inside pgrx's guard, its ERRORs
    // are caught and re-raised at the boundary.
    let value = unsafe { pg_sys::ffi::pg_guard_ffi_boundary(|| nextval_internal(seq, true)) };
    // SAFETY: backend globals; the top-level transaction id is assigned here if the transaction
    // has none (nextval has just written, so this is a read-write transaction). The savepoint the
    // call runs in is named by its id if it has one already: its rows carry it, and they let the
    // reservation go (`Database::kept`). One without an id is not given one here: a plpgsql
    // EXCEPTION block per row (the conversion's fill trigger) would use an id per row, and past
    // 64 of them every snapshot of the server reads pg_subtrans while the transaction runs.
    let (database, taker) = unsafe {
        let top = pg_sys::GetTopFullTransactionId().value;
        // (after the top level's: outside any savepoint, this is it)
        let level = pg_sys::GetCurrentFullTransactionIdIfAny().value;
        let taker = Taker {
            top,
            level: (level != 0).then_some(level),
        };
        (pg_sys::MyDatabaseId, taker)
    };
    let key = MsKey {
        sequence: slot_key(database.to_u32(), seq.to_u32()),
        shard: shard as u16,
        ms,
    };
    let start = seq_field(value) as u16;
    // the DEFAULT issues only above every millisecond this call may hand out, whatever the clock
    // does next (issue 50: a clock stepping back into a backfill's milliseconds)
    crate::issue::keep_above(key.sequence, last_ms, last_ms + LIVE_MARGIN_MS, epoch);
    // the caller reads only what it may (issues 50, 55): every table holding the sequence's ids,
    // before any index is opened and before a reservation is looked at (one made by a caller who
    // may read them would tell this one which ids are stored)
    with_columns(seq, |columns| {
        if let Some(column) = columns.iter().find(|c| !caller_may_read_ids_of(c.relation)) {
            refuse_unreadable(seq, column.relation);
        }
    });
    // DEFAULT ids whose rows are not in an index yet (a slow trigger, a long statement, an open
    // transaction): wait for their transactions, or stay below them (issue 55)
    let ceiling = crate::open_draws::settle(key.sequence, ms, last_ms);
    let mut db = Indexes { own: key.sequence };
    let drawn = match draw(table, key, start, taker, ceiling, &mut db) {
        Err(DrawError::PastLastMs) if ceiling < last_ms => {
            // every other transaction up to last_ms waited for; still below the caller's own
            let ceiling = crate::open_draws::wait_up_to(key.sequence, last_ms);
            if ceiling >= ms {
                draw(table, key, start, taker, ceiling, &mut db)
            } else {
                Err(DrawError::PastLastMs)
            }
        }
        drawn => drawn,
    };
    let (ms, remainder) = match drawn {
        Ok(found) => found,
        Err(e) => refuse(e, seq, ms, epoch),
    };
    let parts = IdParts {
        ms,
        shard,
        seq: i64::from(remainder),
    };
    compose(parts).unwrap_or_else(|e| errors::raise(e, epoch))
}

fn refuse(error: DrawError<String>, seq: pg_sys::Oid, ms: i64, epoch: i64) -> ! {
    let name = errors::relation_name(seq);
    match error {
        DrawError::Database(why) => errors::raise_with_hint(
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!("pg_shard_id: next_shard_id_at cannot tell which ids of sequence \"{name}\" are stored: {why}"),
            "Every column whose DEFAULT draws from the sequence must be readable: a bigint \
             column whose DEFAULT is the plain next_shard_id call, first in a valid btree index. \
             shard_id_check() names each column and what to fix.",
        ),
        DrawError::PastLastMs => errors::raise_with_hint(
            PgSqlErrorCode::ERRCODE_PROGRAM_LIMIT_EXCEEDED,
            format!(
                "pg_shard_id: every id of this shard of sequence \"{name}\" from {} to 1 second \
                 ago is taken",
                format_unix_ms(ms + epoch)
            ),
            "Each millisecond holds 1,024 ids per shard; spread the rows over other shards.",
        ),
        DrawError::NoRoom => errors::raise_with_hint(
            PgSqlErrorCode::ERRCODE_PROGRAM_LIMIT_EXCEEDED,
            "pg_shard_id: next_shard_id_at's shared reservations are all held by transactions \
             that have not stored their ids yet"
                .into(),
            "Store each id in the statement that draws it (INSERT ... SELECT, UPDATE ... SET), \
             or commit in smaller batches. Rows stored in a savepoint, of ids drawn outside it, \
             free no reservation while the savepoint is open (another session's: until it \
             commits).",
        ),
    }
}

/// Whether the caller may read every row of `relation`, a table whose column holds the sequence's
/// ids (for a partition: of it, or of a table it is a partition of, through which its rows are
/// read).
fn caller_may_read_ids_of(relation: pg_sys::Oid) -> bool {
    if crate::privilege::caller_may_read(relation) {
        return true;
    }
    // (only here, when the partition itself may not be read: its ancestors, from pg_inherits,
    // no lock taken)
    // SAFETY: a catalog lookup by oid inside a transaction.
    if !unsafe { pg_sys::get_rel_relispartition(relation) } {
        return false;
    }
    let ancestors = crate::read::one_with_args::<Vec<pg_sys::Oid>>(
        "SELECT pg_catalog.array_agg(a.relid::pg_catalog.oid) \
           FROM pg_catalog.pg_partition_ancestors($1::pg_catalog.regclass) a",
        &[relation.into()],
    )
    .ok()
    .flatten()
    .unwrap_or_default();
    ancestors
        .into_iter()
        .any(|a| a != relation && crate::privilege::caller_may_read(a))
}

/// 42501: a table holding the sequence's ids that the caller may not read. Its ids would go
/// unchecked if it were skipped, so the call refuses, naming it.
fn refuse_unreadable(sequence: pg_sys::Oid, relation: pg_sys::Oid) -> ! {
    let table = errors::qualified_relation_name(relation);
    errors::raise_with_hint(
        PgSqlErrorCode::ERRCODE_INSUFFICIENT_PRIVILEGE,
        format!(
            "pg_shard_id: next_shard_id_at must read the ids stored in {table}, which the caller \
             may not read (sequence \"{}\")",
            errors::relation_name(sequence)
        ),
        &format!(
            "It checks every table whose DEFAULT draws from the sequence, and reads only what the \
             caller may: GRANT SELECT ON {table} TO the role, with no row security hiding rows \
             from it, or call it as the table's owner."
        ),
    )
}

/// The indexes of the columns of each sequence, read for `draw`: of the caller's sequence `own`
/// (whose tables the caller was checked to may read), and of other sequences whose held
/// reservations `draw` would evict.
struct Indexes {
    own: pg_shard_id_core::slots::SlotKey,
}

impl Database for Indexes {
    type Error = String;

    fn stored(&mut self, key: MsKey) -> Result<Remainders, String> {
        self.read(key, Count::Entries)
    }

    fn kept(&mut self, key: MsKey, drawn_in: Option<u64>) -> Result<Remainders, String> {
        self.read(key, Count::Kept { drawn_in })
    }

    fn has_ended(&mut self, top: u64) -> bool {
        // SAFETY: plain calls into the transaction manager. A 64-bit id 2^31 or more behind the
        // next one is older than any running transaction, and its 32-bit form may name another.
        unsafe {
            let next = pg_sys::ReadNextFullTransactionId().value;
            next.saturating_sub(top) >= 1 << 31
                || !pg_sys::TransactionIdIsInProgress(pg_sys::TransactionId::from(top as u32))
        }
    }

    fn oldest_running(&mut self) -> u64 {
        // SAFETY: plain calls into the transaction manager, in a read-write transaction.
        unsafe {
            let next = pg_sys::ReadNextFullTransactionId().value;
            widen_xid(next, pg_sys::GetOldestActiveTransactionId().into_inner())
        }
    }
}

impl Indexes {
    /// The remainders of `key` in every column holding its sequence's ids, counted as `count`.
    fn read(&mut self, key: MsKey, count: Count) -> Result<Remainders, String> {
        // A key of another database (a held entry `draw` would evict): its tables are not
        // readable from here, and a sequence of the same oid here is another sequence.
        // SAFETY: a backend global, set at connection.
        if database_of(key.sequence) != unsafe { pg_sys::MyDatabaseId }.to_u32() {
            return Err("a sequence of another database".into());
        }
        let sequence = pg_sys::Oid::from(sequence_of(key.sequence));
        let low = compose(IdParts {
            ms: key.ms,
            shard: i64::from(key.shard),
            seq: 0,
        })
        .map_err(|e| e.to_string())?;
        let high = low + 1023;
        with_columns(sequence, |columns| {
            if columns.is_empty() {
                return Err(format!(
                    "no column's DEFAULT draws from it (declare the column the ids go to with \
                     DEFAULT next_shard_id('{}', shard) and a btree index on it first)",
                    errors::relation_name(sequence)
                ));
            }
            // the caller reads only what it may (issue 50): every column's table checked before
            // any index is opened, so that a refusal locks nothing. Another sequence's tables (a
            // reservation held by another role's backfill) are not the caller's business: they
            // are read without waiting for a lock and let go at once, and only to learn whether
            // that reservation may go; nothing of them reaches the caller (issue 55)
            let locking = if key.sequence == self.own {
                if let Some(column) = columns.iter().find(|c| !caller_may_read_ids_of(c.relation)) {
                    refuse_unreadable(sequence, column.relation);
                }
                Locking::Held
            } else {
                Locking::Briefly
            };
            let mut found = Remainders::default();
            for column in columns {
                // SAFETY: oids just read from the catalog, inside a transaction and pgrx's guard.
                let stored = unsafe { remainders_in(column, low, high, locking, count) }
                    .map_err(|why| format!("{} ({})", column.name, why.why()))?;
                found.union_with(&stored);
            }
            Ok(found)
        })
    }
}

/// The columns of one sequence, as long as no catalog change can have been seen since they were
/// read: the same transaction, command, and count of invalidation messages received.
struct Cached {
    sequence: pg_sys::Oid,
    valid_for: (u64, pg_sys::LocalTransactionId, pg_sys::CommandId),
    columns: Vec<Column>,
}

thread_local! {
    static CACHE: RefCell<Vec<Cached>> = const { RefCell::new(Vec::new()) };
}

fn with_columns<T>(sequence: pg_sys::Oid, f: impl FnOnce(&[Column]) -> T) -> T {
    // SAFETY: in a transaction. Invalidations are received at every lock a backend takes anew,
    // not at one it holds: a long INSERT ... SELECT would keep its list while another session
    // creates and fills a table drawing from the sequence. Receiving them here (a read of a
    // shared flag when there are none) makes the count below move when any catalog changed.
    unsafe { pg_sys::AcceptInvalidationMessages() };
    // SAFETY: backend globals, read in a transaction.
    let valid_for = unsafe {
        (
            pg_sys::SharedInvalidMessageCounter,
            crate::mask::local_transaction(),
            pg_sys::GetCurrentCommandId(false),
        )
    };
    // taken out while `f` runs: `f` reads indexes, and an ERROR there just drops it
    let cached = CACHE.with_borrow_mut(|cache| {
        cache.retain(|c| c.valid_for == valid_for);
        let hit = cache.iter().position(|c| c.sequence == sequence);
        hit.map(|i| cache.swap_remove(i))
    });
    let cached = cached.unwrap_or_else(|| Cached {
        sequence,
        valid_for,
        columns: columns_of(Some(sequence)),
    });
    let result = f(&cached.columns);
    CACHE.with_borrow_mut(|cache| cache.push(cached));
    result
}
