// pg_shard_id ids through Knex (query builder, schema builder and migrations; the `pg` client).
// Run by tests/clients/run.sh (node --test js/orm/knex.test.mjs); helpers in common.mjs.
//
// The column: t.bigInteger('id').primary().defaultTo(knex.raw("next_shard_id('knex_photos_id_seq', 9)"))
// after knex.raw('CREATE SEQUENCE knex_photos_id_seq') in the migration. Knex returns strings.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import Knex from 'knex';
import * as h from './common.mjs';

const TABLE = 'knex_photos';
const SHARD = 9;
const migrationSource = {
  getMigrations: async () => ['0001_photos'],
  getMigrationName: (m) => m,
  getMigration: async () => ({
    async up(knex) {
      await knex.raw(`CREATE SEQUENCE ${TABLE}_id_seq`); // the schema builder has no sequences
      await knex.schema.createTable(TABLE, (t) => {
        t.bigInteger('id').primary().defaultTo(knex.raw(`next_shard_id('${TABLE}_id_seq', ${SHARD})`));
        t.text('note').notNullable();
      });
      await knex.raw(`ALTER SEQUENCE ${TABLE}_id_seq OWNED BY ${TABLE}.id`);
    },
    down: (knex) => knex.schema.dropTable(TABLE),
  }),
};
const logFrom = h.logOffset();
let c, knex;

before(async () => {
  c = await h.plain();
  await c.query(`DROP TABLE IF EXISTS ${TABLE}, knex_migrations, knex_migrations_lock; DROP SEQUENCE IF EXISTS ${TABLE}_id_seq`);
  knex = Knex({ client: 'pg', connection: h.env });
});
after(async () => {
  await knex?.destroy();
  await c?.end();
});

test('schema: a Knex migration makes the sequence and the DEFAULT; a string defaultTo is quoted (22P02)', async () => {
  // defaultTo("next_shard_id(...)") without knex.raw writes DEFAULT 'next_shard_id(...)', a bigint literal
  await assert.rejects(
    knex.schema.createTable('knex_wrong', (t) => t.bigInteger('id').primary().defaultTo(`next_shard_id('${TABLE}_id_seq', ${SHARD})`)),
    { code: '22P02' },
  );
  const [, done] = await knex.migrate.latest({ migrationSource });
  assert.deepEqual(done, ['0001_photos']);
  assert.equal(await h.columnDefault(c, TABLE), `next_shard_id('${TABLE}_id_seq'::regclass, ${SHARD})`);
  const [, again] = await knex.migrate.latest({ migrationSource });
  assert.deepEqual(again, []);
});

test('insert().returning() of one row and of 100 rows reads back the exact ids, as strings', async () => {
  const one = await knex(TABLE).insert({ note: 'knex one' }).returning(['id', 'note']);
  const many = await knex(TABLE)
    .insert(Array.from({ length: 100 }, (_, i) => ({ note: `knex batch ${i}` }))).returning(['id', 'note']);
  assert.equal(many.length, 100);
  await h.assertExactIds(c, TABLE, [...one, ...many], 'string');
});

test('JSON: the string id goes through JSON and finds the row; shard_id_to_jsonb and masked shortcodes', async () => {
  const [row] = await knex(TABLE).insert({ note: 'knex json' }).returning(['id', 'note']);
  const api = h.throughJson(row.id, row.note);
  assert.deepEqual(await knex(TABLE).where('id', api.id), [row]);
  const [r] = await knex(`${TABLE} as p`).select(knex.raw('shard_id_to_jsonb(p) AS doc')).where('id', api.id);
  assert.deepEqual(r.doc, row);
  const [{ code }] = await knex(TABLE).select(knex.raw(`shard_id_mask_shortcode(id, 'photos') AS code`)).where('id', row.id);
  assert.deepEqual(await knex(TABLE).whereRaw(`id = shard_id_unmask_shortcode(?, 'photos')`, [code]), [row]);
});

test('shard_id_decode through knex.raw; a time range by shard_id_lower_bound uses the primary key', async () => {
  const [row] = await knex(TABLE).insert({ note: 'knex decode' }).returning(['id', 'note']);
  const { rows: [d] } = await knex.raw('SELECT (shard_id_decode(?::bigint)).*', [row.id]);
  assert.equal(d.shard, SHARD);
  const range = (q) => q(TABLE).where('id', '>=', knex.raw(`shard_id_lower_bound(now() - interval '1 hour')`));
  assert.ok((await range(knex)).some((p) => p.id === row.id));
  // the table is tiny: enable_seqscan = off for this transaction only, or the planner scans it
  const plan = await knex.transaction(async (trx) => {
    await trx.raw('SET LOCAL enable_seqscan = off');
    const q = range(trx).toSQL().toNative();
    return (await trx.raw(`EXPLAIN ${q.sql}`, q.bindings)).rows;
  });
  h.assertIndexScan(h.planText(plan), await h.primaryKeyIndex(c, TABLE));
});

test('the server log: no INSERT from Knex names the id column', () => {
  const inserts = h.assertNoIdSent(TABLE, logFrom, 4);
  assert.ok(inserts.every((i) => !i.columns.includes('id')));
});
