-- sqlx migrate: the sequence first, then the table whose DEFAULT names it (a regclass argument is
-- looked up when the table is created: 42P01 otherwise), then tie the sequence to the column.
CREATE SEQUENCE sqlx_photos_id_seq;
CREATE TABLE sqlx_photos (
    id bigint PRIMARY KEY DEFAULT next_shard_id('sqlx_photos_id_seq', 7),
    note text NOT NULL
);
ALTER SEQUENCE sqlx_photos_id_seq OWNED BY sqlx_photos.id;
