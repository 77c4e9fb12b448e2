//! Where a database's ids came from: the epoch they were made with and the server that made them,
//! recorded *in the database* (the extension's table `_pg_shard_id.origin`), so that both travel with
//! the data through pg_dump/pg_restore and pg_upgrade, which carry neither `postgresql.conf` nor
//! the lease file.
//!
//! Each server that issues ids in a database adds a row: its epoch and its system identifier
//! (`pg_control_system()`, different for every `initdb`; a standby, a promoted standby and a
//! restored base backup keep their primary's). Before a backend's first id, [`decide`] reads the
//! rows:
//!
//! * a recorded epoch earlier than the configured one: refuse, as for the lease file (new ids
//!   could repeat old ones);
//! * a row of another server: the data was restored or upgraded from it, and its lease did not
//!   come along (a server that takes the data in replaces the others' rows by its own). Its ids can be ahead of this clock by at most the lead `borrow` allows
//!   ([`MAX_LEAD_MS`]) plus one lease step, so new ids start above that, and this server records
//!   itself. The price, once per database and server: ids up to 10 min 1 s ahead of the clock.
//! * a row of this server but of another database (0.5.0 records the database's oid): the data
//!   was copied within this server (pg_dump/pg_restore into another database, `CREATE DATABASE
//!   ... TEMPLATE`). Its sequences have new oids, so their guards start fresh, and the copied ids
//!   can be ahead of the clock (borrow's lead, a floor after a restart). This server's lease is
//!   above every id it ever issued, so new ids start above the lease. Rows recorded before 0.5.0
//!   name no database, so the first id after the update to 0.5.0 does the same, once.

use crate::guard::MAX_LEAD_MS;
use crate::lease::LEASE_STEP_MS;

/// What the rows of `_pg_shard_id.origin` say, read before a backend's first id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recorded {
    /// The earliest epoch in the rows (Unix ms); `None` when there are no rows.
    pub epoch_unix_ms: Option<i64>,
    /// The system identifiers of the servers that issued ids here.
    pub system_identifiers: Vec<i64>,
    /// The database oids of the rows (0: recorded before 0.5.0, which did not say); `None` when
    /// the database has the SQL of a version before 0.5.0.
    pub databases: Option<Vec<u32>>,
}

/// Where this backend runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Here {
    /// This server's system identifier.
    pub server: i64,
    /// This database's oid.
    pub database: u32,
    /// The lease in force (Unix ms); `None` without one (guard mode `session`).
    pub lease_unix_ms: Option<i64>,
}

/// What to do before this backend's first id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Issue ids. `floor_unix_ms`: new ids start above it (data made by another server);
    /// `record`: add this server's row (its epoch and identifier).
    Issue {
        floor_unix_ms: Option<i64>,
        record: bool,
    },
    /// The database's ids were made with this earlier epoch: refuse (55000).
    Refuse { recorded_epoch_unix_ms: i64 },
}

/// Decides from the rows, where this backend runs, its epoch and the clock (Unix ms).
pub fn decide(recorded: &Recorded, here: &Here, epoch_unix_ms: i64, now_unix_ms: i64) -> Verdict {
    let this_server = here.server;
    let Some(recorded_epoch) = recorded.epoch_unix_ms else {
        // no row: a database where no id was made since the extension was created
        return Verdict::Issue {
            floor_unix_ms: None,
            record: true,
        };
    };
    if recorded_epoch < epoch_unix_ms {
        return Verdict::Refuse {
            recorded_epoch_unix_ms: recorded_epoch,
        };
    }
    let ours = recorded.system_identifiers.contains(&this_server);
    let others = recorded
        .system_identifiers
        .iter()
        .any(|&id| id != this_server);
    let copied = recorded
        .databases
        .as_ref()
        .is_some_and(|databases| databases.iter().any(|&db| db != here.database));
    let floor_unix_ms = if others {
        Some(floor_for_other_servers(now_unix_ms))
    } else if copied {
        // this server made every id here: its lease is above all of them
        Some(match here.lease_unix_ms {
            Some(lease) if lease != i64::MIN => lease.saturating_add(1),
            _ => floor_for_other_servers(now_unix_ms),
        })
    } else {
        None
    };
    Verdict::Issue {
        floor_unix_ms,
        // another server's or database's rows (this one takes them in: its row replaces
        // theirs), no row of this server yet, or an epoch moved earlier (so later ids are made
        // with it)
        record: others || copied || !ours || recorded_epoch > epoch_unix_ms,
    }
}

/// Where new ids start in data that another server made, or may have made (its lease did not
/// come along): above anything it could have issued. Its ids were at most [`MAX_LEAD_MS`] ahead
/// of a clock no later than this one (the lead `borrow` allows), and its lease at most one step
/// past them.
pub fn floor_for_other_servers(now_unix_ms: i64) -> i64 {
    now_unix_ms
        .saturating_add(MAX_LEAD_MS)
        .saturating_add(LEASE_STEP_MS)
}

#[cfg(test)]
mod tests {
    use super::*;

    const EPOCH: i64 = 1_767_225_600_000;
    const NOW: i64 = 1_795_000_000_000;
    const US: i64 = 7_300_000_000_000_000_001;
    const OLD: i64 = 7_100_000_000_000_000_002;

    const DB: u32 = 16_384;
    const LEASE: i64 = NOW + 1_000;
    const HERE: Here = Here {
        server: US,
        database: DB,
        lease_unix_ms: Some(LEASE),
    };

    fn rows(epoch: Option<i64>, ids: &[i64]) -> Recorded {
        Recorded {
            epoch_unix_ms: epoch,
            system_identifiers: ids.to_vec(),
            databases: Some(vec![DB]),
        }
    }

    #[test]
    fn a_copy_within_this_server_starts_above_its_lease() {
        let copied = Recorded {
            databases: Some(vec![DB + 1]),
            ..rows(Some(EPOCH), &[US])
        };
        let expected = Verdict::Issue {
            floor_unix_ms: Some(LEASE + 1),
            record: true,
        };
        assert_eq!(decide(&copied, &HERE, EPOCH, NOW), expected);
        // rows from before 0.5.0 name no database (0): the same, once
        let unnamed = Recorded {
            databases: Some(vec![0]),
            ..rows(Some(EPOCH), &[US])
        };
        assert_eq!(decide(&unnamed, &HERE, EPOCH, NOW), expected);
        // the SQL before 0.5.0 cannot say: nothing to go on (as 0.4.0 did)
        let old_sql = Recorded {
            databases: None,
            ..rows(Some(EPOCH), &[US])
        };
        assert_eq!(
            decide(&old_sql, &HERE, EPOCH, NOW),
            Verdict::Issue {
                floor_unix_ms: None,
                record: false
            }
        );
        // without a lease (guard mode session): the floor for other servers
        let no_lease = Here {
            lease_unix_ms: None,
            ..HERE
        };
        assert_eq!(
            decide(&copied, &no_lease, EPOCH, NOW),
            Verdict::Issue {
                floor_unix_ms: Some(floor_for_other_servers(NOW)),
                record: true
            }
        );
    }

    #[test]
    fn a_fresh_database_records_this_server_without_a_floor() {
        assert_eq!(
            decide(&rows(None, &[]), &HERE, EPOCH, NOW),
            Verdict::Issue {
                floor_unix_ms: None,
                record: true
            }
        );
    }

    #[test]
    fn our_own_rows_with_our_epoch_need_nothing() {
        assert_eq!(
            decide(&rows(Some(EPOCH), &[US]), &HERE, EPOCH, NOW),
            Verdict::Issue {
                floor_unix_ms: None,
                record: false
            }
        );
        // rows of another server beside ours (a data-only restore, or a dump of the old server
        // restored after this one took the data in): its ids are here again
        assert_eq!(
            decide(&rows(Some(EPOCH), &[OLD, US]), &HERE, EPOCH, NOW),
            Verdict::Issue {
                floor_unix_ms: Some(floor_for_other_servers(NOW)),
                record: true
            }
        );
    }

    #[test]
    fn a_later_configured_epoch_is_refused_whoever_made_the_ids() {
        let earlier = EPOCH - 86_400_000;
        for ids in [&[US][..], &[OLD][..], &[OLD, US][..]] {
            assert_eq!(
                decide(&rows(Some(earlier), ids), &HERE, EPOCH, NOW),
                Verdict::Refuse {
                    recorded_epoch_unix_ms: earlier
                }
            );
        }
    }

    #[test]
    fn data_from_another_server_starts_above_anything_it_could_have_issued() {
        match decide(&rows(Some(EPOCH), &[OLD]), &HERE, EPOCH, NOW) {
            Verdict::Issue {
                floor_unix_ms: Some(floor),
                record: true,
            } => {
                // that server's ids: at most MAX_LEAD_MS ahead of a clock no later than ours,
                // and its lease at most one step past them
                assert!(floor >= NOW + MAX_LEAD_MS + LEASE_STEP_MS);
                assert!(
                    floor <= NOW + MAX_LEAD_MS + LEASE_STEP_MS + 1,
                    "and no further"
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_earlier_configured_epoch_is_allowed_and_recorded() {
        let later = EPOCH + 86_400_000;
        assert_eq!(
            decide(&rows(Some(later), &[US]), &HERE, EPOCH, NOW),
            Verdict::Issue {
                floor_unix_ms: None,
                record: true
            }
        );
    }
}
