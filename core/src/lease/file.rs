//! The lease file: read it (never failing), replace it whole under a lock shared by every
//! writer, extend the lease ahead of use ([`cover`]), and merge a replayed WAL record into it.

use super::{decode, encode, Found, Record, LEASE_STEP_MS};
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::UNIX_EPOCH;

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

pub(super) fn sibling(path: &Path, suffix: &str) -> PathBuf {
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

/// Makes sure the lease covers `unix_ms`: if `reserved` (the lease in force, shared by every
/// process of the server) is below it, writes a lease [`LEASE_STEP_MS`] past it to the file at
/// `path`, then hands the same record to `log` (the server writes and flushes its WAL record
/// there), and only then publishes it in `reserved`. Nobody may issue an id above `reserved`, so
/// every id is covered by the file and by the WAL before it exists. Returns whether it wrote.
///
/// The order matters for a crash in between: a lease in the file but not yet in the WAL was not
/// published, so no id used it; a checkpoint can never make the WAL record the only copy.
pub fn cover(
    path: &Path,
    reserved: &AtomicI64,
    unix_ms: i64,
    epoch_unix_ms: i64,
    log: impl FnOnce(&Record) -> io::Result<()>,
) -> io::Result<bool> {
    if reserved.load(Ordering::Acquire) >= unix_ms {
        return Ok(false);
    }
    let _lock = lock_writers(path)?;
    if reserved.load(Ordering::Acquire) >= unix_ms {
        return Ok(false); // another process grew it while we waited for the lock
    }
    let record = Record {
        lease_unix_ms: unix_ms.saturating_add(LEASE_STEP_MS),
        epoch_unix_ms: Some(epoch_unix_ms),
    };
    write_locked(path, &record)?;
    log(&record)?;
    reserved.store(record.lease_unix_ms, Ordering::Release);
    Ok(true)
}

/// What the file must hold after a WAL record `replayed` (crash recovery, a standby, a restore):
/// the higher lease, and the earlier epoch (an epoch may only ever move earlier, so the earliest
/// one recorded is the one the newest ids were made with). `None`: the file already holds it.
pub fn replay(found: &Found, replayed: Record) -> Option<Record> {
    let Found::Record(current) = found else {
        return Some(replayed);
    };
    let merged = Record {
        lease_unix_ms: current.lease_unix_ms.max(replayed.lease_unix_ms),
        epoch_unix_ms: match (current.epoch_unix_ms, replayed.epoch_unix_ms) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        },
    };
    (merged != *current).then_some(merged)
}

/// Replaces the file with `record` under the writers' lock, if [`replay`] says it must change.
/// Returns the record the file holds afterwards.
pub fn write_replayed(path: &Path, replayed: Record) -> io::Result<Record> {
    let _lock = lock_writers(path)?;
    let found = read(path);
    match replay(&found, replayed) {
        Some(merged) => {
            write_locked(path, &merged)?;
            Ok(merged)
        }
        None => match found {
            Found::Record(current) => Ok(current),
            _ => unreachable!("replay returns a record unless the file holds one"),
        },
    }
}
