"""pg_shard_id ids through psycopg 3: Python ints are exact at any size, so the rules are about
decoding, JSON and shortcodes matching the server."""
import json

from conftest import decode, from_shortcode, to_shortcode


def setup_table(conn):
    conn.execute("""DROP TABLE IF EXISTS py_photos; DROP SEQUENCE IF EXISTS py_photos_id_seq;
                    CREATE SEQUENCE py_photos_id_seq;
                    CREATE TABLE py_photos (id bigint PRIMARY KEY DEFAULT next_shard_id('py_photos_id_seq', 6),
                                            note text NOT NULL)""")


def test_insert_returning_executemany_prepared_and_copy(conn):
    setup_table(conn)
    cur = conn.cursor()
    # INSERT ... RETURNING through the DEFAULT
    rows = cur.execute("INSERT INTO py_photos (note) SELECT 'bulk ' || g FROM generate_series(1, 1000) g "
                       "RETURNING id, id::text").fetchall()
    assert all(isinstance(i, int) and str(i) == t and i > 2**53 for i, t in rows)
    # executemany with RETURNING
    cur.executemany("INSERT INTO py_photos (note) VALUES (%s) RETURNING id", [(f"many {i}",) for i in range(300)],
                    returning=True)
    many = []
    while True:
        many.append(cur.fetchone()[0])
        if not cur.nextset():
            break
    assert len(set(many)) == 300
    # a server-side prepared statement, used repeatedly
    prepared = [cur.execute("INSERT INTO py_photos (note) VALUES (%s) RETURNING id", (f"prepared {i}",),
                            prepare=True).fetchone()[0] for i in range(300)]
    assert len(set(prepared)) == 300
    # COPY in without ids, COPY out with them
    with cur.copy("COPY py_photos (note) FROM STDIN") as copy:
        for i in range(5000):
            copy.write_row((f"copy {i}",))
    with cur.copy("COPY (SELECT id FROM py_photos WHERE note LIKE 'copy %') TO STDOUT") as copy:
        copied = [int(row[0]) for row in copy.rows()]
    assert len(copied) == len(set(copied)) == 5000
    total, distinct = cur.execute("SELECT count(*), count(DISTINCT id) FROM py_photos").fetchone()
    assert total == distinct == 1000 + 300 + 300 + 5000
    # every id found by itself
    for i, _ in rows[:200]:
        assert cur.execute("SELECT count(*) FROM py_photos WHERE id = %s", (i,)).fetchone()[0] == 1


def test_decode_on_the_client_equals_the_server(conn):
    setup_table(conn)
    conn.execute("INSERT INTO py_photos (note) SELECT 'x' FROM generate_series(1, 2000)")
    epoch = conn.execute("SELECT epoch FROM pg_shard_id_info()").fetchone()[0]
    rows = conn.execute("SELECT id, d.ts, d.shard, d.seq FROM py_photos, shard_id_decode(id) d").fetchall()
    assert len(rows) == 2000
    for id_, ts, shard, seq in rows:
        assert decode(id_, epoch) == (ts, shard, seq)


def test_json_round_trip(conn):
    setup_table(conn)
    conn.execute("INSERT INTO py_photos (note) SELECT 'j' || g FROM generate_series(1, 500) g")
    # jsonb comes back parsed; the ids are strings with exactly the id's digits
    doc = conn.execute("SELECT jsonb_agg(shard_id_to_jsonb(p) ORDER BY id) FROM py_photos p").fetchone()[0]
    ids = [r[0] for r in conn.execute("SELECT id FROM py_photos ORDER BY id")]
    assert [p["id"] for p in doc] == [str(i) for i in ids]
    # as text through json.dumps and back to the server
    text = json.dumps(doc)
    matched = conn.execute("SELECT count(*) FROM jsonb_array_elements(%s::jsonb) e "
                           "JOIN py_photos p ON p.id = (e ->> 'id')::bigint AND p.note = e ->> 'note'",
                           (text,)).fetchone()[0]
    assert matched == 500


def test_shortcodes_match_the_server(conn):
    setup_table(conn)
    conn.execute("INSERT INTO py_photos (note) SELECT 's' FROM generate_series(1, 1000)")
    for id_, code in conn.execute("SELECT id, shard_id_to_shortcode(id) FROM py_photos"):
        assert to_shortcode(id_) == code
        assert from_shortcode(code) == id_
    code = to_shortcode(ids := conn.execute("SELECT max(id) FROM py_photos").fetchone()[0])
    assert conn.execute("SELECT shard_id_from_shortcode(%s)", (code,)).fetchone()[0] == ids
