//! Ids in JSON: `shard_id_to_jsonb(value)` is `to_jsonb(value)` with every bigint as a string.
//!
//! Every id made after the first 12 days of the epoch is above 2^53, the largest integer a
//! JavaScript number (and so `JSON.parse`) holds exactly. `to_jsonb`/`json_agg` write bigints as
//! JSON numbers, which JavaScript rounds. The rule here is by type, not by value, the one
//! node-postgres applies to int8: every `bigint` (and `bigint[]`, and domains over them) becomes a
//! string, so a field has one JSON type in every row, whatever its value.
//!
//! PostgreSQL's own `to_jsonb` makes the value (every other type exactly as `to_jsonb` would);
//! this walks it with PostgreSQL's jsonb iterator and builds the result token by token with
//! `pushJsonbValue`, turning the numbers that `pg_shard_id_core::json::Quoter` picks into strings
//! (their decimal text, by `numeric_out`). The bigint fields are found from the row's type, which
//! for an anonymous row (`SELECT shard_id_to_jsonb(t) FROM (SELECT ...) t`) only the type cache
//! knows.

use pg_shard_id_core::json::{bigint_keys, Quoter, Token};
use pgrx::prelude::*;
use pgrx::PgTupleDesc;
use std::ffi::CStr;

/// Whether `typid` (or the base type of a domain over it) is `bigint` or an array of `bigint`.
fn is_bigint_or_bigint_array(typid: pg_sys::Oid) -> bool {
    // SAFETY: catalog lookups by oid; both return InvalidOid rather than failing for other types.
    let base = unsafe { pg_sys::getBaseType(typid) };
    if base == pg_sys::INT8OID {
        return true;
    }
    // SAFETY: as above.
    let element = unsafe { pg_sys::get_element_type(base) };
    // SAFETY: as above; `element` is valid when it is not InvalidOid.
    element != pg_sys::InvalidOid && unsafe { pg_sys::getBaseType(element) } == pg_sys::INT8OID
}

/// The top-level keys of a row value's JSON whose values are quoted (`bigint_keys`: the last
/// column of each name decides).
fn row_bigint_keys(value: &pgrx::AnyElement) -> Vec<Vec<u8>> {
    // SAFETY: a value of a row type is a (possibly toasted) composite datum: a varlena whose header
    // is a HeapTupleHeaderData carrying the row's type id and typmod (which identifies anonymous
    // rows in the type cache). lookup_rowtype_tupdesc returns a reference-counted descriptor that
    // PgTupleDesc::from_pg releases when it is dropped.
    let tupdesc = unsafe {
        let header =
            pg_sys::pg_detoast_datum(value.datum().cast_mut_ptr()) as pg_sys::HeapTupleHeader;
        let fields = (*header).t_choice.t_datum;
        PgTupleDesc::from_pg(pg_sys::lookup_rowtype_tupdesc(
            fields.datum_typeid,
            fields.datum_typmod,
        ))
    };
    let columns: Vec<(Vec<u8>, bool)> = tupdesc
        .iter()
        .filter(|att| !att.attisdropped)
        .map(|att| {
            // SAFETY: attname is a NUL-terminated NameData, in the server encoding (as the keys
            // to_jsonb writes).
            let name = unsafe { CStr::from_ptr(att.attname.data.as_ptr()) };
            (
                name.to_bytes().to_vec(),
                is_bigint_or_bigint_array(att.atttypid),
            )
        })
        .collect();
    bigint_keys(
        columns
            .iter()
            .map(|(name, is_bigint)| (name.as_slice(), *is_bigint)),
    )
}

/// `to_jsonb(value)`, with every bigint and bigint[] field of a row (or a bigint or bigint[]
/// value itself) written as JSON strings, so that ids survive `JSON.parse` and JavaScript.
///
/// `shard_id_to_jsonb(value anyelement) RETURNS jsonb` STABLE STRICT PARALLEL SAFE
///
/// ```sql
/// SELECT shard_id_to_jsonb(p) FROM photos p;      -- {"id": "34152616212915201", "url": "a"}
/// SELECT jsonb_agg(shard_id_to_jsonb(p)) FROM (SELECT id, url FROM photos) p;
/// SELECT shard_id_to_jsonb(ARRAY[1, 2]::bigint[]);  -- ["1", "2"]
/// ```
/// Other values are exactly what `to_jsonb` gives (STABLE like it: timestamps follow the
/// session's TimeZone). Only the row's own columns are looked at: nested rows, json and jsonb
/// values are kept as `to_jsonb` writes them (call it on nested rows first). When two columns
/// share a name, jsonb keeps the last one, and so does the quoting. Errors: none of its own;
/// those of `to_jsonb`.
#[pg_extern(sql = r#"
CREATE FUNCTION shard_id_to_jsonb("value" anyelement) RETURNS jsonb
    STABLE STRICT PARALLEL SAFE
    LANGUAGE c AS 'MODULE_PATHNAME', 'shard_id_to_jsonb_wrapper';
"#)]
fn shard_id_to_jsonb(
    value: pgrx::AnyElement,
    fcinfo: pg_sys::FunctionCallInfo,
) -> pgrx::AnyElement {
    // SAFETY: to_jsonb reads only its first argument and, through flinfo->fn_expr, that
    // argument's type; this call's fcinfo has the same argument, of the same type, so PostgreSQL's
    // to_jsonb converts it exactly as `to_jsonb(value)` in SQL would.
    let jsonb = unsafe { pg_sys::to_jsonb(fcinfo) };
    let keys;
    let quoter = if is_bigint_or_bigint_array(value.oid()) {
        Quoter::whole()
    } else {
        // SAFETY: a catalog lookup by the argument's type oid.
        keys = if unsafe { pg_sys::type_is_rowtype(value.oid()) } {
            row_bigint_keys(&value)
        } else {
            Vec::new()
        };
        if keys.is_empty() {
            return jsonb_result(jsonb); // nothing to quote: to_jsonb's own result
        }
        Quoter::fields(&keys)
    };
    // SAFETY: `jsonb` is the jsonb datum to_jsonb just made (not toasted).
    jsonb_result(unsafe { rebuild(jsonb, quoter) })
}

/// A copy of the jsonb value `jsonb`, made token by token, with the numbers `quoter` picks as
/// strings. Built the way PostgreSQL's own jsonb functions copy a value (`jsonb_strip_nulls`):
/// `pushJsonbValue` gets each token's value for scalars and for a raw scalar's array, so object
/// keys are ordered and de-duplicated exactly as in any jsonb.
///
/// # Safety
/// `jsonb` must be a jsonb datum, valid in the current memory context.
unsafe fn rebuild(jsonb: pg_sys::Datum, mut quoter: Quoter<'_>) -> pg_sys::Datum {
    use pg_sys::JsonbIteratorToken::*;
    // SAFETY: the caller's contract; the iterator, the parse state and the result are palloc'd
    // in the current memory context, and every JsonbValue passed is initialised by the iterator.
    unsafe {
        let container =
            &raw mut (*pg_sys::pg_detoast_datum(jsonb.cast_mut_ptr()).cast::<pg_sys::Jsonb>()).root;
        let mut iterator = pg_sys::JsonbIteratorInit(container);
        let mut state: *mut pg_sys::JsonbParseState = std::ptr::null_mut();
        let mut value = std::mem::zeroed::<pg_sys::JsonbValue>();
        let mut result = std::ptr::null_mut();
        loop {
            let token = pg_sys::JsonbIteratorNext(&mut iterator, &mut value, false);
            if token == WJB_DONE {
                break;
            }
            let key;
            let walked = match token {
                WJB_BEGIN_OBJECT => Token::BeginObject,
                WJB_END_OBJECT => Token::EndObject,
                WJB_BEGIN_ARRAY => Token::BeginArray,
                WJB_END_ARRAY => Token::EndArray,
                WJB_KEY => {
                    let string = value.val.string;
                    key = std::slice::from_raw_parts(string.val.cast::<u8>(), string.len as usize);
                    Token::Key(key)
                }
                WJB_VALUE => Token::Value,
                _ => Token::Elem,
            };
            if quoter.quote(walked) && value.type_ == pg_sys::jbvType::jbvNumeric {
                number_as_string(&mut value);
            }
            let pass_value = token == WJB_KEY
                || token == WJB_VALUE
                || token == WJB_ELEM
                || (token == WJB_BEGIN_ARRAY && value.val.array.rawScalar);
            let pushed = if pass_value {
                &raw mut value
            } else {
                std::ptr::null_mut()
            };
            result = pg_sys::pushJsonbValue(&mut state, token, pushed);
        }
        pg_sys::Datum::from(pg_sys::JsonbValueToJsonb(result))
    }
}

/// Turns a jsonb number into a jsonb string of its decimal text (`numeric_out`: a bigint's
/// number is an integer, written without exponent or fraction).
///
/// # Safety
/// `value` must be a `jbvNumeric` JsonbValue.
unsafe fn number_as_string(value: &mut pg_sys::JsonbValue) {
    // SAFETY: the caller's contract; numeric_out returns a palloc'd NUL-terminated string.
    unsafe {
        let numeric = pg_sys::Datum::from(value.val.numeric);
        let text: &CStr = pgrx::direct_function_call(pg_sys::numeric_out, &[Some(numeric)])
            .expect("numeric_out returns text");
        value.type_ = pg_sys::jbvType::jbvString;
        value.val.string = pg_sys::JsonbValue__bindgen_ty_1__bindgen_ty_1 {
            len: text.to_bytes().len() as i32,
            val: text.as_ptr().cast_mut(),
        };
    }
}

/// A jsonb datum as this function's result (declared `jsonb` in its SQL).
fn jsonb_result(datum: pg_sys::Datum) -> pgrx::AnyElement {
    // SAFETY: `datum` is a jsonb value, valid in the current memory context.
    unsafe { pgrx::AnyElement::from_polymorphic_datum(datum, false, pg_sys::JSONBOID) }
        .expect("a jsonb datum")
}
