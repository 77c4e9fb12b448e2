-- Text functions in every server encoding: a key routes to the same shard in a UTF8, LATIN1 and
-- SQL_ASCII database (its UTF-8 bytes are hashed), and bytes with no UTF-8 form get a SQLSTATE.
SET client_encoding = 'UTF8';
SELECT shard_id_shard_for('ünïcode', 2000) AS in_utf8, shard_id_shard_for('alice@example.com', 2000) AS ascii_key;
CREATE DATABASE regress_shard_id_latin1 ENCODING 'LATIN1' LOCALE 'C' TEMPLATE template0;
CREATE DATABASE regress_shard_id_sql_ascii ENCODING 'SQL_ASCII' LOCALE 'C' TEMPLATE template0;

\c regress_shard_id_latin1
SET client_encoding = 'UTF8';
SET client_min_messages = warning;
CREATE EXTENSION pg_shard_id;
SELECT shard_id_shard_for('ünïcode', 2000) AS in_latin1, shard_id_shard_for('alice@example.com', 2000) AS ascii_key;
SELECT shard_id_from_shortcode('AClX-gwU94k') AS id, shard_id_to_shortcode(11637205501278089) AS code;
SELECT shard_id_from_shortcode('AClX-gwU94ü');

\c regress_shard_id_sql_ascii
SET client_encoding = 'UTF8';
SET client_min_messages = warning;
CREATE EXTENSION pg_shard_id;
SELECT shard_id_shard_for('ünïcode', 2000) AS in_sql_ascii;
SELECT shard_id_from_shortcode('AClX-gwU94k') AS id;
-- SQL_ASCII stores any bytes: one that is not UTF-8 is refused with PostgreSQL's own error
SELECT shard_id_shard_for(convert_from('\xff'::bytea, 'SQL_ASCII'), 2000);
SELECT shard_id_from_shortcode(convert_from('\x41436c582d67775539346bff'::bytea, 'SQL_ASCII'));

\c pg_shard_id_regress
DROP DATABASE regress_shard_id_latin1;
DROP DATABASE regress_shard_id_sql_ascii;
