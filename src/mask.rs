//! Masked public ids: `shard_id_mask`, `shard_id_unmask` and their shortcode forms, over
//! `pg_shard_id_core::mask` (FF1-AES-256 from the `fpe` and `aes` crates).
//!
//! **Where the key lives: a file, `pg_shard_id.keys` in the data directory**, as PostgreSQL keeps
//! its SSL key: opened once without following a symbolic link, then checked on that descriptor
//! (`fstat`): a regular file, owned by the server's OS user, with no group or other access, at
//! most 64 KiB; read from the same descriptor into a buffer that is wiped when dropped, as are
//! the parsed key bytes (`zeroize`) and the expanded key schedules when their key is dropped
//! (`aes`'s `zeroize` feature). What is not wiped: copies the compiler makes on the stack while a
//! key is built and moved (Rust promises nothing there), and the memory of a backend that ends.
//! Not a setting: a setting's value lives in `postgresql.conf` or
//! `postgresql.auto.conf` (`ALTER SYSTEM` writes it in plain text beside every other setting,
//! and `pg_file_settings` shows it to superusers), a superuser could `SET` it per session, which
//! would make the same call give different answers in two sessions, and no role's `SHOW` must
//! ever see it.
//!
//! **A rotation reaches every process at one point: the first transaction that starts after the
//! file is replaced.** A backend keeps its expanded keys, and at the first mask or unmask of each
//! transaction opens the file and compares its identity (device, inode, size, modification and
//! change times) with the one it read; a different file is read again. Within a transaction the
//! keys never change (a statement would not do: the extended protocol restarts the statement
//! clock at every Execute, so a portal fetched in parts, a JDBC fetch size, would see a rotation
//! between its fetches). The forms that use the current key are PARALLEL RESTRICTED (the leader
//! alone computes them): a parallel worker is a transaction of its own, and could read a newer
//! file than its leader, so that one query masked under two keys (0.6.0: 72,772 of 300,000 rows
//! under the old key in tests/mask, no error).
//!
//! **A key id's key never changes, and the database checks it.** `shard_id_mask_keys_record()`
//! stores each key's check value (its masked value of 0 under a reserved tweak: it identifies
//! the key, it is not the key) in `_pg_shard_id.mask_keys`, which pg_dump, pg_upgrade and
//! physical replication carry with the data. Every read of the file compares its keys with
//! those records, and a key id whose key differs is refused (F0000), here and in
//! `shard_id_check()`: a restored copy or a standby given another key file would otherwise
//! recompute masked columns to other values, silently.
//!
//! **Volatility.** The forms that use the *current* key (`shard_id_mask(id, tweak)`,
//! `shard_id_unmask(masked, tweak)`, `shard_id_mask_shortcode`) are STABLE: a rotation changes
//! their answer. The forms that name their key (`shard_id_mask(id, tweak, key_id)`,
//! `shard_id_unmask(masked, tweak, key_id)`, and `shard_id_unmask_shortcode`, whose code carries
//! its key id) are IMMUTABLE and PARALLEL SAFE: a key id's key never changes (checked above). A
//! generated column or an index needs those.
//!
//! **Who may call them: the key holder's roles only.** An id is a millisecond, a shard and a
//! 10-bit counter: knowing a row's time to a second and its shard leaves 1,024,000 candidates,
//! which a role that may mask tried in 0.77 s (docs/masking.md) to find the id behind a
//! masked value. So masking is as privileged as unmasking: EXECUTE on all six functions is
//! revoked from PUBLIC and granted to the role `shard_id_masker` (created by the extension if
//! missing, NOLOGIN); grant it to the roles that make or resolve public ids.

use crate::errors::raise_with_hint;
use crate::text;
use pg_shard_id_core::health::{self, Finding, KeyFileState};
use pg_shard_id_core::mask::{Key, KeyChecks, KeyFile, MaskError};
use pgrx::prelude::*;
use std::cell::RefCell;
use std::fs::File;
use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::rc::Rc;
use zeroize::Zeroizing;

/// The key file, in the data directory (the backend's working directory).
pub const KEY_FILE: &str = "pg_shard_id.keys";
/// A key file is a few lines; anything larger is not one.
const MAX_KEY_FILE_BYTES: u64 = 64 * 1024;

/// This backend's keys, the file they were read from and the transaction that last confirmed it.
struct Loaded {
    keys: Rc<KeyFile>,
    file: FileIdentity,
    transaction: pg_sys::LocalTransactionId,
}

thread_local! {
    static LOADED: RefCell<Option<Loaded>> = const { RefCell::new(None) };
}

/// What tells one key file from its replacement: a rename gives a new inode, an in-place write a
/// new size or modification time (nanoseconds), a `touch` a new change time.
#[derive(Clone, Copy, PartialEq, Eq)]
struct FileIdentity([i64; 7]);

/// Why the key file cannot be used: the SQLSTATE, message and hint to raise.
struct Refused {
    code: PgSqlErrorCode,
    message: String,
    hint: &'static str,
    /// There is no key file (not one that is wrong).
    missing: bool,
}

impl Refused {
    fn new(code: PgSqlErrorCode, message: String) -> Refused {
        Refused {
            code,
            message,
            hint: HOW_TO_MAKE_ONE,
            missing: false,
        }
    }

    fn raise(self) -> ! {
        raise_with_hint(self.code, self.message, self.hint)
    }
}

/// This backend's local transaction id: a new one for every transaction it runs (a 32-bit
/// counter of the backend's own).
#[inline]
pub(crate) fn local_transaction() -> pg_sys::LocalTransactionId {
    // SAFETY: MyProc is this backend's PGPROC, set before any function can be called; the field
    // is written by this backend only.
    unsafe {
        #[cfg(any(feature = "pg15", feature = "pg16"))]
        return (*pg_sys::MyProc).lxid;
        #[cfg(any(feature = "pg17", feature = "pg18"))]
        return (*pg_sys::MyProc).vxid.lxid;
    }
}

/// The keys for this transaction: read at its first call, again only when the file was replaced.
fn keys() -> Rc<KeyFile> {
    let transaction = local_transaction();
    let confirmed = LOADED.with_borrow(|loaded| {
        loaded
            .as_ref()
            .filter(|l| l.transaction == transaction)
            .map(|l| l.keys.clone())
    });
    if let Some(keys) = confirmed {
        return keys;
    }
    let (file, identity, len) = open_key_file().unwrap_or_else(|r| r.raise());
    let unchanged = LOADED.with_borrow_mut(|loaded| {
        let l = loaded.as_mut().filter(|l| l.file == identity)?;
        l.transaction = transaction;
        Some(l.keys.clone())
    });
    if let Some(keys) = unchanged {
        return keys;
    }
    let keys = Rc::new(read_key_file(file, len).unwrap_or_else(|r| r.raise()));
    refuse_changed_keys(&keys);
    LOADED.set(Some(Loaded {
        keys: keys.clone(),
        file: identity,
        transaction,
    }));
    keys
}

const HOW_TO_MAKE_ONE: &str = "Write the file pg_shard_id.keys in the data directory, owned by \
     the server's OS user and readable by it only (chmod 600), with a line \"key 1 <64 hex \
     digits>\" (for example from openssl rand -hex 32) and a line \"current 1\"; replace it by \
     renaming a new file over it. Then, as a superuser: SELECT * FROM shard_id_mask_keys_record();";

/// Opens the key file without following a symbolic link (or waiting on a FIFO) and checks what
/// it is on the open descriptor, so that nothing can be swapped in between; returns it with its
/// identity and length.
fn open_key_file() -> Result<(File, FileIdentity, u64), Refused> {
    use PgSqlErrorCode::*;
    let refused = |message: String| Refused::new(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE, message);
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(KEY_FILE)
        .map_err(|e| match (e.kind(), e.raw_os_error()) {
            (std::io::ErrorKind::NotFound, _) => Refused {
                missing: true,
                ..refused(format!(
                    "pg_shard_id: no mask key: cannot read \"{KEY_FILE}\" in the data directory: {e}"
                ))
            },
            (_, Some(libc::ELOOP)) => refused(format!(
                "pg_shard_id: the mask key file \"{KEY_FILE}\" is a symbolic link, which is not followed"
            )),
            _ => Refused::new(
                ERRCODE_IO_ERROR,
                format!("pg_shard_id: cannot open the mask key file \"{KEY_FILE}\": {e}"),
            ),
        })?;
    let io = |e: std::io::Error| {
        Refused::new(
            ERRCODE_IO_ERROR,
            format!("pg_shard_id: cannot read the mask key file \"{KEY_FILE}\": {e}"),
        )
    };
    let meta = file.metadata().map_err(io)?;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let server_uid = unsafe { libc::geteuid() };
    if !meta.file_type().is_file() {
        return Err(refused(format!(
            "pg_shard_id: the mask key file \"{KEY_FILE}\" is not a regular file"
        )));
    }
    if meta.uid() != server_uid {
        return Err(refused(format!(
            "pg_shard_id: the mask key file \"{KEY_FILE}\" is owned by the OS user {}, not by the \
             server's ({server_uid})",
            meta.uid()
        )));
    }
    if meta.mode() & 0o077 != 0 {
        return Err(Refused {
            hint: "Keys must be readable by the server's OS user only: chmod 600 pg_shard_id.keys \
                   in the data directory.",
            ..refused(format!(
                "pg_shard_id: the mask key file \"{KEY_FILE}\" has group or other access (mode {:o})",
                meta.mode() & 0o777
            ))
        });
    }
    if meta.len() > MAX_KEY_FILE_BYTES {
        return Err(refused(format!(
            "pg_shard_id: the mask key file \"{KEY_FILE}\" has {} bytes; a key file is a few lines",
            meta.len()
        )));
    }
    let identity = FileIdentity([
        meta.dev() as i64,
        meta.ino() as i64,
        meta.size() as i64,
        meta.mtime(),
        meta.mtime_nsec(),
        meta.ctime(),
        meta.ctime_nsec(),
    ]);
    Ok((file, identity, meta.len()))
}

/// Reads and parses the open key file of `len` bytes (as checked); the text is wiped when this
/// returns.
fn read_key_file(mut file: File, len: u64) -> Result<KeyFile, Refused> {
    use PgSqlErrorCode::*;
    // room for one byte more than fstat said, so that the buffer never grows (a reallocation
    // would leave a copy of the text behind) and a file that grew meanwhile shows
    let mut text = Zeroizing::new(Vec::with_capacity(len as usize + 1));
    (&mut file)
        .take(len + 1)
        .read_to_end(&mut text)
        .map_err(|e| {
            Refused::new(
                ERRCODE_IO_ERROR,
                format!("pg_shard_id: cannot read the mask key file \"{KEY_FILE}\": {e}"),
            )
        })?;
    if text.len() as u64 != len {
        return Err(Refused::new(
            ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!(
                "pg_shard_id: the mask key file \"{KEY_FILE}\" changed while it was read: replace it \
                 by renaming a new file over it"
            ),
        ));
    }
    let invalid = |why: String| {
        Refused::new(
            ERRCODE_CONFIG_FILE_ERROR,
            format!("pg_shard_id: the mask key file \"{KEY_FILE}\" is invalid: {why}"),
        )
    };
    let text = std::str::from_utf8(&text).map_err(|e| invalid(e.to_string()))?;
    KeyFile::parse(text).map_err(|e| invalid(e.to_string()))
}

/// The check values this database recorded (none before the 0.7.0 SQL). Read-only SPI, whatever
/// the transaction did before (pgrx's `select` runs read-write once the transaction has written,
/// and a read-write execution increments the command counter, which a parallel leader may not do
/// in the middle of a CREATE TABLE AS): no command counter, no transaction id, so that it runs in
/// a parallel worker, on a standby and inside any statement.
fn recorded_checks() -> Vec<(u8, i64)> {
    const QUERY: &std::ffi::CStr =
        c"SELECT k.key_id::integer, k.check_value FROM _pg_shard_id.mask_keys k \
        WHERE pg_catalog.to_regclass('_pg_shard_id.mask_keys') IS NOT NULL";
    const EXISTS: &std::ffi::CStr =
        c"SELECT 1 WHERE pg_catalog.to_regclass('_pg_shard_id.mask_keys') IS NOT NULL";
    Spi::connect(|_client| {
        // SAFETY: SPI is connected (Spi::connect); inside pgrx's guard, so an ERROR unwinds and
        // the transaction's abort undoes SPI. Every datum is copied into Rust before
        // SPI_finish frees it.
        unsafe {
            let run = |query: &std::ffi::CStr| {
                let status = pg_sys::SPI_execute(query.as_ptr(), true, 0);
                if status != pg_sys::SPI_OK_SELECT as i32 {
                    error!("pg_shard_id: reading _pg_shard_id.mask_keys failed ({status})");
                }
            };
            // (the table is new in 0.7.0's SQL: a database still at 0.6.0 has none, and the
            // query naming it would not parse)
            run(EXISTS);
            if pg_sys::SPI_processed == 0 {
                return Vec::new();
            }
            run(QUERY);
            let table = pg_sys::SPI_tuptable;
            let get = |row: usize, column: i32| {
                let mut null = false;
                let datum = pg_sys::SPI_getbinval(
                    *(*table).vals.add(row),
                    (*table).tupdesc,
                    column,
                    &mut null,
                );
                (datum, null)
            };
            (0..pg_sys::SPI_processed as usize)
                .filter_map(|row| {
                    let (id, null) = get(row, 1);
                    let id = i32::from_datum(id, null)?;
                    let (value, null) = get(row, 2);
                    Some((u8::try_from(id).ok()?, i64::from_datum(value, null)?))
                })
                .collect()
        }
    })
}

/// Refuses a key file whose key for some id is not the one this database recorded for it.
fn refuse_changed_keys(keys: &KeyFile) {
    let checks = KeyChecks::of(keys, &recorded_checks());
    if !checks.mismatched.is_empty() {
        let ids: Vec<String> = checks.mismatched.iter().map(u8::to_string).collect();
        raise_with_hint(
            PgSqlErrorCode::ERRCODE_CONFIG_FILE_ERROR,
            format!(
                "pg_shard_id: the mask key file \"{KEY_FILE}\" is refused: its key for the id(s) \
                 {} is not the key this database recorded for them (the check value differs); \
                 nothing is masked or unmasked until it is fixed",
                ids.join(", ")
            ),
            "A key id's key never changes: values masked with it, in generated columns and \
             indexes, would change. Put back the key file this database's values were made with; \
             a new key takes a new id.",
        );
    }
}

/// `shard_id_check()`'s `mask_keys` row: the key file against this database's records, read
/// without raising (and without keeping what it read).
pub fn check_finding() -> Finding {
    let recorded = recorded_checks();
    let state = match open_key_file().and_then(|(file, _, len)| read_key_file(file, len)) {
        Ok(keys) => KeyFileState::Read {
            current: keys.current().id,
            keys: keys.keys().count(),
            checks: KeyChecks::of(&keys, &recorded),
        },
        Err(r) if r.missing => KeyFileState::Missing,
        Err(r) => KeyFileState::Refused(r.message),
    };
    health::mask_keys(&state, recorded.len())
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

/// Runs `f` with the key `key_id` of this transaction's keys.
fn with_key<R>(key_id: i32, f: impl FnOnce(&Key) -> R) -> R {
    let keys = keys();
    let key = u8::try_from(key_id)
        .ok()
        .and_then(|id| keys.key(id).ok())
        .unwrap_or_else(|| {
            raise_with_hint(
                PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
                format!("pg_shard_id: no mask key has the id {key_id}"),
                "The key ids are the \"key <id> ...\" lines of pg_shard_id.keys; a retired key cannot unmask.",
            )
        })
    ;
    f(key)
}

/// The masked value of `id` under `tweak`, with the current key: a non-negative bigint that says
/// nothing of the id's time, shard or order. EXECUTE: `shard_id_masker` (revoked from PUBLIC).
///
/// ```sql
/// shard_id_mask(id bigint, tweak text DEFAULT '') RETURNS bigint  STABLE STRICT PARALLEL RESTRICTED
/// SELECT shard_id_mask(11637205501278089, 'photos');
/// ```
///
/// Errors: 42501 without EXECUTE; 22003 for a negative id; 55000 without a key file, or one
/// that is a symbolic link, not the server user's, or readable by others; F0000 for an invalid
/// one, or one whose key for some id is not the key this database recorded for it; 58030 when
/// it cannot be read.
#[pg_extern(sql = r#"
CREATE FUNCTION shard_id_mask("id" bigint, "tweak" text DEFAULT '') RETURNS bigint
    STABLE STRICT PARALLEL RESTRICTED
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
/// changes: checked against the database's record), for generated columns and indexes.
/// EXECUTE: `shard_id_masker`.
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
    with_key(key_id, |key| key.mask(id, tweak.as_bytes())).unwrap_or_else(|e| raise(e))
}

/// The id whose masked value under `tweak` is `masked`, with the current key: the exact inverse
/// of `shard_id_mask(id, tweak)`. EXECUTE: `shard_id_masker`.
///
/// ```sql
/// shard_id_unmask(masked bigint, tweak text DEFAULT '') RETURNS bigint  STABLE STRICT PARALLEL RESTRICTED
/// SELECT shard_id_unmask(shard_id_mask(42, 'photos'), 'photos');  -- 42
/// ```
///
/// Errors: those of `shard_id_mask`.
#[pg_extern(sql = r#"
CREATE FUNCTION shard_id_unmask("masked" bigint, "tweak" text DEFAULT '') RETURNS bigint
    STABLE STRICT PARALLEL RESTRICTED
    LANGUAGE c AS 'MODULE_PATHNAME', 'shard_id_unmask_wrapper';
"#)]
fn shard_id_unmask(masked: i64, tweak: &[u8]) -> i64 {
    let tweak = text::utf8(tweak);
    keys()
        .current()
        .unmask(masked, tweak.as_bytes())
        .unwrap_or_else(|e| raise(e))
}

/// The id whose masked value under `tweak` with key `key_id` is `masked` (values masked before a
/// rotation). EXECUTE: `shard_id_masker`.
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
"#)]
fn shard_id_unmask_with_key(masked: i64, tweak: &[u8], key_id: i32) -> i64 {
    let tweak = text::utf8(tweak);
    with_key(key_id, |key| key.unmask(masked, tweak.as_bytes())).unwrap_or_else(|e| raise(e))
}

/// A URL-safe, JavaScript-safe masked id: the current key's id as one character, then the masked
/// value's 11-character shortcode. It carries its key, so it unmasks after a rotation. EXECUTE:
/// `shard_id_masker`.
///
/// ```sql
/// shard_id_mask_shortcode(id bigint, tweak text DEFAULT '') RETURNS text  STABLE STRICT PARALLEL RESTRICTED
/// SELECT shard_id_mask_shortcode(id, 'photos') FROM photos;  -- e.g. BJWnT2x0k3aQ
/// ```
///
/// Errors: those of `shard_id_mask`.
#[pg_extern(sql = r#"
CREATE FUNCTION shard_id_mask_shortcode("id" bigint, "tweak" text DEFAULT '') RETURNS text
    STABLE STRICT PARALLEL RESTRICTED
    LANGUAGE c AS 'MODULE_PATHNAME', 'shard_id_mask_shortcode_wrapper';
"#)]
fn shard_id_mask_shortcode(id: i64, tweak: &[u8]) -> String {
    let tweak = text::utf8(tweak);
    keys()
        .current()
        .mask_shortcode(id, tweak.as_bytes())
        .unwrap_or_else(|e| raise(e))
}

/// The id of a masked shortcode, with the key it names. EXECUTE: `shard_id_masker`.
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

/// Records, in `_pg_shard_id.mask_keys`, the check value of every key of the key file that has
/// none, and lists every key with its check value. A superuser runs it after adding a key; from
/// then on a different key under that id is refused, here and wherever this database's rows are
/// copied with their records (pg_dump, pg_upgrade, a physical standby).
///
/// ```sql
/// shard_id_mask_keys_record() RETURNS TABLE (key_id integer, check_value bigint, recorded text)
///     VOLATILE PARALLEL UNSAFE  -- EXECUTE revoked from PUBLIC
/// SELECT * FROM shard_id_mask_keys_record();
/// ```
///
/// Errors: 42501 without EXECUTE; those of reading the key file (F0000 when a key differs from
/// its record: nothing is recorded then).
#[pg_extern(sql = r#"
CREATE FUNCTION shard_id_mask_keys_record() RETURNS TABLE ("key_id" integer, "check_value" bigint, "recorded" text)
    VOLATILE STRICT PARALLEL UNSAFE SET search_path = pg_catalog, pg_temp
    LANGUAGE c AS 'MODULE_PATHNAME', 'shard_id_mask_keys_record_wrapper';
REVOKE EXECUTE ON FUNCTION shard_id_mask_keys_record() FROM PUBLIC;
"#, requires = ["mask_keys"])]
#[allow(clippy::type_complexity)]
fn shard_id_mask_keys_record() -> TableIterator<
    'static,
    (
        name!(key_id, i32),
        name!(check_value, i64),
        name!(recorded, String),
    ),
> {
    let keys = keys(); // (refuses a key that differs from its record)
    let rows: Vec<(i32, i64, String)> = keys
        .keys()
        .map(|key| {
            let value = key.check_value();
            #[allow(clippy::disallowed_methods)] // (it writes: a transaction id is needed)
            let added = Spi::get_one_with_args::<i32>(
                "INSERT INTO _pg_shard_id.mask_keys (key_id, check_value) VALUES ($1, $2) \
                 ON CONFLICT (key_id) DO NOTHING RETURNING key_id",
                &[i32::from(key.id).into(), value.into()],
            );
            let status = match added {
                Ok(Some(_)) => "recorded now",
                Ok(None) | Err(pgrx::spi::Error::InvalidPosition) => "recorded before",
                Err(e) => error!(
                    "pg_shard_id: recording the check value of key {}: {e}",
                    key.id
                ),
            };
            (i32::from(key.id), value, status.to_string())
        })
        .collect();
    TableIterator::new(rows)
}

extension_sql_file!(
    "../sql/mask.sql",
    name = "mask_keys",
    requires = [
        "origin", // (the schema _pg_shard_id)
        shard_id_mask,
        shard_id_mask_with_key,
        shard_id_unmask,
        shard_id_unmask_with_key,
        shard_id_mask_shortcode,
        shard_id_unmask_shortcode,
    ]
);
