-- Time partitioning on the id: monthly partitions from shard_id_partition_bounds.
SET TimeZone = 'UTC';
SET DateStyle = 'ISO';

SELECT * FROM shard_id_partition_bounds('2026-01-01+00', '2026-04-01+00', '1 month');
-- the last range ends at to_ts even when it is not a whole step away
SELECT * FROM shard_id_partition_bounds('2026-01-01+00', '2026-01-01 00:00:00.0025+00', '1 ms');
-- ... and a tail inside the last range's final millisecond adds no empty range
SELECT * FROM shard_id_partition_bounds('2026-01-01 00:00:00.0002+00', '2026-01-01 00:00:00.0024+00', '1 ms');

CREATE SEQUENCE events_id_seq;
CREATE TABLE events (
    id bigint NOT NULL DEFAULT next_shard_id('events_id_seq', 7),
    note text
) PARTITION BY RANGE (id);
DO $$
DECLARE
    b record;
    m int := 0;
BEGIN
    FOR b IN SELECT * FROM shard_id_partition_bounds('2026-01-01+00', '2028-01-01+00', '1 month') LOOP
        EXECUTE format('CREATE TABLE events_%s PARTITION OF events FOR VALUES FROM (%s) TO (%s)',
                       to_char('2026-01-01'::date + make_interval(months => m), 'YYYY_MM'),
                       b.lower, b.upper);
        m := m + 1;
    END LOOP;
END $$;
SELECT count(*) AS partitions FROM pg_inherits WHERE inhparent = 'events'::regclass;

-- rows of past months (composed ids), month edges, and rows made now (the DEFAULT)
INSERT INTO events (id, note)
SELECT shard_id_compose(ts, 7, 0), 'composed ' || ts
  FROM (VALUES ('2026-01-01 00:00:00+00'::timestamptz), ('2026-01-31 23:59:59.999+00'),
               ('2026-02-01 00:00:00+00'), ('2026-07-15 12:00:00+00'), ('2027-12-31 23:59:59.999+00')) v(ts);
INSERT INTO events (note) SELECT 'now' FROM generate_series(1, 1000);

-- every row is in the partition of its month
SELECT tableoid::regclass AS partition, count(*)
  FROM events WHERE note <> 'now' GROUP BY 1 ORDER BY 1;
SELECT count(*) AS rows_in_the_wrong_partition
  FROM events
 WHERE tableoid::regclass::text <> 'events_' || to_char(shard_id_extract_timestamp(id), 'YYYY_MM');

-- a range query on a month prunes to its partition
EXPLAIN (COSTS OFF)
SELECT count(*) FROM events
 WHERE id >= shard_id_lower_bound('2026-07-01+00', '2026-01-01+00')
   AND id <  shard_id_lower_bound('2026-08-01+00', '2026-01-01+00');

SELECT * FROM shard_id_partition_bounds('2026-02-01+00', '2026-01-01+00', '1 month');
SELECT * FROM shard_id_partition_bounds('2026-01-01+00', '2026-02-01+00', '0 days');
SELECT * FROM shard_id_partition_bounds('2026-01-01+00', '2070-01-01+00', '1 year');
-- steps that go back or nowhere from some dates, sub-millisecond steps, infinite bounds,
-- ranges before the epoch, too many ranges: each a clear error, at once
SELECT * FROM shard_id_partition_bounds('2026-01-01+00', '2026-06-01+00', '1 mon -30 days');
SELECT * FROM shard_id_partition_bounds('2026-01-01+00', '2026-06-01+00', '1 mon -28 days');
SELECT * FROM shard_id_partition_bounds('2026-01-01+00', '2026-02-01+00', '-1 day');
SELECT * FROM shard_id_partition_bounds('2026-01-01+00', '2026-01-01 00:00:00.003+00', '0.5 ms');
SELECT * FROM shard_id_partition_bounds('2026-01-01 00:00:00.0002+00', '2026-01-01 00:00:00.0007+00', '1 day');
SELECT * FROM shard_id_partition_bounds('-infinity', '2026-06-01+00', '1 day');
SELECT * FROM shard_id_partition_bounds('2026-01-01+00', 'infinity', '1 day');
SELECT * FROM shard_id_partition_bounds('2020-01-01+00', '2021-01-01+00', '1 month');
SELECT * FROM shard_id_partition_bounds('2026-01-01+00', '2027-01-01+00', '1 ms');
-- a span that starts before the epoch starts at id 0
SELECT * FROM shard_id_partition_bounds('2025-12-01+00', '2026-04-01+00', '2 months');
