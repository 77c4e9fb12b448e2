//! The reservation table against a model of a database: transactions that draw ids at past
//! milliseconds, store them in an index (or not yet), commit or abort; vacuum that removes dead
//! rows. The property: no id is ever handed out while an equal id is stored and alive, or held by
//! a running transaction that has not stored it yet.

use super::*;
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};

const SEQ: SlotKey = (1 << 32) | 16384;

/// Transaction 100, outside any savepoint.
const T100: Taker = Taker {
    top: 100,
    level: Some(100),
};

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
    /// inserted by a running (sub)transaction, or committed
    Live,
    /// inserted by an aborted (sub)transaction (or deleted), not yet removed by vacuum
    Dead,
}

/// A running transaction: the ids it drew and has not stored yet (each with the
/// (sub)transaction that drew it), its open savepoint and every (sub)transaction id it used.
#[derive(Default)]
struct Tx {
    pending: Vec<(i64, u64)>,
    savepoint: Option<u64>,
    levels: Vec<u64>,
}

impl Tx {
    fn level(&self, top: u64) -> u64 {
        self.savepoint.unwrap_or(top)
    }
}

/// A row of the index: its state, the (sub)transaction that inserted it and the one that drew
/// its id.
#[derive(Clone, Copy, Debug)]
struct Stored {
    row: Row,
    xmin: u64,
    drawn_in: u64,
}

impl Stored {
    fn committed(row: Row) -> Self {
        Stored {
            row,
            xmin: 1,
            drawn_in: 1,
        }
    }
}

#[derive(Default)]
struct Model {
    next_xid: u64,
    /// running transactions by top-level id
    running: BTreeMap<u64, Tx>,
    /// the index: id -> its row
    index: BTreeMap<i64, Stored>,
    /// the milliseconds draws asked for or spilled into
    drawn_at: BTreeSet<(u16, i64)>,
    /// what [`Database::kept`] counts: `false` makes it count every entry, as the eviction did
    /// before the 27th review (the property test then finds the repeat)
    kept_is_stored: bool,
    /// the transaction that draws now (it tells its own released savepoints from open ones)
    caller: Option<u64>,
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
    fn kept(&mut self, key: MsKey, drawn_in: Option<u64>) -> Result<Remainders, ()> {
        if self.kept_is_stored {
            return self.stored(key);
        }
        let running_sub = |x: u64| {
            self.running
                .iter()
                .any(|(top, tx)| *top != x && tx.levels.contains(&x))
        };
        // the caller's own savepoints, released into its top level: their rows go only with it
        let own_released = |x: u64| {
            self.caller.is_some_and(|top| {
                let tx = &self.running[&top];
                x != top && tx.levels.contains(&x) && tx.savepoint != Some(x)
            })
        };
        Ok(self
            .index
            .range(id(key, 0)..=id(key, 1023))
            .filter(|(_, s)| {
                s.row == Row::Live
                    && (self.running.contains_key(&s.xmin)
                        || Some(s.xmin) == drawn_in
                        || own_released(s.xmin)
                        || !running_sub(s.xmin))
            })
            .map(|(id, _)| remainder_of(*id))
            .collect())
    }
    fn has_ended(&mut self, top: u64) -> bool {
        !self.running.contains_key(&top)
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
    fn begin(&mut self) -> u64 {
        let xid = self.next_xid;
        self.next_xid += 1;
        self.running.insert(
            xid,
            Tx {
                levels: vec![xid],
                ..Tx::default()
            },
        );
        xid
    }
    /// Ids that must not be handed out again: alive in the index, or drawn by a running
    /// transaction and not stored yet.
    fn taken(&self) -> BTreeSet<i64> {
        let live = self.index.iter().filter(|(_, s)| s.row == Row::Live);
        live.map(|(id, _)| *id)
            .chain(
                self.running
                    .values()
                    .flat_map(|tx| tx.pending.iter().map(|p| p.0)),
            )
            .collect()
    }
    /// Opens a savepoint in running transaction `top`: its new (sub)transaction id.
    fn savepoint(&mut self, top: u64) -> u64 {
        let sub = self.next_xid;
        self.next_xid += 1;
        let tx = self.running.get_mut(&top).unwrap();
        tx.levels.push(sub);
        tx.savepoint = Some(sub);
        sub
    }
    /// Stores `id`, drawn in (sub)transaction `drawn_in`, in a row inserted by `xmin`.
    fn store(&mut self, id: i64, xmin: u64, drawn_in: u64) {
        let row = Row::Live;
        self.index.insert(
            id,
            Stored {
                row,
                xmin,
                drawn_in,
            },
        );
    }
    /// Marks dead every row inserted by one of `xids`; returns their ids and drawing levels.
    fn kill(&mut self, xids: &[u64]) -> Vec<(i64, u64)> {
        let mut killed = Vec::new();
        for (id, s) in self.index.iter_mut() {
            if s.row == Row::Live && xids.contains(&s.xmin) {
                s.row = Row::Dead;
                killed.push((*id, s.drawn_in));
            }
        }
        killed
    }
}

#[derive(Clone, Debug)]
enum Op {
    Begin,
    /// draw in the n-th running transaction (in its savepoint, if open: one that has an id of
    /// its own already when `named`)
    Draw {
        tx: usize,
        shard: u16,
        ms: i64,
        start: u16,
        named: bool,
    },
    /// store the oldest id the n-th running transaction drew
    Store {
        tx: usize,
    },
    /// open a savepoint in the n-th running transaction (none open yet)
    Savepoint {
        tx: usize,
    },
    /// roll back to its savepoint: the rows stored in it die, the ids drawn in it are void (the
    /// documented rule), ids drawn before it and stored in it are pending again
    RollbackTo {
        tx: usize,
    },
    Release {
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
        6 => (0..4usize, 0..2u16, 0..40i64, 0..3u16, any::<bool>())
            .prop_map(|(tx, shard, ms, start, named)| Op::Draw { tx, shard, ms, start, named }),
        4 => (0..4usize).prop_map(|tx| Op::Store { tx }),
        1 => (0..4usize).prop_map(|tx| Op::Savepoint { tx }),
        1 => (0..4usize).prop_map(|tx| Op::RollbackTo { tx }),
        1 => (0..4usize).prop_map(|tx| Op::Release { tx }),
        1 => (0..4usize).prop_map(|tx| Op::Commit { tx }),
        1 => (0..4usize).prop_map(|tx| Op::Abort { tx }),
        1 => (0..2u16, 0..40i64, 0..3u16).prop_map(|(shard, ms, r)| Op::Copy { shard, ms, r }),
        1 => Just(Op::Vacuum),
    ]
}

/// Runs `ops` against a table of `N` entries; returns how many ids were drawn.
fn run<const N: usize>(ops: &[Op], kept_is_stored: bool) -> Result<usize, TestCaseError> {
    let table = Reservations::<N>::new_boxed();
    let mut db = Model {
        kept_is_stored,
        ..Model::new()
    };
    let mut drawn = 0;
    let nth = |db: &Model, n: usize| db.running.keys().nth(n % db.running.len().max(1)).copied();
    for op in ops {
        match *op {
            Op::Begin => {
                db.begin();
            }
            Op::Draw {
                tx,
                shard,
                ms,
                start,
                named,
            } => {
                let Some(xid) = nth(&db, tx) else { continue };
                let level = db.running[&xid].level(xid);
                let named = named || level == xid;
                let taker = Taker {
                    top: xid,
                    level: named.then_some(level),
                };
                db.caller = Some(xid);
                let drawn_now = draw(&*table, key(shard, ms), start, taker, 1_000, &mut db);
                db.caller = None;
                match drawn_now {
                    Ok((ms, r)) => {
                        let new = id(key(shard, ms), r);
                        db.drawn_at
                            .extend((key(shard, ms).ms..=ms).map(|m| (shard, m)));
                        prop_assert!(!db.taken().contains(&new), "{new} handed out twice");
                        prop_assert!(ms >= key(shard, ms).ms);
                        db.running.get_mut(&xid).unwrap().pending.push((new, level));
                        drawn += 1;
                    }
                    // a full bucket of unstored ids: refused, never a duplicate
                    Err(DrawError::NoRoom) => {}
                    Err(e) => return Err(TestCaseError::fail(format!("{e:?}"))),
                }
            }
            Op::Store { tx } => {
                let Some(xid) = nth(&db, tx) else { continue };
                let t = db.running.get_mut(&xid).unwrap();
                let xmin = t.level(xid);
                if !t.pending.is_empty() {
                    let (id, drawn_in) = t.pending.remove(0);
                    db.store(id, xmin, drawn_in);
                }
            }
            Op::Savepoint { tx } => {
                let Some(xid) = nth(&db, tx) else { continue };
                if db.running[&xid].savepoint.is_none() {
                    db.savepoint(xid);
                }
            }
            Op::RollbackTo { tx } => {
                let Some(xid) = nth(&db, tx) else { continue };
                let Some(sub) = db.running[&xid].savepoint else {
                    continue;
                };
                let killed = db.kill(&[sub]);
                let t = db.running.get_mut(&xid).unwrap();
                t.savepoint = None;
                t.levels.retain(|&l| l != sub);
                t.pending.retain(|&(_, drawn_in)| drawn_in != sub);
                t.pending
                    .extend(killed.into_iter().filter(|&(_, d)| d != sub));
            }
            Op::Release { tx } => {
                let Some(xid) = nth(&db, tx) else { continue };
                db.running.get_mut(&xid).unwrap().savepoint = None;
            }
            Op::Commit { tx } => {
                let Some(xid) = nth(&db, tx) else { continue };
                // a transaction stores what it draws before it commits (the documented use)
                let t = db.running.remove(&xid).unwrap();
                for (id, drawn_in) in t.pending {
                    db.store(id, t.savepoint.unwrap_or(xid), drawn_in);
                }
            }
            Op::Abort { tx } => {
                let Some(xid) = nth(&db, tx) else { continue };
                let t = db.running.remove(&xid).unwrap();
                db.kill(&t.levels);
            }
            Op::Copy { shard, ms, r } => {
                let copied = id(key(shard, ms), r);
                // only where it is free: a copy of a duplicate is not the table's doing
                if !db.taken().contains(&copied) && !db.drawn_at.contains(&(shard, ms)) {
                    db.index.insert(copied, Stored::committed(Row::Live));
                }
            }
            Op::Vacuum => db.index.retain(|_, s| s.row == Row::Live),
        }
    }
    Ok(drawn)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    /// 16 entries (two buckets): evictions all the time.
    #[test]
    fn no_id_is_handed_out_twice_in_a_small_table(ops in prop::collection::vec(op(), 1..300)) {
        run::<16>(&ops, false)?;
    }

    #[test]
    fn no_id_is_handed_out_twice_in_a_single_bucket(ops in prop::collection::vec(op(), 1..300)) {
        run::<8>(&ops, false)?;
    }

    #[test]
    fn no_id_is_handed_out_twice_in_the_shared_size(ops in prop::collection::vec(op(), 1..300)) {
        run::<SHARED_ENTRIES>(&ops, false)?;
    }
}

#[test]
fn a_full_millisecond_spills_into_the_next() {
    let table = Reservations::<16>::new_boxed();
    let mut db = Model::new();
    for r in 0..1024 {
        db.index
            .insert(id(key(0, 5), r), Stored::committed(Row::Live));
    }
    db.index
        .insert(id(key(0, 6), 7), Stored::committed(Row::Live));
    assert_eq!(draw(&*table, key(0, 5), 7, T100, 10, &mut db), Ok((6, 8)));
    assert_eq!(
        draw(&*table, key(0, 5), 7, T100, 5, &mut db),
        Err(DrawError::PastLastMs)
    );
}

#[test]
fn one_transaction_draws_more_milliseconds_than_the_table_holds_when_it_stores_them() {
    let table = Reservations::<16>::new_boxed();
    let mut db = Model::new();
    db.begin();
    let mut ids = BTreeSet::new();
    for ms in 0..1_000 {
        let (ms, r) = draw(&*table, key(0, ms), 0, T100, 10_000, &mut db).unwrap();
        let new = id(key(0, ms), r);
        assert!(ids.insert(new));
        db.store(new, 100, 100);
    }
    let (used, evictions) = table.usage();
    assert_eq!((used, evictions), (16, 1_000 - 16));
}

#[test]
fn unstored_ids_of_a_running_transaction_keep_their_entries() {
    let table = Reservations::<8>::new_boxed();
    let mut db = Model::new();
    db.begin();
    for ms in 0..8 {
        assert!(draw(&*table, key(0, ms), 0, T100, 10, &mut db).is_ok());
    }
    // none stored: the ninth millisecond finds no room, rather than forgetting one of them
    assert_eq!(
        draw(&*table, key(0, 8), 0, T100, 10, &mut db),
        Err(DrawError::NoRoom)
    );
    // once the transaction ended, its entries may go
    db.running.clear();
    db.next_xid = 102;
    assert!(draw(
        &*table,
        key(0, 8),
        0,
        Taker {
            top: 101,
            level: Some(101)
        },
        10,
        &mut db
    )
    .is_ok());
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
    db.begin();
    for ms in 0..7 {
        let (ms, r) = draw(&*table, key(0, ms), 0, T100, 100, &mut db).unwrap();
        db.store(id(key(0, ms), r), 100, 100);
    }
    let (a, b) = (key(0, 50), key(0, 51));
    let Step::Fill(ticket_a) = table.reserve(a, 0, T100, None, &[]) else {
        panic!("a claims")
    };
    // b's claim must not take a's entry, which is being filled: a stored one goes instead
    let oldest = db.oldest_running();
    let step_b = table.reserve(b, 0, T100, Some(oldest), &[]);
    let Step::NoRoom(held) = step_b else {
        panic!("b finds no free entry: {step_b:?}")
    };
    assert_ne!(
        held.last().unwrap().key,
        key(0, 6),
        "the entry being filled is tried last"
    );
    assert_eq!(held.last().unwrap().key, a);
    let h = held[0];
    assert!(table.evict_if_kept(h.ticket, h.key, &db.kept(h.key, h.drawn_in).unwrap()));
    assert!(matches!(
        table.reserve(b, 0, T100, Some(oldest), &[]),
        Step::Fill(_)
    ));
    assert!(
        table.fill(ticket_a, a, &db.stored(a).unwrap()),
        "a's entry is still a's"
    );
}

/// The 27th review: a backfill stores its ids inside a savepoint, another backfill needs room,
/// the savepoint is rolled back and its rows vacuumed, a third backfill draws, the first stores
/// its ids again. The rows of the open savepoint must not free the entry.
#[test]
fn rows_of_an_open_savepoint_do_not_free_their_entries() {
    for kept_is_stored in [false, true] {
        let table = Reservations::<8>::new_boxed();
        let mut db = Model {
            kept_is_stored,
            ..Model::new()
        };
        let t1 = db.begin();
        let taker = Taker {
            top: t1,
            level: Some(t1),
        };
        let drawn: Vec<i64> = (0..8)
            .map(|ms| {
                let (ms, r) = draw(&*table, key(0, ms), 0, taker, 100, &mut db).unwrap();
                id(key(0, ms), r)
            })
            .collect();
        let sub = db.savepoint(t1);
        for &new in &drawn {
            db.store(new, sub, t1);
        }
        let t2 = db.begin();
        let other = draw(
            &*table,
            key(0, 50),
            0,
            Taker {
                top: t2,
                level: Some(t2),
            },
            100,
            &mut db,
        );
        if kept_is_stored {
            // the old eviction: t2 took t1's least recently used entry; rolled back to the
            // savepoint and vacuumed, the index forgets t1's id, and a third draw repeats it
            let (ms, r) = other.unwrap();
            db.store(id(key(0, ms), r), t2, t2);
            db.kill(&[sub]);
            db.index.retain(|_, s| s.row == Row::Live);
            db.running
                .get_mut(&t1)
                .unwrap()
                .pending
                .extend(drawn.iter().map(|&d| (d, t1)));
            let t3 = db.begin();
            let (ms, r) = draw(
                &*table,
                key(0, 0),
                0,
                Taker {
                    top: t3,
                    level: Some(t3),
                },
                100,
                &mut db,
            )
            .unwrap();
            assert!(
                db.taken().contains(&id(key(0, ms), r)),
                "the model sees the repeat"
            );
            continue;
        }
        assert_eq!(other, Err(DrawError::NoRoom), "t1's ids are not kept yet");
        // once t1 ended, a savepoint that draws and stores its ids itself (a conversion's
        // batch) draws more milliseconds than the table holds: its own rows free its entries
        db.running.remove(&t1);
        db.kill(&[t1, sub]);
        let t3 = db.begin();
        let sub3 = db.savepoint(t3);
        for ms in 100..120 {
            let taker = Taker {
                top: t3,
                level: Some(sub3),
            };
            let (ms, r) = draw(&*table, key(0, ms), 0, taker, 1_000, &mut db).unwrap();
            db.store(id(key(0, ms), r), sub3, sub3);
        }
        // ids drawn outside the savepoint and stored in it do not free their entries
        let t4 = db.begin();
        let sub4 = db.savepoint(t4);
        let mut refused = false;
        for ms in 200..220 {
            let taker = Taker {
                top: t4,
                level: Some(t4),
            };
            match draw(&*table, key(0, ms), 0, taker, 1_000, &mut db) {
                Ok((ms, r)) => {
                    db.store(id(key(0, ms), r), sub4, t4);
                }
                Err(e) => {
                    assert_eq!(e, DrawError::NoRoom);
                    refused = true;
                    break;
                }
            }
        }
        assert!(refused, "t4's rows in its savepoint keep its entries");
    }
}

/// The review of the savepoint fix: a conversion's batches, each a transaction whose batch runs
/// in a subtransaction (plpgsql's EXCEPTION block), draw again from milliseconds earlier batches
/// drew from; and one transaction draws each row in a savepoint of its own, released (psql's
/// ON_ERROR_ROLLBACK, a plpgsql block per row). Neither is refused.
#[test]
fn later_batches_and_savepoints_per_row_draw_again_from_the_same_milliseconds() {
    let table = Reservations::<SHARED_ENTRIES>::new_boxed();
    let mut db = Model::new();
    let mut rng = 12345u64;
    let mut next_ms = || {
        rng = rng
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((rng >> 33) % 5_000) as i64
    };
    // an older transaction left open meanwhile, in any database (the second review of the fix:
    // the oldest running transaction then stays below every batch's)
    let idle = db.begin();
    for _batch in 0..4 {
        let top = db.begin();
        let sub = db.savepoint(top);
        for _row in 0..10_000 {
            // (the batch's first draw comes before its first row is written: no id yet)
            let level = db.index.values().any(|s| s.xmin == sub).then_some(sub);
            db.caller = Some(top);
            let (ms, r) = draw(
                &*table,
                key(0, next_ms()),
                0,
                Taker { top, level },
                10_000,
                &mut db,
            )
            .expect("a batch is not refused");
            db.caller = None;
            db.store(id(key(0, ms), r), sub, sub);
        }
        db.running.remove(&top);
    }
    let top = db.begin();
    for _row in 0..20_000 {
        let sub = db.savepoint(top);
        db.caller = Some(top);
        let (ms, r) = draw(
            &*table,
            key(1, next_ms()),
            0,
            Taker { top, level: None },
            10_000,
            &mut db,
        )
        .expect("a savepoint per row is not refused");
        db.caller = None;
        db.store(id(key(1, ms), r), sub, sub);
        db.running.get_mut(&top).unwrap().savepoint = None;
    }
    db.running.remove(&idle);
}

/// The third review of the savepoint fix: a transaction that drew (and stored) ids for every
/// entry of the table aborts while an older transaction is left open elsewhere; its entries
/// protect nothing any more, and another transaction's draw is not refused.
#[test]
fn the_entries_of_an_aborted_transaction_go_while_an_older_one_stays_open() {
    let table = Reservations::<SHARED_ENTRIES>::new_boxed();
    let mut db = Model::new();
    let idle = db.begin();
    let aborted = db.begin();
    for ms in 0..6_000 {
        let taker = Taker {
            top: aborted,
            level: Some(aborted),
        };
        let (ms, r) = draw(&*table, key(0, ms), 0, taker, 100_000, &mut db).unwrap();
        db.store(id(key(0, ms), r), aborted, aborted);
    }
    let gone = db.running.remove(&aborted).unwrap();
    db.kill(&gone.levels);
    let later = db.begin();
    for ms in 10_000..10_100 {
        let taker = Taker {
            top: later,
            level: None,
        };
        draw(&*table, key(0, ms), 0, taker, 100_000, &mut db).expect("not refused");
    }
    db.running.remove(&idle);
}
