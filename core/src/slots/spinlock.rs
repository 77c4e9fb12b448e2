//! The spinlock of the claim lock and of each slot: one 32-bit word in shared memory, usable across
//! processes (PostgreSQL's own `slock_t` is the same idea).

use std::sync::atomic::{AtomicU32, Ordering};

/// A test-and-test-and-set spinlock on one 32-bit word, usable across processes.
#[repr(C)]
pub struct SpinLock(AtomicU32);

impl SpinLock {
    pub(crate) const fn new() -> Self {
        SpinLock(AtomicU32::new(0))
    }

    pub(crate) fn lock(&self) -> SpinGuard<'_> {
        let mut spins = 0u32;
        loop {
            if self
                .0
                .compare_exchange_weak(0, 1, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                return SpinGuard(self);
            }
            while self.0.load(Ordering::Relaxed) != 0 {
                spins = spins.wrapping_add(1);
                if spins.is_multiple_of(128) {
                    // The holder may have been descheduled: give it the core.
                    std::thread::yield_now();
                } else {
                    std::hint::spin_loop();
                }
            }
        }
    }
}

pub(crate) struct SpinGuard<'a>(&'a SpinLock);

impl Drop for SpinGuard<'_> {
    fn drop(&mut self) {
        (self.0).0.store(0, Ordering::Release);
    }
}
