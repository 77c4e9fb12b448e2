//! Masked public ids: `shard_id_mask`, `shard_id_unmask` and their shortcode forms, over
//! `pg_shard_id_core::mask` (FF1-AES-256 from the `fpe` and `aes` crates).
//!
//! **Where the key lives: a file, `pg_shard_id.keys` in the data directory**, readable by the
//! server's OS user only (a file with group or other access is refused, as PostgreSQL refuses
//! such an SSL key). Not a setting: a setting's value lives in `postgresql.conf` or
//! `postgresql.auto.conf` (`ALTER SYSTEM` writes it in plain text beside every other setting,
//! and `pg_file_settings` shows it to superusers), a superuser could `SET` it per session, which
//! would make the same call give different answers in two sessions, and no role's `SHOW` must
//! ever see it. The file is read by each backend at its first mask or unmask and its keys are
//! expanded once and kept for the backend's life (so a rotation reaches new sessions).
//!
//! **Volatility.** The forms that use the *current* key (`shard_id_mask(id, tweak)`,
//! `shard_id_unmask(masked, tweak)`, `shard_id_mask_shortcode`) are STABLE: a rotation changes
//! their answer. The forms that name their key (`shard_id_mask(id, tweak, key_id)`,
//! `shard_id_unmask(masked, tweak, key_id)`, and `shard_id_unmask_shortcode`, whose code carries
//! its key id) are IMMUTABLE, on one rule the README states: a key id's key is never changed,
//! only added or retired. A generated column or an index needs those.
//!
//! **Who may call them.** Masking is granted to everyone: it is what an application shows, and it
//! reveals nothing of the key. Unmasking turns a public value back into the id, with its time
//! and shard: EXECUTE is revoked from PUBLIC; grant it to the roles that resolve URLs.

use crate::errors::raise_with_hint;
use crate::text;
use pg_shard_id_core::mask::{Key, KeyFile, MaskError};
use pgrx::prelude::*;
use std::sync::OnceLock;

/// The key file, in the data directory (the backend's working directory).
pub const KEY_FILE: &str = "pg_shard_id.keys";

/// This backend's keys, read and expanded at first use. (A backend is one thread; a failed read
/// is not kept, so creating the file helps the next call.)
static KEYS: OnceLock<KeyFile> = OnceLock::new();

fn keys() -> &'static KeyFile {
    if let Some(keys) = KEYS.get() {
        return keys;
    }
    let keys = load();
    KEYS.get_or_init(|| keys)
}

const HOW_TO_MAKE_ONE: &str = "Write the file pg_shard_id.keys in the data directory, readable by \
     the server's OS user only (chmod 600), with a line \"key 1 <64 hex digits>\" (for example from \
     openssl rand -hex 32) and a line \"current 1\"; new sessions read it.";

fn load() -> KeyFile {
    use std::os::unix::fs::PermissionsExt;
    let metadata = std::fs::metadata(KEY_FILE).unwrap_or_else(|e| {
        let code = if e.kind() == std::io::ErrorKind::NotFound {
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE
        } else {
            PgSqlErrorCode::ERRCODE_IO_ERROR
        };
        raise_with_hint(
            code,
            format!(
                "pg_shard_id: no mask key: cannot read \"{KEY_FILE}\" in the data directory: {e}"
            ),
            HOW_TO_MAKE_ONE,
        )
    });
    let mode = metadata.permissions().mode();
    if mode & 0o077 != 0 {
        raise_with_hint(
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!(
                "pg_shard_id: the mask key file \"{KEY_FILE}\" has group or other access (mode {:o})",
                mode & 0o777
            ),
            "Keys must be readable by the server's OS user only: chmod 600 pg_shard_id.keys in the data directory.",
        );
    }
    let text = std::fs::read_to_string(KEY_FILE).unwrap_or_else(|e| {
        raise_with_hint(
            PgSqlErrorCode::ERRCODE_IO_ERROR,
            format!("pg_shard_id: cannot read the mask key file \"{KEY_FILE}\": {e}"),
            HOW_TO_MAKE_ONE,
        )
    });
    KeyFile::parse(&text).unwrap_or_else(|e| {
        raise_with_hint(
            PgSqlErrorCode::ERRCODE_CONFIG_FILE_ERROR,
            format!("pg_shard_id: the mask key file \"{KEY_FILE}\" is invalid: {e}"),
            HOW_TO_MAKE_ONE,
        )
    })
}

/// Raises a masking error with its SQLSTATE.
fn raise(error: MaskError) -> ! {
    let (code, hint) = match &error {
        MaskError::Negative(_) => (
            PgSqlErrorCode::ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE,
            "Ids and masked ids are non-negative bigints.",
        ),
        MaskError::UnknownKey(_) => (
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            "The key ids are the \"key <id> ...\" lines of pg_shard_id.keys; a retired key cannot unmask.",
        ),
        MaskError::BadShortcode(_) => (
            PgSqlErrorCode::ERRCODE_INVALID_TEXT_REPRESENTATION,
            "A masked shortcode is 12 characters of A-Z, a-z, 0-9, '-' and '_', as made by shard_id_mask_shortcode.",
        ),
        MaskError::BadLine(..) | MaskError::NoCurrentKey => {
            (PgSqlErrorCode::ERRCODE_CONFIG_FILE_ERROR, HOW_TO_MAKE_ONE)
        }
    };
    raise_with_hint(code, format!("pg_shard_id: {error}"), hint)
}

fn key(key_id: i32) -> &'static Key {
    let keys = keys();
    u8::try_from(key_id)
        .ok()
        .and_then(|id| keys.key(id).ok())
        .unwrap_or_else(|| {
            raise_with_hint(
                PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
                format!("pg_shard_id: no mask key has the id {key_id}"),
                "The key ids are the \"key <id> ...\" lines of pg_shard_id.keys; a retired key cannot unmask.",
            )
        })
}

/// The masked value of `id` under `tweak`, with the current key: a non-negative bigint that says
/// nothing of the id's time, shard or order.
///
/// ```sql
/// shard_id_mask(id bigint, tweak text DEFAULT '') RETURNS bigint  STABLE STRICT PARALLEL SAFE
/// SELECT shard_id_mask(11637205501278089, 'photos');
/// ```
///
/// Errors: 22003 for a negative id; 55000 without a key file (or one others can read); F0000 for
/// an invalid one; 58030 when it cannot be read.
#[pg_extern(sql = r#"
CREATE FUNCTION shard_id_mask("id" bigint, "tweak" text DEFAULT '') RETURNS bigint
    STABLE STRICT PARALLEL SAFE
    LANGUAGE c AS 'MODULE_PATHNAME', 'shard_id_mask_wrapper';
"#)]
fn shard_id_mask(id: i64, tweak: &[u8]) -> i64 {
    let tweak = text::utf8(tweak);
    keys()
        .current()
        .mask(id, tweak.as_bytes())
        .unwrap_or_else(|e| raise(e))
}

/// The masked value of `id` under `tweak` with the key `key_id`: IMMUTABLE (a key id's key never
/// changes), for generated columns and indexes.
///
/// ```sql
/// shard_id_mask(id bigint, tweak text, key_id integer) RETURNS bigint  IMMUTABLE STRICT PARALLEL SAFE
/// ALTER TABLE photos ADD COLUMN public_id bigint GENERATED ALWAYS AS (shard_id_mask(id, 'photos', 1)) STORED;
/// ```
///
/// Errors: 22023 for a key id the key file does not have; otherwise those of the two-argument
/// form.
#[pg_extern(sql = r#"
CREATE FUNCTION shard_id_mask("id" bigint, "tweak" text, "key_id" integer) RETURNS bigint
    IMMUTABLE STRICT PARALLEL SAFE
    LANGUAGE c AS 'MODULE_PATHNAME', 'shard_id_mask_with_key_wrapper';
"#)]
fn shard_id_mask_with_key(id: i64, tweak: &[u8], key_id: i32) -> i64 {
    let tweak = text::utf8(tweak);
    key(key_id)
        .mask(id, tweak.as_bytes())
        .unwrap_or_else(|e| raise(e))
}

/// The id whose masked value under `tweak` is `masked`, with the current key: the exact inverse
/// of `shard_id_mask(id, tweak)`. EXECUTE is revoked from PUBLIC.
///
/// ```sql
/// shard_id_unmask(masked bigint, tweak text DEFAULT '') RETURNS bigint  STABLE STRICT PARALLEL SAFE
/// SELECT shard_id_unmask(shard_id_mask(42, 'photos'), 'photos');  -- 42
/// ```
///
/// Errors: 42501 without EXECUTE; those of `shard_id_mask`.
#[pg_extern(sql = r#"
CREATE FUNCTION shard_id_unmask("masked" bigint, "tweak" text DEFAULT '') RETURNS bigint
    STABLE STRICT PARALLEL SAFE
    LANGUAGE c AS 'MODULE_PATHNAME', 'shard_id_unmask_wrapper';
REVOKE EXECUTE ON FUNCTION shard_id_unmask(bigint, text) FROM PUBLIC;
"#)]
fn shard_id_unmask(masked: i64, tweak: &[u8]) -> i64 {
    let tweak = text::utf8(tweak);
    keys()
        .current()
        .unmask(masked, tweak.as_bytes())
        .unwrap_or_else(|e| raise(e))
}

/// The id whose masked value under `tweak` with key `key_id` is `masked` (values masked before a
/// rotation). EXECUTE is revoked from PUBLIC.
///
/// ```sql
/// shard_id_unmask(masked bigint, tweak text, key_id integer) RETURNS bigint  IMMUTABLE STRICT PARALLEL SAFE
/// ```
///
/// Errors: 22023 for an unknown key id; those of `shard_id_unmask(masked, tweak)`.
#[pg_extern(sql = r#"
CREATE FUNCTION shard_id_unmask("masked" bigint, "tweak" text, "key_id" integer) RETURNS bigint
    IMMUTABLE STRICT PARALLEL SAFE
    LANGUAGE c AS 'MODULE_PATHNAME', 'shard_id_unmask_with_key_wrapper';
REVOKE EXECUTE ON FUNCTION shard_id_unmask(bigint, text, integer) FROM PUBLIC;
"#)]
fn shard_id_unmask_with_key(masked: i64, tweak: &[u8], key_id: i32) -> i64 {
    let tweak = text::utf8(tweak);
    key(key_id)
        .unmask(masked, tweak.as_bytes())
        .unwrap_or_else(|e| raise(e))
}

/// A URL-safe, JavaScript-safe masked id: the current key's id as one character, then the masked
/// value's 11-character shortcode. It carries its key, so it unmasks after a rotation.
///
/// ```sql
/// shard_id_mask_shortcode(id bigint, tweak text DEFAULT '') RETURNS text  STABLE STRICT PARALLEL SAFE
/// SELECT shard_id_mask_shortcode(id, 'photos') FROM photos;  -- e.g. BJWnT2x0k3aQ
/// ```
///
/// Errors: those of `shard_id_mask`.
#[pg_extern(sql = r#"
CREATE FUNCTION shard_id_mask_shortcode("id" bigint, "tweak" text DEFAULT '') RETURNS text
    STABLE STRICT PARALLEL SAFE
    LANGUAGE c AS 'MODULE_PATHNAME', 'shard_id_mask_shortcode_wrapper';
"#)]
fn shard_id_mask_shortcode(id: i64, tweak: &[u8]) -> String {
    let tweak = text::utf8(tweak);
    keys()
        .current()
        .mask_shortcode(id, tweak.as_bytes())
        .unwrap_or_else(|e| raise(e))
}

/// The id of a masked shortcode, with the key it names. EXECUTE is revoked from PUBLIC.
///
/// ```sql
/// shard_id_unmask_shortcode(code text, tweak text DEFAULT '') RETURNS bigint  IMMUTABLE STRICT PARALLEL SAFE
/// SELECT * FROM photos WHERE id = shard_id_unmask_shortcode('BJWnT2x0k3aQ', 'photos');
/// ```
///
/// Errors: 22P02 for a text that is not a masked shortcode; 22023 when its key is not in the key
/// file; those of `shard_id_unmask`.
#[pg_extern(sql = r#"
CREATE FUNCTION shard_id_unmask_shortcode("code" text, "tweak" text DEFAULT '') RETURNS bigint
    IMMUTABLE STRICT PARALLEL SAFE
    LANGUAGE c AS 'MODULE_PATHNAME', 'shard_id_unmask_shortcode_wrapper';
REVOKE EXECUTE ON FUNCTION shard_id_unmask_shortcode(text, text) FROM PUBLIC;
"#)]
fn shard_id_unmask_shortcode(code: &[u8], tweak: &[u8]) -> i64 {
    let code = text::utf8(code);
    let tweak = text::utf8(tweak);
    keys()
        .unmask_shortcode(&code, tweak.as_bytes())
        .unwrap_or_else(|e| match e {
            MaskError::BadShortcode(why) => raise(MaskError::BadShortcode(format!(
                "\"{}\": {why}",
                text::echo(&code, 20)
            ))),
            other => raise(other),
        })
}
