#!/usr/bin/env bash
# Upgrade test: every released version of the SQL, kept as sql/pg_shard_id--VERSION.sql, upgrades
# in place to the current version with ALTER EXTENSION pg_shard_id UPDATE, and the result is the
# same as a fresh install; tables that use every function are kept, not dropped or rewritten.
#
# Fails when the SQL changes without an upgrade script, three ways:
#   - the committed install script of the current version differs from the generated one
#     (a change of SQL needs a new version: bump Cargo.toml's version, commit the new
#     `cargo pgrx schema pg15 --out sql/pg_shard_id--NEW.sql`, write sql/pg_shard_id--OLD--NEW.sql);
#   - no update path leads from a released version to the current one;
#   - the catalog after the update differs from a fresh install's (functions with their
#     definitions, labels, comments and privileges; the extension's members).
# Needs the current build installed (scripts/test.sh does that). Ends with "N passed, M failed".
source "$(dirname "$0")/../../scripts/lib.sh"

EXT_DIR="$("$PG_CONFIG" --sharedir)/extension"

# The released versions before the current one, oldest first; their install scripts go into the
# server's extension folder for this test only (packages ship the current version's script and
# the upgrade scripts: that is all ALTER EXTENSION ... UPDATE needs).
old_versions=()
copied=()
for f in "$REPO"/sql/pg_shard_id--*.sql; do
    v="$(basename "$f" .sql)"
    v="${v#pg_shard_id--}"
    [[ "$v" == *--* || "$v" == "$EXTENSION_VERSION" ]] && continue
    old_versions+=("$v")
done
mapfile -t old_versions < <(printf '%s\n' "${old_versions[@]}" | sort -V)
cleanup() {
    for c in "${STARTED_CLUSTERS[@]}"; do stop_cluster "$c"; done
    for f in "${copied[@]}"; do rm -f "$f"; done
}
trap cleanup EXIT
for v in "${old_versions[@]}"; do
    cp "$REPO/sql/pg_shard_id--$v.sql" "$EXT_DIR/" && copied+=("$EXT_DIR/pg_shard_id--$v.sql")
done

# Every function of schemas public and _pg_shard_id, whole (arguments, result, language, body or C symbol, labels,
# cost, SET options), with its comment and privileges.
functions() {
    q -d "$1" -c "SELECT string_agg(p.oid::regprocedure::text || E'\n' || pg_get_functiondef(p.oid)
                                     || 'comment: ' || coalesce(obj_description(p.oid, 'pg_proc'), '(none)')
                                     || E'\nacl: ' || coalesce(p.proacl::text, '(default)'),
                                     E'\n\n' ORDER BY p.oid::regprocedure::text)
                  FROM pg_proc p
                  WHERE p.pronamespace IN ('public'::regnamespace, to_regnamespace('_pg_shard_id'))"
}
# The extension's members, but for the test build's schema "tests" (#[pg_test] functions).
members() {
    q -d "$1" -c "SELECT string_agg(i.type || ' ' || i.identity, E'\n' ORDER BY i.type, i.identity)
                  FROM pg_depend d, pg_identify_object(d.classid, d.objid, d.objsubid) i
                  WHERE d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e'
                    AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'pg_shard_id')
                    AND i.schema IS DISTINCT FROM 'tests' AND i.identity <> 'tests'"
}
# What the user's tables are made of and hold: files (a rewrite changes them), defaults and
# generated expressions, constraints, indexes, views, and the rows (through the views too). The
# extension's own tables (members, such as _pg_shard_id.origin) are the members check's business.
user_objects() {
    local user_rel="NOT EXISTS (SELECT FROM pg_depend d WHERE d.classid = 'pg_class'::regclass
                                 AND d.objid = %s AND d.deptype = 'e')"
    q -d "$1" -c "SELECT concat_ws(E'\n',
        (SELECT string_agg(relname || ' ' || relkind::text || ' ' || relfilenode, ', ' ORDER BY relname)
           FROM pg_class c WHERE relnamespace = 'public'::regnamespace AND $(printf "$user_rel" c.oid)),
        (SELECT string_agg(adrelid::regclass || '.' || adnum || ' ' || pg_get_expr(adbin, adrelid), E'\n'
                           ORDER BY adrelid::regclass::text, adnum) FROM pg_attrdef
          WHERE $(printf "$user_rel" adrelid)),
        (SELECT string_agg(conname || ' ' || pg_get_constraintdef(oid), E'\n' ORDER BY conname)
           FROM pg_constraint WHERE connamespace = 'public'::regnamespace),
        (SELECT string_agg(pg_get_indexdef(indexrelid), E'\n' ORDER BY indexrelid::regclass::text)
           FROM pg_index WHERE indrelid::regclass::text NOT LIKE 'pg_%' AND $(printf "$user_rel" indrelid)),
        (SELECT string_agg(c.relname || ': ' || pg_get_viewdef(c.oid), E'\n' ORDER BY c.relname)
           FROM pg_class c WHERE c.relkind = 'v' AND c.relnamespace = 'public'::regnamespace
            AND $(printf "$user_rel" c.oid)),
        (SELECT md5(string_agg(p::text, ',' ORDER BY id)) FROM photos p),
        (SELECT md5(string_agg(e::text, ',' ORDER BY id)) FROM events e),
        (SELECT md5(string_agg(f::text, ',' ORDER BY id)) FROM photo_fields f),
        (SELECT md5(string_agg(f::text, ',' ORDER BY id)) FROM photo_fields_at f))"
}

# Tables, indexes and views over every function, made with the old version's SQL.
USER_SCHEMA="
CREATE SEQUENCE photos_id_seq;
CREATE TABLE photos (
    id bigint PRIMARY KEY DEFAULT next_shard_id('photos_id_seq', 5),
    made_at timestamptz GENERATED ALWAYS AS (shard_id_extract_timestamp(id, '2026-01-01 00:00:00+00')) STORED,
    shard integer GENERATED ALWAYS AS (shard_id_extract_shard(id)) STORED,
    code text GENERATED ALWAYS AS (shard_id_to_shortcode(id)) STORED,
    CONSTRAINT photos_shard CHECK (shard_id_extract_shard(id) = 5)
);
CREATE INDEX photos_made_at ON photos (shard_id_extract_timestamp(id, '2026-01-01 00:00:00+00'));
CREATE INDEX photos_seq ON photos (shard_id_extract_seq(id));
CREATE INDEX photos_route ON photos (shard_id_shard_for(id, 64), shard_id_shard_for(code, 64));
CREATE INDEX photos_code ON photos (shard_id_from_shortcode(code));
CREATE VIEW photo_fields AS
    SELECT id, (shard_id_decode(id)).*, shard_id_extract_timestamp(id) AS made,
           shard_id_compose(shard_id_extract_timestamp(id), 5, shard_id_extract_seq(id)) = id AS recomposes
      FROM photos;
CREATE VIEW photo_fields_at AS
    SELECT id, d.*, shard_id_compose(d.ts, d.shard, d.seq, '2026-01-01 00:00:00+00') = id AS recomposes
      FROM photos, shard_id_decode(id, '2026-01-01 00:00:00+00') d;
CREATE VIEW recent_photos AS
    SELECT * FROM photos WHERE id >= shard_id_lower_bound(now() - interval '1 hour')
                           AND id >= shard_id_lower_bound(now() - interval '1 hour', '2026-01-01 00:00:00+00');
CREATE TABLE events (id bigint NOT NULL DEFAULT next_shard_id('photos_id_seq', 6), note text)
    PARTITION BY RANGE (id);
DO \$\$
DECLARE r record; i int := 0;
BEGIN
    FOR r IN SELECT * FROM shard_id_partition_bounds(date_trunc('day', now()) - interval '1 day',
                                                     date_trunc('day', now()) + interval '2 days',
                                                     interval '1 day') LOOP
        EXECUTE format('CREATE TABLE events_%s PARTITION OF events FOR VALUES FROM (%s) TO (%s)', i, r.lower, r.upper);
        i := i + 1;
    END LOOP;
END
\$\$;
INSERT INTO photos DEFAULT VALUES;
INSERT INTO photos SELECT FROM generate_series(2, 20000);
INSERT INTO events (note) SELECT 'e' || g FROM generate_series(1, 3000) g;
"
# Every function once, through the SQL of whichever version is installed.
EVERY_FUNCTION="SELECT count(*) FROM (
    SELECT next_shard_id('photos_id_seq', 7), shard_id_decode(1::bigint << 30), shard_id_to_shortcode(42),
           shard_id_from_shortcode(shard_id_to_shortcode(42)), shard_id_shard_for('k', 8),
           shard_id_shard_for(42, 8), shard_id_lower_bound(now()), shard_id_compose(now(), 1, 1),
           (SELECT count(*) FROM shard_id_partition_bounds(now(), now() + interval '2 days', interval '1 day')),
           (SELECT guard FROM pg_shard_id_info())) x"

say "PostgreSQL $PG_MAJOR: upgrade test, released versions ${old_versions[*]:-(none)} -> $EXTENSION_VERSION"
start_cluster upgrade yes "fsync = off"

q -c "CREATE DATABASE fresh" -c "CREATE DATABASE released"
q -d fresh -c "SET client_min_messages = warning; CREATE EXTENSION pg_shard_id"
check "fresh install: version $EXTENSION_VERSION" "$(q -d fresh -c "SELECT extversion FROM pg_extension WHERE extname = 'pg_shard_id'")" "$EXTENSION_VERSION"
fresh_functions="$(functions fresh)"
fresh_members="$(members fresh)"
check "fresh install: functions found" "$([ "$(echo "$fresh_functions" | grep -c '^CREATE OR REPLACE FUNCTION')" -ge 15 ] && echo yes)" yes

# The committed install script of this version, run as plain SQL, makes the same functions
# (without registering its configuration table, which only CREATE EXTENSION can do).
if [ -f "$REPO/sql/pg_shard_id--$EXTENSION_VERSION.sql" ]; then
    sed -e "s/MODULE_PATHNAME/pg_shard_id/g" -e "s/@extschema@/public/g" -e "/pg_extension_config_dump/d" \
        "$REPO/sql/pg_shard_id--$EXTENSION_VERSION.sql" |
        q -d released -c "SET client_min_messages = warning" -f - >/dev/null
    if [ "$(functions released)" = "$fresh_functions" ]; then
        check "sql/pg_shard_id--$EXTENSION_VERSION.sql is the install script this build generates" same same
    else
        diff <(functions released) <(echo "$fresh_functions") | head -40 | sed 's/^/    /' || true
        echo "  The SQL changed: bump the version in Cargo.toml, commit the generated script as"
        echo "  sql/pg_shard_id--NEW.sql (cargo pgrx schema pg15 --out ...) and write sql/pg_shard_id--$EXTENSION_VERSION--NEW.sql."
        check "sql/pg_shard_id--$EXTENSION_VERSION.sql is the install script this build generates" differs same
    fi
else
    check "sql/pg_shard_id--$EXTENSION_VERSION.sql is committed (the released install script)" missing present
fi

for old in "${old_versions[@]}"; do
    db="from_${old//./_}"
    say "$old -> $EXTENSION_VERSION"
    q -c "CREATE DATABASE $db"
    check "$old: an update path to $EXTENSION_VERSION" "$(q -d "$db" -c "SELECT count(*) FROM pg_extension_update_paths('pg_shard_id')
                                                   WHERE source = '$old' AND target = '$EXTENSION_VERSION' AND path IS NOT NULL")" 1
    q -d "$db" -c "SET client_min_messages = warning; CREATE EXTENSION pg_shard_id VERSION '$old'"
    # a publication FOR ALL TABLES, as CDC tools create: it publishes the extension's own table
    # too, which had no replica identity before 0.6.0 (its DELETE failed every first id, 55000)
    q -d "$db" -c "SET client_min_messages = error; CREATE PUBLICATION cdc FOR ALL TABLES"
    q -d "$db" -c "$USER_SCHEMA" >/dev/null
    # the state between installing the new library (and restarting) and ALTER EXTENSION UPDATE:
    # the old SQL over the new library
    check "$old: every function works with the old SQL on the new library" "$(q -d "$db" -c "$EVERY_FUNCTION")" 1
    before="$(user_objects "$db")"
    max_before="$(q -d "$db" -c "SELECT max(id) FROM photos")"
    q -d "$db" -c "ALTER EXTENSION pg_shard_id UPDATE"
    check "$old: updated to $EXTENSION_VERSION" "$(q -d "$db" -c "SELECT extversion FROM pg_extension WHERE extname = 'pg_shard_id'")" "$EXTENSION_VERSION"
    after="$(user_objects "$db")"
    if [ "$after" = "$before" ]; then
        check "$old: tables, files, defaults, indexes, views and rows unchanged by the update" same same
    else
        diff <(echo "$before") <(echo "$after") | head -20 | sed 's/^/    /' || true
        check "$old: tables, files, defaults, indexes, views and rows unchanged by the update" changed same
    fi
    if [ "$(functions "$db")" = "$fresh_functions" ]; then
        check "$old: functions after the update = a fresh $EXTENSION_VERSION install" same same
    else
        diff <(functions "$db") <(echo "$fresh_functions") | head -40 | sed 's/^/    /' || true
        check "$old: functions after the update = a fresh $EXTENSION_VERSION install" differs same
    fi
    if [ "$(members "$db")" = "$fresh_members" ]; then
        check "$old: extension members after the update = a fresh install's" "$(echo "$fresh_members" | wc -l) members" "$(echo "$fresh_members" | wc -l) members"
    else
        diff <(members "$db") <(echo "$fresh_members") | sed 's/^/    /' || true
        check "$old: extension members after the update = a fresh install's" differ same
    fi
    check "$old: every function works after the update" "$(q -d "$db" -c "$EVERY_FUNCTION")" 1
    check "$old: _pg_shard_id.origin's replica identity after the update = a fresh install's (full)" \
        "$(q -d "$db" -c "SELECT relreplident FROM pg_class WHERE oid = '_pg_shard_id.origin'::regclass")/$(q -d fresh -c "SELECT relreplident FROM pg_class WHERE oid = '_pg_shard_id.origin'::regclass")" \
        f/f
    q -d "$db" -c "INSERT INTO photos SELECT FROM generate_series(1, 1000)" \
        -c "INSERT INTO events (note) SELECT 'new' FROM generate_series(1, 1000)"
    check "$old: new ids are above every old one" \
        "$(q -d "$db" -c "SELECT count(*) FROM photos WHERE id > $max_before")" 1000
    check "$old: after the first id, _pg_shard_id.origin holds this server and its epoch only" \
        "$(q -d "$db" -c "SELECT count(*) FILTER (WHERE o.epoch = i.epoch AND o.system_identifier = c.system_identifier) > 0
                                  AND count(*) FILTER (WHERE o.system_identifier <> c.system_identifier) = 0
                           FROM _pg_shard_id.origin o, pg_shard_id_info() i, pg_control_system() c")" t
    check "$old: no duplicates" "$(q -d "$db" -c "SELECT count(*) - count(DISTINCT id) FROM (SELECT id FROM photos UNION ALL SELECT id FROM events) x")" 0
    check "$old: decoded views agree with the stored columns" \
        "$(q -d "$db" -c "SELECT count(*) FROM photo_fields f JOIN photos p USING (id)
                          WHERE f.ts <> p.made_at OR f.shard <> p.shard OR NOT f.recomposes")" 0
    check "$old: indexes valid" "$(q -d "$db" -c "SELECT count(*) FROM pg_index WHERE NOT indisvalid")" 0
    check "$old: the expression index on the IMMUTABLE decode answers a time range" \
        "$(q -d "$db" -c "SET enable_seqscan = off" -c "EXPLAIN (COSTS OFF) SELECT count(*) FROM photos
              WHERE shard_id_extract_timestamp(id, '2026-01-01 00:00:00+00') >= now() - interval '1 day'" |
           grep -c photos_made_at)" 1
    check "$old: a plain DROP EXTENSION refuses (the tables depend on it)" \
        "$(error_of -d "$db" -c "DROP EXTENSION pg_shard_id" | grep -o 2BP01)" 2BP01
    # dump and restore of the upgraded database
    as_pg "$PG_BIN/pg_dump" -h "$PGHOST" -p "$PGPORT" -U postgres -Fc -f "$PGHOST/$db.dump" "$db"
    q -c "CREATE DATABASE ${db}_restored"
    as_pg "$PG_BIN/pg_restore" -h "$PGHOST" -p "$PGPORT" -U postgres --exit-on-error -d "${db}_restored" "$PGHOST/$db.dump"
    check "$old: pg_dump/pg_restore of the updated database: same rows" \
        "$(user_objects "${db}_restored" | tail -4 | md5sum | cut -c1-12)" "$(user_objects "$db" | tail -4 | md5sum | cut -c1-12)"
    check "$old: restored database issues new ids" \
        "$(q -d "${db}_restored" -c "INSERT INTO photos DEFAULT VALUES RETURNING id > $max_before")" t
done

echo
echo "upgrade: $PASSED passed, $FAILED failed"
[ "$FAILED" = 0 ]
