//! A table in heap memory: for tests, and for the per-session table when the library is not
//! preloaded.

use super::SlotTable;

/// Owned, heap-allocated memory for a table, for tests and for the per-session fallback.
pub struct OwnedSlotTable {
    /// The table's memory; `table` points into it, so it must not move or be dropped first.
    _mem: Vec<CacheLine>,
    table: SlotTable,
}

/// A unit of the table's memory, aligned as its slots are.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct CacheLine([u8; 64]);

impl OwnedSlotTable {
    pub fn new(capacity: usize) -> Self {
        assert!(SlotTable::align() <= std::mem::align_of::<CacheLine>());
        let mut mem = vec![CacheLine([0; 64]); SlotTable::size_of(capacity).div_ceil(64)];
        // SAFETY: `mem` is large enough, aligned for the table (checked above), ours alone, and
        // lives in this struct as long as the view (a Vec's heap buffer does not move with the Vec).
        let table = unsafe { SlotTable::init_in(mem.as_mut_ptr().cast(), capacity) };
        OwnedSlotTable { _mem: mem, table }
    }

    pub fn table(&self) -> &SlotTable {
        &self.table
    }
}
