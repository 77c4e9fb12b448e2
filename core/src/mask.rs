//! Masked public ids: a keyed, reversible permutation of the non-negative bigints, so that an id
//! shown in a URL says nothing of when its row was made, on which shard, or how many rows a shard
//! makes (`shard_id_mask`, `shard_id_unmask` and their shortcode forms).
//!
//! * **The cipher is NIST SP 800-38G FF1 with AES-256**, from the `fpe` and `aes` crates: nothing
//!   cryptographic is written here. The domain is `0 .. 2^63`, every non-negative bigint, as 7
//!   numerals of radix 512 (9 bits each, most significant first: 512^7 = 2^63 exactly), so a
//!   masked id is again a non-negative bigint, and [`Key::unmask`] is the exact inverse of
//!   [`Key::mask`]. The tweak (any text; the table's name, say) is FF1's tweak: the same id under
//!   two tweaks gives unrelated values.
//! * **The numerals are kept in a `u64`** ([`Numerals`]): `fpe`'s FF1 asks its numeral strings for
//!   their number's bytes and for additions and subtractions modulo radix^m, and leaves their
//!   representation to the caller (its `NumeralString` trait). Its general one keeps a `Vec` and a
//!   big integer per step, 5 µs a mask; radix 512 is a power of two, so these are shifts and
//!   masks of one `u64`. The FF1 rounds, the PRF (AES-CBC-MAC) and the key schedule stay the
//!   crate's; a property test checks that this representation gives exactly what the crate's
//!   `FlexibleNumeralString` gives.
//! * **Keys** come from the file `pg_shard_id.keys` in the data directory ([`KeyFile::parse`]):
//!   `key <id> <64 hex digits>` lines (ids 1 to 63) and one `current <id>` line naming the key new
//!   masks use. Rotation adds a key and moves `current`; the old keys stay for unmasking. The
//!   bytes of a key live in a [`Zeroizing`] buffer while they are parsed, and the expanded key
//!   schedule is wiped when its [`Key`] is dropped (`aes`'s `zeroize` feature); copies the
//!   compiler makes on the stack while a key is built and moved are not (Rust promises nothing
//!   about them).
//! * **Check values** ([`Key::check_value`]): the key's masked value of 0 under a tweak no
//!   application uses. The database records it per key id, so that a key id whose key changed
//!   (a restored copy or a standby given another file) is refused instead of silently making
//!   other masked values: it says which key it is, never the key.
//! * **Masked shortcodes** ([`Key::mask_shortcode`]) are the key id as one character of the
//!   URL-safe base64 alphabet, then the masked value's 11-character shortcode: 12 characters,
//!   JavaScript-safe as text, and they carry their key, so they unmask after a rotation. A masked
//!   bigint cannot carry its key (all 63 bits are the permutation's), so unmasking one made with
//!   an older key names that key.

use crate::shortcode::{self, ShortcodeError};
use aes::Aes256;
use fpe::ff1::{NumeralString, Operations, FF1};
use zeroize::Zeroizing;

/// The radix of the numerals: 9 bits each.
const RADIX: u32 = 512;
/// Numerals per value: 7 x 9 = 63 bits.
const NUMERALS: usize = 7;
const NUMERAL_BITS: u32 = 9;
/// Key ids: one character of the URL-safe base64 alphabet, `B` (1) to `_` (63).
pub const MAX_KEY_ID: u8 = 63;
/// The alphabet of shortcodes; a masked shortcode starts with its key id's character.
const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
/// Length of a masked shortcode.
pub const MASKED_SHORTCODE_LEN: usize = 1 + shortcode::SHORTCODE_LEN;
/// The tweak of [`Key::check_value`]: not one an application would give (it is documented as
/// reserved).
pub const CHECK_TWEAK: &[u8] = b"pg_shard_id key check value";

/// Why masking, unmasking or reading the key file failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MaskError {
    /// A negative bigint: not an id, and not a masked id.
    Negative(i64),
    /// A line of the key file that is not `key <id> <64 hex digits>`, `current <id>`, a comment
    /// or blank (1-based line number and why).
    BadLine(usize, String),
    /// The key file names no current key, or one it does not define.
    NoCurrentKey,
    /// No key with this id.
    UnknownKey(u8),
    /// A text that is not a masked shortcode.
    BadShortcode(String),
}

impl std::fmt::Display for MaskError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MaskError::Negative(v) => write!(f, "{v} is negative; ids and masked ids are not"),
            MaskError::BadLine(n, why) => write!(f, "line {n}: {why}"),
            MaskError::NoCurrentKey => {
                write!(f, "no \"current <id>\" line names a key of the file")
            }
            MaskError::UnknownKey(id) => write!(f, "no mask key has the id {id}"),
            MaskError::BadShortcode(why) => write!(f, "not a masked shortcode: {why}"),
        }
    }
}

/// One key: its id and the expanded AES-256 key (expanded once, when the file is read).
pub struct Key {
    pub id: u8,
    ff1: FF1<Aes256>,
}

impl Key {
    /// A key from its 32 bytes.
    pub fn new(id: u8, bytes: &[u8; 32]) -> Key {
        Key {
            id,
            ff1: FF1::<Aes256>::new(bytes, RADIX).expect("512 is a valid FF1 radix"),
        }
    }

    /// The masked value of `id` under `tweak`: FF1-AES-256 over `0 .. 2^63`.
    pub fn mask(&self, id: i64, tweak: &[u8]) -> Result<i64, MaskError> {
        let numerals = to_numerals(id)?;
        let out = self
            .ff1
            .encrypt(tweak, &numerals)
            .expect("7 numerals of radix 512 are a valid FF1 input");
        Ok(from_numerals(out))
    }

    /// The id whose masked value under `tweak` is `masked`: the exact inverse of [`Key::mask`].
    pub fn unmask(&self, masked: i64, tweak: &[u8]) -> Result<i64, MaskError> {
        let numerals = to_numerals(masked)?;
        let out = self
            .ff1
            .decrypt(tweak, &numerals)
            .expect("7 numerals of radix 512 are a valid FF1 input");
        Ok(from_numerals(out))
    }

    /// A value that identifies this key without revealing it: the masked value of 0 under
    /// [`CHECK_TWEAK`]. Two keys have the same check value with probability 2^-63.
    pub fn check_value(&self) -> i64 {
        self.mask(0, CHECK_TWEAK).expect("0 is in the domain")
    }

    /// The masked shortcode of `id`: this key's id character, then the masked value's shortcode.
    pub fn mask_shortcode(&self, id: i64, tweak: &[u8]) -> Result<String, MaskError> {
        let masked = self.mask(id, tweak)?;
        let mut code = String::with_capacity(MASKED_SHORTCODE_LEN);
        code.push(char::from(ALPHABET[usize::from(self.id)]));
        code.push_str(&shortcode::encode(masked));
        Ok(code)
    }
}

/// The key id a masked shortcode names, and its masked value.
pub fn parse_masked_shortcode(code: &str) -> Result<(u8, i64), MaskError> {
    let mut chars = code.chars();
    let first = chars
        .next()
        .ok_or_else(|| MaskError::BadShortcode("it is empty".into()))?;
    let id = ALPHABET
        .iter()
        .position(|&c| char::from(c) == first)
        .filter(|&i| i >= 1)
        .ok_or_else(|| {
            MaskError::BadShortcode("its first character is not a key id (B to _)".into())
        })? as u8;
    let masked = shortcode::decode(chars.as_str()).map_err(|e| {
        MaskError::BadShortcode(match e {
            // positions after the key id's character
            ShortcodeError::Character(i) => {
                format!("character {} is not in the URL-safe base64 alphabet", i + 2)
            }
            ShortcodeError::Length(n) => {
                format!("has {} characters, not {MASKED_SHORTCODE_LEN}", n + 1)
            }
            other => other.to_string(),
        })
    })?;
    Ok((id, masked))
}

fn to_numerals(value: i64) -> Result<Numerals, MaskError> {
    if value < 0 {
        return Err(MaskError::Negative(value));
    }
    Ok(Numerals(value as u64))
}

fn from_numerals(numerals: Numerals) -> i64 {
    numerals.0 as i64
}

/// A value of the domain `0 .. 2^63` as FF1's numeral string of 7 numerals of radix 512, most
/// significant first: the bits of one `u64`.
pub struct Numerals(u64);

/// One half of [`Numerals`] in FF1's rounds: `count` numerals of radix 512 (at most 4, 36 bits).
pub struct Half {
    value: u64,
    count: usize,
}

impl Half {
    fn mask(count: usize) -> u64 {
        (1u64 << (NUMERAL_BITS as usize * count)) - 1
    }

    /// The low 64 bits of a big-endian number: enough modulo 512^m (a power of two <= 2^36).
    fn low_bits(bytes: impl Iterator<Item = u8>) -> u64 {
        bytes.fold(0u64, |acc, b| (acc << 8) | u64::from(b))
    }
}

/// The bytes [`Operations::to_be_bytes`] gives: at most 8 here (`b` is 5 for 36 bits).
pub struct BeBytes {
    buf: [u8; 8],
    len: usize,
}

impl AsRef<[u8]> for BeBytes {
    fn as_ref(&self) -> &[u8] {
        &self.buf[8 - self.len..]
    }
}

impl Operations for Half {
    type Bytes = BeBytes;

    fn numeral_count(&self) -> usize {
        self.count
    }

    fn to_be_bytes(&self, radix: u32, b: usize) -> BeBytes {
        assert!(radix == RADIX && b <= 8, "radix 512, at most 8 bytes");
        BeBytes {
            buf: self.value.to_be_bytes(),
            len: b,
        }
    }

    fn add_mod_exp(self, other: impl Iterator<Item = u8>, radix: u32, m: usize) -> Self {
        assert!(radix == RADIX && m <= 4);
        let value = self.value.wrapping_add(Self::low_bits(other)) & Self::mask(m);
        Half { value, count: m }
    }

    fn sub_mod_exp(self, other: impl Iterator<Item = u8>, radix: u32, m: usize) -> Self {
        assert!(radix == RADIX && m <= 4);
        let value = self.value.wrapping_sub(Self::low_bits(other)) & Self::mask(m);
        Half { value, count: m }
    }
}

impl NumeralString for Numerals {
    type Ops = Half;

    fn is_valid(&self, radix: u32) -> bool {
        radix == RADIX && self.0 >> 63 == 0
    }

    fn numeral_count(&self) -> usize {
        NUMERALS
    }

    /// u = 3 numerals (the high 27 bits), v = 4 (the low 36 bits).
    fn split(&self) -> (Half, Half) {
        let v = NUMERALS - NUMERALS / 2;
        let low_bits = NUMERAL_BITS as usize * v;
        (
            Half {
                value: self.0 >> low_bits,
                count: NUMERALS / 2,
            },
            Half {
                value: self.0 & Half::mask(v),
                count: v,
            },
        )
    }

    fn concat(a: Half, b: Half) -> Self {
        Numerals((a.value << (NUMERAL_BITS as usize * b.count)) | b.value)
    }
}

/// The keys of the file `pg_shard_id.keys`, and which one is current.
pub struct KeyFile {
    keys: Vec<Key>,
    current: u8,
}

impl KeyFile {
    /// Parses the file's text: `key <id> <64 hex digits>` (id 1 to 63, each id once), one
    /// `current <id>` naming a defined key, `#` comments and blank lines.
    pub fn parse(text: &str) -> Result<KeyFile, MaskError> {
        // (room for every key id at once: a Vec that grew would free its old buffer, key
        // schedules included, without wiping it)
        let mut keys: Vec<Key> = Vec::with_capacity(usize::from(MAX_KEY_ID));
        let mut current = None;
        for (n, line) in text.lines().enumerate().map(|(i, l)| (i + 1, l.trim())) {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let bad = |why: &str| MaskError::BadLine(n, why.to_string());
            let words: Vec<&str> = line.split_whitespace().collect();
            match words.as_slice() {
                ["key", id, hex] => {
                    let id = parse_id(id).ok_or_else(|| bad("a key id is 1 to 63"))?;
                    if keys.iter().any(|k| k.id == id) {
                        return Err(bad("this key id is defined twice"));
                    }
                    let bytes = parse_hex(hex)
                        .ok_or_else(|| bad("a key is 64 hexadecimal digits (32 bytes)"))?;
                    keys.push(Key::new(id, &bytes)); // (the bytes are wiped here, dropped)
                }
                ["current", id] => {
                    if current.is_some() {
                        return Err(bad("\"current\" is given twice"));
                    }
                    current = Some(parse_id(id).ok_or_else(|| bad("a key id is 1 to 63"))?);
                }
                _ => {
                    return Err(bad(
                        "expected \"key <id> <64 hex digits>\" or \"current <id>\"",
                    ))
                }
            }
        }
        match current {
            Some(id) if keys.iter().any(|k| k.id == id) => Ok(KeyFile { keys, current: id }),
            _ => Err(MaskError::NoCurrentKey),
        }
    }

    /// The key new masks use.
    pub fn current(&self) -> &Key {
        self.key(self.current).expect("parse checked it")
    }

    /// Every key of the file, in the file's order.
    pub fn keys(&self) -> impl Iterator<Item = &Key> {
        self.keys.iter()
    }

    /// The key with this id.
    pub fn key(&self, id: u8) -> Result<&Key, MaskError> {
        self.keys
            .iter()
            .find(|k| k.id == id)
            .ok_or(MaskError::UnknownKey(id))
    }

    /// The id a masked shortcode carries, unmasked with the key it names.
    pub fn unmask_shortcode(&self, code: &str, tweak: &[u8]) -> Result<i64, MaskError> {
        let (id, masked) = parse_masked_shortcode(code)?;
        self.key(id)?.unmask(masked, tweak)
    }
}

/// How the keys of a key file stand against the check values a database recorded (key id,
/// check value): the ids whose key is not the recorded one, and the ids with no record.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct KeyChecks {
    pub mismatched: Vec<u8>,
    pub unrecorded: Vec<u8>,
}

impl KeyChecks {
    pub fn of(file: &KeyFile, recorded: &[(u8, i64)]) -> KeyChecks {
        let mut checks = KeyChecks::default();
        for key in file.keys() {
            match recorded.iter().find(|(id, _)| *id == key.id) {
                Some((_, value)) if *value != key.check_value() => checks.mismatched.push(key.id),
                Some(_) => {}
                None => checks.unrecorded.push(key.id),
            }
        }
        checks
    }
}

fn parse_id(text: &str) -> Option<u8> {
    text.parse::<u8>()
        .ok()
        .filter(|&id| (1..=MAX_KEY_ID).contains(&id))
}

fn parse_hex(text: &str) -> Option<Zeroizing<[u8; 32]>> {
    if text.len() != 64 || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let mut out = Zeroizing::new([0u8; 32]);
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use fpe::ff1::FlexibleNumeralString;
    use proptest::prelude::*;

    /// NIST SP 800-38G's AES-256 key of FF1 samples 7-9.
    const NIST_KEY: [u8; 32] = [
        0x2B, 0x7E, 0x15, 0x16, 0x28, 0xAE, 0xD2, 0xA6, 0xAB, 0xF7, 0x15, 0x88, 0x09, 0xCF, 0x4F,
        0x3C, 0xEF, 0x43, 0x59, 0xD8, 0xD5, 0x80, 0xAA, 0x4F, 0x7F, 0x03, 0x6D, 0x6F, 0x04, 0xFC,
        0x6A, 0x94,
    ];

    /// The NIST samples through the crates this module uses (FF1 from `fpe`, AES-256 from
    /// `aes`): samples 7, 8 (radix 10) and 9 (radix 36), encrypting and decrypting.
    #[test]
    fn nist_sp_800_38g_ff1_aes256_samples() {
        /// (radix, tweak, plaintext, ciphertext)
        type Sample = (u32, &'static [u8], Vec<u16>, Vec<u16>);
        let samples: [Sample; 3] = [
            (
                10,
                b"",
                (0..10).collect(),
                vec![6, 6, 5, 7, 6, 6, 7, 0, 0, 9],
            ),
            (
                10,
                b"9876543210",
                (0..10).collect(),
                vec![1, 0, 0, 1, 6, 2, 3, 4, 6, 3],
            ),
            (
                36,
                b"7777pqrs777",
                (0..19).collect(),
                vec![
                    33, 28, 8, 10, 0, 10, 35, 17, 2, 10, 31, 34, 10, 21, 34, 35, 30, 32, 13,
                ],
            ),
        ];
        for (radix, tweak, pt, ct) in samples {
            let ff1 = FF1::<Aes256>::new(&NIST_KEY, radix).unwrap();
            let got: Vec<u16> = ff1
                .encrypt(tweak, &FlexibleNumeralString::from(pt.clone()))
                .unwrap()
                .into();
            assert_eq!(got, ct, "radix {radix}");
            let back: Vec<u16> = ff1
                .decrypt(tweak, &FlexibleNumeralString::from(ct))
                .unwrap()
                .into();
            assert_eq!(back, pt);
        }
    }

    /// Known answers of this module's own domain (7 numerals of radix 512) under the NIST key,
    /// so that a change of the numeral layout, which would change every masked id already
    /// published, fails here.
    #[test]
    fn known_masked_values_do_not_change() {
        let key = Key::new(1, &NIST_KEY);
        let cases = [
            (0i64, &b""[..]),
            (1, b""),
            (i64::MAX, b""),
            (11_637_205_501_278_089, b"photos"),
        ];
        let got: Vec<i64> = cases
            .iter()
            .map(|(id, t)| key.mask(*id, t).unwrap())
            .collect();
        assert_eq!(got, KNOWN, "masked values changed: {got:?}");
        for ((id, tweak), masked) in cases.iter().zip(KNOWN) {
            assert_eq!(key.unmask(masked, tweak).unwrap(), *id);
        }
    }
    const KNOWN: [i64; 4] = [
        2_698_587_358_713_113_508,
        7_661_764_453_910_059_173,
        1_456_613_967_788_391_754,
        1_463_496_062_521_237_990,
    ];

    /// A check value names a key without being it: fixed for a key (a known answer, so that a
    /// change here, which would refuse every recorded key, fails), different for another key.
    #[test]
    fn check_values_identify_keys() {
        let key = Key::new(1, &NIST_KEY);
        assert_eq!(key.check_value(), key.mask(0, CHECK_TWEAK).unwrap());
        assert_eq!(key.check_value(), CHECK_VALUE_OF_NIST_KEY);
        let mut other = NIST_KEY;
        other[31] ^= 1;
        assert_ne!(Key::new(1, &other).check_value(), key.check_value());
        // the key id is not part of it: the same key under two ids has one check value
        assert_eq!(Key::new(2, &NIST_KEY).check_value(), key.check_value());
    }
    const CHECK_VALUE_OF_NIST_KEY: i64 = 5_540_789_936_356_448_632;

    #[test]
    fn key_checks_name_mismatched_and_unrecorded_ids() {
        let hex = |b: u8| format!("{b:02x}").repeat(32);
        let file = KeyFile::parse(&format!(
            "key 1 {}\nkey 2 {}\nkey 3 {}\ncurrent 2\n",
            hex(1),
            hex(2),
            hex(3)
        ))
        .unwrap();
        let value = |id| file.key(id).unwrap().check_value();
        let recorded = [(1, value(1)), (2, value(2) ^ 1), (9, 7)];
        assert_eq!(
            KeyChecks::of(&file, &recorded),
            KeyChecks {
                mismatched: vec![2],
                unrecorded: vec![3]
            }
        );
        let all = [(1, value(1)), (2, value(2)), (3, value(3))];
        assert_eq!(KeyChecks::of(&file, &all), KeyChecks::default());
    }

    #[test]
    fn numerals_cover_exactly_the_non_negative_bigints() {
        for v in [0, 1, 511, 512, i64::MAX, i64::MAX - 1, 1 << 62] {
            assert_eq!(from_numerals(to_numerals(v).unwrap()), v);
        }
        assert_eq!(to_numerals(-1).err(), Some(MaskError::Negative(-1)));
        assert_eq!(512u64.pow(7), 1 << 63);
    }

    #[test]
    fn the_key_file_is_strict() {
        let hex = "00".repeat(32);
        let ok = format!(
            "# keys\nkey 1 {hex}\n\nkey 2 {}\ncurrent 2\n",
            "ab".repeat(32)
        );
        let file = KeyFile::parse(&ok).unwrap();
        assert_eq!(file.current().id, 2);
        assert_eq!(file.key(1).unwrap().id, 1);
        assert_eq!(file.key(3).err(), Some(MaskError::UnknownKey(3)));
        let line = |text: &str| match KeyFile::parse(text) {
            Err(MaskError::BadLine(n, _)) => n,
            other => panic!("{text}: {:?}", other.map(|_| ())),
        };
        assert_eq!(line(&format!("key 0 {hex}\ncurrent 0")), 1);
        assert_eq!(line(&format!("key 64 {hex}\ncurrent 64")), 1);
        assert_eq!(line(&format!("key 1 {}\ncurrent 1", "0".repeat(63))), 1);
        assert_eq!(line(&format!("key 1 {}\ncurrent 1", "zz".repeat(32))), 1);
        assert_eq!(line(&format!("key 1 {hex}\nkey 1 {hex}\ncurrent 1")), 2);
        assert_eq!(line(&format!("key 1 {hex}\ncurrent 1\ncurrent 1")), 3);
        assert_eq!(line("secret"), 1);
        assert_eq!(
            KeyFile::parse(&format!("key 1 {hex}"))
                .err()
                .map(|e| e.to_string()),
            Some(MaskError::NoCurrentKey.to_string())
        );
        assert!(matches!(
            KeyFile::parse(&format!("key 1 {hex}\ncurrent 2")),
            Err(MaskError::NoCurrentKey)
        ));
        assert!(matches!(KeyFile::parse(""), Err(MaskError::NoCurrentKey)));
    }

    #[test]
    fn masked_shortcodes_carry_their_key_and_are_strict() {
        let hex1 = "11".repeat(32);
        let hex2 = "22".repeat(32);
        let old = KeyFile::parse(&format!("key 1 {hex1}\ncurrent 1")).unwrap();
        let code = old.current().mask_shortcode(42, b"t").unwrap();
        assert_eq!(code.len(), MASKED_SHORTCODE_LEN);
        assert!(code.starts_with('B'), "{code}");
        // rotated: key 2 is current, key 1 still unmasks what it made
        let rotated = KeyFile::parse(&format!("key 1 {hex1}\nkey 2 {hex2}\ncurrent 2")).unwrap();
        assert_eq!(rotated.unmask_shortcode(&code, b"t").unwrap(), 42);
        let new = rotated.current().mask_shortcode(42, b"t").unwrap();
        assert!(new.starts_with('C') && new != code);
        assert_eq!(rotated.unmask_shortcode(&new, b"t").unwrap(), 42);
        // a retired key is gone: the old code names it
        let retired = KeyFile::parse(&format!("key 2 {hex2}\ncurrent 2")).unwrap();
        assert_eq!(
            retired.unmask_shortcode(&code, b"t").err(),
            Some(MaskError::UnknownKey(1))
        );
        for bad in [
            "",
            "A",
            "AAAAAAAAAAAA",
            "B",
            "BAAAAAAAAAA",
            "BAAAAAAAAAAAA",
            "B_AAAAAAAAAA",
            "BAAAAAAAA!AA",
        ] {
            assert!(
                matches!(parse_masked_shortcode(bad), Err(MaskError::BadShortcode(_))),
                "{bad}"
            );
        }
    }

    /// The crate's own general numeral string, for comparison.
    fn flexible(v: i64) -> FlexibleNumeralString {
        FlexibleNumeralString::from(
            (0..NUMERALS)
                .rev()
                .map(|i| ((v as u64 >> (9 * i)) & 511) as u16)
                .collect::<Vec<u16>>(),
        )
    }

    fn from_flexible(ns: FlexibleNumeralString) -> i64 {
        Vec::<u16>::from(ns)
            .into_iter()
            .fold(0u64, |v, n| (v << 9) | u64::from(n)) as i64
    }

    fn keys() -> (Key, Key) {
        (Key::new(1, &[7; 32]), Key::new(2, &[8; 32]))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2_000))]

        /// unmask(mask(x)) = x over the whole domain; the masked value stays in it.
        #[test]
        fn unmask_inverts_mask_over_the_whole_domain(x in 0i64..=i64::MAX, tweak in proptest::collection::vec(any::<u8>(), 0..40)) {
            let (key, _) = keys();
            let masked = key.mask(x, &tweak).unwrap();
            prop_assert!(masked >= 0);
            prop_assert_eq!(key.unmask(masked, &tweak).unwrap(), x);
            // and the other way round: every non-negative bigint is some id's masked value
            let unmasked = key.unmask(x, &tweak).unwrap();
            prop_assert!(unmasked >= 0);
            prop_assert_eq!(key.mask(unmasked, &tweak).unwrap(), x);
        }

        /// The u64 numerals give exactly what the crate's general numeral string gives.
        #[test]
        fn the_u64_numerals_agree_with_the_crates_numeral_string(x in 0i64..=i64::MAX, tweak in proptest::collection::vec(any::<u8>(), 0..20)) {
            let ff1 = FF1::<Aes256>::new(&NIST_KEY, RADIX).unwrap();
            let key = Key::new(1, &NIST_KEY);
            prop_assert_eq!(key.mask(x, &tweak).unwrap(), from_flexible(ff1.encrypt(&tweak, &flexible(x)).unwrap()));
            prop_assert_eq!(key.unmask(x, &tweak).unwrap(), from_flexible(ff1.decrypt(&tweak, &flexible(x)).unwrap()));
        }

        /// Two tweaks, or two keys, are unrelated permutations: over 16 ids they never agree
        /// on all of them (a chance of 2^-1008 if they were independent).
        #[test]
        fn tweaks_and_keys_give_different_permutations(start in 0i64..i64::MAX - 16, a in "[a-z]{0,8}", b in "[a-z]{0,8}") {
            prop_assume!(a != b);
            let (k1, k2) = keys();
            let ids = start..start + 16;
            let by = |k: &Key, t: &str| ids.clone().map(|x| k.mask(x, t.as_bytes()).unwrap()).collect::<Vec<_>>();
            prop_assert_ne!(by(&k1, &a), by(&k1, &b));
            prop_assert_ne!(by(&k1, &a), by(&k2, &a));
        }
    }

    #[test]
    fn masking_hides_the_order_of_consecutive_ids() {
        // consecutive ids (one shard, one millisecond) do not give consecutive masked values
        let (key, _) = keys();
        let masked: Vec<i64> = (1000..1064)
            .map(|x| key.mask(x, b"photos").unwrap())
            .collect();
        let increasing = masked.windows(2).filter(|w| w[1] > w[0]).count();
        assert!(
            (16..=48).contains(&increasing),
            "{increasing} of 63 steps increase"
        );
        assert!(masked.windows(2).all(|w| (w[1] - w[0]).abs() > 1 << 40));
    }
}
