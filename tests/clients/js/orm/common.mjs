// Helpers shared by the ORM tests (js/orm/*.test.mjs): a plain node-postgres connection to check
// what the ORM did, the exact-id compare, and the server-log reader for "the ORM never sends an id".
// The connection comes from PGHOST/PGPORT/PGUSER/PGDATABASE; tests/clients/run.sh starts the server
// with log_statement = 'all' and exports SERVER_LOG (the server's log file).
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import pg from 'pg';

export const MAX_SAFE = BigInt(Number.MAX_SAFE_INTEGER);
export const env = {
  host: process.env.PGHOST,
  port: Number(process.env.PGPORT || 5432),
  user: process.env.PGUSER || 'postgres',
  database: process.env.PGDATABASE,
};
// The same server as a URL (Prisma's config, drizzle-kit); a socket directory goes in ?host=.
export const url = `postgresql://${encodeURIComponent(env.user)}@localhost:${env.port}/${env.database}` +
  (env.host?.startsWith('/') ? `?host=${encodeURIComponent(env.host)}` : '');

// A node-postgres client (default int8 parser: strings) for checks outside the ORM.
export async function plain() {
  const c = new pg.Client(env);
  await c.connect();
  return c;
}

// note -> id::text for the table's rows with these notes: what the server really stored.
export async function storedIds(c, table, notes) {
  const { rows } = await c.query(`SELECT note, id::text AS id FROM ${table} WHERE note = ANY($1)`, [notes]);
  return new Map(rows.map((r) => [r.note, r.id]));
}

// Asserts each returned object's id is the stored id exactly, of JavaScript type `type`
// ('string' or 'bigint'), and above 2^53 (so a Number could not have held it).
export async function assertExactIds(c, table, objects, type) {
  assert.ok(objects.length > 0);
  const stored = await storedIds(c, table, objects.map((o) => o.note));
  assert.equal(stored.size, objects.length, 'every returned row is in the table');
  for (const o of objects) {
    assert.equal(typeof o.id, type, `id ${o.id} is a ${type}`);
    assert.equal(String(o.id), stored.get(o.note), `returned id of ${o.note} is the stored one`);
    assert.ok(BigInt(o.id) > MAX_SAFE, 'ids made today are above 2^53');
  }
}

// The primary key's index of a table (for the EXPLAIN checks).
export async function primaryKeyIndex(c, table) {
  const { rows } = await c.query(
    `SELECT i.indexrelid::regclass::text AS name FROM pg_index i WHERE i.indrelid = $1::regclass AND i.indisprimary`,
    [table],
  );
  assert.equal(rows.length, 1, `${table} has a primary key`);
  return rows[0].name;
}

// The column's DEFAULT as the server holds it (NULL: none).
export async function columnDefault(c, table, column = 'id') {
  const { rows } = await c.query(
    `SELECT pg_get_expr(d.adbin, d.adrelid) AS def FROM pg_attribute a
       LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
      WHERE a.attrelid = $1::regclass AND a.attname = $2`,
    [table, column],
  );
  return rows[0]?.def ?? null;
}

// Statements in the server log (log_statement = 'all'): one entry per log line, with its
// tab-indented continuation lines joined, from byte `from` on (logOffset() before a test).
export function logOffset() {
  return readFileSync(logPath()).length;
}
function logPath() {
  assert.ok(process.env.SERVER_LOG, 'SERVER_LOG names the server log (tests/clients/run.sh exports it)');
  return process.env.SERVER_LOG;
}
export function loggedStatements(from = 0) {
  const text = readFileSync(logPath()).subarray(from).toString();
  const entries = [];
  for (const line of text.split('\n')) {
    if (line.startsWith('\t') && entries.length) entries[entries.length - 1] += '\n' + line.slice(1);
    else entries.push(line);
  }
  return entries
    .map((e) => e.match(/LOG:\s+(?:statement|execute [^:]*):\s+([\s\S]*)$/)?.[1])
    .filter(Boolean);
}

// The INSERTs into `table` the server logged (from byte `from`), each with its column list (null
// when the statement names none, which means every column) and what it gave the id column in each
// VALUES row (`ids`: [] when it does not name the column).
export function loggedInserts(table, from = 0) {
  const re = new RegExp(`^\\s*insert\\s+into\\s+(?:"?public"?\\.)?"?${table}"?\\s*(\\(([^)]*)\\))?`, 'i');
  return loggedStatements(from)
    .map((sql) => ({ sql, m: sql.match(re) }))
    .filter((x) => x.m)
    .map(({ sql, m }) => {
      const columns = m[2] ? m[2].split(',').map((col) => col.trim().replace(/"/g, '')) : null;
      const at = columns ? columns.indexOf('id') : -1;
      const values = sql.slice(m[0].length).split(/\s(?:returning|on conflict)\s/i)[0];
      const rows = [...values.replace(/^\s*values\s*/i, '').matchAll(/\(((?:[^()]|\([^()]*\))*)\)/g)];
      const ids = at < 0 ? [] : rows.map((r) => topLevel(r[1])[at].trim());
      return { sql, columns, ids };
    });
}

// "a, f(b, c), d" -> ["a", " f(b, c)", " d"]: a VALUES row split at its own commas only.
function topLevel(list) {
  const parts = [''];
  let depth = 0;
  for (const ch of list) {
    if (ch === ',' && depth === 0) parts.push('');
    else parts[parts.length - 1] += ch;
    if (ch === '(') depth += 1;
    if (ch === ')') depth -= 1;
  }
  return parts;
}

// Asserts the ORM's INSERTs into `table` (at least `atLeast` of them) send no id: they either leave
// the id column out or give it the keyword DEFAULT, so the server's DEFAULT made every id.
export function assertNoIdSent(table, from = 0, atLeast = 1) {
  const inserts = loggedInserts(table, from);
  assert.ok(inserts.length >= atLeast, `${inserts.length} INSERTs into ${table} in the server log`);
  for (const i of inserts) {
    assert.ok(i.columns, `INSERT names its columns: ${i.sql}`);
    // where the id column is listed, its values must have been read (else nothing was checked)
    if (i.columns.includes('id')) assert.ok(i.ids.length > 0, `the VALUES of an INSERT naming id were read: ${i.sql}`);
    for (const v of i.ids) assert.equal(v.toUpperCase(), 'DEFAULT', `INSERT sends no id: ${i.sql}`);
  }
  return inserts;
}

// The API-like round trip: an object with the id as a JSON string, stringified and parsed back.
export function throughJson(id, note) {
  const text = JSON.stringify({ photo: { id: String(id), note } });
  assert.ok(text.includes(`"id":"${String(id)}"`), 'the id is a JSON string, every digit');
  return JSON.parse(text).photo;
}

// EXPLAIN output (one line per row, any column name) uses this index for the id range.
export function assertIndexScan(planLines, index) {
  const plan = planLines.join('\n');
  const name = index.replace(/"/g, '');
  assert.match(plan, new RegExp(`(Index (Only )?Scan using|Bitmap Index Scan on) "?${name}\\b`), plan);
  // the bound is the index's condition, not a filter over the rows an index scan returned
  assert.match(plan, /Index Cond: \(.*id >= shard_id_lower_bound\(/, plan);
}
export const planText = (rows) => rows.map((r) => Object.values(r)[0]);

// The SQL that makes the schema where the ORM's tool cannot: the sequence, then the table.
export const schemaSql = (table, shard) => `
  DROP TABLE IF EXISTS ${table}; DROP SEQUENCE IF EXISTS ${table}_id_seq;
  CREATE SEQUENCE ${table}_id_seq;
  CREATE TABLE ${table} (id bigint PRIMARY KEY DEFAULT next_shard_id('${table}_id_seq', ${shard}), note text NOT NULL);
  ALTER SEQUENCE ${table}_id_seq OWNED BY ${table}.id`;
