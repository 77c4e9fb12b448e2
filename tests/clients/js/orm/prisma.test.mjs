// pg_shard_id ids through Prisma 7 (`@prisma/client` with the `prisma-client-js` generator and the
// `@prisma/adapter-pg` driver adapter: the query compiler is WebAssembly, no engine binary runs).
// Run by tests/clients/run.sh (node --test js/orm/prisma.test.mjs); helpers in common.mjs.
//
// The column: id BigInt @id @default(dbgenerated("next_shard_id('prisma_photos_id_seq'::regclass, 6)"))
// (js/orm/prisma/schema.prisma). Prisma returns ids as BigInt: exact, but JSON.stringify throws on them.
//
// What does not run here: `prisma migrate dev|deploy|diff`, `db push` and `db pull` need the
// schema engine, a native binary the CLI downloads at first use (binaries.prisma.sh, unreachable:
// "Error: request to https://binaries.prisma.sh/.../schema-engine.gz.sha256 failed, reason:
// getaddrinfo ENOTFOUND"). So the schema is made with SQL, as the migration would have to be
// anyway: Prisma has no sequences in its schema language, so a generated migration has no
// CREATE SEQUENCE and fails with 42P01 until it is added by hand (docs/orms.md).
// `prisma generate` needs no engine, only the CLI insists on finding the binary first:
// PRISMA_SCHEMA_ENGINE_BINARY pointing at any existing file stops the download (generate never runs it).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import * as h from './common.mjs';

const TABLE = 'prisma_photos';
const SHARD = 6;
const logFrom = h.logOffset();
let c, prisma;

before(async () => {
  const here = fileURLToPath(new URL('./prisma/', import.meta.url));
  const cli = createRequire(import.meta.url).resolve('prisma/build/index.js');
  // writes the client to node_modules/.prisma/client (prisma-client-js: JavaScript, no build step)
  execFileSync(process.execPath, [cli, 'generate', '--config', `${here}prisma.config.mjs`], {
    cwd: here, stdio: 'pipe',
    env: { ...process.env, PRISMA_SCHEMA_ENGINE_BINARY: '/bin/false', PRISMA_HIDE_UPDATE_MESSAGE: '1', DATABASE_URL: h.url },
  });
  const { PrismaClient } = (await import('@prisma/client')).default;
  const { PrismaPg } = await import('@prisma/adapter-pg');
  c = await h.plain();
  await c.query(h.schemaSql(TABLE, SHARD));
  prisma = new PrismaClient({ adapter: new PrismaPg(h.env) });
});
after(async () => {
  await prisma?.$disconnect();
  await c?.end();
});

test('create() and createManyAndReturn() read back the exact id, as a BigInt', async () => {
  const one = await prisma.photo.create({ data: { note: 'prisma one' } });
  const many = await prisma.photo.createManyAndReturn({
    data: Array.from({ length: 100 }, (_, i) => ({ note: `prisma batch ${i}` })),
  });
  assert.equal(many.length, 100);
  await h.assertExactIds(c, TABLE, [one, ...many], 'bigint');
  // createMany() (without AndReturn) gives only a count: no ids
  assert.deepEqual(await prisma.photo.createMany({ data: [{ note: 'prisma count' }] }), { count: 1 });
});

test('JSON: JSON.stringify throws on the BigInt; as a string it comes back and finds the row', async () => {
  const row = await prisma.photo.create({ data: { note: 'prisma json' } });
  assert.throws(() => JSON.stringify(row), TypeError);
  const api = h.throughJson(row.id, row.note);
  assert.deepEqual(await prisma.photo.findUnique({ where: { id: BigInt(api.id) } }), row);
  // shard_id_to_jsonb through $queryRaw: the id a JSON string (and the raw bigint column a BigInt)
  const [r] = await prisma.$queryRaw`SELECT id, shard_id_to_jsonb(p) AS doc FROM prisma_photos p WHERE id = ${row.id}`;
  assert.equal(r.id, row.id);
  assert.deepEqual(r.doc, { id: String(row.id), note: 'prisma json' });
  // the masked shortcode (run.sh wrote the server's key file) finds the row again
  const [{ code }] = await prisma.$queryRaw`SELECT shard_id_mask_shortcode(${row.id}::bigint, 'photos') AS code`;
  const found = await prisma.$queryRaw`SELECT note FROM prisma_photos WHERE id = shard_id_unmask_shortcode(${code}, 'photos')`;
  assert.deepEqual(found, [{ note: 'prisma json' }]);
});

test('shard_id_decode through $queryRaw; a time range by shard_id_lower_bound uses the primary key', async () => {
  const row = await prisma.photo.create({ data: { note: 'prisma decode' } });
  const [d] = await prisma.$queryRaw`SELECT (shard_id_decode(${row.id}::bigint)).*`;
  assert.equal(d.shard, SHARD);
  const [{ lower }] = await prisma.$queryRaw`SELECT shard_id_lower_bound(now() - interval '1 hour') AS lower`;
  const recent = await prisma.photo.findMany({ where: { id: { gte: lower } } });
  assert.ok(recent.some((p) => p.id === row.id));
  // the table is tiny: without enable_seqscan = off (SET LOCAL: this transaction only) the
  // planner would rightly scan it
  const plan = await prisma.$transaction(async (tx) => {
    await tx.$executeRawUnsafe('SET LOCAL enable_seqscan = off');
    return tx.$queryRawUnsafe(`EXPLAIN SELECT * FROM prisma_photos WHERE id >= shard_id_lower_bound(now() - interval '1 hour')`);
  });
  h.assertIndexScan(h.planText(plan), await h.primaryKeyIndex(c, TABLE));
});

test('the server log: no INSERT from Prisma names the id column', () => {
  h.assertNoIdSent(TABLE, logFrom, 5);
});
