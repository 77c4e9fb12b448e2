//! A column moved inside a PostgreSQL expression tree in its text form (`pg_node_tree`, what
//! `nodeToString` writes and `stringToNode` reads), for the table conversion: an index or a CHECK
//! on the old key column is built again on the new column before the swap, and its expression is
//! the old one with every reference to the old column made a reference to the new one.
//!
//! Why the tree and not the SQL text: replacing a name in `pg_get_expr`'s text would also replace
//! it inside a string literal, a quoted identifier or a longer name. In the tree a column is a
//! `Var` node with the column's number, and nothing else looks like one: every field is written
//! as `:name value`, a `{` inside a string value is escaped (`\{`), and a `Var` holds no nested
//! node. PostgreSQL 15 to 18 write a `Var` as
//!
//! ```text
//! {VAR :varno 1 :varattno 3 :vartype 20 :vartypmod -1 :varcollid 0 [:varnullingrels (b)]
//!      :varlevelsup 0 [:varreturningtype 0] :varnosyn 1 :varattnosyn 3 :location 42}
//! ```
//!
//! In an index's expressions or predicate, a CHECK, a policy or a generated column, the table is
//! range-table entry 1 and the expression has no sub-query, so `varno 1, varlevelsup 0` is the
//! table itself. `varattnosyn` is what `ruleutils.c` prints when it is set, so both move.

/// `tree` with every `Var` of range-table entry 1 at query level 0 that refers to a column of
/// `moves` (from, to) made to refer to its `to`, and how many were moved. Everything else is kept
/// byte for byte. (A table that references itself moves two columns at once: its key, and the
/// column of its foreign key to that key.)
pub fn move_columns(tree: &str, moves: &[(i16, i16)]) -> (String, usize) {
    let moves: Vec<(String, String)> = moves
        .iter()
        .map(|(from, to)| (from.to_string(), to.to_string()))
        .collect();
    let mut out = String::with_capacity(tree.len());
    let mut moved = 0;
    let mut rest = tree;
    while let Some(start) = next_var(rest) {
        out.push_str(&rest[..start]);
        let body = &rest[start..];
        // a Var holds no nested node: it ends at the first closing brace
        let Some(end) = body.find('}') else { break };
        let node = &body[..=end];
        match moved_var(node, &moves) {
            Some(new) => {
                out.push_str(&new);
                moved += 1;
            }
            None => out.push_str(node),
        }
        rest = &body[end + 1..];
    }
    out.push_str(rest);
    (out, moved)
}

/// Where the next `{VAR ` node starts in `s` (not an escaped `\{` inside a string value).
fn next_var(s: &str) -> Option<usize> {
    let mut from = 0;
    while let Some(at) = s[from..].find("{VAR ") {
        let at = from + at;
        if at == 0 || s.as_bytes()[at - 1] != b'\\' {
            return Some(at);
        }
        from = at + 1;
    }
    None
}

/// The Var `node` (from `{VAR ` to its `}`) moved to the `to` of the move whose `from` it refers
/// to, or None when it is not a reference to one of the table's columns in `moves`.
fn moved_var(node: &str, moves: &[(String, String)]) -> Option<String> {
    let inner = &node[1..node.len() - 1];
    let mut tokens: Vec<&str> = inner.split(' ').collect();
    if field(&tokens, ":varno")? != "1" || field(&tokens, ":varlevelsup")? != "0" {
        return None;
    }
    let attno = field(&tokens, ":varattno")?;
    let (from, to) = moves.iter().find(|(from, _)| from == attno)?;
    for name in [":varattno", ":varattnosyn"] {
        if let Some(i) = tokens.iter().position(|t| *t == name) {
            if tokens.get(i + 1) == Some(&from.as_str()) {
                tokens[i + 1] = to;
            }
        }
    }
    Some(format!("{{{}}}", tokens.join(" ")))
}

/// The value written after `:name` among a node's tokens.
fn field<'a>(tokens: &[&'a str], name: &str) -> Option<&'a str> {
    let at = tokens.iter().position(|t| *t == name)?;
    tokens.get(at + 1).copied()
}

#[cfg(test)]
mod tests {
    use super::move_columns;

    fn move_column(tree: &str, from: i16, to: i16) -> (String, usize) {
        move_columns(tree, &[(from, to)])
    }

    // `pg_get_expr`'s input for CHECK ((id % 16) <> 3 AND note <> '{VAR :varno 1 :varattno 1}')
    // on PostgreSQL 16, abridged only in the operator's fields
    const CHECK_16: &str = "{BOOLEXPR :boolop and :args ({OPEXPR :opno 519 :opfuncid 145 \
        :opresulttype 16 :opretset false :opcollid 0 :inputcollid 0 :args ({OPEXPR :opno 439 \
        :opfuncid 945 :opresulttype 20 :opretset false :opcollid 0 :inputcollid 0 :args ({VAR \
        :varno 1 :varattno 1 :vartype 20 :vartypmod -1 :varcollid 0 :varnullingrels (b) \
        :varlevelsup 0 :varnosyn 1 :varattnosyn 1 :location 8} {CONST :consttype 20 \
        :consttypmod -1 :constcollid 0 :constlen 8 :constbyval true :constisnull false \
        :location 13 :constvalue 8 [ 16 0 0 0 0 0 0 0 ]}) :location 11} {CONST :consttype 20 \
        :consttypmod -1 :constcollid 0 :constlen 8 :constbyval true :constisnull false \
        :location 20 :constvalue 8 [ 3 0 0 0 0 0 0 0 ]}) :location 17} {OPEXPR :opno 531 \
        :opfuncid 157 :opresulttype 16 :opretset false :opcollid 0 :inputcollid 100 :args ({VAR \
        :varno 1 :varattno 3 :vartype 25 :vartypmod -1 :varcollid 100 :varnullingrels (b) \
        :varlevelsup 0 :varnosyn 1 :varattnosyn 3 :location 26} {CONST :consttype 25 \
        :consttypmod -1 :constcollid 100 :constlen -1 :constbyval false :constisnull false \
        :location 34 :constvalue 30 [ 120 0 0 0 123 86 65 82 ]}) :location 31}) :location 22}";

    #[test]
    fn the_column_moves_and_nothing_else_changes() {
        let (moved, count) = move_column(CHECK_16, 1, 5);
        assert_eq!(count, 1);
        assert_eq!(
            moved,
            CHECK_16
                .replace(":varattno 1 :vartype 20", ":varattno 5 :vartype 20")
                .replace(":varattnosyn 1 :location 8", ":varattnosyn 5 :location 8")
        );
        // the other column (3) is kept
        assert!(moved.contains(":varattno 3 :vartype 25"));
    }

    #[test]
    fn other_columns_levels_and_range_table_entries_are_kept() {
        for tree in [
            "{VAR :varno 1 :varattno 2 :vartype 20 :varlevelsup 0 :varnosyn 1 :varattnosyn 2}",
            "{VAR :varno 2 :varattno 1 :vartype 20 :varlevelsup 0 :varnosyn 2 :varattnosyn 1}",
            "{VAR :varno 1 :varattno 1 :vartype 20 :varlevelsup 1 :varnosyn 1 :varattnosyn 1}",
            "{VAR :varno 1 :varattno 11 :vartype 20 :varlevelsup 0 :varnosyn 1 :varattnosyn 11}",
        ] {
            assert_eq!(move_column(tree, 1, 7), (tree.to_string(), 0), "{tree}");
        }
    }

    #[test]
    fn an_escaped_brace_in_a_string_is_not_a_node() {
        // a name or string value holding "{VAR :varno 1 :varattno 1" is written escaped
        let tree = r"{ALIAS :aliasname \{VAR\ :varno\ 1\ :varattno\ 1 :colnames <>}";
        assert_eq!(move_column(tree, 1, 2), (tree.to_string(), 0));
        let tree = r"{X :s \{VAR :varno 1 :varattno 1 :varlevelsup 0}";
        assert_eq!(move_column(tree, 1, 2), (tree.to_string(), 0));
    }

    #[test]
    fn every_reference_in_a_list_moves_and_bitmapsets_and_versions_are_kept() {
        // PostgreSQL 15 (no varnullingrels) and 18 (varreturningtype), in an index's expression
        // list
        let tree = "({VAR :varno 1 :varattno 4 :vartype 20 :vartypmod -1 :varcollid 0 \
                    :varlevelsup 0 :varnosyn 1 :varattnosyn 4 :location -1} {VAR :varno 1 \
                    :varattno 4 :vartype 20 :vartypmod -1 :varcollid 0 :varnullingrels (b 1 2) \
                    :varlevelsup 0 :varreturningtype 0 :varnosyn 1 :varattnosyn 4 :location 7})";
        let (moved, count) = move_column(tree, 4, 9);
        assert_eq!(count, 2);
        assert_eq!(
            moved,
            tree.replace(":varattno 4", ":varattno 9")
                .replace(":varattnosyn 4", ":varattnosyn 9")
        );
    }

    #[test]
    fn an_unfinished_node_is_left_as_it_is() {
        let tree = "{VAR :varno 1 :varattno 1";
        assert_eq!(move_column(tree, 1, 2), (tree.to_string(), 0));
    }
}

#[cfg(test)]
mod two_moves {
    use super::move_columns;

    #[test]
    fn a_self_reference_moves_both_columns_and_they_do_not_chain() {
        // an index on (id, manager_id) of a table whose manager_id references its own id: 1 -> 5
        // and 2 -> 6, and a column moved to 2 is not moved again to 6
        let tree = "({VAR :varno 1 :varattno 1 :varlevelsup 0 :varnosyn 1 :varattnosyn 1} \
                    {VAR :varno 1 :varattno 2 :varlevelsup 0 :varnosyn 1 :varattnosyn 2})";
        let (moved, count) = move_columns(tree, &[(1, 2), (2, 6)]);
        assert_eq!(count, 2);
        assert_eq!(
            moved,
            "({VAR :varno 1 :varattno 2 :varlevelsup 0 :varnosyn 1 :varattnosyn 2} \
             {VAR :varno 1 :varattno 6 :varlevelsup 0 :varnosyn 1 :varattnosyn 6})"
        );
    }
}
