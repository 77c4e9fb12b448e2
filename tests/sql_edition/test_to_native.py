"""From the SQL edition to the native extension without a repeat (docs/managed.md#to-native): a
table whose DEFAULT is the edition's next_shard_id, rows stored, and ids handed out by a
transaction that rolled back running seconds ahead of the clock (a sequence with INCREMENT BY 1024:
every value a new block, so every id a millisecond further); then the native extension created in
another schema and ids.shard_id_switch_to_native() pointing the DEFAULT at it. The native ids are
strictly above every id the edition issued, stored or not: its data floor sees the stored ones,
the switch's wait for the high water covers the others. Needs a build of pg_shard_id installed
(scripts/test.sh does that)."""

import time

from conftest import install_plain
from pgcluster import Cluster


def one(conn, query, params=None):
    return conn.execute(query, params).fetchone()[0]


def test_switch_to_the_native_extension_without_a_repeat(edition):
    c = Cluster("sqled_native")  # (pg_shard_id preloaded)
    try:
        install_plain(c, "postgres", edition)
        with c.connect() as conn:
            conn.execute("CREATE SEQUENCE photos_id_seq INCREMENT BY 1024")
            conn.execute("SELECT ids.shard_id_guard('photos_id_seq')")
            conn.execute("CREATE TABLE photos (id bigint PRIMARY KEY DEFAULT ids.next_shard_id('photos_id_seq', 5), x int)")
            conn.execute("INSERT INTO photos (x) SELECT g FROM generate_series(1, 1000) g")
            stored = one(conn, "SELECT max(id) FROM photos")
        with c.connect(autocommit=False) as conn:
            gone = [r[0] for r in conn.execute("SELECT ids.next_shard_id('photos_id_seq', 5) FROM generate_series(1, 4000)")]
            conn.rollback()
        with c.connect() as conn:
            ahead = (max(gone) >> 23) - one(conn, "SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint - 1767225600000")
            assert ahead > 2000  # (the edition's ids run seconds ahead of the clock)
            conn.execute("CREATE SCHEMA shard_ids")
            conn.execute("CREATE EXTENSION pg_shard_id SCHEMA shard_ids")
            started = time.monotonic()
            switched = conn.execute("SELECT tbl::text, col, new_default FROM ids.shard_id_switch_to_native('shard_ids')").fetchall()
            waited = time.monotonic() - started
            assert switched == [("photos", "id", "shard_ids.next_shard_id('public.photos_id_seq'::regclass, 5)")]
            conn.execute("INSERT INTO photos (x) SELECT g FROM generate_series(1, 300) g")
            new = [r[0] for r in conn.execute("SELECT id FROM photos WHERE id > %s ORDER BY id", (stored,))]
        assert len(new) == 300
        assert min(new) > max(gone) and min(new) > stored
        assert not set(new) & set(gone)
        assert waited * 1000 >= ahead - 500  # (the switch waited for the clock)
    finally:
        c.destroy()
