-- diesel_migrations: plain SQL, run in a transaction; the sequence before the table.
CREATE SEQUENCE diesel_photos_id_seq;
CREATE TABLE diesel_photos (
    id bigint PRIMARY KEY DEFAULT next_shard_id('diesel_photos_id_seq', 8),
    note text NOT NULL
);
ALTER SEQUENCE diesel_photos_id_seq OWNED BY diesel_photos.id;
