//! What the table knows of the server, in its header: counters, the lease in force, a refused
//! epoch, the floors under fresh guards, and whether fresh guards wait for their data floor.

use super::SlotTable;
use std::sync::atomic::{AtomicI64, Ordering};

impl SlotTable {
    /// Number of slots that hold a sequence.
    pub fn in_use(&self) -> usize {
        self.header().in_use.load(Ordering::Relaxed)
    }

    /// How many times a slot was taken from one sequence and given to another.
    pub fn evictions(&self) -> u64 {
        self.header().evictions.load(Ordering::Relaxed)
    }

    /// How many times the lease was extended since the server started.
    pub fn lease_writes(&self) -> u64 {
        self.header().lease_writes.load(Ordering::Relaxed)
    }

    /// Whether the server started without a lease file: a new data directory (initdb, the target
    /// of pg_upgrade or of a restore), or the file was deleted.
    pub fn started_without_lease(&self) -> bool {
        self.header().started_without_lease.load(Ordering::Relaxed) != 0
    }

    /// Records that the server started without a lease file.
    pub fn mark_started_without_lease(&self) {
        self.header()
            .started_without_lease
            .store(1, Ordering::Relaxed);
    }

    /// Counts one extension of the lease.
    pub fn count_lease_write(&self) {
        self.header().lease_writes.fetch_add(1, Ordering::Relaxed);
    }

    /// The lease in force, in Unix ms (shared by every process): no id above it may be issued.
    pub fn lease(&self) -> &AtomicI64 {
        &self.header().lease
    }

    /// The recorded epoch (Unix ms) when ids are refused because the configured one is later.
    pub fn refused_epoch(&self) -> Option<i64> {
        let epoch = self.header().refused_epoch.load(Ordering::Acquire);
        (epoch != i64::MIN).then_some(epoch)
    }

    /// Refuses ids (`Some(recorded epoch)`) or allows them (`None`).
    pub fn set_refused_epoch(&self, recorded: Option<i64>) {
        self.header()
            .refused_epoch
            .store(recorded.unwrap_or(i64::MIN), Ordering::Release);
    }

    /// Puts a lease in force: the lease (Unix ms) never goes down, the floor (ms since the epoch)
    /// is raised, and a refused epoch (Unix ms), once set, stays. The one way the lease's
    /// effects reach the table, at start-up from the file and in WAL replay from a record.
    pub fn put_lease_in_force(
        &self,
        lease_unix_ms: i64,
        floor: Option<i64>,
        refused_epoch: Option<i64>,
    ) {
        self.lease().fetch_max(lease_unix_ms, Ordering::AcqRel);
        if let Some(floor) = floor {
            self.raise_floor(floor);
        }
        if refused_epoch.is_some() {
            self.set_refused_epoch(refused_epoch);
        }
    }

    /// The floor under guards created from now on (ms since the epoch; `i64::MIN` for none).
    pub fn floor(&self) -> i64 {
        self.header().floor.load(Ordering::Acquire)
    }

    /// Raises the floor to at least `ms`.
    pub fn raise_floor(&self, ms: i64) {
        self.header().floor.fetch_max(ms, Ordering::AcqRel);
    }

    /// Where ids of a sequence that no column's DEFAULT draws from start, when data made
    /// elsewhere was taken in (its rows cannot tell: ids drawn by explicit calls may be anywhere).
    pub fn elsewhere_floor(&self) -> Option<i64> {
        let floor = self.header().elsewhere_floor.load(Ordering::Acquire);
        (floor != i64::MIN).then_some(floor)
    }

    /// Raises [`SlotTable::elsewhere_floor`] to at least `ms`.
    pub fn raise_elsewhere_floor(&self, ms: i64) {
        self.header()
            .elsewhere_floor
            .fetch_max(ms, Ordering::AcqRel);
    }
}
