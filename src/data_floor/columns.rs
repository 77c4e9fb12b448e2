//! Which columns a sequence's ids may be stored in: the catalog query `sql/data_floor_columns.sql`,
//! run without a lock, with the latest snapshot, under `search_path = pg_catalog, pg_temp` (and
//! [`QUERY_SETTINGS`]). For one
//! sequence its cost does not grow with the database (issue 51), unless the database has defaults
//! that name no sequence: see [`query`].

use pg_shard_id_core::catalog_watch::Ticket;
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
    /// The shard number its `next_shard_id(seq, N)` call names (`None`: another shape). Read for
    /// every sequence only (`columns_by_owner(None)`: `shard_id_check()`); `None` for one.
    pub shard: Option<i64>,
    /// The DEFAULT is the node form, `next_shard_id(seq)`: the server's node number is its shard.
    /// Read for every sequence only, as `shard`.
    pub node_form: bool,
    /// The partitioned table whose RANGE partitions on this column bound the ids the leaf holds
    /// (`super::bounds`), if any.
    pub range_parent: Option<pg_sys::Oid>,
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
///
/// For one sequence in a database known to have no default that names no sequence
/// (`crate::catalog_watch`), the query reads only what `pg_depend` lists against the sequence,
/// with a plan this backend keeps; otherwise it reads every default of the database (and, for one
/// sequence, tells the watch whether any names no sequence).
fn query(sequence: Option<pg_sys::Oid>) -> Vec<(Column, bool)> {
    let Some(sequence) = sequence else {
        return run(Query::EveryDefault, None).0;
    };
    // every default, recording what it says when the watch gave a ticket for it
    let every_default = |ticket: Option<Ticket>| {
        let (rows, defaults_name_none) = run(Query::EveryDefault, Some(sequence));
        if let Some(ticket) = ticket {
            crate::catalog_watch::record(ticket, !defaults_name_none);
        }
        rows
    };
    match crate::catalog_watch::known() {
        Ok((true, at)) => {
            let rows = run(Query::NamingOnly, Some(sequence)).0;
            // asked again after the read: a change counted since the answer (one that ended
            // before the read's snapshot was taken among them) may be in what it read
            if crate::catalog_watch::unchanged_since(at) {
                rows
            } else {
                every_default(None)
            }
        }
        Ok((false, _)) => every_default(None),
        Err(ticket) => every_default(Some(ticket)),
    }
}

/// Which defaults the query reads.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Query {
    /// Every default of the database that calls `next_shard_id` (`$2` true): for every sequence,
    /// or for one in a database that may have defaults naming no sequence. Planned at each call.
    EveryDefault,
    /// Only the defaults that name the sequence (`$2` false). Its plan is kept for the backend's
    /// life, with `false` written in for `$2` and generic from the start: a generic plan cannot
    /// prune by a parameter's value, and with `$2` left a parameter it scanned `pg_proc` and the
    /// dependents of `next_shard_id` (7 ms a call at 20,000 tables, against 0.5 ms; planning
    /// alone is 6 ms, which a custom plan would pay at every call).
    NamingOnly,
}

/// The settings the query is planned and run under: no role's objects stand in for the
/// catalog's; and lookups through the catalogs' indexes, whatever the planner guesses, without
/// JIT. A generic plan's guesses of a catalog join's size follow the catalogs' statistics: once
/// 3,650 partitions were in a database of 20,000 tables, the kept plan for one sequence joined
/// `pg_attribute` by a scan (200 ms a call, against 0.6 ms), and with scans priced out its cost
/// passed JIT's threshold (90 ms of compiling a call).
/// The plan's kind is set too (a role or database may set `plan_cache_mode`): generic for the
/// kept plan, custom (planned with the sequence, or NULL) for the others.
const QUERY_SETTINGS: [(&std::ffi::CStr, &std::ffi::CStr); 5] = [
    (c"search_path", c"pg_catalog, pg_temp"),
    (c"enable_seqscan", c"off"),
    (c"enable_hashjoin", c"off"),
    (c"enable_mergejoin", c"off"),
    (c"jit", c"off"),
];

thread_local! {
    /// The kept plan of [`Query::NamingOnly`] (null until the first).
    static NAMING_ONLY_PLAN: std::cell::Cell<pg_sys::SPIPlanPtr> =
        const { std::cell::Cell::new(std::ptr::null_mut()) };
}

/// Runs the query for `sequence` (`None`: every sequence): its rows, and whether some default
/// names no sequence (known only for [`Query::EveryDefault`]).
fn run(which: Query, sequence: Option<pg_sys::Oid>) -> (Vec<(Column, bool)>, bool) {
    let plan_cache_mode = match which {
        Query::NamingOnly => c"force_generic_plan",
        Query::EveryDefault => c"force_custom_plan",
    };
    let mut settings = QUERY_SETTINGS.to_vec();
    settings.push((c"plan_cache_mode", plan_cache_mode));
    Spi::connect(|_client| {
        crate::scoped::with_settings(&settings, || {
            // SAFETY: SPI is connected (Spi::connect); inside pgrx's guard, so an ERROR unwinds
            // and the transaction's abort undoes SPI. A kept plan lives in its own memory
            // context (SPI_keepplan) until the backend ends. Every datum is copied into Rust
            // before SPI_finish frees it.
            unsafe {
                let plan = match which {
                    Query::NamingOnly => naming_only_plan(),
                    Query::EveryDefault => {
                        let sql = CString::new(COLUMNS_SQL).expect("no NUL in the query");
                        let mut types = [pg_sys::OIDOID, pg_sys::BOOLOID];
                        pg_sys::SPI_prepare(sql.as_ptr(), 2, types.as_mut_ptr())
                    }
                };
                if plan.is_null() {
                    error!("pg_shard_id: preparing the data floor's catalog query failed");
                }
                let mut values = [
                    pg_sys::Datum::from(sequence.unwrap_or(pg_sys::InvalidOid)),
                    pg_sys::Datum::from(true),
                ];
                let nulls = [
                    if sequence.is_some() { b' ' } else { b'n' } as std::ffi::c_char,
                    b' ' as _,
                ];
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

/// The kept plan of [`Query::NamingOnly`], made on first use.
///
/// # Safety
/// SPI is connected.
unsafe fn naming_only_plan() -> pg_sys::SPIPlanPtr {
    let kept = NAMING_ONLY_PLAN.get();
    if !kept.is_null() {
        return kept;
    }
    let sql = CString::new(COLUMNS_SQL.replace("$2", "false")).expect("no NUL in the query");
    let mut types = [pg_sys::OIDOID];
    // SAFETY: the caller's contract; a plan that could not be kept is not remembered.
    unsafe {
        let plan = pg_sys::SPI_prepare_cursor(
            sql.as_ptr(),
            1,
            types.as_mut_ptr(),
            pg_sys::CURSOR_OPT_GENERIC_PLAN as i32,
        );
        if plan.is_null() || pg_sys::SPI_keepplan(plan) != 0 {
            error!("pg_shard_id: preparing the data floor's catalog query failed");
        }
        NAMING_ONLY_PLAN.set(plan);
        plan
    }
}

/// The rows of the last SPI query, as [`Column`]s with their `owner_may_draw`, and whether some
/// default names no sequence.
///
/// # Safety
/// Right after `SPI_execute_snapshot` of `COLUMNS_SQL` succeeded.
unsafe fn read_rows() -> (Vec<(Column, bool)>, bool) {
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
        let defaults_name_none = pg_sys::SPI_processed > 0
            && bool::from_datum(get(0, 11).0, get(0, 11).1).unwrap_or(true);
        let rows = (0..pg_sys::SPI_processed as usize)
            // the one row of NULLs when no column counts
            .filter(|&row| !get(row, 1).1)
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
                    range_parent: oid(get(row, 10)),
                };
                let owner_may_draw = bool::from_datum(get(row, 9).0, get(row, 9).1).unwrap_or(true);
                (column, owner_may_draw)
            })
            .collect();
        (rows, defaults_name_none)
    }
}

#[cfg(any(test, feature = "pg_test"))]
#[pgrx::pg_schema]
#[allow(clippy::disallowed_methods)] // (tests)
mod tests {
    use super::{run, Query};
    use pgrx::prelude::*;

    /// Every shape of DEFAULT that names its sequence: plain, wrapped, the node form, a domain's
    /// (and a domain over it), a partition and an inheritance child, a function of the user's
    /// own with a text body or a SQL-standard one, a temporary table; plus columns that must not
    /// count (nextval, a view).
    const SHAPES: &str = r#"
        CREATE SCHEMA shapes;
        SELECT set_config('search_path', 'shapes, ' || current_setting('search_path'), true);
        CREATE SEQUENCE s1; CREATE SEQUENCE s2; CREATE SEQUENCE s3; CREATE SEQUENCE s4;
        CREATE SEQUENCE s5; CREATE SEQUENCE s6; CREATE SEQUENCE s7; CREATE SEQUENCE s8;
        CREATE SEQUENCE s9; CREATE SEQUENCE s10;
        CREATE TABLE t1 (id bigint PRIMARY KEY DEFAULT next_shard_id('s1', 1));
        CREATE TABLE t2 (a bigint DEFAULT next_shard_id('s1', 2),
                         b bigint DEFAULT next_shard_id('s2', 3) + 0,
                         c bigint DEFAULT nextval('s10'));
        CREATE DOMAIN d1 AS bigint DEFAULT next_shard_id('s3', 1);
        CREATE DOMAIN d2 AS d1;
        CREATE TABLE t3 (id d2 PRIMARY KEY);
        CREATE TABLE t3b (id d1, other d1 DEFAULT next_shard_id('s2', 4));
        CREATE TABLE p (id bigint DEFAULT next_shard_id('s4', 1), k int) PARTITION BY LIST (k);
        CREATE TABLE p1 PARTITION OF p FOR VALUES IN (1);
        CREATE TABLE p2 (id bigint, k int);
        ALTER TABLE p ATTACH PARTITION p2 FOR VALUES IN (2);
        CREATE TABLE parent (id bigint PRIMARY KEY DEFAULT next_shard_id('s5', 1));
        CREATE TABLE child () INHERITS (parent);
        CREATE FUNCTION f_text(regclass) RETURNS bigint LANGUAGE plpgsql
            AS $$ BEGIN RETURN next_shard_id($1, 1); END $$;
        CREATE TABLE t6 (id bigint DEFAULT f_text('s6'));
        CREATE FUNCTION f_std(s regclass) RETURNS bigint RETURN next_shard_id(s, 2);
        CREATE TABLE t7 (id bigint DEFAULT f_std('s7'));
        CREATE TABLE t8 (id bigint PRIMARY KEY DEFAULT next_shard_id('s8'));
        CREATE VIEW v1 AS SELECT * FROM t1;
        CREATE TEMP TABLE tt (id bigint DEFAULT next_shard_id('s1', 9));
    "#;

    /// What a run found, comparable: every field of every column, sorted.
    fn found(which: Query, sequence: pg_sys::Oid) -> (Vec<String>, bool) {
        let (rows, defaults_name_none) = run(which, Some(sequence));
        let mut rows: Vec<String> = rows
            .into_iter()
            .map(|(c, owner_may_draw)| {
                format!(
                    "{} {:?} {:?} {:?} {:?} {} {}",
                    c.name,
                    c.sequence,
                    c.cannot_tell,
                    c.index,
                    c.shard,
                    c.node_form,
                    owner_may_draw
                )
            })
            .collect();
        rows.sort();
        (rows, defaults_name_none)
    }

    /// Issue 51: the query for one sequence, which reads only what `pg_depend` lists against it,
    /// finds for every sequence exactly what the query over every default finds, in a database
    /// whose defaults all name their sequence (the one case it is used in: the catalog watch).
    #[pg_test]
    fn the_query_for_one_sequence_finds_what_the_query_over_every_default_finds() {
        Spi::run(SHAPES).unwrap();
        let sequences: Vec<(String, pg_sys::Oid)> = Spi::connect(|c| {
            c.select(
                "SELECT relname::text, oid FROM pg_class WHERE relkind = 'S'
                    AND relnamespace = 'shapes'::regnamespace ORDER BY relname",
                None,
                &[],
            )
            .unwrap()
            .map(|r| (r.get(1).unwrap().unwrap(), r.get(2).unwrap().unwrap()))
            .collect()
        });
        assert_eq!(sequences.len(), 10);
        let mut counted = 0;
        for (name, oid) in &sequences {
            let (every, some_name_none) = found(Query::EveryDefault, *oid);
            assert!(
                !some_name_none,
                "every default of SHAPES names its sequence"
            );
            let (one, _) = found(Query::NamingOnly, *oid);
            assert_eq!(one, every, "sequence {name}");
            counted += one.len();
            if name != "s9" && name != "s10" {
                assert!(!one.is_empty(), "{name} has columns");
            }
        }
        // s1: t1, t2.a, the temporary table; s2: t2.b, t3b.other; s3: t3 and t3b.id through the
        // domains; s4: p1, p2; s5: parent, child; s6, s7: the functions' tables; s8: t8
        assert_eq!(counted, 14);
    }

    /// And a default that names no sequence is reported, for the watch to remember.
    #[pg_test]
    fn a_default_that_names_no_sequence_is_reported() {
        Spi::run(SHAPES).unwrap();
        Spi::run("CREATE TABLE late (id bigint DEFAULT next_shard_id(current_setting('app.seq')::regclass, 1))")
            .unwrap();
        let s1 = Spi::get_one::<pg_sys::Oid>("SELECT 'shapes.s1'::regclass::oid")
            .unwrap()
            .unwrap();
        let (rows, some_name_none) = run(Query::EveryDefault, Some(s1));
        assert!(some_name_none);
        assert!(rows
            .iter()
            .any(|(c, _)| c.name.ends_with("late.id") && c.sequence.is_none()));
        let (rows, _) = run(Query::NamingOnly, Some(s1));
        assert!(
            !rows.iter().any(|(c, _)| c.name.ends_with("late.id")),
            "read only through the watch"
        );
    }
}
