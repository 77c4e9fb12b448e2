-- Runs once, at CREATE EXTENSION: without shared_preload_libraries the guard is per session.
DO $$
BEGIN
    IF (SELECT guard FROM @extschema@.pg_shard_id_info()) <> 'cluster' THEN
        -- CREATE EXTENSION runs its script with client_min_messages raised to warning; lower it
        -- for this statement only, so that the NOTICE reaches the user.
        PERFORM set_config('client_min_messages', 'notice', true);
        RAISE NOTICE 'pg_shard_id is not in shared_preload_libraries: ids are guarded per session only'
            USING HINT = 'Add pg_shard_id to shared_preload_libraries and restart PostgreSQL to guard them across the whole cluster.';
    END IF;
END
$$;
