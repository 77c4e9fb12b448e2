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

use crate::guard::MAX_LEAD_MS;
use crate::lease::LEASE_STEP_MS;

/// What the rows of `_pg_shard_id.origin` say, read before a backend's first id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recorded {
    /// The earliest epoch in the rows (Unix ms); `None` when there are no rows.
    pub epoch_unix_ms: Option<i64>,
    /// The system identifiers of the servers that issued ids here.
    pub system_identifiers: Vec<i64>,
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

/// Decides from the rows, this server's identifier and epoch, and the clock (Unix ms).
pub fn decide(
    recorded: &Recorded,
    this_server: i64,
    epoch_unix_ms: i64,
    now_unix_ms: i64,
) -> Verdict {
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
    Verdict::Issue {
        floor_unix_ms: others.then(|| floor_for_other_servers(now_unix_ms)),
        // another server's rows (this one takes them in: its row replaces theirs), no row of
        // this server yet, or an epoch moved earlier (so later ids are made with it)
        record: others || !ours || recorded_epoch > epoch_unix_ms,
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

    fn rows(epoch: Option<i64>, ids: &[i64]) -> Recorded {
        Recorded {
            epoch_unix_ms: epoch,
            system_identifiers: ids.to_vec(),
        }
    }

    #[test]
    fn a_fresh_database_records_this_server_without_a_floor() {
        assert_eq!(
            decide(&rows(None, &[]), US, EPOCH, NOW),
            Verdict::Issue {
                floor_unix_ms: None,
                record: true
            }
        );
    }

    #[test]
    fn our_own_rows_with_our_epoch_need_nothing() {
        assert_eq!(
            decide(&rows(Some(EPOCH), &[US]), US, EPOCH, NOW),
            Verdict::Issue {
                floor_unix_ms: None,
                record: false
            }
        );
        // rows of another server beside ours (a data-only restore, or a dump of the old server
        // restored after this one took the data in): its ids are here again
        assert_eq!(
            decide(&rows(Some(EPOCH), &[OLD, US]), US, EPOCH, NOW),
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
                decide(&rows(Some(earlier), ids), US, EPOCH, NOW),
                Verdict::Refuse {
                    recorded_epoch_unix_ms: earlier
                }
            );
        }
    }

    #[test]
    fn data_from_another_server_starts_above_anything_it_could_have_issued() {
        match decide(&rows(Some(EPOCH), &[OLD]), US, EPOCH, NOW) {
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
            decide(&rows(Some(later), &[US]), US, EPOCH, NOW),
            Verdict::Issue {
                floor_unix_ms: None,
                record: true
            }
        );
    }
}
