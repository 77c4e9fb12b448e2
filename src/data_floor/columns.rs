//! Which columns a sequence's ids may be stored in: the catalog query `sql/data_floor_columns.sql`,
//! run without a lock, with the latest snapshot, under `search_path = pg_catalog, pg_temp`.

use pgrx::prelude::*;
use std::ffi::CString;

/// Why no index can say what a column holds: the data floor then jumps ahead
/// ([`super::JUMP_MS`]) for its sequence, and `shard_id_check()` names the column and the reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CannotTell {
    /// The default is not the `next_shard_id` call itself (a cast to another type, a wrapper
    /// such as `coalesce` or `shard_id_mask`, a function of the user's own that calls it): the
    /// stored values may not be the ids as issued.
    Expression,
    /// The column is not `bigint` (or a domain over it).
    Type,
    /// Another session's temporary table: its rows are in that session's buffers.
    Temporary,
    /// A view, a foreign table, a materialized view, or a table of another access method.
    Relation,
    /// No valid, non-partial btree index has the column first (and the table holds rows).
    NoIndex,
    /// Another transaction holds a lock on the table or its index (a first id never waits).
    Locked,
    /// The end of the index is covered by more dead entries than one read visits.
    DeadEntries,
}

impl CannotTell {
    /// What to tell the user, after the column's name.
    pub fn why(self) -> &'static str {
        match self {
            CannotTell::Expression => "its DEFAULT is not the plain next_shard_id call",
            CannotTell::Type => "not bigint",
            CannotTell::Temporary => "another session's temporary table",
            CannotTell::Relation => {
                "not a heap table (a view, foreign table or other access method)"
            }
            CannotTell::NoIndex => "no btree index has it as first column",
            CannotTell::Locked => "locked by another transaction when read",
            CannotTell::DeadEntries => "too many dead index entries at the top of the index",
        }
    }

    fn from_sql(code: &str) -> CannotTell {
        match code {
            "expression" => CannotTell::Expression,
            "type" => CannotTell::Type,
            "temporary" => CannotTell::Temporary,
            _ => CannotTell::Relation,
        }
    }
}

/// One column whose default draws from the sequence, in one leaf relation.
pub struct Column {
    pub relation: pg_sys::Oid,
    /// The sequence its DEFAULT names; `None`: it names none (the sequence comes from text at run
    /// time), so it counts for every sequence.
    pub sequence: Option<pg_sys::Oid>,
    /// `schema.table.column`, for messages.
    pub name: String,
    /// Why no index can be read, when the catalog alone says so.
    pub cannot_tell: Option<CannotTell>,
    /// The btree index whose first column it is, if any, and whether it sorts descending.
    pub index: Option<(pg_sys::Oid, bool)>,
    /// The shard number its `next_shard_id(seq, N)` call names (`None`: another shape).
    pub shard: Option<i64>,
    /// The DEFAULT is the node form, `next_shard_id(seq)`: the server's node number is its shard.
    pub node_form: bool,
}

impl Column {
    /// The shard number its DEFAULT issues on this server, whose node number (for the node form)
    /// is `node`; `None` when it cannot be told.
    pub fn shard_number(&self, node: Option<i64>) -> Option<i64> {
        self.shard.or(node.filter(|_| self.node_form))
    }
}

const COLUMNS_SQL: &str = include_str!("../../sql/data_floor_columns.sql");

/// The columns (leaf partitions expanded) whose default calls `next_shard_id` with `sequence`
/// (`None`: with any sequence), including those whose DEFAULT names no sequence, in tables whose
/// owner may draw from the sequence: the columns the data floor reads.
pub fn columns_of(sequence: Option<pg_sys::Oid>) -> Vec<Column> {
    columns_by_owner(sequence).0
}

/// Every column [`columns_of`] would find if the owner's privilege did not matter, split in two:
/// those whose table's owner may draw from the sequence (USAGE or UPDATE on it), which the data
/// floor reads, and the others, which it does not (a role that may not draw from a sequence
/// cannot move its ids with a table of its own), and which `shard_id_check()` names when they
/// hold rows, since new ids can repeat those.
///
/// A column reached through two tables (a partition with a DEFAULT of its own, under its parent)
/// is read when either table's owner may draw, and is listed once among the others.
pub fn columns_by_owner(sequence: Option<pg_sys::Oid>) -> (Vec<Column>, Vec<Column>) {
    let (read, others): (Vec<_>, Vec<_>) = query(sequence)
        .into_iter()
        .partition(|(_, owner_may_draw)| *owner_may_draw);
    let read: Vec<Column> = read.into_iter().map(|(c, _)| c).collect();
    let mut not_read: Vec<Column> = Vec::new();
    for (column, _) in others {
        let same = |c: &Column| c.relation == column.relation && c.name == column.name;
        if !read.iter().any(same) && !not_read.iter().any(same) {
            not_read.push(column);
        }
    }
    (read, not_read)
}

/// The query's rows: each column, and whether its table's owner may draw from the sequence.
fn query(sequence: Option<pg_sys::Oid>) -> Vec<(Column, bool)> {
    let sql = CString::new(COLUMNS_SQL).expect("no NUL in the query");
    Spi::connect(|_client| {
        crate::scoped::with_setting(c"search_path", c"pg_catalog, pg_temp", || {
            // SAFETY: SPI is connected (Spi::connect); inside pgrx's guard, so an ERROR unwinds
            // and the transaction's abort undoes SPI. Every datum is copied into Rust before
            // SPI_finish frees it.
            unsafe {
                let mut types = [pg_sys::OIDOID];
                let plan = pg_sys::SPI_prepare(sql.as_ptr(), 1, types.as_mut_ptr());
                if plan.is_null() {
                    error!("pg_shard_id: preparing the data floor's catalog query failed");
                }
                let mut values = [pg_sys::Datum::from(sequence.unwrap_or(pg_sys::InvalidOid))];
                let nulls = [if sequence.is_some() { b' ' } else { b'n' } as std::ffi::c_char];
                let status = pg_sys::SPI_execute_snapshot(
                    plan,
                    values.as_mut_ptr(),
                    nulls.as_ptr(),
                    pg_sys::GetLatestSnapshot(),
                    std::ptr::null_mut(),
                    true,
                    false,
                    0,
                );
                if status != pg_sys::SPI_OK_SELECT as i32 {
                    error!("pg_shard_id: the data floor's catalog query failed ({status})");
                }
                read_rows()
            }
        })
    })
}

/// The rows of the last SPI query, as [`Column`]s with their `owner_may_draw`.
///
/// # Safety
/// Right after `SPI_execute_snapshot` of `COLUMNS_SQL` succeeded.
unsafe fn read_rows() -> Vec<(Column, bool)> {
    // SAFETY: the caller's contract: SPI_tuptable holds SPI_processed rows of the query's shape.
    unsafe {
        let table = pg_sys::SPI_tuptable;
        let get = |row: usize, column: i32| {
            let mut null = false;
            let datum =
                pg_sys::SPI_getbinval(*(*table).vals.add(row), (*table).tupdesc, column, &mut null);
            (datum, null)
        };
        let oid = |(d, null): (pg_sys::Datum, bool)| pg_sys::Oid::from_datum(d, null);
        let text = |(d, null): (pg_sys::Datum, bool)| String::from_datum(d, null);
        (0..pg_sys::SPI_processed as usize)
            .map(|row| {
                let column = Column {
                    relation: oid(get(row, 1)).unwrap_or_default(),
                    sequence: oid(get(row, 2)),
                    name: text(get(row, 3)).unwrap_or_default(),
                    cannot_tell: text(get(row, 4)).map(|code| CannotTell::from_sql(&code)),
                    index: oid(get(row, 5)).map(|index| {
                        (
                            index,
                            bool::from_datum(get(row, 6).0, get(row, 6).1).unwrap_or(false),
                        )
                    }),
                    shard: i64::from_datum(get(row, 7).0, get(row, 7).1),
                    node_form: bool::from_datum(get(row, 8).0, get(row, 8).1).unwrap_or(false),
                };
                let owner_may_draw = bool::from_datum(get(row, 9).0, get(row, 9).1).unwrap_or(true);
                (column, owner_may_draw)
            })
            .collect()
    }
}
