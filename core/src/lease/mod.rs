//! The lease: a millisecond that no id of this server is above, and the epoch the ids were made
//! with, kept durably so that both survive a restart, a crash, a failover or a restore.
//!
//! **No id is ever issued above the lease.** The guard's memory is lost when the server restarts,
//! and the clock it restarts with may be anywhere (an hour behind after NTP corrected it, seconds
//! behind the ids `borrow` issued ahead of it). So before an id is returned, its millisecond must
//! be covered: the lease is extended *ahead of use*, [`LEASE_STEP_MS`] past the millisecond that
//! needed it, the way a sequence logs values ahead. One durable write per step, never per id: at
//! the layout's full rate that is one write per second. At start-up the lease plus one becomes
//! the floor under every fresh guard ([`plan_start`]), so new ids start strictly above every id
//! issued before, whatever the clock did meanwhile. The price: after a restart quicker than one
//! step, ids may start up to [`LEASE_STEP_MS`] ahead of the clock (plus any lead they had).
//!
//! The server keeps the lease in two places, written in this order before the new value is used:
//! this file in the data directory (what a restart reads first), then a WAL record (what crash
//! recovery, a standby's replay, a promotion and point-in-time recovery replay; see the extension's
//! `lease` module). [`replay`] merges a replayed record into the file.
//!
//! The file is one line, `pg_shard_id lease <unix ms> epoch <unix ms> check <fnv-1a 64>`, replaced
//! whole (write a temporary file, fsync, rename, fsync the directory), so a crash leaves the old or
//! the new record and never a mix; the check value catches any other damage. A damaged or
//! unreadable file never stops the server: it is replaced by a floor that is above anything the
//! lost record could have held (see [`plan_start`]).

use crate::hash::fnv1a64;

mod file;
mod start;
pub use file::{cover, read, replay, write, write_replayed};
pub use start::{plan_start, Level, Start};

/// The lease file, relative to the data directory (every server process runs there).
pub const LEASE_FILE: &str = "pg_shard_id.lease";

/// How far past the millisecond that needed it one extension of the lease reaches (1 s).
///
/// Why 1 s: it bounds how far ahead of the clock ids may start after a restart that took less than
/// a second (none does in practice: PostgreSQL's own crash restart takes longer here), and it
/// costs one file write, one WAL record and one WAL flush per second of ids at the clock, which
/// the benchmark does not see. A longer step would only save writes that cost nothing measurable.
pub const LEASE_STEP_MS: i64 = 1_000;

/// What the lease file records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record {
    /// No id of this server has a timestamp past this (Unix ms).
    pub lease_unix_ms: i64,
    /// The epoch the ids were made with (Unix ms); `None` in files written by 0.1.0.
    pub epoch_unix_ms: Option<i64>,
}

impl Record {
    /// The record's bytes in a WAL record: the lease and the epoch (`i64::MIN`: none), each
    /// little-endian.
    pub fn to_wal_bytes(&self) -> [u8; 16] {
        let mut bytes = [0; 16];
        bytes[..8].copy_from_slice(&self.lease_unix_ms.to_le_bytes());
        bytes[8..].copy_from_slice(&self.epoch_unix_ms.unwrap_or(i64::MIN).to_le_bytes());
        bytes
    }

    /// The record in a WAL record's bytes; `None` unless they are exactly what
    /// [`Record::to_wal_bytes`] writes.
    pub fn from_wal_bytes(bytes: &[u8]) -> Option<Record> {
        let bytes: &[u8; 16] = bytes.try_into().ok()?;
        let lease_unix_ms = i64::from_le_bytes(bytes[..8].try_into().ok()?);
        let epoch = i64::from_le_bytes(bytes[8..].try_into().ok()?);
        Some(Record {
            lease_unix_ms,
            epoch_unix_ms: (epoch != i64::MIN).then_some(epoch),
        })
    }
}

/// What [`read`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// No file: the first start with the library preloaded (or the file was removed on purpose).
    Missing,
    Record(Record),
    /// A file that cannot be read or does not hold a valid record.
    Damaged {
        why: String,
        /// When the file was last written (Unix ms), if the file system still says.
        modified_unix_ms: Option<i64>,
    },
}

fn encode(record: &Record) -> String {
    let body = format!(
        "pg_shard_id lease {:020} epoch {:020}",
        record.lease_unix_ms,
        record.epoch_unix_ms.unwrap_or(i64::MIN)
    );
    format!("{body} check {:016x}\n", fnv1a64(body.as_bytes()))
}

fn decode(text: &str) -> Result<Record, String> {
    let line = text.strip_suffix('\n').unwrap_or(text);
    // 0.1.0 wrote the lease alone, zero-padded to 20 digits
    if line.len() == 20 && line.bytes().all(|b| b.is_ascii_digit()) {
        return line
            .parse()
            .map(|lease_unix_ms| Record {
                lease_unix_ms,
                epoch_unix_ms: None,
            })
            .map_err(|e| format!("bad 0.1.0 lease: {e}"));
    }
    let (body, check) = line
        .rsplit_once(" check ")
        .ok_or_else(|| "not a pg_shard_id lease record".to_string())?;
    if format!("{:016x}", fnv1a64(body.as_bytes())) != check {
        return Err("the record's check value does not match".to_string());
    }
    let fields: Vec<&str> = body.split(' ').collect();
    match fields.as_slice() {
        ["pg_shard_id", "lease", lease, "epoch", epoch] => {
            let lease_unix_ms = lease.parse().map_err(|_| "bad lease value")?;
            let epoch: i64 = epoch.parse().map_err(|_| "bad epoch value")?;
            Ok(Record {
                lease_unix_ms,
                epoch_unix_ms: (epoch != i64::MIN).then_some(epoch),
            })
        }
        _ => Err("not a pg_shard_id lease record".to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::file::sibling;
    use super::*;
    use crate::guard::MAX_LEAD_MS;
    use std::io;
    use std::path::PathBuf;
    use std::sync::atomic::{AtomicI64, Ordering};
    use std::sync::Arc;

    const EPOCH: i64 = 1_767_225_600_000;
    const NOW: i64 = 1_795_000_000_000;

    fn temp_path(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("pg_shard_id_lease_{}_{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("pg_shard_id.lease");
        let _ = std::fs::remove_file(&path);
        path
    }

    fn record(lease: i64, epoch: i64) -> Record {
        Record {
            lease_unix_ms: lease,
            epoch_unix_ms: Some(epoch),
        }
    }

    #[test]
    fn no_file_is_missing_and_a_written_record_reads_back() {
        let path = temp_path("roundtrip");
        assert_eq!(read(&path), Found::Missing);
        write(&path, &record(NOW, EPOCH)).unwrap();
        assert_eq!(read(&path), Found::Record(record(NOW, EPOCH)));
        assert!(
            !sibling(&path, ".tmp").exists(),
            "the temporary file was renamed"
        );
    }

    #[test]
    fn a_0_1_0_lease_reads_without_an_epoch() {
        let path = temp_path("v1");
        std::fs::write(&path, format!("{NOW:020}\n")).unwrap();
        assert_eq!(
            read(&path),
            Found::Record(Record {
                lease_unix_ms: NOW,
                epoch_unix_ms: None
            })
        );
    }

    #[test]
    fn damage_of_every_kind_is_detected_not_fatal() {
        let path = temp_path("damage");
        let good = encode(&record(NOW, EPOCH));
        let flipped = good.replacen('1', "2", 1);
        for bad in [
            String::new(),
            good[..good.len() / 2].to_string(),
            "garbage\n".to_string(),
            flipped,
            "\u{0}\u{1}binary".to_string(),
        ] {
            std::fs::write(&path, &bad).unwrap();
            match read(&path) {
                Found::Damaged {
                    modified_unix_ms, ..
                } => assert!(modified_unix_ms.is_some(), "{bad:?}"),
                other => panic!("{bad:?} read as {other:?}"),
            }
        }
    }

    #[test]
    fn cover_grows_in_steps_and_records_the_epoch() {
        let path = temp_path("grow");
        let reserved = AtomicI64::new(i64::MIN);
        let logged = std::cell::RefCell::new(Vec::new());
        let log = |r: &Record| {
            logged.borrow_mut().push(*r);
            Ok(())
        };
        assert!(cover(&path, &reserved, 1_000, EPOCH, log).unwrap());
        assert_eq!(
            read(&path),
            Found::Record(record(1_000 + LEASE_STEP_MS, EPOCH))
        );
        // inside the lease: nothing is written
        std::fs::write(&path, "garbage").unwrap();
        assert!(!cover(&path, &reserved, 1_000 + LEASE_STEP_MS, EPOCH, log).unwrap());
        assert!(
            matches!(read(&path), Found::Damaged { .. }),
            "a covered millisecond must not touch the file"
        );
        assert!(cover(&path, &reserved, 20_000, EPOCH, log).unwrap());
        assert_eq!(
            read(&path),
            Found::Record(record(20_000 + LEASE_STEP_MS, EPOCH))
        );
        assert_eq!(
            *logged.borrow(),
            vec![
                record(1_000 + LEASE_STEP_MS, EPOCH),
                record(20_000 + LEASE_STEP_MS, EPOCH)
            ],
            "every write is logged, with the same record"
        );
    }

    #[test]
    fn concurrent_writers_leave_the_largest_lease() {
        let path = Arc::new(temp_path("concurrent"));
        let reserved = Arc::new(AtomicI64::new(i64::MIN));
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let (path, reserved) = (path.clone(), reserved.clone());
                std::thread::spawn(move || {
                    for i in 0..50 {
                        cover(&path, &reserved, i * 20_000 + t, EPOCH, |_| Ok(())).unwrap();
                    }
                })
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
        let Found::Record(r) = read(&path) else {
            panic!("no record")
        };
        assert_eq!(r.lease_unix_ms, reserved.load(Ordering::Relaxed));
        assert!(r.lease_unix_ms >= 49 * 20_000 + 3);
    }

    #[test]
    fn first_start_records_the_epoch_and_holds_nothing_back() {
        let s = plan_start(Found::Missing, EPOCH, NOW);
        assert_eq!(s.floor_unix_ms, None);
        assert_eq!(s.write, Some(record(EPOCH, EPOCH)));
        assert_eq!(s.refused_epoch_unix_ms, None);
        assert!(s.messages.is_empty());
    }

    #[test]
    fn a_record_with_the_same_epoch_is_the_floor() {
        let s = plan_start(Found::Record(record(NOW + 5_000, EPOCH)), EPOCH, NOW);
        assert_eq!(s.floor_unix_ms, Some(NOW + 5_001));
        assert_eq!(s.lease_unix_ms, NOW + 5_000);
        assert_eq!(s.write, None);
        assert!(s.messages.is_empty());
    }

    #[test]
    fn a_later_epoch_is_refused_an_earlier_one_allowed_and_logged() {
        let later = EPOCH + 86_400_000;
        let s = plan_start(Found::Record(record(NOW, EPOCH)), later, NOW);
        assert_eq!(s.refused_epoch_unix_ms, Some(EPOCH));
        assert_eq!(s.write, None, "the record stays, so the refusal stays");
        assert_eq!(s.messages[0].0, Level::Warning);
        assert!(
            s.messages[0].1.contains("2026-01-01 00:00:00.000+00"),
            "{:?}",
            s.messages
        );
        assert!(
            s.messages[0].1.contains("2026-01-02 00:00:00.000+00"),
            "{:?}",
            s.messages
        );

        let earlier = EPOCH - 86_400_000;
        let s = plan_start(Found::Record(record(NOW, EPOCH)), earlier, NOW);
        assert_eq!(s.refused_epoch_unix_ms, None);
        assert_eq!(s.floor_unix_ms, Some(NOW + 1));
        assert_eq!(s.write, Some(record(NOW, earlier)));
        assert_eq!(s.messages[0].0, Level::Log);
    }

    #[test]
    fn a_0_1_0_record_gets_the_epoch() {
        let found = Found::Record(Record {
            lease_unix_ms: NOW,
            epoch_unix_ms: None,
        });
        let s = plan_start(found, EPOCH, NOW);
        assert_eq!(s.floor_unix_ms, Some(NOW + 1));
        assert_eq!(s.write, Some(record(NOW, EPOCH)));
    }

    #[test]
    fn a_damaged_lease_gives_a_floor_above_anything_it_could_have_held() {
        // the last write was at `modified`; by then no id was more than MAX_LEAD_MS ahead of the
        // clock, and the lease was at most one step past the id
        for (modified, now) in [
            (Some(NOW - 1_000), NOW),
            (Some(NOW + 9_000), NOW),
            (None, NOW),
        ] {
            let found = Found::Damaged {
                why: "garbage".into(),
                modified_unix_ms: modified,
            };
            let s = plan_start(found, EPOCH, now);
            let last_write = modified.unwrap_or(now).max(now);
            let highest_possible_lease = last_write + MAX_LEAD_MS + LEASE_STEP_MS;
            assert!(s.floor_unix_ms.unwrap() >= highest_possible_lease);
            assert_eq!(s.write, Some(record(s.floor_unix_ms.unwrap(), EPOCH)));
            assert_eq!(s.messages[0].0, Level::Warning);
            assert!(s.messages[0].1.contains("damaged (garbage)"));
        }
    }

    #[test]
    fn a_lease_past_the_horizon_or_far_ahead_is_kept_and_warned_about() {
        let year_2100 = 4_102_444_800_000;
        let s = plan_start(Found::Record(record(year_2100, EPOCH)), EPOCH, NOW);
        assert_eq!(
            s.floor_unix_ms,
            Some(year_2100 + 1),
            "never silently dropped"
        );
        assert!(s.messages.iter().any(|(_, m)| m.contains("22008")));
        let s = plan_start(Found::Record(record(NOW + 86_400_000, EPOCH)), EPOCH, NOW);
        assert!(s
            .messages
            .iter()
            .any(|(_, m)| m.contains("ahead of the clock")));
    }

    #[test]
    fn a_restart_never_issues_at_the_leased_millisecond() {
        // Ids may exist at the lease's own millisecond (with any remainder): a guard that started
        // *at* it with an empty set of used remainders would repeat them. 0.3.0 did.
        use crate::guard::{GuardState, Overflow};
        let lease = NOW + 2_000;
        let s = plan_start(Found::Record(record(lease, EPOCH)), EPOCH, NOW);
        let floor = s.floor_unix_ms.unwrap() - EPOCH;
        let mut guard = GuardState::with_floor(floor);
        for remainder in 0..1024u16 {
            for now in [NOW - EPOCH, lease - EPOCH, lease - EPOCH + 1] {
                match guard.issue(now, remainder, Overflow::Wait).unwrap() {
                    crate::guard::Decision::Issue { ms, .. } => {
                        assert!(ms > lease - EPOCH, "issued {ms} at or below the lease")
                    }
                    other => panic!("{other:?}"),
                }
            }
        }
    }

    #[test]
    fn a_failed_log_publishes_nothing() {
        let path = temp_path("failed_log");
        let reserved = AtomicI64::new(5);
        let err = cover(&path, &reserved, 1_000, EPOCH, |_| {
            Err(io::Error::other("no WAL"))
        });
        assert!(err.is_err());
        assert_eq!(
            reserved.load(Ordering::Relaxed),
            5,
            "an unlogged lease must not be used"
        );
    }

    #[test]
    fn wal_bytes_round_trip_and_reject_other_sizes() {
        for r in [
            record(NOW, EPOCH),
            Record {
                lease_unix_ms: -1,
                epoch_unix_ms: None,
            },
        ] {
            assert_eq!(Record::from_wal_bytes(&r.to_wal_bytes()), Some(r));
        }
        assert_eq!(Record::from_wal_bytes(&[0; 15]), None);
        assert_eq!(Record::from_wal_bytes(&[0; 17]), None);
    }

    #[test]
    fn replay_keeps_the_higher_lease_and_the_earlier_epoch() {
        let earlier = EPOCH - 86_400_000;
        assert_eq!(
            replay(&Found::Missing, record(NOW, EPOCH)),
            Some(record(NOW, EPOCH))
        );
        let damaged = Found::Damaged {
            why: "x".into(),
            modified_unix_ms: None,
        };
        assert_eq!(
            replay(&damaged, record(NOW, EPOCH)),
            Some(record(NOW, EPOCH))
        );
        let file = Found::Record(record(NOW, EPOCH));
        assert_eq!(replay(&file, record(NOW - 1, EPOCH)), None, "nothing to do");
        assert_eq!(
            replay(&file, record(NOW + 1, EPOCH)),
            Some(record(NOW + 1, EPOCH))
        );
        assert_eq!(
            replay(&file, record(NOW - 1, earlier)),
            Some(record(NOW, earlier))
        );
        assert_eq!(
            replay(&Found::Record(record(NOW, earlier)), record(NOW + 5, EPOCH)),
            Some(record(NOW + 5, earlier))
        );
        let path = temp_path("replayed");
        assert_eq!(
            write_replayed(&path, record(NOW, EPOCH)).unwrap(),
            record(NOW, EPOCH)
        );
        assert_eq!(
            write_replayed(&path, record(NOW - 10, EPOCH)).unwrap(),
            record(NOW, EPOCH)
        );
        assert_eq!(read(&path), Found::Record(record(NOW, EPOCH)));
    }
}
