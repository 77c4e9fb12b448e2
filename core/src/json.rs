//! Writing bigints as JSON strings in the JSON text PostgreSQL made (`jsonb_out` of `to_jsonb`).
//!
//! JavaScript numbers hold integers exactly only up to 2^53, and shard ids are above it 12 days
//! after the epoch. `quote_fields` rewrites the values of the named top-level fields of a JSON
//! object, and `quote_integers` a whole value, so that every integer in them becomes a string:
//! `{"id": 123, "n": [1, null]}` with field `id` becomes `{"id": "123", "n": [1, null]}`.
//!
//! Only values of `bigint` or `bigint[]` columns are rewritten, and their JSON holds nothing but
//! integers, `null`, brackets, commas and spaces, so quoting every run of digits in them is exact.
//! The rest of the text (strings with any escapes, nested objects, numbers of other columns) is
//! scanned, never changed. The text is bytes in the server's encoding: every server encoding is
//! ASCII-compatible, and only ASCII bytes are looked at.

/// Every integer in `json` (a number, or an array of them nested to any depth, or `null`) as a
/// string: `[1, -2, null]` gives `["1", "-2", null]`.
pub fn quote_integers(json: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(json.len() + 16);
    let mut in_number = false;
    for &b in json {
        let digit_or_sign = b.is_ascii_digit() || b == b'-';
        if digit_or_sign != in_number {
            out.push(b'"');
        }
        in_number = digit_or_sign;
        out.push(b);
    }
    if in_number {
        out.push(b'"');
    }
    out
}

/// `name` as a JSON string literal, escaped as PostgreSQL's `escape_json` does (so it matches the
/// keys `jsonb_out` writes byte for byte).
fn json_key(name: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(name.len() + 2);
    out.push(b'"');
    for &b in name {
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            0x08 => out.extend_from_slice(b"\\b"),
            0x0c => out.extend_from_slice(b"\\f"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            b if b < 0x20 => out.extend_from_slice(format!("\\u{b:04x}").as_bytes()),
            b => out.push(b),
        }
    }
    out.push(b'"');
    out
}

/// The end (exclusive) of the JSON string starting at `start` (a `"`).
fn string_end(bytes: &[u8], start: usize) -> usize {
    let mut i = start + 1;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b'"' => return i + 1,
            _ => i += 1,
        }
    }
    bytes.len()
}

/// The end (exclusive) of the JSON value starting at `start`: a string, an object or array
/// (brackets counted outside strings), or a scalar running to the next `,`, `}` or `]`.
fn value_end(bytes: &[u8], start: usize) -> usize {
    let mut depth = 0usize;
    let mut i = start;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => {
                i = string_end(bytes, i);
                if depth == 0 {
                    return i;
                }
                continue;
            }
            b'{' | b'[' => depth += 1,
            b'}' | b']' if depth == 0 => return i,
            b'}' | b']' => {
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            }
            b',' if depth == 0 => return i,
            _ => {}
        }
        i += 1;
    }
    bytes.len()
}

fn skip_space(bytes: &[u8], mut i: usize) -> usize {
    while i < bytes.len() && bytes[i].is_ascii_whitespace() {
        i += 1;
    }
    i
}

/// `object` (a JSON object as `jsonb_out` writes it) with the values of the top-level keys in
/// `fields` passed through [`quote_integers`]. Anything that is not an object is returned as is.
pub fn quote_fields<F: AsRef<[u8]>>(object: &[u8], fields: &[F]) -> Vec<u8> {
    let bytes = object;
    let keys: Vec<Vec<u8>> = fields.iter().map(|f| json_key(f.as_ref())).collect();
    let mut i = skip_space(bytes, 0);
    if fields.is_empty() || bytes.get(i) != Some(&b'{') {
        return object.to_owned();
    }
    let mut out = Vec::with_capacity(object.len() + 2 * fields.len());
    i += 1;
    out.extend_from_slice(&object[..i]);
    loop {
        // At a key, or at the closing brace of an empty object.
        let key_start = skip_space(bytes, i);
        if bytes.get(key_start) != Some(&b'"') {
            out.extend_from_slice(&object[i..]);
            return out;
        }
        let key_end = string_end(bytes, key_start);
        let colon = skip_space(bytes, key_end);
        let value_start = skip_space(bytes, colon + 1);
        let value_stop = value_end(bytes, value_start);
        out.extend_from_slice(&object[i..value_start]);
        let value = &object[value_start..value_stop];
        if keys.iter().any(|k| k[..] == bytes[key_start..key_end]) {
            out.extend_from_slice(&quote_integers(value));
        } else {
            out.extend_from_slice(value);
        }
        i = value_stop;
        let next = skip_space(bytes, i);
        if bytes.get(next) != Some(&b',') {
            out.extend_from_slice(&object[i..]);
            return out;
        }
        out.extend_from_slice(&object[i..=next]);
        i = next + 1;
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    fn names(n: &[&str]) -> Vec<String> {
        n.iter().map(|s| (*s).to_owned()).collect()
    }
    fn quote_integers(json: &str) -> String {
        String::from_utf8(super::quote_integers(json.as_bytes())).unwrap()
    }
    fn quote_fields(json: &str, fields: &[String]) -> String {
        String::from_utf8(super::quote_fields(json.as_bytes(), fields)).unwrap()
    }

    #[test]
    fn integers_and_arrays_of_them_become_strings() {
        assert_eq!(quote_integers("9007199254740993"), "\"9007199254740993\"");
        assert_eq!(quote_integers("-5"), "\"-5\"");
        assert_eq!(quote_integers("null"), "null");
        assert_eq!(
            quote_integers("[1, -2, null, [3]]"),
            "[\"1\", \"-2\", null, [\"3\"]]"
        );
        assert_eq!(quote_integers("[]"), "[]");
    }

    #[test]
    fn only_the_named_fields_change() {
        let json =
            r#"{"n": 1.50, "id": 1234567890123456789, "ids": [1, 2], "url": "a,b}\"id\": 3"}"#;
        assert_eq!(
            quote_fields(json, &names(&["id", "ids"])),
            r#"{"n": 1.50, "id": "1234567890123456789", "ids": ["1", "2"], "url": "a,b}\"id\": 3"}"#
        );
    }

    #[test]
    fn nested_values_are_skipped_whole() {
        let json = r#"{"a": {"id": 1, "b": [{"c": "]"}]}, "id": 7, "z": [[1], {"x": "}"}]}"#;
        assert_eq!(
            quote_fields(json, &names(&["id"])),
            r#"{"a": {"id": 1, "b": [{"c": "]"}]}, "id": "7", "z": [[1], {"x": "}"}]}"#
        );
    }

    #[test]
    fn keys_with_escapes_match_their_column_names() {
        let json = "{\"a\\\"b\": 1, \"tab\\tx\": 2, \"\\u0001\": 3, \"ü\": 4, \"plain\": 5}";
        let out = quote_fields(json, &names(&["a\"b", "tab\tx", "\u{1}", "ü"]));
        assert_eq!(
            out,
            "{\"a\\\"b\": \"1\", \"tab\\tx\": \"2\", \"\\u0001\": \"3\", \"ü\": \"4\", \"plain\": 5}"
        );
    }

    #[test]
    fn no_fields_or_no_object_leaves_the_text_alone() {
        assert_eq!(quote_fields(r#"{"id": 1}"#, &[]), r#"{"id": 1}"#);
        assert_eq!(
            super::quote_fields(b"{\"\xe9\": 1}", &[b"\xe9"]),
            b"{\"\xe9\": \"1\"}"
        );
        assert_eq!(quote_fields("[1, 2]", &names(&["id"])), "[1, 2]");
        assert_eq!(quote_fields("{}", &names(&["id"])), "{}");
        assert_eq!(
            quote_fields(r#"{"id": null}"#, &names(&["id"])),
            r#"{"id": null}"#
        );
    }

    proptest! {
        /// Any bigint, in a field among others with awkward strings, comes back as its exact
        /// decimal string, and the other fields are untouched.
        #[test]
        fn a_bigint_field_round_trips_as_its_decimal_text(
            id in any::<i64>(),
            ids in proptest::collection::vec(proptest::option::of(any::<i64>()), 0..5),
            text in "[ -~]{0,12}",
        ) {
            let escaped = text.replace('\\', "\\\\").replace('"', "\\\"");
            let array = ids.iter()
                .map(|v| v.map_or("null".to_owned(), |v| v.to_string()))
                .collect::<Vec<_>>().join(", ");
            let json = format!(r#"{{"s": "{escaped}", "id": {id}, "ids": [{array}], "x": 1}}"#);
            let out = quote_fields(&json, &names(&["id", "ids"]));
            let quoted = ids.iter()
                .map(|v| v.map_or("null".to_owned(), |v| format!("\"{v}\"")))
                .collect::<Vec<_>>().join(", ");
            prop_assert_eq!(
                out,
                format!(r#"{{"s": "{escaped}", "id": "{id}", "ids": [{quoted}], "x": 1}}"#)
            );
        }
    }
}
