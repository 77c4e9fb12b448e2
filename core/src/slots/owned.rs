//! A table in heap memory: for tests, and for the per-session table when the library is not
//! preloaded.

use super::SlotTable;

/// Owned, heap-allocated memory for a table, for tests and for the per-session fallback.
pub struct OwnedSlotTable {
    /// The table's memory; `table` points into it, so it must not move or be dropped first.
    _mem: Vec<u64>,
    table: SlotTable,
}

impl OwnedSlotTable {
    pub fn new(capacity: usize) -> Self {
        assert!(SlotTable::align() <= std::mem::align_of::<u64>());
        let mut mem = vec![0u64; SlotTable::size_of(capacity).div_ceil(8)];
        // SAFETY: `mem` is large enough, u64-aligned (checked above), ours alone, and lives in
        // this struct as long as the view (a Vec's heap buffer does not move with the Vec).
        let table = unsafe { SlotTable::init_in(mem.as_mut_ptr().cast(), capacity) };
        OwnedSlotTable { _mem: mem, table }
    }

    pub fn table(&self) -> &SlotTable {
        &self.table
    }
}
