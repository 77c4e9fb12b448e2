//! Masks and unmasks per second on one core, beside the plain shortcode:
//! `cargo run --release -p pg_shard_id_core --example mask_cost`. The key is expanded once, as the
//! extension does per backend; each call is one FF1-AES-256 over 7 numerals of radix 512.
use pg_shard_id_core::mask::Key;
use pg_shard_id_core::shortcode;
use std::hint::black_box;
use std::time::Instant;

fn rate(name: &str, n: i64, mut f: impl FnMut(i64) -> i64) {
    let mut best = f64::MAX;
    for _ in 0..5 {
        let start = Instant::now();
        let mut acc = 0i64;
        for i in 0..n {
            acc ^= f(black_box(i * 7_919 + 11_637_205_501_278_089));
        }
        black_box(acc);
        best = best.min(start.elapsed().as_secs_f64());
    }
    println!(
        "{name:<28} {:>12.0} per second per core ({:.0} ns each, best of 5 runs of {n})",
        n as f64 / best,
        best * 1e9 / n as f64
    );
}

fn main() {
    let key = Key::new(1, &[0x5a; 32]);
    let n = 200_000;
    rate("shortcode (encode)", n, |id| {
        shortcode::encode(id).len() as i64
    });
    rate("mask", n, |id| key.mask(id, b"photos").unwrap());
    rate("unmask", n, |id| key.unmask(id, b"photos").unwrap());
    rate("mask_shortcode", n, |id| {
        key.mask_shortcode(id, b"photos").unwrap().len() as i64
    });
}
