-- The id generators compared by scripts/bench.sh, each as a user would write it.

-- Instagram's next_id() as published (2012), our own copy; `%%` in the blog post is Python string
-- escaping for `%`. Epoch 1314220021721 ms = 2011-08-24 21:07:01.721 UTC, shard 5.
CREATE SCHEMA insta5;
CREATE SEQUENCE insta5.table_id_seq;
CREATE OR REPLACE FUNCTION insta5.next_id(OUT result bigint) AS $$
DECLARE
    our_epoch bigint := 1314220021721;
    seq_id bigint;
    now_millis bigint;
    shard_id int := 5;
BEGIN
    SELECT nextval('insta5.table_id_seq') % 1024 INTO seq_id;

    SELECT FLOOR(EXTRACT(EPOCH FROM clock_timestamp()) * 1000) INTO now_millis;
    result := (now_millis - our_epoch) << 23;
    result := result | (shard_id << 10);
    result := result | (seq_id);
END;
$$ LANGUAGE PLPGSQL;

-- For the same formula written as one inline SQL expression (see bench.py).
CREATE SEQUENCE inline_seq;

CREATE SEQUENCE plain_seq;
CREATE SEQUENCE shard_seq;
CREATE SEQUENCE borrow_seq;
