//! The parts of pg_shard_id that do not need PostgreSQL: the 64-bit id layout, time conversion
//! and the uniqueness guard. The `pg_shard_id` extension crate is a thin pgrx layer on top.
//!
//! Everything here is tested with ordinary `cargo test`, without a database.

pub mod guard;
pub mod layout;
pub mod lease;
pub mod slots;
pub mod time;
