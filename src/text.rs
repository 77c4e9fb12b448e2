//! Text arguments in any server encoding.
//!
//! pgrx's `&str` arguments assume a UTF-8 database and fail with XX000 elsewhere. The text
//! functions take the argument's raw bytes instead (their SQL declares `text`) and convert them to
//! UTF-8 with PostgreSQL's own conversion, so `shard_id_shard_for('ünïcode', n)` hashes the same
//! UTF-8 bytes in a UTF8, LATIN1 or SQL_ASCII database. Bytes that are not valid in the database
//! encoding, or that have no UTF-8 form, raise PostgreSQL's own errors (22021, 22P05).

use pgrx::prelude::*;
use std::borrow::Cow;

fn database_is_utf8() -> bool {
    // SAFETY: reading the backend's database encoding.
    unsafe { pg_sys::GetDatabaseEncoding() == pg_sys::pg_enc::PG_UTF8 as i32 }
}

/// At most `max_chars` characters of user input, for an error message. Messages are read in the
/// database encoding, so outside UTF-8 databases non-ASCII characters are shown as `\u00fc`.
pub fn echo(text: &str, max_chars: usize) -> String {
    let short = pg_shard_id_core::echo(text, max_chars);
    if database_is_utf8() || short.is_ascii() {
        return short;
    }
    short
        .chars()
        .map(|c| {
            if c.is_ascii() {
                c.to_string()
            } else {
                format!("\\u{:04x}", u32::from(c))
            }
        })
        .collect()
}

/// The UTF-8 form of a text argument's bytes.
pub fn utf8(bytes: &[u8]) -> Cow<'_, str> {
    if database_is_utf8() {
        // PostgreSQL validated the text on input.
        return match std::str::from_utf8(bytes) {
            Ok(s) => Cow::Borrowed(s),
            Err(_) => invalid_utf8(),
        };
    }
    let len = i32::try_from(bytes.len()).expect("a text is at most 1 GB");
    // SAFETY: `bytes` is valid for `len` bytes; the function returns either its input or a
    // palloc'd, NUL-terminated conversion, and raises an ERROR for bytes it cannot convert.
    let converted = unsafe {
        pg_sys::pg_server_to_any(bytes.as_ptr().cast(), len, pg_sys::pg_enc::PG_UTF8 as i32)
    };
    let utf8 = if converted.cast_const() == bytes.as_ptr().cast() {
        bytes.to_vec()
    } else {
        // SAFETY: a converted string is NUL-terminated palloc'd memory.
        unsafe { std::ffi::CStr::from_ptr(converted) }
            .to_bytes()
            .to_vec()
    };
    match String::from_utf8(utf8) {
        Ok(s) => Cow::Owned(s),
        Err(_) => invalid_utf8(),
    }
}

fn invalid_utf8() -> ! {
    crate::errors::raise_with_hint(
        PgSqlErrorCode::ERRCODE_CHARACTER_NOT_IN_REPERTOIRE,
        "pg_shard_id: the text is not valid UTF-8".to_string(),
        "Text keys and shortcodes are read as UTF-8.",
    )
}
