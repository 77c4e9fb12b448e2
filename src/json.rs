//! Ids in JSON: `shard_id_to_jsonb(value)` is `to_jsonb(value)` with every bigint as a string.
//!
//! Every id made after the first 12 days of the epoch is above 2^53, the largest integer a
//! JavaScript number (and so `JSON.parse`) holds exactly. `to_jsonb`/`json_agg` write bigints as
//! JSON numbers, which JavaScript rounds. The rule here is by type, not by value, the one
//! node-postgres applies to int8: every `bigint` (and `bigint[]`, and domains over them) becomes a
//! string, so a field has one JSON type in every row, whatever its value.
//!
//! PostgreSQL's own `to_jsonb` writes the value (every other type exactly as `to_jsonb` would);
//! `pg_shard_id_core::json` quotes the integers of the bigint fields in its text; `jsonb_in` reads
//! the result back. The bigint fields are found from the row's type, which for an anonymous row
//! (`SELECT shard_id_to_jsonb(t) FROM (SELECT ...) t`) only the type cache knows.

use pg_shard_id_core::json;
use pgrx::prelude::*;
use pgrx::PgTupleDesc;
use std::ffi::{CStr, CString};

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

/// The names of the fields of a row value whose type is `bigint` or `bigint[]` (or a domain over
/// one), in column order.
fn bigint_fields(value: &pgrx::AnyElement) -> Vec<Vec<u8>> {
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
    tupdesc
        .iter()
        .filter(|att| !att.attisdropped && is_bigint_or_bigint_array(att.atttypid))
        .map(|att| {
            // SAFETY: attname is a NUL-terminated NameData, in the server encoding.
            let name = unsafe { CStr::from_ptr(att.attname.data.as_ptr()) };
            name.to_bytes().to_vec()
        })
        .collect()
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
/// session's TimeZone). Nested rows are not looked into: call it on them first (a jsonb value is
/// kept as is). Errors: none of its own; those of `to_jsonb`.
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
    let whole = is_bigint_or_bigint_array(value.oid());
    // SAFETY: a catalog lookup by the argument's type oid.
    let fields = if !whole && unsafe { pg_sys::type_is_rowtype(value.oid()) } {
        bigint_fields(&value)
    } else {
        Vec::new()
    };
    if !whole && fields.is_empty() {
        return jsonb_result(jsonb); // nothing to quote: to_jsonb's own result
    }
    // SAFETY: jsonb_out of a jsonb datum returns a palloc'd C string.
    let text: &CStr = unsafe { pgrx::direct_function_call(pg_sys::jsonb_out, &[Some(jsonb)]) }
        .expect("jsonb_out");
    let text = text.to_bytes(); // in the server encoding
    let quoted = if whole {
        json::quote_integers(text)
    } else {
        json::quote_fields(text, &fields)
    };
    let quoted = CString::new(quoted).expect("JSON text has no NUL");
    // SAFETY: jsonb_in parses a C string into a jsonb datum (palloc'd in the current context).
    let datum = unsafe {
        pgrx::direct_function_call_as_datum(
            pg_sys::jsonb_in,
            &[Some(pg_sys::Datum::from(quoted.as_ptr()))],
        )
    }
    .expect("jsonb_in");
    jsonb_result(datum)
}

/// A jsonb datum as this function's result (declared `jsonb` in its SQL).
fn jsonb_result(datum: pg_sys::Datum) -> pgrx::AnyElement {
    // SAFETY: `datum` is a jsonb value, valid in the current memory context.
    unsafe { pgrx::AnyElement::from_polymorphic_datum(datum, false, pg_sys::JSONBOID) }
        .expect("a jsonb datum")
}
