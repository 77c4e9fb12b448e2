//! `#[pg_test]`s: SQL-level behaviour checked from Rust, in a server with the library preloaded.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;

    #[pg_test]
    fn instagram_known_answer() {
        let id = Spi::get_one::<i64>(
            "SELECT shard_id_compose('2011-01-01 00:00:00+00'::timestamptz + interval '1387263 s', \
             31341 % 2000, 5001 % 1024, '2011-01-01 00:00:00+00')",
        );
        assert_eq!(id, Ok(Some(11_637_205_501_278_089)));
    }
}
