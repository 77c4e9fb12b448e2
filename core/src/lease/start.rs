//! What a starting server makes of the lease file it found: the floor under fresh guards, the
//! epoch check, and what to log.

use super::{Found, Record, LEASE_STEP_MS};
use crate::guard::MAX_LEAD_MS;
use crate::layout::MAX_MS;
use crate::time::format_unix_ms;

/// How loud a start-up message is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Log,
    Warning,
}

/// What a starting server does with the lease it found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Start {
    /// Fresh guards start at or above this (Unix ms), one past the lease: every id issued before
    /// is at or below the lease. `None`: at the clock.
    pub floor_unix_ms: Option<i64>,
    /// The lease value in force after start-up (Unix ms), for the shared `reserved` cache.
    pub lease_unix_ms: i64,
    /// A record to write now (`None`: leave the file as it is).
    pub write: Option<Record>,
    /// The recorded epoch, when the configured one is later: ids must not be issued (they could
    /// repeat old ones).
    pub refused_epoch_unix_ms: Option<i64>,
    /// What to tell the server log.
    pub messages: Vec<(Level, String)>,
}

/// Decides, from what the lease file holds, the configured epoch and the clock (all Unix ms),
/// how a server starts:
///
/// * no file: no floor; the epoch is recorded (with a lease at the epoch itself, which holds
///   nothing back: the lease never holds a millisecond that no clock reading or lead produced);
/// * a record with the same epoch: the floor is one past its lease (ids may exist *at* the lease);
/// * a record with a later epoch than the configured one: the configured epoch is *earlier*, so
///   every new id sorts above every old one; allowed, logged, and the new epoch is recorded;
/// * a record with an earlier epoch: the configured epoch is *later*, so new ids could repeat old
///   ones: ids are refused until the epoch is set back (the record is kept);
/// * a damaged or unreadable file: the floor is `max(clock, file's mtime) + MAX_LEAD_MS +
///   LEASE_STEP_MS`, above anything the lost record could have held (a lease is at most one step
///   past an id, and no id runs more than `MAX_LEAD_MS` ahead of the clock that wrote it), and a
///   new record is written.
pub fn plan_start(found: Found, epoch_unix_ms: i64, now_unix_ms: i64) -> Start {
    let at = format_unix_ms;
    let mut start = Start {
        floor_unix_ms: None,
        lease_unix_ms: epoch_unix_ms,
        write: None,
        refused_epoch_unix_ms: None,
        messages: Vec::new(),
    };
    let record = |lease| Record {
        lease_unix_ms: lease,
        epoch_unix_ms: Some(epoch_unix_ms),
    };
    match found {
        Found::Missing => start.write = Some(record(epoch_unix_ms)),
        Found::Record(found) => {
            start.floor_unix_ms = Some(found.lease_unix_ms.saturating_add(1));
            start.lease_unix_ms = found.lease_unix_ms;
            match found.epoch_unix_ms {
                Some(recorded) if recorded == epoch_unix_ms => {}
                None => {
                    start.write = Some(record(found.lease_unix_ms));
                    start.messages.push((
                        Level::Log,
                        format!(
                            "pg_shard_id: recorded the epoch {} in the lease file",
                            at(epoch_unix_ms)
                        ),
                    ));
                }
                Some(recorded) if recorded > epoch_unix_ms => {
                    start.write = Some(record(found.lease_unix_ms));
                    start.messages.push((
                        Level::Log,
                        format!(
                            "pg_shard_id: pg_shard_id.epoch moved earlier, from {} to {}: new ids sort \
                             above every id made before, and existing ids now decode to earlier timestamps",
                            at(recorded),
                            at(epoch_unix_ms)
                        ),
                    ));
                }
                Some(recorded) => {
                    start.refused_epoch_unix_ms = Some(recorded);
                    start.messages.push((
                        Level::Warning,
                        format!(
                            "pg_shard_id: pg_shard_id.epoch is {}, later than the epoch {} that this \
                             server's ids were made with; next_shard_id refuses to issue ids, which \
                             could repeat existing ones, until pg_shard_id.epoch is set back to {} \
                             (or earlier) and the server restarted",
                            at(epoch_unix_ms),
                            at(recorded),
                            at(recorded)
                        ),
                    ));
                }
            }
        }
        Found::Damaged {
            why,
            modified_unix_ms,
        } => {
            let base = modified_unix_ms.unwrap_or(now_unix_ms).max(now_unix_ms);
            let floor = base.saturating_add(MAX_LEAD_MS + LEASE_STEP_MS);
            start.floor_unix_ms = Some(floor);
            start.lease_unix_ms = floor;
            start.write = Some(record(floor));
            start.messages.push((
                Level::Warning,
                format!(
                    "pg_shard_id: the lease file is damaged ({why}); new ids start at {}, above any \
                     id it could have covered, and the file is rewritten; the epoch it recorded is \
                     lost, {} is recorded",
                    at(floor),
                    at(epoch_unix_ms)
                ),
            ));
        }
    }
    if let Some(floor) = start.floor_unix_ms {
        if floor - epoch_unix_ms > MAX_MS {
            start.messages.push((
                Level::Warning,
                format!(
                    "pg_shard_id: the lease file records ids up to {}, past the last millisecond the \
                     id layout holds with the epoch {}: next_shard_id will fail with SQLSTATE 22008",
                    at(floor),
                    at(epoch_unix_ms)
                ),
            ));
        } else if floor > now_unix_ms + MAX_LEAD_MS + LEASE_STEP_MS {
            start.messages.push((
                Level::Warning,
                format!(
                    "pg_shard_id: the lease file records ids up to {}, {} ms ahead of the clock: new ids \
                     carry timestamps from there until the clock catches up (was the clock set back?)",
                    at(floor),
                    floor - now_unix_ms
                ),
            ));
        }
    }
    start
}
