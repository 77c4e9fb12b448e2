//! Findings about logical copies of the data: columns whose newest id cannot be read (the data
//! floor), a subscriber issuing the shard numbers of the rows it receives, and the origin table in
//! a publication without a replica identity.

use super::{finding, Finding, ShardDefault, Status};
use std::collections::BTreeSet;

/// What `shard_id_check()` found in the columns a sequence's ids may be stored in, for its
/// `data_floor` row.
#[derive(Debug, Default)]
pub struct FloorColumns {
    /// Columns that hold rows and whose newest id no index can tell (`schema.table.column
    /// (why)`): a first id jumps 10 minutes ahead for them.
    pub unreadable: Vec<String>,
    /// Columns whose newest id is too far ahead of the clock to be taken as a floor (`column
    /// (id)`; the id only for a caller who may read the table).
    pub implausible: Vec<String>,
    /// Columns holding ids above where their sequence's live guard issues (each a sentence with
    /// the fix): rows loaded after the guard's first id without `shard_id_resync`, or in a table
    /// that was locked at that first id. New ids can reach them: failed.
    pub above: Vec<String>,
    /// Columns that hold rows in a table whose owner may not draw from the sequence
    /// (`column (sequence)`): the data floor does not read them, so that no role moves another
    /// role's ids with a table of its own, and new ids can repeat their rows.
    pub not_read: Vec<String>,
}

/// The `data_floor` row: ok when every list is empty, failed when `above` is not, else a
/// warning; the detail says what each column needs.
pub fn data_floor(columns: &FloorColumns) -> Finding {
    let FloorColumns {
        unreadable,
        implausible,
        above,
        not_read,
    } = columns;
    if unreadable.is_empty() && implausible.is_empty() && above.is_empty() && not_read.is_empty() {
        return finding(
            "data_floor",
            Status::Ok,
            "every next_shard_id DEFAULT column that holds rows has an index on it: a sequence's \
             first id after a restart, a switchover or a copy starts right above the rows stored",
        );
    }
    let mut problems = Vec::new();
    if !above.is_empty() {
        problems.push(format!(
            "stored ids above the ids their sequence now issues, which new ids can repeat: {}",
            above.join("; ")
        ));
    }
    if !unreadable.is_empty() {
        problems.push(format!(
            "{} may hold rows whose newest id no index can read, so a sequence's first id after \
             a restart starts 10 minutes ahead of the clock instead of right above the rows (rows \
             copied in more than 10 minutes ahead can still be reached). Fix: CREATE INDEX on the \
             id for a missing index; bigint and the plain next_shard_id call as the DEFAULT; \
             shard_id_resync(seq) once a lock is gone",
            unreadable.join(", ")
        ));
    }
    if !implausible.is_empty() {
        problems.push(format!(
            "{} hold an id more than 1 hour 10 minutes ahead of the clock, which no guard makes \
             (written by hand or by another generator): it is passed over, and new ids start \
             above the newest id below it, so they reach it in time (a key violation, or a repeat \
             where no unique index stands). Fix: delete or correct those rows, or give the column \
             its own sequence",
            implausible.join(", ")
        ));
    }
    if !not_read.is_empty() {
        problems.push(format!(
            "{} hold rows in a table whose owner may not draw from the sequence, so its first id \
             does not read them (no role moves another role's ids with a table of its own) and \
             new ids can repeat those rows. Fix: GRANT USAGE ON SEQUENCE to the table's owner, \
             then SELECT shard_id_resync(seq)",
            not_read.join(", ")
        ));
    }
    let status = if above.is_empty() {
        Status::Warning
    } else {
        Status::Failed
    };
    finding("data_floor", status, problems.join(". ") + ".")
}

/// A table this database receives rows for through an enabled subscription, with the shard of
/// the newest id it holds in a `next_shard_id` DEFAULT column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replicated {
    pub subscription: String,
    pub table: String,
    pub shard: i64,
}

/// A subscriber whose own DEFAULTs issue the shard numbers of the rows it receives can issue ids
/// equal to the publisher's while both write. A blue/green target has exactly this setup, which
/// is safe once the subscription is disabled and writes moved (the switchover).
pub fn replication(
    subscriptions: usize,
    replicated: &[Replicated],
    own: &[ShardDefault],
) -> Finding {
    if subscriptions == 0 {
        return finding(
            "replication",
            Status::Ok,
            "no enabled subscription in this database",
        );
    }
    let own_shards: BTreeSet<i64> = own.iter().map(|d| d.shard).collect();
    let clashes: Vec<String> = replicated
        .iter()
        .filter(|r| own_shards.contains(&r.shard))
        .map(|r| {
            let issuers: Vec<&str> = own
                .iter()
                .filter(|d| d.shard == r.shard)
                .map(|d| d.table.as_str())
                .collect();
            format!(
                "{} (subscription {}) receives ids of shard {}, which this server's DEFAULTs on {} \
                 issue too",
                r.table,
                r.subscription,
                r.shard,
                issuers.join(", ")
            )
        })
        .collect();
    if clashes.is_empty() {
        return finding(
            "replication",
            Status::Ok,
            format!(
                "{subscriptions} enabled subscription(s); no replicated table's newest id has a \
                 shard number this server's DEFAULTs issue"
            ),
        );
    }
    finding(
        "replication",
        Status::Warning,
        format!(
            "{}. While the subscription is enabled and both servers write, ids issued here can \
             equal the publisher's. Fix: for a switchover, write here only after ALTER \
             SUBSCRIPTION ... DISABLE (new ids then start above the replicated rows); for two \
             writing servers, give this one other shard numbers.",
            clashes.join("; ")
        ),
    )
}

/// Publications that publish deletes of `_pg_shard_id.origin` while it has no replica identity
/// (the SQL of a version before 0.6.0): recording this server would fail every backend's first id.
pub fn publication(refusing: &[String]) -> Finding {
    if refusing.is_empty() {
        return finding(
            "publication",
            Status::Ok,
            "no publication refuses the extension's writes to _pg_shard_id.origin",
        );
    }
    finding(
        "publication",
        Status::Failed,
        format!(
            "publication(s) {} publish deletes of _pg_shard_id.origin, which has no replica \
             identity in this version of the extension's SQL: a backend's first id fails with \
             55000. Fix: ALTER EXTENSION pg_shard_id UPDATE (0.6.0 gives it REPLICA IDENTITY FULL).",
            refusing.join(", ")
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn default(table: &str, shard: i64) -> ShardDefault {
        ShardDefault {
            table: table.into(),
            sequence: "s".into(),
            shard,
        }
    }

    #[test]
    fn unreadable_columns_are_named_with_the_fix() {
        assert_eq!(data_floor(&FloorColumns::default()).status, Status::Ok);
        let f = data_floor(&FloorColumns {
            unreadable: vec!["public.events.id".to_string()],
            ..FloorColumns::default()
        });
        assert_eq!(f.status, Status::Warning);
        assert!(f.detail.contains("public.events.id") && f.detail.contains("CREATE INDEX"));
        let far = data_floor(&FloorColumns {
            implausible: vec!["public.t.id (9223372036854775807)".to_string()],
            ..FloorColumns::default()
        });
        assert_eq!(far.status, Status::Warning);
        assert!(
            far.detail.contains("9223372036854775807") && far.detail.contains("delete or correct")
        );
        let above = data_floor(&FloorColumns {
            unreadable: vec!["public.u.id (no index)".to_string()],
            above: vec!["public.t.id holds ids up to ...".to_string()],
            ..FloorColumns::default()
        });
        assert_eq!(above.status, Status::Failed);
        assert!(above.detail.contains("public.t.id holds ids up to"));
        assert!(
            above.detail.contains("public.u.id (no index)"),
            "and the rest"
        );
    }

    #[test]
    fn columns_the_floor_does_not_read_are_named_with_the_fix() {
        let f = data_floor(&FloorColumns {
            not_read: vec!["m.t.id (sequence public.s)".to_string()],
            ..FloorColumns::default()
        });
        assert_eq!(f.status, Status::Warning);
        assert!(f.detail.contains("m.t.id (sequence public.s)"));
        assert!(f.detail.contains("may not draw") && f.detail.contains("GRANT USAGE"));
    }

    #[test]
    fn a_subscriber_issuing_the_shards_it_receives_is_flagged() {
        let own = [default("photos", 7), default("users", 9)];
        let received = |shard| Replicated {
            subscription: "sub".into(),
            table: "public.photos".into(),
            shard,
        };
        assert_eq!(replication(0, &[received(7)], &own).status, Status::Ok);
        assert_eq!(replication(1, &[received(8)], &own).status, Status::Ok);
        let clash = replication(1, &[received(7)], &own);
        assert_eq!(clash.status, Status::Warning);
        assert!(clash.detail.contains("shard 7") && clash.detail.contains("DISABLE"));
    }

    #[test]
    fn the_origin_table_published_without_identity_fails() {
        assert_eq!(publication(&[]).status, Status::Ok);
        let f = publication(&["cdc".to_string()]);
        assert_eq!(f.status, Status::Failed);
        assert!(f.detail.contains("ALTER EXTENSION pg_shard_id UPDATE"));
    }
}
