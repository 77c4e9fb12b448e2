// pg_shard_id ids through node-postgres (`pg`), as the README's "Ids in JavaScript and JSON" says
// to use them. Run by tests/clients/run.sh (node --test) against a server with the extension; the
// connection comes from PGHOST/PGPORT/PGUSER/PGDATABASE.
//
// Every id made after the first 12 days of the epoch is above Number.MAX_SAFE_INTEGER (2^53 - 1).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import pg from 'pg';
import { from as copyFrom, to as copyTo } from 'pg-copy-streams';

const INT8 = 20;

// The recipes (README): decode and shortcodes on the client, with BigInt.
// Layout: 41 bits of ms since the epoch | 13 bits of shard | 10 bits of seq.
export function decode(id, epochMs) {
  const v = BigInt(id);
  return { ms: (v >> 23n) + BigInt(epochMs), shard: Number((v >> 10n) & 8191n), seq: Number(v & 1023n) };
}
export function toShortcode(id) {
  const bytes = Buffer.alloc(8);
  bytes.writeBigInt64BE(BigInt(id));
  return bytes.toString('base64url');
}
export function fromShortcode(code) {
  return Buffer.from(code, 'base64url').readBigInt64BE();
}

// A client whose int8 parser is `parse` (undefined: node-postgres' default, strings).
function client(parse) {
  if (!parse) return new pg.Client();
  return new pg.Client({
    types: { getTypeParser: (oid, format) => (oid === INT8 ? parse : pg.types.getTypeParser(oid, format)) },
  });
}

let db;
before(async () => {
  db = client();
  await db.connect();
  await db.query(`DROP TABLE IF EXISTS js_photos; DROP SEQUENCE IF EXISTS js_photos_id_seq;
                  CREATE SEQUENCE js_photos_id_seq;
                  CREATE TABLE js_photos (id bigint PRIMARY KEY DEFAULT next_shard_id('js_photos_id_seq', 5),
                                          note text NOT NULL)`);
});
after(async () => {
  await db.end();
});

async function insert(c, n, prefix) {
  const r = await c.query(
    `INSERT INTO js_photos (note) SELECT $1 || g FROM generate_series(1, $2::int) g RETURNING id, id::text AS text, note`,
    [prefix, n],
  );
  return r.rows;
}

test('the default int8 parser gives exact ids, as strings, and WHERE id = $1 finds each row', async () => {
  const rows = await insert(db, 1000, 'default ');
  assert.equal(rows.length, 1000);
  for (const r of rows) {
    assert.equal(typeof r.id, 'string');
    assert.equal(r.id, r.text);
    assert.ok(BigInt(r.id) > BigInt(Number.MAX_SAFE_INTEGER), 'ids made today are above 2^53');
  }
  for (const r of rows.slice(0, 200)) {
    const found = await db.query('SELECT note FROM js_photos WHERE id = $1', [r.id]);
    assert.deepEqual(found.rows, [{ note: r.note }]);
  }
});

test('an int8 parser set to Number changes ids and finds the wrong rows (the trap the README warns of)', async () => {
  const c = client(Number);
  await c.connect();
  try {
    const rows = await insert(c, 1000, 'number ');
    const changed = rows.filter((r) => String(r.id) !== r.text).length;
    let wrong = 0;
    for (const r of rows.slice(0, 200)) {
      const found = await c.query('SELECT note FROM js_photos WHERE id = $1', [r.id]);
      if (found.rows.length !== 1 || found.rows[0].note !== r.note) wrong += 1;
    }
    console.log(`# Number parser: ${changed} of 1000 ids changed, ${wrong} of 200 lookups found another row or none`);
    assert.ok(changed > 900, `${changed} of 1000 changed`);
    assert.ok(wrong > 100, `${wrong} of 200 wrong`);
  } finally {
    await c.end();
  }
});

test('an int8 parser set to BigInt gives exact ids, and BigInt parameters find each row', async () => {
  const c = client(BigInt);
  await c.connect();
  try {
    const rows = await insert(c, 1000, 'bigint ');
    for (const r of rows) {
      assert.equal(typeof r.id, 'bigint');
      assert.equal(r.id, BigInt(r.text));
    }
    for (const r of rows.slice(0, 200)) {
      const found = await c.query('SELECT note FROM js_photos WHERE id = $1', [r.id]);
      assert.deepEqual(found.rows, [{ note: r.note }]);
    }
  } finally {
    await c.end();
  }
});

test('a prepared (named) statement returns exact ids, each one new', async () => {
  const ids = new Set();
  for (let i = 0; i < 500; i++) {
    const r = await db.query({
      name: 'insert-photo',
      text: 'INSERT INTO js_photos (note) VALUES ($1) RETURNING id, id::text AS text',
      values: [`prepared ${i}`],
    });
    assert.equal(r.rows[0].id, r.rows[0].text);
    ids.add(r.rows[0].id);
  }
  assert.equal(ids.size, 500);
});

test('COPY FROM STDIN takes ids from the DEFAULT; COPY TO STDOUT gives them back exact', async () => {
  const lines = Array.from({ length: 5000 }, (_, i) => `copy ${i}\n`);
  await pipeline(Readable.from(lines), db.query(copyFrom('COPY js_photos (note) FROM STDIN')));
  let text = '';
  for await (const chunk of db.query(copyTo(`COPY (SELECT id, id::text FROM js_photos WHERE note LIKE 'copy %') TO STDOUT`))) {
    text += chunk.toString();
  }
  const rows = text.trim().split('\n').map((l) => l.split('\t'));
  assert.equal(rows.length, 5000);
  assert.equal(new Set(rows.map(([id]) => id)).size, 5000);
  for (const [id] of rows) assert.equal(decode(id, 0).shard, 5);
});

test('decoding on the client (BigInt) equals shard_id_decode on the server', async () => {
  const epoch = (await db.query(`SELECT (extract(epoch FROM epoch) * 1000)::bigint AS ms FROM pg_shard_id_info()`)).rows[0].ms;
  const { rows } = await db.query(`SELECT id, (extract(epoch FROM d.ts) * 1000)::bigint AS ms, d.shard, d.seq
                                     FROM js_photos, shard_id_decode(id) d`);
  assert.ok(rows.length > 7000);
  for (const r of rows) {
    assert.deepEqual(decode(r.id, epoch), { ms: BigInt(r.ms), shard: r.shard, seq: r.seq });
  }
});

test('JSON: shard_id_to_jsonb keeps ids exact through JSON.parse; to_jsonb does not', async () => {
  const safe = await db.query(`SELECT json_agg(shard_id_to_jsonb(p)) AS doc, json_agg(p.id::text) AS ids FROM js_photos p`);
  const doc = safe.rows[0].doc; // node-postgres parses json with JSON.parse
  assert.equal(doc.length, safe.rows[0].ids.length);
  doc.forEach((photo, i) => {
    assert.equal(typeof photo.id, 'string');
    assert.equal(photo.id, safe.rows[0].ids[i]);
  });
  // The same document as text, parsed and written back to the server: the ids still match rows.
  const text = JSON.stringify(doc.slice(0, 100));
  const back = await db.query(`SELECT count(*)::int AS n FROM json_array_elements($1::json) e
                                 JOIN js_photos p ON p.id = (e ->> 'id')::bigint AND p.note = e ->> 'note'`, [text]);
  assert.equal(back.rows[0].n, 100);

  const unsafe = await db.query(`SELECT json_agg(p.id) AS doc, json_agg(p.id::text) AS ids FROM js_photos p`);
  const rounded = unsafe.rows[0].doc.filter((id, i) => String(id) !== unsafe.rows[0].ids[i]).length;
  assert.ok(rounded > unsafe.rows[0].ids.length * 0.9, `to_jsonb/json_agg: ${rounded} ids rounded by JSON.parse`);
});

test('shortcodes: the client encodes and decodes exactly as the server does', async () => {
  const { rows } = await db.query(`SELECT id, shard_id_to_shortcode(id) AS code FROM js_photos LIMIT 2000`);
  for (const r of rows) {
    assert.equal(toShortcode(r.id), r.code);
    assert.equal(fromShortcode(r.code), BigInt(r.id));
  }
  const back = await db.query('SELECT shard_id_from_shortcode($1) AS id', [toShortcode(rows[0].id)]);
  assert.equal(back.rows[0].id, rows[0].id);
});

test('masked shortcodes: through JSON and back as a query parameter, each finds its row', async () => {
  // tests/clients/run.sh writes the server's key file (pg_shard_id.keys) before the suites run
  const { rows } = await db.query(
    `SELECT json_agg(json_build_object('url', 'https://example.com/p/' || shard_id_mask_shortcode(id, 'photos'),
                                       'note', note)) AS doc
       FROM (SELECT id, note FROM js_photos ORDER BY id LIMIT 500) p`,
  );
  const doc = JSON.parse(JSON.stringify(rows[0].doc)); // the page a browser gets
  assert.equal(doc.length, 500);
  const codes = doc.map((d) => d.url.split('/').pop());
  for (const code of codes) assert.match(code, /^[B-Za-z0-9_-][A-Za-z0-9_-]{11}$/);
  assert.equal(new Set(codes).size, 500, 'every row its own code');
  // nothing of the id shows: the plain shortcode's leading characters (its time) are not there
  const plain = await db.query(`SELECT shard_id_to_shortcode(id) AS code FROM js_photos ORDER BY id LIMIT 500`);
  const sharedPrefix = codes.filter((c, i) => c.slice(1, 4) === plain.rows[i].code.slice(0, 3)).length;
  assert.ok(sharedPrefix < 5, `${sharedPrefix} masked codes start like their ids`);
  for (const d of doc.slice(0, 100)) {
    const found = await db.query(
      `SELECT note FROM js_photos WHERE id = shard_id_unmask_shortcode($1, 'photos')`,
      [d.url.split('/').pop()],
    );
    assert.deepEqual(found.rows, [{ note: d.note }]);
  }
});
