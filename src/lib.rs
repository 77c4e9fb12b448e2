//! pg_shard_id: Instagram-style 64-bit ids generated inside PostgreSQL, that never repeat.
//!
//! The pure parts (bit layout, time conversion, the uniqueness guard) are in the
//! `pg_shard_id_core` crate; this crate is the pgrx layer: SQL functions, settings, shared memory
//! and errors.

use pgrx::prelude::*;

mod adopt;
mod backfill;
mod catalog_watch;
mod check;
mod clock;
mod convert;
mod data_floor;
mod decode;
mod errors;
mod generate;
mod info;
mod issue;
mod json;
mod lease;
mod mask;
mod node;
mod open_draws;
mod origin;
mod partition;
mod privilege;
mod read;
mod resync;
mod routing;
mod scoped;
mod settings;
mod shmem;
mod shortcode;
mod stats;
mod text;

#[cfg(any(test, feature = "pg_test"))]
mod tests;

::pgrx::pg_module_magic!(name, version);

#[pg_guard]
pub extern "C-unwind" fn _PG_init() {
    settings::register();
    privilege::register();
    // the lease is the layer above the table: shmem calls back into it, never imports it
    if shmem::init(lease::start) {
        lease::register_wal();
        catalog_watch::register();
        open_draws::register();
    }
}

extension_sql_file!(
    "../sql/preload_notice.sql",
    name = "preload_notice",
    requires = [info::pg_shard_id_info],
);

extension_sql_file!(
    "../sql/origin.sql",
    name = "origin",
    requires = [info::pg_shard_id_info],
);

extension_sql_file!(
    "../sql/stats.sql",
    name = "stats",
    requires = [stats::pg_shard_id_stats, stats::pg_shard_id_stats_reset],
);

extension_sql_file!(
    "../sql/convert.sql",
    name = "convert",
    requires = ["origin", "next_shard_id", backfill::next_shard_id_at],
);

extension_sql_file!("../sql/comments.sql", name = "comments", finalize);

/// Required by `cargo pgrx test`.
#[cfg(test)]
pub mod pg_test {
    pub fn setup(_options: Vec<&str>) {}

    #[must_use]
    pub fn postgresql_conf_options() -> Vec<&'static str> {
        vec!["shared_preload_libraries = 'pg_shard_id'"]
    }
}
