//! The lease: how far ahead of the clock ids may have been issued, and the epoch they were made
//! with, kept in a file so that both survive a restart or a crash.
//!
//! `borrow` (and recovery from a clock step) issues milliseconds ahead of the clock. The guard's
//! memory is lost when the server restarts; if the restart takes less time than that lead, a fresh
//! guard would issue those milliseconds again. So before an id ahead of the clock is returned, its
//! millisecond must be covered by the lease: a Unix-ms value written and fsynced to a file, in steps
//! of [`LEASE_STEP_MS`] so that a bulk load costs one write per ten seconds of lead. At start-up the
//! value becomes the floor under every fresh guard ([`plan_start`]).
//!
//! The file is one line, `pg_shard_id lease <unix ms> epoch <unix ms> check <fnv-1a 64>`, replaced
//! whole (write a temporary file, fsync, rename, fsync the directory), so a crash leaves the old or
//! the new record and never a mix; the check value catches any other damage. A damaged or
//! unreadable file never stops the server: it is replaced by a floor that is above anything the
//! lost record could have held (see [`plan_start`]).

use crate::guard::MAX_LEAD_MS;
use crate::layout::MAX_MS;
use crate::routing::fnv1a64;
use crate::time::format_unix_ms;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::UNIX_EPOCH;

/// How far past the requested millisecond one extension of the lease reaches.
pub const LEASE_STEP_MS: i64 = 10_000;

/// What the lease file records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record {
    /// No id of this server has a timestamp past this (Unix ms).
    pub lease_unix_ms: i64,
    /// The epoch the ids were made with (Unix ms); `None` in files written by 0.1.0.
    pub epoch_unix_ms: Option<i64>,
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

/// Reads the lease file. Never fails: what cannot be read is [`Found::Damaged`].
pub fn read(path: &Path) -> Found {
    let mut text = String::new();
    let result = File::open(path).and_then(|f| f.take(4096).read_to_string(&mut text).map(|_| ()));
    let damaged = |why: String| Found::Damaged {
        why,
        modified_unix_ms: modified_unix_ms(path),
    };
    match result {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Found::Missing,
        Err(e) => damaged(format!("cannot read it: {e}")),
        Ok(()) if text.is_empty() => damaged("it is empty".to_string()),
        Ok(()) => match decode(&text) {
            Ok(record) => Found::Record(record),
            Err(why) => damaged(why),
        },
    }
}

fn modified_unix_ms(path: &Path) -> Option<i64> {
    let modified = std::fs::metadata(path).ok()?.modified().ok()?;
    Some(modified.duration_since(UNIX_EPOCH).ok()?.as_millis() as i64)
}

fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(suffix);
    path.with_file_name(name)
}

/// Replaces the lease file with `record`, durably: a crash leaves either the old or the new file.
/// Serialised between processes by a lock on `<path>.lock`.
pub fn write(path: &Path, record: &Record) -> io::Result<()> {
    let _lock = lock_writers(path)?;
    write_locked(path, record)
}

/// Takes the writers' lock, `<path>.lock`; it is released when the returned file is dropped.
fn lock_writers(path: &Path) -> io::Result<File> {
    let lock = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(sibling(path, ".lock"))?;
    lock.lock()?;
    Ok(lock)
}

fn write_locked(path: &Path, record: &Record) -> io::Result<()> {
    let tmp = sibling(path, ".tmp");
    let mut file = File::create(&tmp)?;
    file.write_all(encode(record).as_bytes())?;
    file.sync_all()?;
    drop(file);
    std::fs::rename(&tmp, path)?;
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    File::open(dir)?.sync_all()
}

/// Makes sure the lease in `path` covers `unix_ms`. `reserved` caches the value written (shared by
/// every process of the server), so the file is touched only when the lease must grow.
pub fn cover(
    path: &Path,
    reserved: &AtomicI64,
    unix_ms: i64,
    epoch_unix_ms: i64,
) -> io::Result<()> {
    if reserved.load(Ordering::Acquire) >= unix_ms {
        return Ok(());
    }
    let _lock = lock_writers(path)?;
    if reserved.load(Ordering::Acquire) >= unix_ms {
        return Ok(()); // another process grew it while we waited for the lock
    }
    let lease = unix_ms.saturating_add(LEASE_STEP_MS);
    write_locked(
        path,
        &Record {
            lease_unix_ms: lease,
            epoch_unix_ms: Some(epoch_unix_ms),
        },
    )?;
    reserved.store(lease, Ordering::Release);
    Ok(())
}

/// How loud a start-up message is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Log,
    Warning,
}

/// What a starting server does with the lease it found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Start {
    /// Fresh guards start at or above this (Unix ms); `None`: at the clock.
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
/// * a record with the same epoch: its lease is the floor;
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
            start.floor_unix_ms = Some(found.lease_unix_ms);
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

#[cfg(test)]
mod tests {
    use super::*;
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
        cover(&path, &reserved, 1_000, EPOCH).unwrap();
        assert_eq!(
            read(&path),
            Found::Record(record(1_000 + LEASE_STEP_MS, EPOCH))
        );
        // inside the lease: nothing is written
        std::fs::write(&path, "garbage").unwrap();
        cover(&path, &reserved, 5_000, EPOCH).unwrap();
        assert!(
            matches!(read(&path), Found::Damaged { .. }),
            "a covered millisecond must not touch the file"
        );
        cover(&path, &reserved, 20_000, EPOCH).unwrap();
        assert_eq!(
            read(&path),
            Found::Record(record(20_000 + LEASE_STEP_MS, EPOCH))
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
                        cover(&path, &reserved, i * 20_000 + t, EPOCH).unwrap();
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
        assert_eq!(s.floor_unix_ms, Some(NOW + 5_000));
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
        assert_eq!(s.floor_unix_ms, Some(NOW));
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
        assert_eq!(s.floor_unix_ms, Some(NOW));
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
        assert_eq!(s.floor_unix_ms, Some(year_2100), "never silently dropped");
        assert!(s.messages.iter().any(|(_, m)| m.contains("22008")));
        let s = plan_start(Found::Record(record(NOW + 86_400_000, EPOCH)), EPOCH, NOW);
        assert!(s
            .messages
            .iter()
            .any(|(_, m)| m.contains("ahead of the clock")));
    }
}
