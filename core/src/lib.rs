//! The parts of pg_shard_id that do not need PostgreSQL: the 64-bit id layout, time conversion,
//! the uniqueness guard and its lease, shard routing and shortcodes. The `pg_shard_id` extension
//! crate is a thin pgrx layer on top.
//!
//! Everything here is tested with ordinary `cargo test`, without a database.

pub mod guard;
pub mod layout;
pub mod lease;
pub mod routing;
pub mod shortcode;
pub mod slots;
pub mod time;
