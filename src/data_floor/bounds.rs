//! The bounds (lower and upper) of RANGE partitions on the id (`Column::range_parent`), read
//! from each parent's partition descriptor as the planner reads it for pruning: a leaf's rows all
//! lie below its upper bound, so the data floor reads the leaves of the highest bounds first and
//! stops where the rest cannot hold a newer id (`pg_shard_id_core::newest_first`, issue 57).
//!
//! Each parent is locked (AccessShareLock, as a reader) only if the lock is free at once, and
//! held while the leaves are read ([`Bounds::release`]): a plain `DETACH PARTITION` waits for
//! it, so no leaf leaves its parent, takes rows above its bound and comes back between its
//! bound's read and its own. `DETACH ... CONCURRENTLY` waits only for the lockers it finds when
//! it begins to wait, and marks its partition first: a parent with a partition so marked gives
//! no bounds. So does a parent whose lock is not free at once: its leaves are all read. A leaf's
//! bounds count only under the parent the catalog named for its column.

use super::columns::Column;
use pg_shard_id_core::newest_first::Range;
use pgrx::prelude::*;
use std::collections::HashMap;

/// The bounds of each (parent, leaf) whose parent's descriptor gave them, and the parents locked.
pub struct Bounds {
    ranges: HashMap<(pg_sys::Oid, pg_sys::Oid), Range>,
    locked: Vec<pg_sys::Oid>,
}

impl Bounds {
    /// What bounds the ids `column` holds (`None`: nothing does): the leaf's bounds in the
    /// parent that the catalog said partitions it on that column, and no other (a leaf moved to
    /// another parent since, partitioned on another column, has bounds that say nothing of this
    /// one: the review of the change).
    pub fn range(&self, column: &Column) -> Option<Range> {
        let parent = column.range_parent?;
        self.ranges.get(&(parent, column.relation)).copied()
    }

    /// Lets the parents' locks go, once the leaves are read.
    pub fn release(self) {
        for parent in self.locked {
            // SAFETY: a lock this backend took in `read`, in this transaction.
            unsafe {
                pg_sys::UnlockRelationOid(parent, pg_sys::AccessShareLock as pg_sys::LOCKMODE)
            };
        }
    }
}

/// The bounds of the leaves of `columns` that are RANGE partitions on their column.
///
/// # Safety
/// Call inside a transaction, inside pgrx's guard, with oids from the catalog.
pub unsafe fn read(columns: &[Column]) -> Bounds {
    let mut bounds = Bounds {
        ranges: HashMap::new(),
        locked: Vec::new(),
    };
    let mut parents: Vec<pg_sys::Oid> = columns.iter().filter_map(|c| c.range_parent).collect();
    parents.sort_unstable_by_key(|oid| oid.to_u32());
    parents.dedup();
    let lock = pg_sys::AccessShareLock as pg_sys::LOCKMODE;
    for parent in parents {
        // SAFETY: the caller's contract. The relation is opened under the lock just taken, its
        // partition descriptor (the relcache's, valid while the relation is open) read, and
        // closed; only plain values are copied out of it.
        unsafe {
            if !pg_sys::ConditionalLockRelationOid(parent, lock) {
                continue;
            }
            bounds.locked.push(parent);
            let relation = pg_sys::try_table_open(parent, pg_sys::NoLock as pg_sys::LOCKMODE);
            if relation.is_null() {
                continue;
            }
            if (*(*relation).rd_rel).relkind as u8 == pg_sys::RELKIND_PARTITIONED_TABLE {
                let descriptor = pg_sys::RelationGetPartitionDesc(relation, true);
                read_range_bounds(parent, descriptor, &mut bounds.ranges);
            }
            pg_sys::table_close(relation, pg_sys::NoLock as pg_sys::LOCKMODE);
        }
    }
    bounds
}

/// Each partition's bounds, from a RANGE descriptor of one bigint key column: the bounds are in
/// ascending order, and bound `i` is the (exclusive) upper bound of partition `indexes[i]` when
/// that is not -1 (-1: a gap's lower bound), whose lower bound is bound `i - 1`; MINVALUE and
/// MAXVALUE bound nothing.
///
/// # Safety
/// `descriptor` is a partition descriptor of an open relation.
unsafe fn read_range_bounds(
    parent: pg_sys::Oid,
    descriptor: pg_sys::PartitionDesc,
    ranges: &mut HashMap<(pg_sys::Oid, pg_sys::Oid), Range>,
) {
    use pg_sys::PartitionRangeDatumKind::PARTITION_RANGE_DATUM_VALUE;
    // SAFETY: the caller's contract; the arrays' lengths are the descriptor's own counts.
    unsafe {
        // (a partition being detached CONCURRENTLY: its detach may have waited for the lockers
        // before this backend's lock, and finish while the leaves are read; such a parent gives
        // no bounds, and its leaves are all read)
        if descriptor.is_null() || (*descriptor).boundinfo.is_null() || (*descriptor).detached_exist
        {
            return;
        }
        let info = (*descriptor).boundinfo;
        if (*info).strategy as u8 != b'r' || (*info).kind.is_null() {
            return;
        }
        let parts = usize::try_from((*descriptor).nparts).unwrap_or(0);
        // (bigint is passed by value: the datum is the number)
        let bound = |i: usize| {
            (*(*(*info).kind.add(i)) == PARTITION_RANGE_DATUM_VALUE)
                .then(|| (*(*(*info).datums.add(i))).value() as i64)
        };
        for i in 0..usize::try_from((*info).ndatums).unwrap_or(0) {
            let Ok(at) = usize::try_from(*(*info).indexes.add(i)) else {
                continue;
            };
            if at >= parts {
                continue;
            }
            let range = Range {
                lower: i.checked_sub(1).and_then(bound),
                upper: bound(i),
            };
            ranges.insert((parent, *(*descriptor).oids.add(at)), range);
        }
    }
}
