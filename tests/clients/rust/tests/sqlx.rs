//! sqlx (postgres, runtime-tokio, no TLS, no compile-time macros) with a next_shard_id DEFAULT.
//! Queries are checked at run time (`sqlx::query*`), so no DATABASE_URL is needed to build.
use pg_shard_id_client_tests::*;
use sqlx::postgres::{PgConnectOptions, PgConnection};
use sqlx::{Connection, QueryBuilder, Row};

const T: &str = "sqlx_photos";

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(f)
}

/// A connection from PGHOST/PGPORT/PGUSER/PGDATABASE (PgConnectOptions::new reads them), with
/// the schema made by sqlx's migrator (it takes an advisory lock: the tests run it concurrently).
async fn migrated() -> PgConnection {
    let mut c = PgConnection::connect_with(&PgConnectOptions::new()).await.expect("connect");
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations/sqlx");
    sqlx::migrate::Migrator::new(dir).await.expect("migrations").run(&mut c).await.expect("migrate");
    c
}

async fn server_ids(c: &mut PgConnection, like: &str) -> Vec<i64> {
    let texts: Vec<String> = sqlx::query_scalar(&format!("SELECT id::text FROM {T} WHERE note LIKE $1 ORDER BY id"))
        .bind(like)
        .fetch_all(c)
        .await
        .unwrap();
    texts.iter().map(|t| t.parse().unwrap()).collect()
}

#[test]
fn migrator_makes_the_sequence_and_the_default() {
    block_on(async {
        let mut c = migrated().await;
        migrated().await; // twice: nothing more to do
        let applied: i64 = sqlx::query_scalar("SELECT count(*) FROM _sqlx_migrations WHERE success")
            .fetch_one(&mut c).await.unwrap();
        assert_eq!(applied, 1);
        let (ty, def, owned): (String, String, String) = sqlx::query_as(
            "SELECT format_type(a.atttypid, a.atttypmod), pg_get_expr(d.adbin, d.adrelid), \
                    (SELECT refobjid::regclass::text FROM pg_depend WHERE objid = 'sqlx_photos_id_seq'::regclass AND deptype = 'a') \
             FROM pg_attribute a JOIN pg_attrdef d ON (d.adrelid, d.adnum) = (a.attrelid, a.attnum) \
             WHERE a.attrelid = 'sqlx_photos'::regclass AND a.attname = 'id'")
            .fetch_one(&mut c).await.unwrap();
        assert_eq!(ty, "bigint");
        assert_eq!(def, "next_shard_id('sqlx_photos_id_seq'::regclass, 7)", "the migration's DEFAULT is kept as written");
        assert_eq!(owned, "sqlx_photos", "the sequence is owned by the table");
    });
}

#[test]
fn single_and_batch_inserts_read_the_id_back() {
    block_on(async {
        let mut c = migrated().await;
        // single: RETURNING id, decoded as i64 (sqlx's Postgres INT8; it has no u64)
        let id: i64 = sqlx::query_scalar(&format!("INSERT INTO {T} (note) VALUES ($1) RETURNING id"))
            .bind("single").fetch_one(&mut c).await.unwrap();
        assert!(id > 1 << 53, "{id}");
        assert_eq!(server_ids(&mut c, "single").await, vec![id], "RETURNING id = SELECT id::text");
        // pitfall: i32 is refused at run time (mismatched types), not truncated
        let err = sqlx::query_scalar::<_, i32>(&format!("INSERT INTO {T} (note) VALUES ($1) RETURNING id"))
            .bind("as_i32").fetch_one(&mut c).await.unwrap_err();
        assert!(matches!(err, sqlx::Error::ColumnDecode { .. }), "{err}");
        assert!(err.to_string().contains("INT8"), "{err}");
        // batch 1: one multi-row VALUES from QueryBuilder::push_values, RETURNING id
        let mut qb = QueryBuilder::new(format!("INSERT INTO {T} (note) "));
        qb.push_values(0..500, |mut row, i| {
            row.push_bind(format!("qb{i}"));
        });
        qb.push(" RETURNING id");
        let mut got: Vec<i64> = qb.build_query_scalar().fetch_all(&mut c).await.unwrap();
        got.sort();
        assert_eq!(got.len(), 500);
        assert_eq!(got, server_ids(&mut c, "qb%").await, "push_values batch: RETURNING = SELECT id::text");
        // batch 2: one array parameter, UNNEST, RETURNING id
        let notes: Vec<String> = (0..500).map(|i| format!("un{i}")).collect();
        let mut got: Vec<i64> = sqlx::query_scalar(&format!("INSERT INTO {T} (note) SELECT * FROM unnest($1::text[]) RETURNING id"))
            .bind(&notes).fetch_all(&mut c).await.unwrap();
        got.sort();
        got.dedup();
        assert_eq!(got.len(), 500);
        assert_eq!(got, server_ids(&mut c, "un%").await, "unnest batch: RETURNING = SELECT id::text");
        let shards: Vec<i32> = sqlx::query_scalar(&format!("SELECT DISTINCT shard_id_extract_shard(id) FROM {T}"))
            .fetch_all(&mut c).await.unwrap();
        assert_eq!(shards, vec![7]);
        // 5: none of these INSERTs named the id column
        assert_no_client_ids(T, 4);
    });
}

#[test]
fn ids_round_trip_through_json_and_masks() {
    block_on(async {
        let mut c = migrated().await;
        let ids: Vec<i64> = sqlx::query_scalar(&format!("INSERT INTO {T} (note) SELECT 'json' || g FROM generate_series(1, 50) g RETURNING id"))
            .fetch_all(&mut c).await.unwrap();
        let mut lost_by_f64 = 0;
        for &id in &ids {
            let doc = serde_json::json!({ "id": id.to_string(), "id_number": id }).to_string();
            let v: serde_json::Value = serde_json::from_str(&doc).unwrap();
            assert_eq!(v["id"].as_str().unwrap().parse::<i64>().unwrap(), id, "{doc}");
            assert_eq!(v["id_number"].as_i64(), Some(id), "serde_json keeps an integer as i64: {doc}");
            if v["id_number"].as_f64().unwrap() as i64 != id {
                lost_by_f64 += 1; // what JavaScript's JSON.parse does
            }
        }
        assert!(lost_by_f64 > 0, "read as f64, ids lose digits ({lost_by_f64} of 50)");
        let id = ids[0];
        let parsed: i64 = serde_json::from_str::<serde_json::Value>(&serde_json::json!({ "id": id.to_string() }).to_string())
            .unwrap()["id"].as_str().unwrap().parse().unwrap();
        let note: String = sqlx::query_scalar(&format!("SELECT note FROM {T} WHERE id = $1")).bind(parsed)
            .fetch_one(&mut c).await.unwrap();
        assert_eq!(note, "json1", "lookup by the id parsed from JSON");
        // shard_id_to_jsonb, read as serde_json::Value (sqlx's json feature): the id as a string
        let (row, one, plain): (serde_json::Value, serde_json::Value, serde_json::Value) = sqlx::query_as(&format!(
            "SELECT shard_id_to_jsonb(p), shard_id_to_jsonb(p.id), to_jsonb(p.id) FROM {T} p WHERE id = $1"))
            .bind(id).fetch_one(&mut c).await.unwrap();
        assert_eq!(row, serde_json::json!({ "id": id.to_string(), "note": "json1" }));
        assert_eq!(one, serde_json::Value::String(id.to_string()));
        assert_eq!(plain.as_i64(), Some(id), "plain to_jsonb: a number, still exact as serde_json's i64");
        // masked forms (run.sh's cluster has a key)
        let r = sqlx::query("SELECT shard_id_mask_shortcode($1, 'photos') AS code, shard_id_mask($1, 'photos') AS masked")
            .bind(id).fetch_one(&mut c).await.unwrap();
        let (code, masked): (String, i64) = (r.get("code"), r.get("masked"));
        assert_eq!(code.len(), 12, "{code}");
        assert!(code.chars().all(|ch| ch.is_ascii_alphanumeric() || ch == '-' || ch == '_'), "{code}");
        assert_ne!(masked, id);
        let url: serde_json::Value = serde_json::from_str(&serde_json::json!({ "url": code }).to_string()).unwrap();
        let found: String = sqlx::query_scalar(&format!("SELECT note FROM {T} WHERE id = shard_id_unmask_shortcode($1, 'photos')"))
            .bind(url["url"].as_str().unwrap()).fetch_one(&mut c).await.unwrap();
        assert_eq!(found, "json1", "the masked shortcode finds the row");
        let back: i64 = sqlx::query_scalar("SELECT shard_id_unmask($1, 'photos')").bind(masked).fetch_one(&mut c).await.unwrap();
        assert_eq!(back, id);
    });
}

#[test]
fn decode_and_a_time_range_use_the_primary_key() {
    block_on(async {
        let mut c = migrated().await;
        let first: i64 = sqlx::query_scalar(&format!("INSERT INTO {T} (note) VALUES ('range0') RETURNING id"))
            .fetch_one(&mut c).await.unwrap();
        sqlx::query(&format!("INSERT INTO {T} (note) SELECT 'range' || g FROM generate_series(1, 20) g"))
            .execute(&mut c).await.unwrap();
        // shard_id_decode: ts as ms since the epoch (no chrono/time feature needed), shard, seq
        let (shard, seq, ms): (i32, i32, i64) = sqlx::query_as(
            "SELECT shard, seq, (extract(epoch FROM ts - (SELECT epoch FROM pg_shard_id_info())) * 1000)::bigint \
             FROM shard_id_decode($1)").bind(first).fetch_one(&mut c).await.unwrap();
        assert_eq!(shard, 7);
        assert_eq!(shard as i64, shard_of(first));
        assert_eq!(seq as i64, seq_of(first));
        assert_eq!(ms, ms_of(first));
        // the time range, with the timestamp as text cast on the server
        let ts: String = sqlx::query_scalar("SELECT shard_id_extract_timestamp($1)::text").bind(first).fetch_one(&mut c).await.unwrap();
        // the table is tiny: without this the planner rightly prefers a sequential scan
        sqlx::query("SET enable_seqscan = off").execute(&mut c).await.unwrap();
        let q = format!("SELECT count(*) FROM {T} WHERE note LIKE 'range%' AND id >= shard_id_lower_bound($1::timestamptz)");
        let plan: Vec<String> = sqlx::query_scalar(&format!("EXPLAIN {q}")).bind(&ts).fetch_all(&mut c).await.unwrap();
        let plan = plan.join("\n");
        assert!(uses_pkey(&plan, T), "{plan}");
        let n: i64 = sqlx::query_scalar(&q).bind(&ts).fetch_one(&mut c).await.unwrap();
        assert_eq!(n, 21);
        sqlx::query("RESET enable_seqscan").execute(&mut c).await.unwrap();
    });
}
