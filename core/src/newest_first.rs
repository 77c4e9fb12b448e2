//! Which columns the data floor must read to know the newest id of them all, when some of them
//! are RANGE partitions on the id itself: a partition's rows all lie below its upper bound, so
//! once an id at least `upper - 1` is found, that partition (and every one bounded lower) cannot
//! hold a higher one. A table partitioned by day on its id (`shard_id_partition_bounds`) then
//! reads its newest partitions only, not every one of its thousands (issue 57).
//!
//! The rule is exact: a column is passed over only when every id it can hold is at most the
//! newest id already read, or above the bound the caller counts ids to (the data floor passes
//! over ids implausibly far ahead: a partition made years ahead cannot hold one that counts).
//! Columns with no upper bound (not partitions on the id, a default partition, an upper bound
//! of MAXVALUE, a partition whose bounds could not be read) are always read.

use std::cmp::Reverse;

/// What a partition's bounds say of the ids it holds: every one is at least `lower` and below
/// `upper` (`None`: unbounded on that side).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Range {
    pub lower: Option<i64>,
    pub upper: Option<i64>,
}

/// Reads `columns` (`range`: what bounds a column's ids, if anything) and returns the newest id
/// at most `at_most` among them, calling `read` for each column it must read (`read` gives the
/// newest id at most `at_most` of a column: `None` when none, or none it can tell, which the
/// caller records itself):
/// * a column whose lower bound is above `at_most` holds no id that counts: not read;
/// * every column without an upper bound is read;
/// * then those with one, from the highest upper bound down, until the newest id found is at
///   least the next one's upper bound minus one: none of the rest can hold a newer id.
pub fn newest_over<C>(
    columns: &[C],
    range: impl Fn(&C) -> Option<Range>,
    at_most: i64,
    mut read: impl FnMut(&C) -> Option<i64>,
) -> Option<i64> {
    let mut newest: Option<i64> = None;
    let mut bounded: Vec<(i64, &C)> = Vec::new();
    for column in columns {
        let range = range(column).unwrap_or_default();
        if range.lower.is_some_and(|lower| lower > at_most) {
            continue;
        }
        match range.upper {
            Some(upper) => bounded.push((upper, column)),
            None => newest = newest.max(read(column)),
        }
    }
    bounded.sort_by_key(|(upper, _)| Reverse(*upper));
    for (upper, column) in bounded {
        if newest.is_some_and(|n| n >= upper.saturating_sub(1)) {
            break; // (this one's ids, and every lower-bounded one's, are at most `newest`)
        }
        newest = newest.max(read(column));
    }
    newest
}

#[cfg(test)]
mod tests {
    use super::{newest_over, Range};
    use proptest::prelude::*;

    /// A column: what bounds it, and the ids it holds (within the bounds).
    type Col = (Option<Range>, Vec<i64>);

    fn upper(u: i64) -> Option<Range> {
        Some(Range {
            lower: None,
            upper: Some(u),
        })
    }

    /// The newest id at most `at_most`, and how many columns were read.
    fn run(columns: &[Col], at_most: i64) -> (Option<i64>, usize) {
        let mut reads = 0;
        let newest = newest_over(
            columns,
            |c| c.0,
            at_most,
            |c| {
                reads += 1;
                c.1.iter().copied().filter(|&id| id <= at_most).max()
            },
        );
        (newest, reads)
    }

    #[test]
    fn daily_partitions_read_from_the_newest_down() {
        // ten partitions of 100 ids each, the newest three empty (made ahead), one unbounded
        let mut columns: Vec<Col> = (0..10i64)
            .map(|d| {
                let range = Some(Range {
                    lower: Some(d * 100),
                    upper: Some((d + 1) * 100),
                });
                (
                    range,
                    if d < 7 {
                        vec![d * 100, d * 100 + 50]
                    } else {
                        vec![]
                    },
                )
            })
            .collect();
        columns.push((None, vec![30]));
        // the unbounded one, the three empty ones and the one holding 650; the next one's ids
        // are all below 600: not read, nor any below it
        assert_eq!(run(&columns, 10_000), (Some(650), 5));
        // partitions that begin past what counts are not read at all
        assert_eq!(run(&columns, 700), (Some(650), 3));
    }

    #[test]
    fn an_id_at_the_top_of_its_partition_stops_at_once() {
        let columns: Vec<Col> = vec![
            (upper(100), vec![99]),
            (upper(99), vec![98]),
            (upper(50), vec![1]),
        ];
        assert_eq!(run(&columns, i64::MAX), (Some(99), 1));
    }

    #[test]
    fn nothing_stored_reads_everything() {
        let columns: Vec<Col> = vec![(upper(100), vec![]), (upper(200), vec![]), (None, vec![])];
        assert_eq!(run(&columns, i64::MAX), (None, 3));
    }

    #[test]
    fn bounds_at_the_ends_of_bigint_do_not_overflow() {
        let columns: Vec<Col> = vec![
            (upper(i64::MIN), vec![]),
            (upper(i64::MAX), vec![i64::MAX - 1]),
        ];
        assert_eq!(run(&columns, i64::MAX), (Some(i64::MAX - 1), 1));
    }

    proptest! {
        /// The newest id at most `at_most` is the newest of every column's, however the bounds
        /// fall; and a column is passed over only when its bounds say it holds nothing newer
        /// that counts.
        #[test]
        fn finds_the_newest_of_all(spec in proptest::collection::vec(
            (proptest::option::of(-5i64..40), proptest::option::of(0i64..40), proptest::collection::vec(-5i64..50, 0..4)), 0..12),
            at_most in -5i64..60) {
            let columns: Vec<Col> = spec.into_iter()
                .map(|(lower, length, ids)| {
                    let upper = length.map(|l| lower.unwrap_or(-5) + l + 1);
                    let ids = ids.into_iter()
                        .map(|i| lower.map_or(i, |lo| i.max(lo)))
                        .map(|i| upper.map_or(i, |up| i.min(up - 1)))
                        .collect();
                    (Some(Range { lower, upper }), ids)
                })
                .collect();
            let truth = columns.iter().flat_map(|c| c.1.iter().copied()).filter(|&id| id <= at_most).max();
            let mut read = vec![false; columns.len()];
            let indexed: Vec<(usize, &Col)> = columns.iter().enumerate().collect();
            let newest = newest_over(&indexed, |(_, c)| c.0, at_most, |(i, c)| {
                read[*i] = true;
                c.1.iter().copied().filter(|&id| id <= at_most).max()
            });
            prop_assert_eq!(newest, truth);
            for (i, c) in columns.iter().enumerate() {
                if !read[i] {
                    let range = c.0.unwrap();
                    let passed_over = range.lower.is_some_and(|lo| lo > at_most)
                        || range.upper.is_some_and(|up| truth.is_some_and(|t| t >= up - 1));
                    prop_assert!(passed_over, "column {} not read: {:?}", i, c);
                }
            }
        }
    }
}
