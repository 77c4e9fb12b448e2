//! Routing keys to logical shards: `shard_id_shard_for`.

use pg_shard_id_core::layout::{SHARD_BITS, SHARD_COUNT};
use pg_shard_id_core::routing::{self, ShardCountOutOfRange};
use pgrx::prelude::*;

fn or_raise(result: Result<i64, ShardCountOutOfRange>) -> i32 {
    result.map(|s| s as i32).unwrap_or_else(|e| {
        crate::errors::raise_with_hint(
            PgSqlErrorCode::ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE,
            e.to_string(),
            &format!(
                "The {SHARD_BITS}-bit shard field holds at most {SHARD_COUNT} logical shards."
            ),
        )
    })
}

/// The logical shard of an integer key: `key mod shard_count` (0 .. shard_count - 1, also for
/// negative keys), as Instagram routed `user_id % 2000`.
///
/// `shard_id_shard_for(key bigint, shard_count integer) RETURNS integer` IMMUTABLE STRICT PARALLEL SAFE
///
/// ```sql
/// SELECT shard_id_shard_for(31341, 2000);  -- 1341
/// ```
/// Errors: 22003 for shard_count outside 1..8192.
#[pg_extern(immutable, strict, parallel_safe, name = "shard_id_shard_for")]
fn shard_id_shard_for_bigint(key: i64, shard_count: i32) -> i32 {
    or_raise(routing::shard_for_int(key, i64::from(shard_count)))
}

/// The logical shard of a text key: 64-bit FNV-1a of its UTF-8 bytes, mod shard_count. Stable
/// across versions, platforms, restarts and database encodings (the key is converted to UTF-8
/// first; pinned by known-answer tests), and easy to compute in the application too.
///
/// `shard_id_shard_for(key text, shard_count integer) RETURNS integer` IMMUTABLE STRICT PARALLEL SAFE
///
/// ```sql
/// SELECT shard_id_shard_for('alice@example.com', 2000);  -- 198
/// ```
/// Errors: 22003 for shard_count outside 1..8192; 22021 or 22P05 for bytes with no UTF-8 form.
// The argument is read as raw bytes (see `text.rs`), so the SQL is written out to declare `text`.
#[pg_extern(sql = r#"
CREATE FUNCTION shard_id_shard_for("key" text, "shard_count" integer) RETURNS integer
    IMMUTABLE STRICT PARALLEL SAFE
    LANGUAGE c AS 'MODULE_PATHNAME', 'shard_id_shard_for_text_wrapper';
"#)]
fn shard_id_shard_for_text(key: &[u8], shard_count: i32) -> i32 {
    let key = crate::text::utf8(key);
    or_raise(routing::shard_for_text(
        key.as_bytes(),
        i64::from(shard_count),
    ))
}
