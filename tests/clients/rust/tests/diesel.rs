//! Diesel 2 (postgres backend over libpq) with a next_shard_id DEFAULT, the schema made by
//! diesel_migrations' embedded migrations (migrations/diesel, plain SQL).
//!
//! `diesel print-schema` would write the `table!` below from the database: `id -> Int8` and
//! nothing about the DEFAULT or the sequence (Diesel's schema has no defaults); the DEFAULT lives
//! only in the migration's SQL, which is why the migration must be written by hand.
use diesel::debug_query;
use diesel::pg::Pg;
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Integer, Jsonb, Text, Timestamptz};
use diesel_migrations::{embed_migrations, EmbeddedMigrations, MigrationHarness};
use pg_shard_id_client_tests::*;
use std::sync::Mutex;

const T: &str = "diesel_photos";
const MIGRATIONS: EmbeddedMigrations = embed_migrations!("migrations/diesel");

diesel::table! {
    diesel_photos (id) {
        id -> Int8,
        note -> Text,
    }
}
use diesel_photos::dsl::diesel_photos as photos;
use diesel_photos::{id as col_id, note as col_note};

/// What the application inserts: no id field at all, so Diesel leaves the column out.
#[derive(Insertable)]
#[diesel(table_name = diesel_photos)]
struct NewPhoto<'a> {
    note: &'a str,
}

/// The pitfall shape: an Option<i64> id is sent as DEFAULT when None (works, but names the id).
#[derive(Insertable)]
#[diesel(table_name = diesel_photos)]
struct NewPhotoWithId<'a> {
    id: Option<i64>,
    note: &'a str,
}

#[derive(Queryable, Selectable, Debug, PartialEq)]
#[diesel(table_name = diesel_photos)]
struct Photo {
    id: i64,
    note: String,
}

diesel::define_sql_function! { fn shard_id_extract_shard(x: BigInt) -> Integer; }
diesel::define_sql_function! { fn shard_id_extract_timestamp(x: BigInt) -> Timestamptz; }
diesel::define_sql_function! { fn shard_id_lower_bound(ts: Timestamptz) -> BigInt; }
diesel::define_sql_function! { fn shard_id_to_jsonb(x: BigInt) -> Jsonb; }
diesel::define_sql_function! { fn shard_id_mask(x: BigInt, tweak: Text) -> BigInt; }
diesel::define_sql_function! { fn shard_id_unmask(masked: BigInt, tweak: Text) -> BigInt; }
diesel::define_sql_function! { fn shard_id_mask_shortcode(x: BigInt, tweak: Text) -> Text; }
diesel::define_sql_function! { fn shard_id_unmask_shortcode(code: Text, tweak: Text) -> BigInt; }

#[derive(QueryableByName)]
struct IdText {
    #[diesel(sql_type = Text)]
    id: String,
}

#[derive(QueryableByName)]
struct PlanLine {
    #[diesel(sql_type = Text, column_name = "QUERY PLAN")]
    line: String,
}

#[derive(QueryableByName)]
struct Decoded {
    #[diesel(sql_type = Integer)]
    shard: i32,
    #[diesel(sql_type = Integer)]
    seq: i32,
    #[diesel(sql_type = BigInt)]
    ms: i64,
}

static MIGRATE: Mutex<()> = Mutex::new(()); // diesel_migrations takes no lock of its own

fn migrated() -> PgConnection {
    let mut c = PgConnection::establish(&conninfo()).expect("connect");
    let _one_at_a_time = MIGRATE.lock().unwrap_or_else(|e| e.into_inner());
    c.run_pending_migrations(MIGRATIONS).expect("migrate");
    c
}

fn server_ids(c: &mut PgConnection, like: &str) -> Vec<i64> {
    diesel::sql_query(format!("SELECT id::text AS id FROM {T} WHERE note LIKE $1 ORDER BY id"))
        .bind::<Text, _>(like)
        .load::<IdText>(c)
        .unwrap()
        .iter()
        .map(|r| r.id.parse().unwrap())
        .collect()
}

#[test]
fn migrations_make_the_sequence_and_the_default() {
    let mut c = migrated();
    assert!(!c.has_pending_migration(MIGRATIONS).unwrap(), "a second run has nothing to do");
    #[derive(QueryableByName)]
    struct Col {
        #[diesel(sql_type = Text)]
        ty: String,
        #[diesel(sql_type = Text)]
        def: String,
    }
    let col: Col = diesel::sql_query(
        "SELECT format_type(a.atttypid, a.atttypmod) AS ty, pg_get_expr(d.adbin, d.adrelid) AS def \
         FROM pg_attribute a JOIN pg_attrdef d ON (d.adrelid, d.adnum) = (a.attrelid, a.attnum) \
         WHERE a.attrelid = 'diesel_photos'::regclass AND a.attname = 'id'")
        .get_result(&mut c)
        .unwrap();
    assert_eq!(col.ty, "bigint");
    assert_eq!(col.def, "next_shard_id('diesel_photos_id_seq'::regclass, 8)");
}

#[test]
fn single_and_batch_inserts_read_the_id_back() {
    let mut c = migrated();
    let one: i64 = diesel::insert_into(photos).values(&NewPhoto { note: "single" }).returning(col_id).get_result(&mut c).unwrap();
    assert!(one > 1 << 53);
    assert_eq!(server_ids(&mut c, "single"), vec![one], "RETURNING id = SELECT id::text");
    let row: Photo = diesel::insert_into(photos).values(&NewPhoto { note: "single2" })
        .returning(Photo::as_returning()).get_result(&mut c).unwrap();
    assert_eq!(server_ids(&mut c, "single2"), vec![row.id]);
    // batch: one multi-row INSERT ... VALUES (...), (...) RETURNING id
    let notes: Vec<String> = (0..500).map(|i| format!("b{i}")).collect();
    let rows: Vec<NewPhoto> = notes.iter().map(|n| NewPhoto { note: n }).collect();
    let mut got: Vec<i64> = diesel::insert_into(photos).values(&rows).returning(col_id).get_results(&mut c).unwrap();
    got.sort();
    got.dedup();
    assert_eq!(got.len(), 500);
    assert_eq!(got, server_ids(&mut c, "b%"), "batch: RETURNING = SELECT id::text");
    let shards: Vec<i32> = photos.select(shard_id_extract_shard(col_id)).distinct().load(&mut c).unwrap();
    assert_eq!(shards, vec![8]);
    // the Option<i64> shape: None becomes DEFAULT, and the INSERT names the id column (not run here)
    let sql = debug_query::<Pg, _>(&diesel::insert_into(photos).values(&NewPhotoWithId { id: None, note: "x" })).to_string();
    assert!(sql.starts_with(r#"INSERT INTO "diesel_photos" ("id", "note") VALUES (DEFAULT, $1)"#), "{sql}");
    // 5: none of the INSERTs that ran named the id column
    assert_no_client_ids(T, 3);
}

#[test]
fn ids_round_trip_through_json_and_masks() {
    let mut c = migrated();
    let rows: Vec<NewPhoto> = (0..50).map(|_| NewPhoto { note: "json" }).collect();
    let ids: Vec<i64> = diesel::insert_into(photos).values(&rows).returning(col_id).get_results(&mut c).unwrap();
    let docs = serde_json::to_string(&ids.iter().map(|i| serde_json::json!({ "id": i.to_string(), "n": i })).collect::<Vec<_>>()).unwrap();
    let parsed: Vec<serde_json::Value> = serde_json::from_str(&docs).unwrap();
    let mut lost_by_f64 = 0;
    for (v, &want) in parsed.iter().zip(&ids) {
        assert_eq!(v["id"].as_str().unwrap().parse::<i64>().unwrap(), want);
        assert_eq!(v["n"].as_i64(), Some(want));
        lost_by_f64 += (v["n"].as_f64().unwrap() as i64 != want) as i32;
    }
    assert!(lost_by_f64 > 0, "read as f64 (JavaScript), ids lose digits");
    let first: i64 = parsed[0]["id"].as_str().unwrap().parse().unwrap();
    let found: Photo = photos.find(first).select(Photo::as_select()).first(&mut c).unwrap();
    assert_eq!(found, Photo { id: ids[0], note: "json".into() }, "lookup by the id parsed from JSON");
    // shard_id_to_jsonb through Diesel's Jsonb (serde_json feature)
    let one: serde_json::Value = photos.find(first).select(shard_id_to_jsonb(col_id)).first(&mut c).unwrap();
    assert_eq!(one, serde_json::Value::String(first.to_string()));
    let row: serde_json::Value = photos.find(first).select(diesel::dsl::sql::<Jsonb>("shard_id_to_jsonb(diesel_photos)")).first(&mut c).unwrap();
    assert_eq!(row, serde_json::json!({ "id": first.to_string(), "note": "json" }));
    // masked forms
    let (code, masked): (String, i64) = photos.find(first)
        .select((shard_id_mask_shortcode(col_id, "photos"), shard_id_mask(col_id, "photos")))
        .first(&mut c).unwrap();
    assert_eq!(code.len(), 12, "{code}");
    assert_ne!(masked, first);
    let url: serde_json::Value = serde_json::from_str(&serde_json::json!({ "url": code }).to_string()).unwrap();
    let by_code: Photo = photos.filter(col_id.eq(shard_id_unmask_shortcode(url["url"].as_str().unwrap(), "photos")))
        .select(Photo::as_select()).first(&mut c).unwrap();
    assert_eq!(by_code.id, first, "the masked shortcode finds the row");
    let back: i64 = diesel::select(shard_id_unmask(masked, "photos")).get_result(&mut c).unwrap();
    assert_eq!(back, first);
}

#[test]
fn decode_and_a_time_range_use_the_primary_key() {
    let mut c = migrated();
    let rows: Vec<NewPhoto> = (0..20).map(|_| NewPhoto { note: "range" }).collect();
    let ids: Vec<i64> = diesel::insert_into(photos).values(&rows).returning(col_id).get_results(&mut c).unwrap();
    let first = *ids.iter().min().unwrap();
    let d: Decoded = diesel::sql_query(
        "SELECT shard, seq, CAST(extract(epoch FROM ts - (SELECT epoch FROM pg_shard_id_info())) * 1000 AS bigint) AS ms \
         FROM shard_id_decode($1)").bind::<BigInt, _>(first).get_result(&mut c).unwrap();
    assert_eq!(d.shard, 8);
    assert_eq!(d.shard as i64, shard_of(first));
    assert_eq!(d.seq as i64, seq_of(first));
    assert_eq!(d.ms, ms_of(first));
    // the table is tiny: without this the planner rightly prefers a sequential scan
    diesel::sql_query("SET enable_seqscan = off").execute(&mut c).unwrap();
    let query = photos.filter(col_note.eq("range")).filter(col_id.ge(shard_id_lower_bound(shard_id_extract_timestamp(first)))).count();
    let plan: Vec<PlanLine> = diesel::sql_query(format!(
        "EXPLAIN SELECT count(*) FROM {T} WHERE note = 'range' AND id >= shard_id_lower_bound(shard_id_extract_timestamp($1))"))
        .bind::<BigInt, _>(first).load(&mut c).unwrap();
    let plan = plan.iter().map(|l| l.line.as_str()).collect::<Vec<_>>().join("\n");
    assert!(uses_pkey(&plan, T), "{plan}");
    let n: i64 = query.get_result(&mut c).unwrap();
    assert_eq!(n, 20, "the DSL's range query finds them");
    diesel::sql_query("RESET enable_seqscan").execute(&mut c).unwrap();
}
