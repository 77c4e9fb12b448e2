//! 64-bit FNV-1a: the hash of text routing keys (`routing`) and the lease file's check value
//! (`lease`). Small, fixed and the same on every platform, which both need: a key must route to
//! the same shard everywhere, and a lease file must verify on the server that reads it.

/// 64-bit FNV-1a.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &b| {
        (hash ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}
