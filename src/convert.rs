//! The one piece of the table conversion (`sql/convert.sql`) that needs PostgreSQL's C API: an
//! expression of the old key column (an index's expression or predicate, a CHECK), printed as SQL
//! on the new column, so that its twin can be built before the swap. The column is moved in the
//! expression's tree (`pg_shard_id_core::node_tree`), never by replacing a name in SQL text.

use pg_shard_id_core::node_tree;
use pgrx::prelude::*;
use std::ffi::CString;

/// The expressions of `tree` (one, or a list: an index's expressions) with every reference to a
/// column of `rel` in `from_columns` made a reference to the column at the same place in
/// `to_columns`, each printed as SQL (names schema-qualified where the search_path, pinned by the
/// declaration, would not find them), as the bytes of the text in the database's encoding.
///
/// ```sql
/// _pg_shard_id.expression_moved_bytes(tree pg_node_tree, rel regclass, from_columns smallint[],
///                                     to_columns smallint[]) RETURNS bytea[]
///     STABLE STRICT PARALLEL SAFE SET search_path = pg_catalog, pg_temp
/// SELECT _pg_shard_id.expression_moved(conbin, conrelid, '{1}', '{4}')  -- (its text[] wrapper)
///   FROM pg_constraint WHERE conname = 'purchases_id_check';   -- {"(shard_id > 0)"}
/// ```
///
/// Declared in `sql/convert.sql` (its argument type, `pg_node_tree`, cannot be made from text by
/// any role: only a catalog's own trees reach it). Errors: 42P01 when `rel` does not exist; the
/// deparser's own for a tree that does not belong to `rel`.
#[pg_extern(sql = false)]
fn expression_moved_bytes(
    tree: &str,
    rel: pg_sys::Oid,
    from_columns: Vec<i16>,
    to_columns: Vec<i16>,
) -> Vec<Vec<u8>> {
    let moves: Vec<(i16, i16)> = from_columns
        .iter()
        .copied()
        .zip(to_columns.iter().copied())
        .collect();
    let (moved, _) = node_tree::move_columns(tree, &moves);
    let moved = CString::new(moved).expect("a pg_node_tree holds no NUL byte");
    // SAFETY: inside pgrx's guard (a #[pg_extern]); stringToNode reads a tree that came from a
    // catalog (the argument's type admits nothing else) with only Var column numbers changed,
    // and the deparser raises an ERROR for a column number rel does not have.
    unsafe {
        let name = pg_sys::get_rel_name(rel);
        if name.is_null() {
            ereport!(
                PgLogLevel::ERROR,
                PgSqlErrorCode::ERRCODE_UNDEFINED_TABLE,
                format!("pg_shard_id: no relation with oid {}", rel.to_u32())
            );
        }
        let context = pg_sys::deparse_context_for(name, rel);
        let node = pg_sys::stringToNode(moved.as_ptr()).cast::<pg_sys::Node>();
        // (the bytes PostgreSQL printed, in the database's encoding, which the SQL declaration
        // reads as text: through a Rust String, which must be UTF-8, a LATIN1 database's names
        // came out mangled, and the twin CHECK named no column: the ninth review)
        let deparse = |expr: *mut pg_sys::Node| {
            let text = pg_sys::deparse_expression(expr, context, false, false);
            std::ffi::CStr::from_ptr(text).to_bytes().to_vec()
        };
        if (*node).type_ == pg_sys::NodeTag::T_List {
            let list = node.cast::<pg_sys::List>();
            (0..(*list).length)
                .map(|i| deparse(pg_sys::list_nth(list, i).cast()))
                .collect()
        } else {
            vec![deparse(node)]
        }
    }
}
