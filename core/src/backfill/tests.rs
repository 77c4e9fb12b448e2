//! The reservation table against a model of a database: transactions that draw ids at past
//! milliseconds, store them in an index (or not yet), commit or abort; vacuum that removes dead
//! rows. The property: no id is ever handed out while an equal id is stored and alive, or held by
//! a running transaction that has not stored it yet.

use super::*;
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};

const SEQ: SlotKey = (1 << 32) | 16384;

fn key(shard: u16, ms: i64) -> MsKey {
    MsKey {
        sequence: SEQ,
        shard,
        ms,
    }
}

fn id(key: MsKey, r: u16) -> i64 {
    (key.ms << 23) | (i64::from(key.shard) << 10) | i64::from(r)
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Row {
    /// inserted by a running transaction, or committed
    Live,
    /// inserted by an aborted transaction (or deleted), not yet removed by vacuum
    Dead,
}

#[derive(Default)]
struct Model {
    next_xid: u64,
    /// running transactions and the ids each drew and has not stored yet
    running: BTreeMap<u64, Vec<i64>>,
    /// the index: id -> (row state, inserting transaction)
    index: BTreeMap<i64, (Row, u64)>,
    /// the milliseconds draws asked for or spilled into
    drawn_at: BTreeSet<(u16, i64)>,
}

impl Database for Model {
    type Error = ();
    fn stored(&mut self, key: MsKey) -> Result<Remainders, ()> {
        // a snapshot that sees every row not yet removable, as the extension's index read does
        Ok(self
            .index
            .range(id(key, 0)..=id(key, 1023))
            .map(|(id, _)| remainder_of(*id))
            .collect())
    }
    fn oldest_running(&mut self) -> u64 {
        self.running.keys().next().copied().unwrap_or(self.next_xid)
    }
}

impl Model {
    fn new() -> Self {
        Model {
            next_xid: 100,
            ..Default::default()
        }
    }
    /// Ids that must not be handed out again: alive in the index, or drawn by a running
    /// transaction and not stored yet.
    fn taken(&self) -> BTreeSet<i64> {
        let live = self.index.iter().filter(|(_, (row, _))| *row == Row::Live);
        live.map(|(id, _)| *id)
            .chain(self.running.values().flatten().copied())
            .collect()
    }
}

#[derive(Clone, Debug)]
enum Op {
    Begin,
    /// draw in the n-th running transaction
    Draw {
        tx: usize,
        shard: u16,
        ms: i64,
        start: u16,
    },
    /// store the oldest id the n-th running transaction drew
    Store {
        tx: usize,
    },
    Commit {
        tx: usize,
    },
    Abort {
        tx: usize,
    },
    /// a row written by something else than a draw (a copy, an explicit id), at a millisecond
    /// no draw has used yet: rows written by others *while* draws use their millisecond are not
    /// seen (the documented limit)
    Copy {
        shard: u16,
        ms: i64,
        r: u16,
    },
    Vacuum,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        1 => Just(Op::Begin),
        6 => (0..4usize, 0..2u16, 0..40i64, 0..3u16)
            .prop_map(|(tx, shard, ms, start)| Op::Draw { tx, shard, ms, start }),
        4 => (0..4usize).prop_map(|tx| Op::Store { tx }),
        1 => (0..4usize).prop_map(|tx| Op::Commit { tx }),
        1 => (0..4usize).prop_map(|tx| Op::Abort { tx }),
        1 => (0..2u16, 0..40i64, 0..3u16).prop_map(|(shard, ms, r)| Op::Copy { shard, ms, r }),
        1 => Just(Op::Vacuum),
    ]
}

/// Runs `ops` against a table of `N` entries; returns how many ids were drawn.
fn run<const N: usize>(ops: &[Op]) -> Result<usize, TestCaseError> {
    let table = Reservations::<N>::new_boxed();
    let mut db = Model::new();
    let mut drawn = 0;
    let nth = |db: &Model, n: usize| db.running.keys().nth(n % db.running.len().max(1)).copied();
    for op in ops {
        match *op {
            Op::Begin => {
                db.running.insert(db.next_xid, Vec::new());
                db.next_xid += 1;
            }
            Op::Draw {
                tx,
                shard,
                ms,
                start,
            } => {
                let Some(xid) = nth(&db, tx) else { continue };
                match draw(&*table, key(shard, ms), start, xid, 1_000, &mut db) {
                    Ok((ms, r)) => {
                        let new = id(key(shard, ms), r);
                        db.drawn_at
                            .extend((key(shard, ms).ms..=ms).map(|m| (shard, m)));
                        prop_assert!(!db.taken().contains(&new), "{new} handed out twice");
                        prop_assert!(ms >= key(shard, ms).ms);
                        db.running.get_mut(&xid).unwrap().push(new);
                        drawn += 1;
                    }
                    // a full bucket of unstored ids: refused, never a duplicate
                    Err(DrawError::NoRoom) => {}
                    Err(e) => return Err(TestCaseError::fail(format!("{e:?}"))),
                }
            }
            Op::Store { tx } => {
                let Some(xid) = nth(&db, tx) else { continue };
                let pending = db.running.get_mut(&xid).unwrap();
                if !pending.is_empty() {
                    let id = pending.remove(0);
                    db.index.insert(id, (Row::Live, xid));
                }
            }
            Op::Commit { tx } => {
                let Some(xid) = nth(&db, tx) else { continue };
                // a transaction stores what it draws before it commits (the documented use)
                for id in db.running.remove(&xid).unwrap() {
                    db.index.insert(id, (Row::Live, xid));
                }
            }
            Op::Abort { tx } => {
                let Some(xid) = nth(&db, tx) else { continue };
                db.running.remove(&xid);
                for (row, by) in db.index.values_mut() {
                    if *by == xid {
                        *row = Row::Dead;
                    }
                }
            }
            Op::Copy { shard, ms, r } => {
                let copied = id(key(shard, ms), r);
                // only where it is free: a copy of a duplicate is not the table's doing
                if !db.taken().contains(&copied) && !db.drawn_at.contains(&(shard, ms)) {
                    db.index.insert(copied, (Row::Live, 1));
                }
            }
            Op::Vacuum => db.index.retain(|_, (row, _)| *row == Row::Live),
        }
    }
    Ok(drawn)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    /// 16 entries (two buckets): evictions all the time.
    #[test]
    fn no_id_is_handed_out_twice_in_a_small_table(ops in prop::collection::vec(op(), 1..300)) {
        run::<16>(&ops)?;
    }

    #[test]
    fn no_id_is_handed_out_twice_in_a_single_bucket(ops in prop::collection::vec(op(), 1..300)) {
        run::<8>(&ops)?;
    }

    #[test]
    fn no_id_is_handed_out_twice_in_the_shared_size(ops in prop::collection::vec(op(), 1..300)) {
        run::<SHARED_ENTRIES>(&ops)?;
    }
}

#[test]
fn a_full_millisecond_spills_into_the_next() {
    let table = Reservations::<16>::new_boxed();
    let mut db = Model::new();
    for r in 0..1024 {
        db.index.insert(id(key(0, 5), r), (Row::Live, 1));
    }
    db.index.insert(id(key(0, 6), 7), (Row::Live, 1));
    assert_eq!(draw(&*table, key(0, 5), 7, 100, 10, &mut db), Ok((6, 8)));
    assert_eq!(
        draw(&*table, key(0, 5), 7, 100, 5, &mut db),
        Err(DrawError::PastLastMs)
    );
}

#[test]
fn one_transaction_draws_more_milliseconds_than_the_table_holds_when_it_stores_them() {
    let table = Reservations::<16>::new_boxed();
    let mut db = Model::new();
    db.running.insert(100, Vec::new());
    db.next_xid = 101;
    let mut ids = BTreeSet::new();
    for ms in 0..1_000 {
        let (ms, r) = draw(&*table, key(0, ms), 0, 100, 10_000, &mut db).unwrap();
        let new = id(key(0, ms), r);
        assert!(ids.insert(new));
        db.index.insert(new, (Row::Live, 100));
    }
    let (used, evictions) = table.usage();
    assert_eq!((used, evictions), (16, 1_000 - 16));
}

#[test]
fn unstored_ids_of_a_running_transaction_keep_their_entries() {
    let table = Reservations::<8>::new_boxed();
    let mut db = Model::new();
    db.running.insert(100, Vec::new());
    db.next_xid = 101;
    for ms in 0..8 {
        assert!(draw(&*table, key(0, ms), 0, 100, 10, &mut db).is_ok());
    }
    // none stored: the ninth millisecond finds no room, rather than forgetting one of them
    assert_eq!(
        draw(&*table, key(0, 8), 0, 100, 10, &mut db),
        Err(DrawError::NoRoom)
    );
    // once the transaction ended, its entries may go
    db.running.clear();
    db.next_xid = 102;
    assert!(draw(&*table, key(0, 8), 0, 101, 10, &mut db).is_ok());
}

#[test]
fn remainders_wrap_and_spill() {
    let set: Remainders = (1000..1024).chain(0..3).collect();
    assert_eq!(set.first_free_from(1010), Some(3));
    assert_eq!(set.first_free_from(5), Some(5));
    assert_eq!(set.len(), 27);
    let full: Remainders = (0..1024).collect();
    assert_eq!(full.first_free_from(0), None);
    assert!(set.is_subset_of(&full) && !full.is_subset_of(&set));
}

#[test]
fn transaction_ids_widen_across_an_epoch() {
    assert_eq!(widen_xid(1000, 990), 990);
    assert_eq!(widen_xid(1000, 1000), 1000);
    // the next id is past a wraparound, the oldest running one before it
    let next = (3u64 << 32) | 5;
    assert_eq!(
        widen_xid(next, u32::MAX - 1),
        (2u64 << 32) | u64::from(u32::MAX - 1)
    );
}

#[test]
fn two_calls_filling_at_once_do_not_evict_each_others_entry() {
    // one bucket: seven entries of a running transaction whose ids are stored, then two calls
    // that each claim an entry and read the index before filling it
    let table = Reservations::<8>::new_boxed();
    let mut db = Model::new();
    db.running.insert(100, Vec::new());
    db.next_xid = 101;
    for ms in 0..7 {
        let (ms, r) = draw(&*table, key(0, ms), 0, 100, 100, &mut db).unwrap();
        db.index.insert(id(key(0, ms), r), (Row::Live, 100));
    }
    let (a, b) = (key(0, 50), key(0, 51));
    let Step::Fill(ticket_a) = table.reserve(a, 0, 100, None) else {
        panic!("a claims")
    };
    // b's claim must not take a's entry, which is being filled: a stored one goes instead
    let oldest = db.oldest_running();
    let step_b = table.reserve(b, 0, 100, Some(oldest));
    let Step::NoRoom(held) = step_b else {
        panic!("b finds no free entry: {step_b:?}")
    };
    assert_ne!(
        held.last().unwrap().1,
        key(0, 6),
        "the entry being filled is tried last"
    );
    assert_eq!(held.last().unwrap().1, a);
    let (t0, k0) = held[0];
    assert!(table.evict_if_stored(t0, k0, &db.stored(k0).unwrap()));
    assert!(matches!(
        table.reserve(b, 0, 100, Some(oldest)),
        Step::Fill(_)
    ));
    assert!(
        table.fill(ticket_a, a, &db.stored(a).unwrap()),
        "a's entry is still a's"
    );
}
