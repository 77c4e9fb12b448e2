-- The guard's statistics per sequence (src/stats.rs), with the database's name and, in this
-- database, the sequence as a regclass (NULL for another database's sequences, and for one that
-- was dropped). Readable by everyone, like pg_stat_user_tables; resetting is not.
CREATE VIEW pg_shard_id_stats AS
SELECT d.datname,
       CASE WHEN s.database = (SELECT oid FROM pg_catalog.pg_database
                                WHERE datname = pg_catalog.current_database())
            THEN (SELECT c.oid::pg_catalog.regclass FROM pg_catalog.pg_class c
                   WHERE c.oid = s.sequence_oid)
       END AS sequence,
       s.sequence_oid, s.ids, s.exhausted_ms, s.waits, s.wait_seconds, s.lead_ms,
       s.clock_steps, s.last_issued, s.lease_writes
  FROM @extschema@.pg_shard_id_stats() s
  LEFT JOIN pg_catalog.pg_database d ON d.oid = s.database;
GRANT SELECT ON pg_shard_id_stats TO PUBLIC;
COMMENT ON VIEW pg_shard_id_stats IS
    'pg_shard_id''s guard statistics per sequence since start-up or pg_shard_id_stats_reset(): ids, exhausted milliseconds, waits, lead over the clock, clock steps, lease writes.';
REVOKE EXECUTE ON FUNCTION pg_shard_id_stats_reset() FROM PUBLIC;
