//! URL shortcodes, as Instagram's public links are: the id's 8 bytes, big-endian, in URL-safe
//! base64 (RFC 4648 §5, alphabet `A-Z a-z 0-9 - _`) without padding: always 11 characters, and
//! sorting like the ids only by accident (base64 is not order-preserving in ASCII).
//!
//! Decoding is strict: exactly 11 characters of the alphabet, the unused low 2 bits of the last
//! character zero (so every id has exactly one code), and a non-negative id.

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
/// Length of every shortcode.
pub const SHORTCODE_LEN: usize = 11;

/// Why a text is not a shortcode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShortcodeError {
    /// Not 11 characters long.
    Length(usize),
    /// A character outside the URL-safe base64 alphabet, at this 0-based position.
    Character(usize),
    /// The last character has bits set that no id produces.
    NotCanonical,
    /// Decodes to a negative bigint, which is not an id.
    Negative,
}

impl std::fmt::Display for ShortcodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ShortcodeError::Length(n) => write!(f, "has {n} characters, not {SHORTCODE_LEN}"),
            ShortcodeError::Character(i) => {
                write!(
                    f,
                    "character {} is not in the URL-safe base64 alphabet",
                    i + 1
                )
            }
            ShortcodeError::NotCanonical => {
                write!(f, "its last character is not one an id produces")
            }
            ShortcodeError::Negative => {
                write!(f, "it decodes to a negative number, which is not an id")
            }
        }
    }
}

/// The shortcode of `id` (any bigint; the SQL layer refuses negative ids first).
pub fn encode(id: i64) -> String {
    let bits = id as u64;
    (0..SHORTCODE_LEN)
        .map(|i| {
            // 11 sextets cover 66 bits: the id shifted left by 2, read from the top.
            let sextet = ((u128::from(bits) << 2) >> (6 * (SHORTCODE_LEN - 1 - i))) & 0x3f;
            char::from(ALPHABET[sextet as usize])
        })
        .collect()
}

/// The id a shortcode stands for.
pub fn decode(code: &str) -> Result<i64, ShortcodeError> {
    // Count and index characters, not bytes: 11 two-byte characters are 11 characters.
    let length = code.chars().count();
    if length != SHORTCODE_LEN {
        return Err(ShortcodeError::Length(length));
    }
    let mut acc: u128 = 0;
    for (i, c) in code.chars().enumerate() {
        let v = ALPHABET
            .iter()
            .position(|&a| char::from(a) == c)
            .ok_or(ShortcodeError::Character(i))?;
        acc = (acc << 6) | v as u128;
    }
    if acc & 0b11 != 0 {
        return Err(ShortcodeError::NotCanonical);
    }
    let id = (acc >> 2) as u64 as i64;
    if id < 0 {
        return Err(ShortcodeError::Negative);
    }
    Ok(id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn known_answers() {
        // computed independently: base64.urlsafe_b64encode(struct.pack('>q', id)).rstrip('=')
        for (id, code) in [
            (0, "AAAAAAAAAAA"),
            (1, "AAAAAAAAAAE"),
            (11_637_205_501_278_089, "AClX-gwU94k"),
            (235_624_315_075_171_329, "A0UbEPCAFAE"),
            (i64::MAX, "f_________8"),
        ] {
            assert_eq!(encode(id), code);
            assert_eq!(decode(code), Ok(id));
        }
    }

    #[test]
    fn invalid_codes() {
        assert_eq!(decode(""), Err(ShortcodeError::Length(0)));
        assert_eq!(decode("AClX-gwU94"), Err(ShortcodeError::Length(10)));
        assert_eq!(decode("AClX-gwU94kk"), Err(ShortcodeError::Length(12)));
        assert_eq!(decode("AClX+gwU94k"), Err(ShortcodeError::Character(4)));
        assert_eq!(decode("AClX/gwU94k"), Err(ShortcodeError::Character(4)));
        assert_eq!(decode("AClX=gwU94k"), Err(ShortcodeError::Character(4)));
        assert_eq!(decode("AClX-gwU94l"), Err(ShortcodeError::NotCanonical));
        assert_eq!(decode("gAAAAAAAAAA"), Err(ShortcodeError::Negative));
        assert_eq!(decode("AClX-gwU9ü"), Err(ShortcodeError::Length(10)));
        assert_eq!(decode("AClX-gwU9üA"), Err(ShortcodeError::Character(9)));
        // 11 characters of two bytes each: the right count in the message
        assert_eq!(decode("ééééééééééé"), Err(ShortcodeError::Character(0)));
        assert_eq!(decode("éééééééééé"), Err(ShortcodeError::Length(10)));
    }

    proptest! {
        #[test]
        fn round_trip(id in 0..=i64::MAX) {
            let code = encode(id);
            prop_assert_eq!(code.len(), SHORTCODE_LEN);
            prop_assert!(code.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'));
            prop_assert_eq!(decode(&code), Ok(id));
        }

        #[test]
        fn any_text_decodes_to_an_id_that_encodes_back_or_errors(text in "[A-Za-z0-9_-]{11}|.{0,14}") {
            if let Ok(id) = decode(&text) {
                prop_assert_eq!(encode(id), text);
            }
        }
    }
}
