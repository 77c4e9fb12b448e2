//! URL shortcodes: `shard_id_to_shortcode` and `shard_id_from_shortcode`.

use pg_shard_id_core::shortcode;
use pgrx::prelude::*;

/// The 11-character URL-safe base64 code of an id (its 8 bytes, big-endian, no padding).
///
/// `shard_id_to_shortcode(id bigint) RETURNS text` IMMUTABLE STRICT PARALLEL SAFE
///
/// ```sql
/// SELECT shard_id_to_shortcode(11637205501278089);  -- AClX-gwU94k
/// ```
/// Errors: 22003 for a negative id.
#[pg_extern(immutable, strict, parallel_safe)]
fn shard_id_to_shortcode(id: i64) -> String {
    if id < 0 {
        crate::errors::raise(pg_shard_id_core::layout::LayoutError::NegativeId(id), 0);
    }
    shortcode::encode(id)
}

/// The id of a shortcode made by `shard_id_to_shortcode`.
///
/// `shard_id_from_shortcode(code text) RETURNS bigint` IMMUTABLE STRICT PARALLEL SAFE
///
/// ```sql
/// SELECT shard_id_from_shortcode('AClX-gwU94k');  -- 11637205501278089
/// ```
/// Errors: 22P02 for anything that is not exactly such a code (the message quotes at most its
/// first 20 characters), in any database encoding.
// The argument is read as raw bytes (see `text.rs`), so the SQL is written out to declare `text`.
#[pg_extern(sql = r#"
CREATE FUNCTION shard_id_from_shortcode("code" text) RETURNS bigint
    IMMUTABLE STRICT PARALLEL SAFE
    LANGUAGE c AS 'MODULE_PATHNAME', 'shard_id_from_shortcode_wrapper';
"#)]
fn shard_id_from_shortcode(code: &[u8]) -> i64 {
    let code = crate::text::utf8(code);
    shortcode::decode(&code).unwrap_or_else(|e| {
        crate::errors::raise_with_hint(
            PgSqlErrorCode::ERRCODE_INVALID_TEXT_REPRESENTATION,
            format!(
                "\"{}\" is not a shard id shortcode: {e}",
                crate::text::echo(&code, 20)
            ),
            "A shortcode is 11 characters of A-Z, a-z, 0-9, '-' and '_', as made by shard_id_to_shortcode.",
        )
    })
}
