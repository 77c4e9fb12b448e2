// pg_shard_id ids through Kysely (PostgresDialect over a `pg` Pool; its schema builder and Migrator).
// Run by tests/clients/run.sh (node --test js/orm/kysely.test.mjs); helpers in common.mjs.
//
// The column: .addColumn('id', 'bigint', (col) => col.primaryKey().defaultTo(sql`next_shard_id('kysely_photos_id_seq', 11)`))
// after sql`CREATE SEQUENCE kysely_photos_id_seq` in the migration. Kysely returns what `pg` does: strings.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import pg from 'pg';
import { Kysely, Migrator, PostgresDialect, sql } from 'kysely';
import * as h from './common.mjs';

const TABLE = 'kysely_photos';
const SHARD = 11;
const provider = {
  getMigrations: async () => ({
    '0001_photos': {
      async up(db) {
        await sql`CREATE SEQUENCE ${sql.id(`${TABLE}_id_seq`)}`.execute(db); // no sequences in the schema builder
        await db.schema.createTable(TABLE)
          .addColumn('id', 'bigint', (col) => col.primaryKey().defaultTo(sql.raw(`next_shard_id('${TABLE}_id_seq', ${SHARD})`)))
          .addColumn('note', 'text', (col) => col.notNull())
          .execute();
        await sql.raw(`ALTER SEQUENCE ${TABLE}_id_seq OWNED BY ${TABLE}.id`).execute(db);
      },
      down: (db) => db.schema.dropTable(TABLE).execute(),
    },
  }),
};
const logFrom = h.logOffset();
let c, db;

before(async () => {
  c = await h.plain();
  await c.query(`DROP TABLE IF EXISTS ${TABLE}, kysely_migration, kysely_migration_lock; DROP SEQUENCE IF EXISTS ${TABLE}_id_seq`);
  db = new Kysely({ dialect: new PostgresDialect({ pool: new pg.Pool(h.env) }) });
});
after(async () => {
  await db?.destroy();
  await c?.end();
});

test('schema: a Kysely migration makes the sequence and the DEFAULT; running it again does nothing', async () => {
  const migrator = new Migrator({ db, provider });
  const first = await migrator.migrateToLatest();
  assert.equal(first.error, undefined);
  assert.deepEqual(first.results.map((r) => [r.migrationName, r.status]), [['0001_photos', 'Success']]);
  assert.equal(await h.columnDefault(c, TABLE), `next_shard_id('${TABLE}_id_seq'::regclass, ${SHARD})`);
  assert.deepEqual((await migrator.migrateToLatest()).results, []);
});

test('insertInto().returning() of one row and of 100 rows reads back the exact ids, as strings', async () => {
  const one = await db.insertInto(TABLE).values({ note: 'kysely one' }).returning(['id', 'note']).execute();
  const many = await db.insertInto(TABLE)
    .values(Array.from({ length: 100 }, (_, i) => ({ note: `kysely batch ${i}` }))).returning(['id', 'note']).execute();
  assert.equal(many.length, 100);
  await h.assertExactIds(c, TABLE, [...one, ...many], 'string');
});

test('JSON: the string id goes through JSON and finds the row; shard_id_to_jsonb and masked shortcodes', async () => {
  const row = await db.insertInto(TABLE).values({ note: 'kysely json' }).returning(['id', 'note']).executeTakeFirstOrThrow();
  const api = h.throughJson(row.id, row.note);
  assert.deepEqual(await db.selectFrom(TABLE).selectAll().where('id', '=', api.id).execute(), [row]);
  const r = await db.selectFrom(`${TABLE} as p`).select(sql`shard_id_to_jsonb(p)`.as('doc')).where('id', '=', api.id).executeTakeFirst();
  assert.deepEqual(r.doc, row);
  const { code } = await db.selectFrom(TABLE)
    .select(sql`shard_id_mask_shortcode(id, 'photos')`.as('code')).where('id', '=', row.id).executeTakeFirst();
  const found = await db.selectFrom(TABLE).selectAll()
    .where('id', '=', sql`shard_id_unmask_shortcode(${code}, 'photos')`).execute();
  assert.deepEqual(found, [row]);
});

test('shard_id_decode in a select; a time range by shard_id_lower_bound uses the primary key', async () => {
  const row = await db.insertInto(TABLE).values({ note: 'kysely decode' }).returning(['id', 'note']).executeTakeFirstOrThrow();
  const d = await db.selectNoFrom(sql`(shard_id_decode(${row.id}::bigint)).shard`.as('shard')).executeTakeFirst();
  assert.equal(d.shard, SHARD);
  const range = (q) => q.selectFrom(TABLE).selectAll().where('id', '>=', sql`shard_id_lower_bound(now() - interval '1 hour')`);
  assert.ok((await range(db).execute()).some((p) => p.id === row.id));
  // the table is tiny: enable_seqscan = off for this transaction only, or the planner scans it
  const plan = await db.transaction().execute(async (trx) => {
    await sql`SET LOCAL enable_seqscan = off`.execute(trx);
    return range(trx).explain(); // Kysely's own EXPLAIN of the query
  });
  h.assertIndexScan(h.planText(plan), await h.primaryKeyIndex(c, TABLE));
});

test('the server log: no INSERT from Kysely names the id column', () => {
  const inserts = h.assertNoIdSent(TABLE, logFrom, 4);
  assert.ok(inserts.every((i) => !i.columns.includes('id')));
});
