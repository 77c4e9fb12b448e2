//! Time conversion: the epoch setting, Unix milliseconds and PostgreSQL's timestamptz
//! (microseconds since 2000-01-01 00:00:00 UTC).

use chrono::{DateTime, FixedOffset, Utc};

/// PostgreSQL's timestamp epoch (2000-01-01 00:00:00 UTC) in Unix microseconds.
pub const PG_EPOCH_UNIX_MICROS: i64 = 946_684_800_000_000;

/// The default epoch, as `pg_shard_id.epoch` spells it.
pub const DEFAULT_EPOCH: &std::ffi::CStr = c"2026-01-01 00:00:00+00";
/// The default epoch in Unix milliseconds (a test checks it against [`DEFAULT_EPOCH`]).
pub const DEFAULT_EPOCH_UNIX_MS: i64 = 1_767_225_600_000;

/// Why an epoch setting is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EpochError {
    /// Not a timestamp with an explicit UTC offset.
    Unparseable(String),
    /// Finer than a millisecond: ids could not represent the epoch itself.
    SubMillisecond(String),
}

impl std::fmt::Display for EpochError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let echo = |v: &str| crate::echo(v, 40);
        match self {
            EpochError::Unparseable(v) => write!(
                f,
                "\"{}\" is not a timestamp with an explicit UTC offset, such as \"{}\"",
                echo(v),
                DEFAULT_EPOCH.to_string_lossy()
            ),
            EpochError::SubMillisecond(v) => {
                write!(f, "\"{}\" has more than millisecond precision", echo(v))
            }
        }
    }
}

/// Parses the epoch setting into Unix milliseconds.
///
/// The value must carry an explicit UTC offset (`+00`, `+05:30`, `Z`): an epoch that silently
/// followed each session's `TimeZone` would give different ids in different sessions. It must be a
/// whole millisecond. An epoch after the current time is accepted: a machine may boot before NTP
/// has set its clock, and an id setting must never keep PostgreSQL from starting;
/// `next_shard_id` raises 22008 until the clock passes the epoch.
pub fn parse_epoch(text: &str) -> Result<i64, EpochError> {
    let parsed =
        parse_with_offset(text.trim()).ok_or_else(|| EpochError::Unparseable(text.to_string()))?;
    if parsed.timestamp_subsec_nanos() % 1_000_000 != 0 {
        return Err(EpochError::SubMillisecond(text.to_string()));
    }
    Ok(parsed.timestamp_millis())
}

fn parse_with_offset(text: &str) -> Option<DateTime<FixedOffset>> {
    // "Z" is accepted as "+00"; chrono's %#z takes "+HH", "+HHMM" and "+HH:MM".
    let normalized = match text.strip_suffix(['Z', 'z']) {
        Some(rest) => format!("{rest}+00"),
        None => text.to_string(),
    };
    [
        "%Y-%m-%d %H:%M:%S%.f%#z",
        "%Y-%m-%dT%H:%M:%S%.f%#z",
        "%Y-%m-%d %H:%M:%S%.f %#z",
    ]
    .iter()
    .find_map(|format| DateTime::parse_from_str(&normalized, format).ok())
}

/// Formats Unix milliseconds as `YYYY-MM-DD HH:MM:SS.mmm+00`, the way PostgreSQL prints a UTC
/// timestamptz.
pub fn format_unix_ms(unix_ms: i64) -> String {
    match DateTime::<Utc>::from_timestamp_millis(unix_ms) {
        Some(t) => t.format("%Y-%m-%d %H:%M:%S%.3f+00").to_string(),
        None => format!("{unix_ms} ms since 1970-01-01"),
    }
}

/// The current wall-clock time in Unix milliseconds (`CLOCK_REALTIME`), floored. Straight from
/// `clock_gettime`: going through a calendar type (`Utc::now()`) cost 6% of `next_shard_id`, and
/// `SystemTime::now()` with its `Duration` arithmetic 54 instructions per call where this takes
/// about 10 (`bench/profile.sh`).
#[inline]
pub fn wall_clock_unix_ms() -> i64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime only writes the timespec it is given; CLOCK_REALTIME always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    // tv_nsec is in 0..1e9 (also before 1970, when tv_sec is negative), so this is the floor.
    ts.tv_sec * 1000 + ts.tv_nsec / 1_000_000
}

/// A PostgreSQL timestamptz value, floored to the millisecond, in Unix milliseconds.
/// `None` when the arithmetic would overflow (only near the ends of the timestamptz range).
pub fn pg_micros_to_unix_ms_floor(pg_micros: i64) -> Option<i64> {
    pg_micros
        .checked_add(PG_EPOCH_UNIX_MICROS)
        .map(|us| us.div_euclid(1000))
}

/// A PostgreSQL timestamptz value, rounded up to the millisecond, in Unix milliseconds.
pub fn pg_micros_to_unix_ms_ceil(pg_micros: i64) -> Option<i64> {
    let us = pg_micros.checked_add(PG_EPOCH_UNIX_MICROS)?;
    Some(us.div_euclid(1000) + i64::from(us.rem_euclid(1000) != 0))
}

/// A PostgreSQL timestamptz value, rounded to the nearest millisecond (half away from zero, as
/// PostgreSQL rounds `numeric` to `bigint`), in Unix milliseconds: what
/// `(extract(epoch FROM t) * 1000)::bigint` gives. `None` on overflow.
pub fn pg_micros_to_unix_ms_rounded(pg_micros: i64) -> Option<i64> {
    let us = pg_micros.checked_add(PG_EPOCH_UNIX_MICROS)?;
    let half = if us >= 0 { 500 } else { -500 };
    Some(us.checked_add(half)? / 1000)
}

/// Unix milliseconds as a PostgreSQL timestamptz value (microseconds since 2000-01-01).
pub fn unix_ms_to_pg_micros(unix_ms: i64) -> Option<i64> {
    unix_ms.checked_mul(1000)?.checked_sub(PG_EPOCH_UNIX_MICROS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_wall_clock_agrees_with_system_time() {
        let system = || {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_millis() as i64
        };
        let before = system();
        let ours = super::wall_clock_unix_ms();
        let after = system();
        assert!(
            before <= ours && ours <= after,
            "{before} <= {ours} <= {after}"
        );
    }

    #[test]
    fn default_epoch_constant_matches_its_text() {
        assert_eq!(
            parse_epoch(DEFAULT_EPOCH.to_str().unwrap()),
            Ok(DEFAULT_EPOCH_UNIX_MS)
        );
    }

    #[test]
    fn accepted_spellings() {
        let instagram = 1_293_840_000_000; // 2011-01-01 00:00:00 UTC
        for text in [
            "2011-01-01 00:00:00+00",
            "2011-01-01 00:00:00+00:00",
            "2011-01-01T00:00:00Z",
            "2011-01-01 00:00:00.000+0000",
            " 2011-01-01 01:00:00+01 ",
            "2010-12-31 19:00:00-05",
        ] {
            assert_eq!(parse_epoch(text), Ok(instagram), "{text}");
        }
        assert_eq!(
            parse_epoch("2011-01-01 00:00:00.123+00"),
            Ok(instagram + 123)
        );
    }

    #[test]
    fn refused_values() {
        for text in [
            "",
            "yesterday",
            "2011-01-01",
            "2011-01-01 00:00:00",
            "2011-13-01 00:00:00+00",
        ] {
            assert!(
                matches!(parse_epoch(text), Err(EpochError::Unparseable(_))),
                "{text}"
            );
        }
        assert!(matches!(
            parse_epoch("2011-01-01 00:00:00.0001+00"),
            Err(EpochError::SubMillisecond(_))
        ));
        // the future is allowed: a clock before the epoch must not stop a server from starting
        assert_eq!(parse_epoch("2099-01-01 00:00:00+00"), Ok(4_070_908_800_000));
    }

    #[test]
    fn wall_clock_agrees_with_chrono() {
        let (a, b, c) = (
            Utc::now().timestamp_millis(),
            wall_clock_unix_ms(),
            Utc::now().timestamp_millis(),
        );
        assert!(a <= b && b <= c, "{a} {b} {c}");
    }

    #[test]
    fn formats_like_postgres_utc() {
        assert_eq!(
            format_unix_ms(DEFAULT_EPOCH_UNIX_MS + 5),
            "2026-01-01 00:00:00.005+00"
        );
    }

    #[test]
    fn micros_rounding() {
        // 2000-01-01 00:00:00.0015 UTC
        assert_eq!(pg_micros_to_unix_ms_rounded(1500), Some(946_684_800_002));
        assert_eq!(pg_micros_to_unix_ms_rounded(1499), Some(946_684_800_001));
        assert_eq!(pg_micros_to_unix_ms_rounded(0), Some(946_684_800_000));
        // before 1970: half away from zero, as numeric to bigint
        assert_eq!(
            pg_micros_to_unix_ms_rounded(-PG_EPOCH_UNIX_MICROS - 1500),
            Some(-2)
        );
        assert_eq!(
            pg_micros_to_unix_ms_rounded(-PG_EPOCH_UNIX_MICROS - 1499),
            Some(-1)
        );
        assert_eq!(pg_micros_to_unix_ms_rounded(i64::MAX), None);
        assert_eq!(pg_micros_to_unix_ms_floor(1500), Some(946_684_800_001));
        assert_eq!(pg_micros_to_unix_ms_ceil(1500), Some(946_684_800_002));
        assert_eq!(pg_micros_to_unix_ms_ceil(2000), Some(946_684_800_002));
        assert_eq!(
            pg_micros_to_unix_ms_floor(-PG_EPOCH_UNIX_MICROS - 1),
            Some(-1)
        );
        assert_eq!(pg_micros_to_unix_ms_floor(i64::MAX), None);
    }

    proptest! {
        #[test]
        fn ms_round_trip(ms in -10_000_000_000_000i64..10_000_000_000_000) {
            let us = unix_ms_to_pg_micros(ms).unwrap();
            prop_assert_eq!(pg_micros_to_unix_ms_floor(us), Some(ms));
            prop_assert_eq!(pg_micros_to_unix_ms_ceil(us), Some(ms));
        }

        #[test]
        fn floor_le_ceil(us in -1_000_000_000_000_000i64..1_000_000_000_000_000) {
            let f = pg_micros_to_unix_ms_floor(us).unwrap();
            let c = pg_micros_to_unix_ms_ceil(us).unwrap();
            prop_assert!(f <= c && c - f <= 1);
            prop_assert!(unix_ms_to_pg_micros(f).unwrap() <= us);
            prop_assert!(unix_ms_to_pg_micros(c).unwrap() >= us);
        }
    }
}
