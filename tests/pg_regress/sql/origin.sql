-- _pg_shard_id.origin: the epoch this database's ids were made with and the servers that made them,
-- kept by pg_dump and pg_upgrade (README, "Replicas, backups and upgrades").
CREATE SEQUENCE origin_s;
SELECT next_shard_id('origin_s', 1) > 0 AS issued;
-- the first id recorded this server, with its epoch
SELECT count(*) >= 1 AS recorded, bool_and(epoch = (SELECT epoch FROM pg_shard_id_info())) AS with_its_epoch
FROM _pg_shard_id.origin WHERE system_identifier = (SELECT system_identifier FROM pg_control_system());
-- only the extension records a server: nobody else may call the function or write the table
CREATE ROLE regress_origin LOGIN;
SET ROLE regress_origin;
SELECT _pg_shard_id.record_origin();
INSERT INTO _pg_shard_id.origin (epoch, system_identifier) VALUES ('2011-01-01 00:00:00+00', 1);
SELECT count(*) > 0 AS readable FROM _pg_shard_id.origin;
RESET ROLE;
-- ids made with an earlier epoch than the server's (as after a restore into a server whose
-- postgresql.conf lacks the old epoch): refused before the first id of every session
INSERT INTO _pg_shard_id.origin (epoch, system_identifier) VALUES ('2025-01-01 00:00:00+00', 1);
\c
SELECT next_shard_id('origin_s', 1);
SELECT shard_id_extract_shard(shard_id_compose('2026-06-01 00:00:00+00', 7, 0)) AS decoding_still_works;
DELETE FROM _pg_shard_id.origin WHERE system_identifier = 1;
\c
SELECT next_shard_id('origin_s', 1) > 0 AS issued_again;
-- an ordinary role's first id records the server too (the extension writes the row, not the role)
DELETE FROM _pg_shard_id.origin;
GRANT USAGE ON SEQUENCE origin_s TO regress_origin;
\c - regress_origin
SELECT next_shard_id('origin_s', 1) > 0 AS issued_by_a_role;
\c - postgres
SELECT count(*) AS recorded_again FROM _pg_shard_id.origin
WHERE system_identifier = (SELECT system_identifier FROM pg_control_system());
DROP OWNED BY regress_origin;
DROP ROLE regress_origin;
