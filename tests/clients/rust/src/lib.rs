//! Shared by the sqlx and Diesel tests: the connection settings (libpq's PG* variables, as
//! tests/clients/run.sh exports them), the id layout, and the server-log check.

/// A variable the tests need; run.sh sets PGHOST PGPORT PGUSER PGDATABASE and SERVER_LOG.
pub fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set (run through tests/clients/run.sh)"))
}

/// A libpq connection string from the PG* variables (PGHOST may be a unix socket directory).
pub fn conninfo() -> String {
    format!("host={} port={} user={} dbname={}", env("PGHOST"), env("PGPORT"), env("PGUSER"), env("PGDATABASE"))
}

/// The README's layout: 41 bits of ms since the epoch | 13 bits of shard | 10 bits of seq.
pub fn shard_of(id: i64) -> i64 {
    (id >> 10) & 8191
}
pub fn ms_of(id: i64) -> i64 {
    id >> 23
}
pub fn seq_of(id: i64) -> i64 {
    id & 1023
}

/// The column lists of every INSERT into `table` in the server log (log_statement = 'all'), with
/// quotes removed; an INSERT without a column list (positional, id included) is "*".
pub fn insert_column_lists(table: &str) -> Vec<String> {
    column_lists_in(&std::fs::read_to_string(env("SERVER_LOG")).expect("SERVER_LOG is readable"), table)
}

/// The same over a log's text.
pub fn column_lists_in(log: &str, table: &str) -> Vec<String> {
    let log = log.to_lowercase();
    let mut out = Vec::new();
    let mut rest = log.as_str();
    while let Some(at) = rest.find("insert into") {
        rest = &rest[at + "insert into".len()..];
        let t = rest.trim_start();
        let t = t.strip_prefix("public.").or_else(|| t.strip_prefix("\"public\".")).unwrap_or(t);
        let t = t.strip_prefix('"').unwrap_or(t);
        let Some(t) = t.strip_prefix(table) else { continue };
        if t.starts_with(|c: char| c.is_alphanumeric() || c == '_') {
            continue; // another table whose name starts the same
        }
        let t = t.strip_prefix('"').unwrap_or(t).trim_start();
        match t.strip_prefix('(') {
            Some(cols) => out.push(cols[..cols.find(')').unwrap_or(cols.len())].replace('"', "")),
            None => out.push("*".into()),
        }
    }
    out
}

/// Check 5: no INSERT into `table` names the id column (or is positional); at least `at_least`.
pub fn assert_no_client_ids(table: &str, at_least: usize) {
    let lists = insert_column_lists(table);
    assert!(lists.len() >= at_least, "only {} INSERTs into {table} in the server log", lists.len());
    let bad: Vec<_> = lists
        .iter()
        .filter(|cols| cols.split(',').any(|c| matches!(c.trim(), "id" | "*")))
        .collect();
    assert!(bad.is_empty(), "INSERTs into {table} that send an id: {bad:?}");
    println!("server log: {} INSERTs into {table}, none lists the id column", lists.len());
}

/// True if the EXPLAIN text reads the table through its primary key.
pub fn uses_pkey(plan: &str, table: &str) -> bool {
    let pkey = format!("{table}_pkey ");
    // the index is used for the bound itself (its condition), not only to read rows
    ["Index Scan using ", "Index Only Scan using ", "Bitmap Index Scan on "]
        .iter()
        .any(|scan| plan.contains(&format!("{scan}{pkey}")))
        && plan.contains("Index Cond: (id >= shard_id_lower_bound(")
}

#[cfg(test)]
mod tests {
    use super::column_lists_in;

    #[test]
    fn the_log_check_sees_every_form() {
        let log = "LOG:  execute sqlx_s_1: INSERT INTO sqlx_photos (note) VALUES ($1) RETURNING id\n\
                   LOG:  execute <unnamed>: INSERT INTO \"diesel_photos\" (\"id\", \"note\") VALUES (DEFAULT, $1)\n\
                   LOG:  statement: insert into public.sqlx_photos values (1, 'x')\n\
                   LOG:  statement: INSERT INTO sqlx_photos_old (id) VALUES (1)\n";
        assert_eq!(column_lists_in(log, "sqlx_photos"), vec!["note", "*"]);
        assert_eq!(column_lists_in(log, "diesel_photos"), vec!["id, note"]);
    }
}
