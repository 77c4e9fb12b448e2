// pg_shard_id ids through Sequelize 6 (postgres dialect over `pg`; queryInterface as the migration).
// Run by tests/clients/run.sh (node --test js/orm/sequelize.test.mjs); helpers in common.mjs.
//
// The column in the model: id: { type: DataTypes.BIGINT, primaryKey: true, autoIncrement: true }
// (the table made by the migration below, with the DEFAULT). Sequelize returns BIGINT as strings.
// Not defaultValue: Sequelize.literal("next_shard_id(...)"): then every INSERT carries its own copy
// of the expression in place of DEFAULT (tested), and a later change of the table's DEFAULT (another
// shard) is silently not used. autoIncrement: true sends DEFAULT; but sync() of such a model on a
// new database makes a BIGSERIAL: make the table with the migration, not sync().
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { Sequelize, DataTypes } from 'sequelize';
import * as h from './common.mjs';

const TABLE = 'sequelize_photos';
const SHARD = 10;
const DEFAULT = `next_shard_id('${TABLE}_id_seq', ${SHARD})`;
const logFrom = h.logOffset();
let c, s, Photo, Literal;

before(async () => {
  c = await h.plain();
  await c.query(`DROP TABLE IF EXISTS ${TABLE}; DROP SEQUENCE IF EXISTS ${TABLE}_id_seq`);
  s = new Sequelize(h.env.database, h.env.user, null, { dialect: 'postgres', host: h.env.host, port: h.env.port, logging: false });
  const note = { type: DataTypes.TEXT, allowNull: false };
  Photo = s.define('Photo', { id: { type: DataTypes.BIGINT, primaryKey: true, autoIncrement: true }, note },
    { tableName: TABLE, timestamps: false });
  Literal = s.define('PhotoLiteral', { id: { type: DataTypes.BIGINT, primaryKey: true, defaultValue: s.literal(DEFAULT) }, note },
    { tableName: TABLE, timestamps: false });
});
after(async () => {
  await s?.close();
  await c?.end();
});

test('schema: sync() does not make the sequence (42P01); the migration does; sync({ alter }) leaves the id alone', async () => {
  await assert.rejects(Literal.sync(), (e) => e.parent?.code === '42P01');
  const qi = s.getQueryInterface();
  await s.query(`CREATE SEQUENCE ${TABLE}_id_seq`); // queryInterface has no sequences
  await qi.createTable(TABLE, {
    id: { type: DataTypes.BIGINT, primaryKey: true, defaultValue: s.literal(DEFAULT) },
    note: { type: DataTypes.TEXT, allowNull: false },
  });
  await s.query(`ALTER SEQUENCE ${TABLE}_id_seq OWNED BY ${TABLE}.id`);
  assert.equal(await h.columnDefault(c, TABLE), `next_shard_id('${TABLE}_id_seq'::regclass, ${SHARD})`);
  // sync({ alter: true }), twice, with either model: the id column's DEFAULT is never touched (the
  // note column is altered on every run, as Sequelize does for every column it knows)
  for (const model of [Photo, Literal, Photo]) {
    const from = h.logOffset();
    await model.sync({ alter: true });
    const alters = h.loggedStatements(from).filter((x) => /^ALTER TABLE/.test(x));
    assert.ok(alters.length > 0 && alters.every((x) => !x.includes('COLUMN "id"')), alters.join('\n'));
  }
  assert.equal(await h.columnDefault(c, TABLE), `next_shard_id('${TABLE}_id_seq'::regclass, ${SHARD})`);
});

test('create() and bulkCreate() of 100 read back the exact ids, as strings', async () => {
  const one = await Photo.create({ note: 'sequelize one' });
  const many = await Photo.bulkCreate(Array.from({ length: 100 }, (_, i) => ({ note: `sequelize batch ${i}` })));
  assert.equal(many.length, 100);
  await h.assertExactIds(c, TABLE, [one, ...many].map((p) => p.get({ plain: true })), 'string');
});

test('the pitfall: with defaultValue: literal(...) the INSERT sends the expression, not DEFAULT', async () => {
  const from = h.logOffset();
  const row = await Literal.create({ note: 'sequelize literal' });
  await h.assertExactIds(c, TABLE, [row.get({ plain: true })], 'string');
  const [insert] = h.loggedInserts(TABLE, from);
  assert.deepEqual(insert.ids, [DEFAULT]);
});

test('JSON: the string id goes through JSON and finds the row; shard_id_to_jsonb and masked shortcodes', async () => {
  const row = (await Photo.create({ note: 'sequelize json' })).get({ plain: true });
  const api = h.throughJson(row.id, row.note);
  assert.deepEqual((await Photo.findByPk(api.id)).get({ plain: true }), row);
  const [[r]] = await s.query(`SELECT shard_id_to_jsonb(p) AS doc FROM ${TABLE} p WHERE id = $1`, { bind: [api.id] });
  assert.deepEqual(r.doc, row);
  const [[{ code }]] = await s.query(`SELECT shard_id_mask_shortcode($1, 'photos') AS code`, { bind: [row.id] });
  const byCode = await Photo.findAll({ where: { id: { [Sequelize.Op.eq]: s.literal(`shard_id_unmask_shortcode(${s.escape(code)}, 'photos')`) } }, raw: true });
  assert.deepEqual(byCode, [row]);
});

test('shard_id_decode through s.query; a time range by shard_id_lower_bound uses the primary key', async () => {
  const row = await Photo.create({ note: 'sequelize decode' });
  const [[d]] = await s.query('SELECT (shard_id_decode($1)).*', { bind: [row.id] });
  assert.equal(d.shard, SHARD);
  const where = { id: { [Sequelize.Op.gte]: s.literal(`shard_id_lower_bound(now() - interval '1 hour')`) } };
  assert.ok((await Photo.findAll({ where, raw: true })).some((p) => p.id === row.id));
  // the table is tiny: enable_seqscan = off for this transaction only, or the planner scans it
  const plan = await s.transaction(async (transaction) => {
    await s.query('SET LOCAL enable_seqscan = off', { transaction });
    const select = s.getQueryInterface().queryGenerator.selectQuery(TABLE, { where }, Photo);
    return (await s.query(`EXPLAIN ${select}`, { transaction }))[0];
  });
  h.assertIndexScan(h.planText(plan), await h.primaryKeyIndex(c, TABLE));
});

test('the server log: Sequelize (autoIncrement) names the id column but sends DEFAULT, never a value', () => {
  const inserts = h.loggedInserts(TABLE, logFrom).filter((i) => !i.ids.includes(DEFAULT)); // but the pitfall's
  assert.ok(inserts.length >= 4);
  for (const i of inserts) assert.ok(i.ids.length > 0 && i.ids.every((v) => v === 'DEFAULT'), i.sql);
});
