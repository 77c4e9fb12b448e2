-- Routing keys to shards, URL shortcodes.
SET TimeZone = 'UTC';
SET DateStyle = 'ISO';

-- Instagram: user 31341 lives on logical shard 31341 % 2000
SELECT shard_id_shard_for(31341, 2000) AS instagram_shard,
       shard_id_shard_for(-1, 2000) AS negative_key,
       shard_id_shard_for(12345, 1) AS one_shard;
-- text keys: 64-bit FNV-1a of the UTF-8 bytes, mod shard_count (pinned values)
SELECT k, shard_id_shard_for(k, 2000) AS shard
  FROM (VALUES (''), ('a'), ('foobar'), ('alice@example.com'), ('ünïcode')) v(k);
SELECT shard_id_shard_for(1, 0);
SELECT shard_id_shard_for('x', 8193);
SELECT shard_id_shard_for(1, 8192) AS max_count_ok;

-- shortcodes: 11 URL-safe base64 characters of the id's 8 bytes
SELECT shard_id_to_shortcode(11637205501278089) AS instagram,
       shard_id_to_shortcode(0) AS zero,
       shard_id_to_shortcode(9223372036854775807) AS max;
SELECT shard_id_from_shortcode('AClX-gwU94k') AS id;
SELECT count(*) AS round_trip_failures
  FROM generate_series(0, 9223372036854775807, 9007199254740993) g
 WHERE shard_id_from_shortcode(shard_id_to_shortcode(g)) <> g;
SELECT shard_id_to_shortcode(-1);
SELECT shard_id_from_shortcode('AClX-gwU94');
SELECT shard_id_from_shortcode('AClX+gwU94k');
SELECT shard_id_from_shortcode('AClX-gwU94l');
SELECT shard_id_from_shortcode('gAAAAAAAAAA');
-- messages quote at most a short prefix of the input, and count characters, not bytes
SELECT shard_id_from_shortcode(repeat('x', 1000000));
SELECT shard_id_from_shortcode('ééééééééééé');
SELECT shard_id_from_shortcode('éééééééééé');
SELECT shard_id_shard_for(repeat('é', 100000), 2000) AS long_key_shard;
