//! Which numbers of a `to_jsonb` value `shard_id_to_jsonb` writes as JSON strings, decided token
//! by token while the extension walks the jsonb value with PostgreSQL's own iterator
//! (`src/json.rs`). Nothing here reads or writes JSON text: the structure decides, so a key, a
//! string or a nested value can never be mistaken for a bigint field (0.3.0 re-scanned jsonb's
//! text, and a duplicate column name or a numeric column named like a bigint one went wrong).
//!
//! The rule, by type: a value whose type is `bigint` or `bigint[]` has every number in it
//! quoted; in a row, the value of each top-level key whose column is `bigint` or `bigint[]`.
//! When a row has two columns of one name, jsonb keeps the last one's value, so the last
//! column's type decides ([`bigint_keys`]).

use std::collections::HashMap;

/// A token of a jsonb value, as PostgreSQL's `JsonbIteratorNext` returns them (without the
/// payloads, except a key's bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Token<'a> {
    BeginObject,
    EndObject,
    BeginArray,
    EndArray,
    Key(&'a [u8]),
    /// A scalar value of an object's key.
    Value,
    /// A scalar element of an array.
    Elem,
}

/// The top-level keys whose values are quoted: for each column name, whether the *last* column
/// of that name (the one jsonb keeps) is `bigint` or `bigint[]`.
pub fn bigint_keys<'a>(columns: impl IntoIterator<Item = (&'a [u8], bool)>) -> Vec<Vec<u8>> {
    let mut last = HashMap::new();
    for (name, is_bigint) in columns {
        last.insert(name, is_bigint);
    }
    let mut keys: Vec<Vec<u8>> = last
        .into_iter()
        .filter(|&(_, is_bigint)| is_bigint)
        .map(|(name, _)| name.to_vec())
        .collect();
    keys.sort();
    keys
}

/// Walks the tokens of one jsonb value and says which scalars to quote.
pub struct Quoter<'k> {
    /// The whole value is a bigint or bigint[]: quote every number.
    whole: bool,
    /// Top-level keys whose values are quoted (see [`bigint_keys`]).
    keys: &'k [Vec<u8>],
    /// Containers entered so far.
    depth: usize,
    /// The last top-level key was one of `keys`.
    key_is_bigint: bool,
    /// Inside the array value of such a key: its depth.
    quoting_from: Option<usize>,
}

impl<'k> Quoter<'k> {
    /// For a value of type bigint or bigint[]: every number is quoted.
    pub fn whole() -> Quoter<'static> {
        Quoter {
            whole: true,
            keys: &[],
            depth: 0,
            key_is_bigint: false,
            quoting_from: None,
        }
    }

    /// For a row: the values of `keys` at the top level are quoted.
    pub fn fields(keys: &'k [Vec<u8>]) -> Self {
        Quoter {
            whole: false,
            keys,
            depth: 0,
            key_is_bigint: false,
            quoting_from: None,
        }
    }

    /// Takes the next token; for a scalar ([`Token::Value`], [`Token::Elem`]) returns whether a
    /// number there is to be written as a string.
    pub fn quote(&mut self, token: Token<'_>) -> bool {
        match token {
            Token::BeginObject | Token::BeginArray => {
                self.depth += 1;
                if self.depth == 2 && self.key_is_bigint && token == Token::BeginArray {
                    self.quoting_from = Some(2);
                }
                false
            }
            Token::EndObject | Token::EndArray => {
                if self.quoting_from == Some(self.depth) {
                    self.quoting_from = None;
                }
                self.depth = self.depth.saturating_sub(1);
                false
            }
            Token::Key(key) => {
                if self.depth == 1 {
                    self.key_is_bigint = self.keys.iter().any(|k| k.as_slice() == key);
                }
                false
            }
            Token::Value => {
                self.whole || self.quoting_from.is_some() || (self.depth == 1 && self.key_is_bigint)
            }
            Token::Elem => self.whole || self.quoting_from.is_some(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Token::*;

    /// The scalars quoted in a token stream, by position.
    fn quoted(q: &mut Quoter<'_>, tokens: &[Token<'_>]) -> Vec<bool> {
        tokens
            .iter()
            .filter_map(|&t| {
                let quote = q.quote(t);
                matches!(t, Value | Elem).then_some(quote)
            })
            .collect()
    }

    #[test]
    fn the_last_column_of_a_name_decides() {
        let keys = bigint_keys([
            (&b"id"[..], true),
            (&b"id"[..], false),
            (&b"v"[..], false),
            (&b"v"[..], true),
            (&b"n"[..], true),
        ]);
        assert_eq!(keys, vec![b"n".to_vec(), b"v".to_vec()]);
    }

    #[test]
    fn only_top_level_values_of_bigint_keys_are_quoted() {
        let keys = vec![b"id".to_vec(), b"ids".to_vec()];
        let mut q = Quoter::fields(&keys);
        // {"id": 1, "ids": [1, [2, null]], "j": {"id": 3, "ids": [4]}, "n": 5}
        let tokens = [
            BeginObject,
            Key(b"id"),
            Value,
            Key(b"ids"),
            BeginArray,
            Elem,
            BeginArray,
            Elem,
            Elem,
            EndArray,
            EndArray,
            Key(b"j"),
            BeginObject,
            Key(b"id"),
            Value,
            Key(b"ids"),
            BeginArray,
            Elem,
            EndArray,
            EndObject,
            Key(b"n"),
            Value,
            EndObject,
        ];
        assert_eq!(
            quoted(&mut q, &tokens),
            [true, true, true, true, false, false, false]
        );
    }

    #[test]
    fn a_nested_object_under_a_bigint_named_key_is_left_alone() {
        // {"id": {"n": 5}} where the last "id" column is jsonb: not a bigint key at all; and
        // were it one, an object value is not a bigint's
        let keys = vec![b"id".to_vec()];
        let mut q = Quoter::fields(&keys);
        let tokens = [
            BeginObject,
            Key(b"id"),
            BeginObject,
            Key(b"n"),
            Value,
            EndObject,
            EndObject,
        ];
        assert_eq!(quoted(&mut q, &tokens), [false]);
    }

    #[test]
    fn a_whole_value_quotes_every_number() {
        let mut q = Quoter::whole();
        // a raw scalar is an array of one element with rawScalar set
        assert_eq!(quoted(&mut q, &[BeginArray, Elem, EndArray]), [true]);
        let mut q = Quoter::whole();
        let tokens = [BeginArray, Elem, BeginArray, Elem, EndArray, EndArray];
        assert_eq!(quoted(&mut q, &tokens), [true, true]);
    }
}
