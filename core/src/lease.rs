//! The lease: how far ahead of the clock ids may have been issued, kept in a file so that it
//! survives a restart or a crash.
//!
//! `borrow` (and recovery from a clock step) issues milliseconds ahead of the clock. The guard's
//! memory is lost when the server restarts; if the restart takes less time than that lead, a fresh
//! guard would issue those milliseconds again. So before an id ahead of the clock is returned, its
//! millisecond must be covered by the lease: a Unix-ms value written and fsynced to a file, in steps
//! of [`LEASE_STEP_MS`] so that a bulk load costs one fsync per ten seconds of lead. At start-up the
//! value becomes the floor under every fresh guard.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::sync::atomic::{AtomicI64, Ordering};

/// How far past the requested millisecond one extension of the lease reaches.
pub const LEASE_STEP_MS: i64 = 10_000;

/// The lease recorded in `path` (Unix ms), `None` if there is no file yet.
pub fn read(path: &Path) -> io::Result<Option<i64>> {
    let mut text = String::new();
    match File::open(path) {
        Ok(mut f) => f.read_to_string(&mut text)?,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    text.trim().parse::<i64>().map(Some).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{} holds {text:?}", path.display()),
        )
    })
}

/// Makes sure the lease in `path` covers `unix_ms`. `reserved` caches the value written (shared by
/// every process of the server), so the file is touched only when the lease must grow. The file
/// lock orders writers; the value is written at a fixed width in place, so a crash mid-write
/// cannot leave a shorter, smaller number behind.
pub fn cover(path: &Path, reserved: &AtomicI64, unix_ms: i64) -> io::Result<()> {
    if reserved.load(Ordering::Acquire) >= unix_ms {
        return Ok(());
    }
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)?;
    file.lock()?;
    if reserved.load(Ordering::Acquire) >= unix_ms {
        return Ok(()); // another process grew it while we waited for the lock
    }
    let lease = unix_ms.saturating_add(LEASE_STEP_MS);
    file.seek(SeekFrom::Start(0))?;
    file.write_all(format!("{lease:020}\n").as_bytes())?;
    file.sync_all()?;
    reserved.store(lease, Ordering::Release);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn temp_path(name: &str) -> std::path::PathBuf {
        let dir =
            std::env::temp_dir().join(format!("pg_shard_id_lease_{}_{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("pg_shard_id.lease");
        let _ = std::fs::remove_file(&path);
        path
    }

    #[test]
    fn no_file_means_no_floor() {
        assert_eq!(read(&temp_path("none")).unwrap(), None);
    }

    #[test]
    fn grows_in_steps_and_survives_a_reread() {
        let path = temp_path("grow");
        let reserved = AtomicI64::new(i64::MIN);
        cover(&path, &reserved, 1_000).unwrap();
        assert_eq!(read(&path).unwrap(), Some(1_000 + LEASE_STEP_MS));
        // inside the lease: nothing is written
        std::fs::write(&path, "garbage").unwrap();
        cover(&path, &reserved, 5_000).unwrap();
        assert!(
            read(&path).is_err(),
            "a covered millisecond must not touch the file"
        );
        cover(&path, &reserved, 20_000).unwrap();
        assert_eq!(read(&path).unwrap(), Some(20_000 + LEASE_STEP_MS));
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
                        cover(&path, &reserved, i * 20_000 + t).unwrap();
                    }
                })
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
        let lease = read(&path).unwrap().unwrap();
        assert_eq!(lease, reserved.load(Ordering::Relaxed));
        assert!(lease >= 49 * 20_000 + 3);
    }
}
