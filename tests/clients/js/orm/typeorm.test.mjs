// pg_shard_id ids through TypeORM (EntitySchema, no decorators; the `postgres` driver over `pg`).
// Run by tests/clients/run.sh (node --test js/orm/typeorm.test.mjs); helpers in common.mjs.
//
// The column: id: { type: 'bigint', primary: true, default: () => "next_shard_id('typeorm_photos_id_seq', 7)" }
// TypeORM returns bigint columns as strings: exact.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { DataSource, EntitySchema, Table } from 'typeorm';
import * as h from './common.mjs';

const TABLE = 'typeorm_photos';
const SHARD = 7;
const DEFAULT = `next_shard_id('${TABLE}_id_seq', ${SHARD})`;
const Photo = new EntitySchema({
  name: 'Photo',
  tableName: TABLE,
  columns: {
    id: { type: 'bigint', primary: true, default: () => DEFAULT },
    note: { type: 'text' },
  },
});
// TypeORM has no sequences: the migration makes it with SQL before createTable
class CreatePhotos1764000000000 {
  name = 'CreatePhotos1764000000000';
  async up(qr) {
    await qr.query(`CREATE SEQUENCE ${TABLE}_id_seq`);
    await qr.createTable(new Table({
      name: TABLE,
      columns: [
        { name: 'id', type: 'bigint', isPrimary: true, default: DEFAULT },
        { name: 'note', type: 'text' },
      ],
    }));
    await qr.query(`ALTER SEQUENCE ${TABLE}_id_seq OWNED BY ${TABLE}.id`);
  }
  async down(qr) {
    await qr.dropTable(TABLE); // drops the owned sequence too
  }
}
const logFrom = h.logOffset();
let c, ds, repo;

before(async () => {
  c = await h.plain();
  await c.query(`DROP TABLE IF EXISTS ${TABLE}, migrations; DROP SEQUENCE IF EXISTS ${TABLE}_id_seq`);
  ds = new DataSource({ type: 'postgres', ...h.env, username: h.env.user, entities: [Photo], migrations: [CreatePhotos1764000000000] });
  await ds.initialize();
  repo = ds.getRepository(Photo);
});
after(async () => {
  await ds?.destroy();
  await c?.end();
});

test('schema: synchronize() does not make the sequence (42P01); a migration does, and then nothing is pending', async () => {
  await assert.rejects(ds.synchronize(), { code: '42P01', message: `relation "${TABLE}_id_seq" does not exist` });
  assert.deepEqual((await ds.runMigrations()).map((m) => m.name), ['CreatePhotos1764000000000']);
  assert.equal(await h.columnDefault(c, TABLE), `next_shard_id('${TABLE}_id_seq'::regclass, ${SHARD})`);
  // what synchronize() / `typeorm migration:generate` would do next: nothing, twice (the
  // server's ::regclass spelling of the default is not taken for a change)
  for (let i = 0; i < 2; i++) {
    assert.deepEqual((await ds.driver.createSchemaBuilder().log()).upQueries, []);
  }
  await ds.synchronize();
  assert.equal(await h.columnDefault(c, TABLE), `next_shard_id('${TABLE}_id_seq'::regclass, ${SHARD})`);
});

test('save() of one and of 100 objects, and insert(), read back the exact ids, as strings', async () => {
  const one = await repo.save({ note: 'typeorm one' });
  const many = await repo.save(Array.from({ length: 100 }, (_, i) => ({ note: `typeorm batch ${i}` })));
  const notes = ['typeorm insert 1', 'typeorm insert 2'];
  const inserted = await repo.insert(notes.map((note) => ({ note })));
  const viaInsert = inserted.identifiers.map(({ id }, i) => ({ id, note: notes[i] }));
  await h.assertExactIds(c, TABLE, [one, ...many, ...viaInsert], 'string');
});

test('JSON: the string id goes through JSON and finds the row; shard_id_to_jsonb and masked shortcodes', async () => {
  const row = await repo.save({ note: 'typeorm json' });
  const api = h.throughJson(row.id, row.note);
  assert.deepEqual(await repo.findOneBy({ id: api.id }), { id: row.id, note: 'typeorm json' });
  const [r] = await ds.query(`SELECT shard_id_to_jsonb(p) AS doc FROM ${TABLE} p WHERE id = $1`, [api.id]);
  assert.deepEqual(r.doc, { id: row.id, note: 'typeorm json' });
  const [{ code }] = await ds.query(`SELECT shard_id_mask_shortcode($1, 'photos') AS code`, [row.id]);
  const found = await repo.createQueryBuilder('p')
    .where(`p.id = shard_id_unmask_shortcode(:code, 'photos')`, { code }).getMany();
  assert.deepEqual(found, [{ id: row.id, note: 'typeorm json' }]);
});

test('shard_id_decode through ds.query; a time range by shard_id_lower_bound uses the primary key', async () => {
  const row = await repo.save({ note: 'typeorm decode' });
  const [d] = await ds.query('SELECT (shard_id_decode($1)).*', [row.id]);
  assert.equal(d.shard, SHARD);
  const range = repo.createQueryBuilder('p').where(`p.id >= shard_id_lower_bound(now() - interval '1 hour')`);
  assert.ok((await range.getMany()).some((p) => p.id === row.id));
  // the table is tiny: enable_seqscan = off for this transaction only, or the planner scans it
  const plan = await ds.transaction(async (m) => {
    await m.query('SET LOCAL enable_seqscan = off');
    const [sql, params] = range.getQueryAndParameters();
    return m.query(`EXPLAIN ${sql}`, params);
  });
  h.assertIndexScan(h.planText(plan), await h.primaryKeyIndex(c, TABLE));
});

test('the server log: TypeORM names the id column but sends DEFAULT for it, never a value', () => {
  const inserts = h.assertNoIdSent(TABLE, logFrom, 4);
  assert.ok(inserts.every((i) => i.columns.includes('id') && i.ids.length > 0));
});
