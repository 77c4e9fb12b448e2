// pg_shard_id ids through Drizzle ORM (node-postgres driver) and drizzle-kit (generate, push).
// Run by tests/clients/run.sh (node --test js/orm/drizzle.test.mjs); helpers in common.mjs; the
// schema is js/orm/drizzle/schema.js (a .js file: drizzle-kit does not read .mjs schemas).
//
// The column: bigint('id', { mode: 'bigint' }).primaryKey().default(sql`next_shard_id('drizzle_photos_id_seq', 8)`)
// with pgSequence('drizzle_photos_id_seq'). mode 'bigint' returns BigInt (exact); mode 'number'
// returns a Number and changes the id (tested). drizzle-orm 0.45 has no string mode for bigint.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { eq, gte, sql } from 'drizzle-orm';
import { drizzle } from 'drizzle-orm/node-postgres';
import { migrate } from 'drizzle-orm/node-postgres/migrator';
import { pgTable, bigint, text } from 'drizzle-orm/pg-core';
import * as h from './common.mjs';
import { photos } from './drizzle/schema.js';

const TABLE = 'drizzle_photos';
const SHARD = 8;
const schemaFile = fileURLToPath(new URL('./drizzle/schema.js', import.meta.url));
const kit = fileURLToPath(new URL('../../node_modules/drizzle-kit/bin.cjs', import.meta.url)); // not in its exports
const work = mkdtempSync(join(tmpdir(), 'drizzle-')); // generated migrations: not kept
// drizzle-kit wants a relative --out (an absolute one breaks its second run), hence cwd = work
const drizzleKit = (...args) =>
  execFileSync(process.execPath, [kit, ...args, '--dialect', 'postgresql', '--schema', schemaFile],
    { cwd: work, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
const logFrom = h.logOffset();
let c, db;

before(async () => {
  c = await h.plain();
  await c.query(`DROP TABLE IF EXISTS ${TABLE}; DROP SEQUENCE IF EXISTS ${TABLE}_id_seq; DROP SCHEMA IF EXISTS drizzle CASCADE`);
  db = drizzle({ connection: h.env });
});
after(async () => {
  await db?.$client.end();
  await c?.end();
  rmSync(work, { recursive: true, force: true });
});

test('schema: drizzle-kit generate makes the sequence first; migrate() applies it; generate again finds nothing', async () => {
  drizzleKit('generate', '--out', 'migrations');
  const [file] = readdirSync(join(work, 'migrations')).filter((f) => f.endsWith('.sql'));
  const ddl = readFileSync(join(work, 'migrations', file), 'utf8');
  assert.ok(ddl.indexOf(`CREATE SEQUENCE "public"."${TABLE}_id_seq"`) >= 0, ddl);
  assert.ok(ddl.indexOf(`CREATE SEQUENCE`) < ddl.indexOf(`CREATE TABLE "${TABLE}"`), ddl);
  assert.match(ddl, new RegExp(`"id" bigint PRIMARY KEY DEFAULT next_shard_id\\('${TABLE}_id_seq', ${SHARD}\\)`));
  await migrate(db, { migrationsFolder: join(work, 'migrations') });
  assert.equal(await h.columnDefault(c, TABLE), `next_shard_id('${TABLE}_id_seq'::regclass, ${SHARD})`);
  assert.match(drizzleKit('generate', '--out', 'migrations'), /No schema changes/);
});

test('schema: drizzle-kit push takes the default for changed and sets it again on every run', () => {
  for (let i = 0; i < 2; i++) {
    const from = h.logOffset();
    drizzleKit('push', '--url', h.url, '--tablesFilter', TABLE);
    const altered = h.loggedStatements(from).filter((s) => s.startsWith(`ALTER TABLE "${TABLE}" ALTER COLUMN "id" SET DEFAULT`));
    assert.equal(altered.length, 1, `push run ${i + 1}`);
  }
});

test('insert().returning() of one row and of 100 rows reads back the exact ids, as BigInt', async () => {
  const one = await db.insert(photos).values({ note: 'drizzle one' }).returning();
  const many = await db.insert(photos)
    .values(Array.from({ length: 100 }, (_, i) => ({ note: `drizzle batch ${i}` }))).returning();
  assert.equal(many.length, 100);
  await h.assertExactIds(c, TABLE, [...one, ...many], 'bigint');
});

test("the pitfall: mode: 'number' returns Numbers that are not the ids", async () => {
  const asNumber = pgTable(TABLE, { id: bigint('id', { mode: 'number' }).primaryKey(), note: text('note').notNull() });
  const rows = await db.insert(asNumber)
    .values(Array.from({ length: 100 }, (_, i) => ({ note: `drizzle number ${i}` }))).returning();
  const stored = await h.storedIds(c, TABLE, rows.map((r) => r.note));
  const changed = rows.filter((r) => String(r.id) !== stored.get(r.note)).length;
  assert.ok(changed > 80, `${changed} of 100 ids changed by Number`);
});

test('JSON: JSON.stringify throws on the BigInt; as a string it comes back and finds the row', async () => {
  const [row] = await db.insert(photos).values({ note: 'drizzle json' }).returning();
  assert.throws(() => JSON.stringify(row), TypeError);
  const api = h.throughJson(row.id, row.note);
  assert.deepEqual(await db.select().from(photos).where(eq(photos.id, BigInt(api.id))), [row]);
  const { rows: [r] } = await db.execute(sql`SELECT shard_id_to_jsonb(p) AS doc FROM ${photos} p WHERE id = ${row.id}`);
  assert.deepEqual(r.doc, { id: api.id, note: 'drizzle json' });
  const [{ code }] = await db.select({ code: sql`shard_id_mask_shortcode(${photos.id}, 'photos')` })
    .from(photos).where(eq(photos.id, row.id));
  const found = await db.select().from(photos).where(sql`${photos.id} = shard_id_unmask_shortcode(${code}, 'photos')`);
  assert.deepEqual(found, [row]);
});

test('shard_id_decode in a select; a time range by shard_id_lower_bound uses the primary key', async () => {
  const [row] = await db.insert(photos).values({ note: 'drizzle decode' }).returning();
  const [d] = await db.select({ shard: sql`(shard_id_decode(${photos.id})).shard` }).from(photos).where(eq(photos.id, row.id));
  assert.equal(d.shard, SHARD);
  const range = (q) => q.select().from(photos).where(gte(photos.id, sql`shard_id_lower_bound(now() - interval '1 hour')`));
  assert.ok((await range(db)).some((p) => p.id === row.id));
  // the table is tiny: enable_seqscan = off for this transaction only, or the planner scans it
  const plan = await db.transaction(async (tx) => {
    await tx.execute(sql`SET LOCAL enable_seqscan = off`);
    return (await tx.execute(sql`EXPLAIN ${range(tx)}`)).rows; // the ORM's own query, explained
  });
  h.assertIndexScan(h.planText(plan), await h.primaryKeyIndex(c, TABLE));
});

test('the server log: Drizzle names the id column but sends default for it, never a value', () => {
  const inserts = h.assertNoIdSent(TABLE, logFrom, 4);
  assert.ok(inserts.every((i) => i.columns.includes('id') && i.ids.length > 0));
});
