# Logical copies of the data, run for real (issue 29): a blue/green switchover through logical
# replication (publications FOR ALL TABLES and FOR TABLE; during a borrow lead, and with the
# subscriber's clock behind under libfaketime), a CDC consumer (pg_recvlogical with test_decoding)
# of a FOR ALL TABLES publication, and partial and plain dumps and COPY into another database of
# the same server and into another server, each into a table with and without an index on the id.
# None of them carries the lease or (but for FOR ALL TABLES) the origin table: new ids must start
# above the rows that came along, because the data itself is the floor.
# Sourced by tests/cluster/run.sh after lifecycle.sh (at, wait_for, with_fake_clock).

# switchover PUBLICATION MODE: BLUE writes, GREEN is made from BLUE's schema-only dump and
# subscribes to PUBLICATION ("all": FOR ALL TABLES, "some": FOR TABLE photos, events); writes move
# to GREEN once it has caught up, and GREEN takes 200,000 inserts. MODE "lead": BLUE borrows and
# its newest ids are >= 5 s ahead of the clock; "behind": BLUE waits for its clock and GREEN's clock
# is 3 s behind BLUE's (libfaketime).
switchover() {
    local pub="$1" mode="$2" name="switchover ($1 tables, $2)"
    say "logical replication: $name"
    no_fake_clock
    local overflow=wait
    [ "$mode" = lead ] && overflow=borrow
    start_cluster blue yes "wal_level = logical" "fsync = off" "pg_shard_id.overflow = $overflow"
    q -c "SET client_min_messages = warning; CREATE EXTENSION pg_shard_id" -c "CREATE SEQUENCE s" \
      -c "CREATE TABLE photos (id bigint PRIMARY KEY DEFAULT next_shard_id('s', 7), n int)" \
      -c "CREATE TABLE events (id bigint DEFAULT next_shard_id('s', 7), n int)" \
      -c "CREATE INDEX events_id ON events (id)" \
      -c "CREATE TABLE settings_kv (k text PRIMARY KEY, v text)"
    "$PG_BIN/pg_dump" --schema-only -f "$RUN_DIR/blue/schema.sql" postgres
    if [ "$pub" = all ]; then
        q -c "CREATE PUBLICATION pub FOR ALL TABLES"
    else
        q -c "CREATE PUBLICATION pub FOR TABLE photos, events"
    fi
    local blue="host=$PGHOST port=$PGPORT user=postgres dbname=postgres"
    [ "$mode" = behind ] && with_fake_clock -3
    start_cluster green yes "fsync = off" "pg_shard_id.overflow = $overflow"
    no_fake_clock
    q -f "$RUN_DIR/blue/schema.sql" >/dev/null
    q -c "CREATE SUBSCRIPTION sub CONNECTION '$blue' PUBLICATION pub"
    at blue
    check "$name: BLUE issues ids with the publication in place" \
        "$(q -c "INSERT INTO photos (n) SELECT g FROM generate_series(1, 20000) g" \
             -c "INSERT INTO events (n) SELECT g FROM generate_series(1, 20000) g" \
             -c "SELECT count(*) FROM photos" 2>&1)" 20000
    if [ "$mode" = lead ]; then
        # INCREMENT 1024: every value has the same remainder, so every id takes a millisecond of
        # its own and borrow runs ahead by one millisecond per id
        q -c "ALTER SEQUENCE s INCREMENT 1024" \
          -c "INSERT INTO photos (n) SELECT g FROM generate_series(20001, 27000) g" \
          -c "ALTER SEQUENCE s INCREMENT 1" \
          -c "INSERT INTO events (n) SELECT g FROM generate_series(20001, 21000) g" ||
            echo "  (BLUE failed to draw ids)"
        local lead
        lead="$(q -c "SELECT coalesce((extract(epoch FROM shard_id_extract_timestamp(max(id)) - clock_timestamp()) * 1000)::bigint, 0) FROM photos")"
        echo "  BLUE's newest id is $lead ms ahead of its clock"
        check "$name: BLUE's lead at the switchover is at least 5 s" "$([ "$lead" -ge 5000 ] && echo t || echo f)" t
    fi
    local rows; rows="$(q -c "SELECT (SELECT count(*) FROM photos) || '/' || (SELECT count(*) FROM events)")"
    at green
    wait_for 120 "SELECT (SELECT count(*) FROM photos) || '/' || (SELECT count(*) FROM events) = '$rows'" ||
        echo "  GREEN did not catch up: $(q -c "SELECT (SELECT count(*) FROM photos) || '/' || (SELECT count(*) FROM events)") of $rows"
    if [ "$pub" = all ]; then
        check "$name: the origin table replicated too (FOR ALL TABLES)" \
            "$(q -c "SELECT count(*) > 0 FROM _pg_shard_id.origin WHERE system_identifier <> (SELECT system_identifier FROM pg_control_system())")" t
    fi
    check "$name: shard_id_check() on the subscriber flags its DEFAULT's shard in replicated rows" \
        "$(q -c "SELECT status FROM shard_id_check() WHERE \"check\" = 'replication'")" warning
    # the switchover: BLUE stops writing, GREEN stops applying and takes the writes
    q -c "ALTER SUBSCRIPTION sub DISABLE"
    stop_cluster blue
    local newest; newest="$(q -c "SELECT coalesce(greatest((SELECT max(id) FROM photos), (SELECT max(id) FROM events)), 0)")"
    local inserted
    inserted="$(q -c "WITH i AS (INSERT INTO photos (n) SELECT g FROM generate_series(1000001, 1100000) g
                                 ON CONFLICT DO NOTHING RETURNING 1) SELECT count(*) FROM i" \
                  -c "INSERT INTO events (n) SELECT g FROM generate_series(1000001, 1100000) g" || echo 0)"
    check "$name: 200,000 inserts on GREEN: 0 primary-key violations of 100,000" "$((100000 - inserted))" 0
    check "$name: 0 repeated ids in the table without a unique key" \
        "$(q -c "SELECT count(*) - count(DISTINCT id) FROM events")" 0
    check "$name: every new id is above BLUE's newest" \
        "$(q -c "SELECT (SELECT min(id) FROM photos WHERE n > 1000000) > $newest
                    AND (SELECT min(id) FROM events WHERE n > 1000000) > $newest")" t
    check "$name: new ids continue right above the data, not 10 minutes ahead (< 3 s above BLUE's newest)" \
        "$(q -c "SELECT shard_id_extract_timestamp(min(id)) - shard_id_extract_timestamp($newest) BETWEEN interval '0' AND interval '3 s'
                   FROM (SELECT id FROM photos WHERE n > 1000000 UNION ALL SELECT id FROM events WHERE n > 1000000) x")" t
    check "$name: shard_id_check() after the switchover: replication ok" \
        "$(q -c "SELECT status FROM shard_id_check() WHERE \"check\" = 'replication'")" ok
    if [ "$mode" = lead ]; then
        check "$name: shard_id_check()'s clock row names the data, not a clock step" \
            "$(q -c "SELECT detail ~ 'above rows already stored' FROM shard_id_check() WHERE \"check\" = 'clock'")" t
    fi
    q -c "DROP SUBSCRIPTION sub" >/dev/null 2>&1 || q -c "ALTER SUBSCRIPTION sub SET (slot_name = NONE)" -c "DROP SUBSCRIPTION sub"
    stop_cluster green
}
test_switchover_all_tables_lead() { switchover all lead; }
test_switchover_some_tables_lead() { switchover some lead; }
test_switchover_all_tables_behind() { switchover all behind; }
test_switchover_some_tables_behind() { switchover some behind; }

test_cdc_stream() {
    say "CDC: pg_recvlogical (test_decoding) reads a FOR ALL TABLES publication's slot while ids are drawn"
    no_fake_clock
    start_cluster cdc yes "wal_level = logical" "fsync = off"
    q -c "SET client_min_messages = warning; CREATE EXTENSION pg_shard_id" -c "CREATE SEQUENCE s" \
      -c "CREATE TABLE t (id bigint PRIMARY KEY DEFAULT next_shard_id('s', 3), n int)" \
      -c "CREATE PUBLICATION cdc FOR ALL TABLES WITH (publish = 'insert, update, delete, truncate')"
    "$PG_BIN/pg_recvlogical" -d postgres --slot cdc --create-slot -P test_decoding
    "$PG_BIN/pg_recvlogical" -d postgres --slot cdc --start --no-loop -F 1 -f "$PGHOST/stream.txt" &
    local consumer=$!
    local i
    for i in $(seq 1 20); do
        q -c "INSERT INTO t (n) SELECT g FROM generate_series(1, 500) g" 2>&1 | head -1 || true
    done
    check "CDC: 10,000 rows inserted through the DEFAULT" "$(q -c "SELECT count(*) FROM t")" 10000
    local lsn; lsn="$(q -c "SELECT pg_current_wal_lsn()")"
    wait_for 60 "SELECT confirmed_flush_lsn >= '$lsn' FROM pg_replication_slots WHERE slot_name = 'cdc'" ||
        echo "  the consumer did not confirm $lsn"
    kill "$consumer" 2>/dev/null || true
    wait "$consumer" 2>/dev/null || true
    grep -o 'table public\.t: INSERT: id\[bigint\]:[0-9]*' "$PGHOST/stream.txt" | sed 's/.*://' | sort >"$PGHOST/streamed"
    q -c "SELECT id FROM t" | sort >"$PGHOST/stored"
    check "CDC: every insert reached the stream with its id" \
        "$(wc -l <"$PGHOST/streamed") $(comm -3 "$PGHOST/streamed" "$PGHOST/stored" | wc -l)" "10000 0"
    q -c "SELECT pg_drop_replication_slot('cdc')" >/dev/null
    stop_cluster cdc
}

# copy_data METHOD FROM_DB TO_DB: the schema "app" of FROM_DB (the source, in $RUN_DIR/src) into
# TO_DB of the cluster psql points at now, which has the extension already.
copy_data() {
    local method="$1" from="host=$RUN_DIR/src port=$SRC_PORT user=postgres dbname=$2" to="$3"
    case "$method" in
        dump_schema) # pg_dump -n app: schema and data of one schema
            "$PG_BIN/pg_dump" -n app "$from" | q -d "$to" >/dev/null ;;
        schema_then_data) # --schema-only, then a --data-only load
            "$PG_BIN/pg_dump" -n app --schema-only "$from" | q -d "$to" >/dev/null
            "$PG_BIN/pg_dump" -n app --data-only "$from" | q -d "$to" >/dev/null ;;
        copy) # the tables made from the schema, the rows by COPY
            "$PG_BIN/pg_dump" -n app --schema-only "$from" | q -d "$to" >/dev/null
            local t
            for t in indexed plain; do
                psql -X -q "$from" -c "\\copy app.$t TO STDOUT" | q -d "$to" -c "\\copy app.$t FROM STDIN"
            done ;;
    esac
}

test_partial_dumps() {
    say "pg_dump -n, --schema-only + --data-only, COPY: into another database and another server"
    no_fake_clock
    start_cluster src yes "fsync = off"
    SRC_PORT="$PGPORT"
    # ids 17 s ahead of the clock (the test clock), in a table with an index on the id and one
    # without
    q -c "SET client_min_messages = warning; CREATE EXTENSION pg_shard_id" -c "CREATE SCHEMA app" \
      -c "CREATE SEQUENCE app.s" -c "CREATE SEQUENCE app.s2" \
      -c "CREATE TABLE app.indexed (id bigint PRIMARY KEY DEFAULT next_shard_id('app.s', 2), n int)" \
      -c "CREATE TABLE app.plain (id bigint DEFAULT next_shard_id('app.s2', 2), n int)" \
      -c "SET pg_shard_id.test_clock_offset_ms = 17000" \
      -c "INSERT INTO app.indexed (n) SELECT g FROM generate_series(1, 5000) g" \
      -c "INSERT INTO app.plain (n) SELECT g FROM generate_series(1, 5000) g"
    start_cluster dst yes "fsync = off"
    local where method db
    for where in src dst; do
        at "$where"
        for method in dump_schema schema_then_data copy; do
            db="copy_${method}"
            q -c "CREATE DATABASE $db" -d postgres
            q -d "$db" -c "SET client_min_messages = warning; CREATE EXTENSION pg_shard_id"
            copy_data "$method" postgres "$db"
            q -d "$db" -c "INSERT INTO app.indexed (n) SELECT g FROM generate_series(1000001, 1005000) g" \
                       -c "INSERT INTO app.plain (n) SELECT g FROM generate_series(1000001, 1005000) g" 2>&1 | head -2
            local label="$method into $([ "$where" = src ] && echo 'another database of the server' || echo 'another server')"
            check "$label: new ids above the copied rows, with an index on the id" \
                "$(q -d "$db" -c "SELECT min(id) FILTER (WHERE n > 1000000) > max(id) FILTER (WHERE n <= 1000000) AND count(*) = 10000 FROM app.indexed")" t
            check "$label: new ids above the copied rows, without an index" \
                "$(q -d "$db" -c "SELECT min(id) FILTER (WHERE n > 1000000) > max(id) FILTER (WHERE n <= 1000000) AND count(DISTINCT id) = 10000 FROM app.plain")" t
        done
    done
    check "the server log names the unindexed column the ids jumped ahead for" \
        "$(grep -c 'app.plain.id (no btree index has it as first column) may hold rows whose newest id no index can read' "$RUN_DIR/dst/server.log")" 3
    stop_cluster src
    stop_cluster dst
}

test_temp_table_of_another_session() {
    say "the data floor skips another session's temporary table (its buffers are that session's)"
    no_fake_clock
    start_cluster temp yes "fsync = off"
    q -c "SET client_min_messages = warning; CREATE EXTENSION pg_shard_id" -c "CREATE SEQUENCE s"
    # a session holds a temporary table whose DEFAULT draws from s, with a row, and stays
    psql -X -q -c "CREATE TEMP TABLE mine (id bigint PRIMARY KEY DEFAULT next_shard_id('s', 1))" \
         -c "INSERT INTO mine VALUES (shard_id_compose(now(), 1, 0))" -c "SELECT pg_sleep(20)" >/dev/null 2>&1 &
    local holder=$!
    wait_for 10 "SELECT count(*) = 1 FROM pg_class WHERE relname = 'mine' AND relpersistence = 't'" || true
    sleep 0.5
    check "temp: another session's first id of s works beside that session's temporary table" \
        "$(q -c "SELECT next_shard_id('s', 1) > 0" 2>&1 | head -1)" t
    check "temp: shard_id_check() works beside it too" \
        "$(q -c "SELECT count(*) > 0 FROM shard_id_check()" 2>&1 | head -1)" t
    kill "$holder" 2>/dev/null || true
    wait "$holder" 2>/dev/null || true
    stop_cluster temp
}

test_publications_of_every_kind() {
    say "the origin record under publications of every kind at once (FOR ALL TABLES, FOR TABLES IN SCHEMA, row filter, column list, publish subsets)"
    no_fake_clock
    start_cluster pubs yes "wal_level = logical" "fsync = off"
    q -c "SET client_min_messages = warning; CREATE EXTENSION pg_shard_id" -c "CREATE SEQUENCE s" \
      -c "CREATE TABLE t (id bigint PRIMARY KEY DEFAULT next_shard_id('s', 1), n int, note text)" \
      -c "CREATE PUBLICATION p_all FOR ALL TABLES" \
      -c "CREATE PUBLICATION p_all_deletes FOR ALL TABLES WITH (publish = 'delete')" \
      -c "CREATE PUBLICATION p_schema FOR TABLES IN SCHEMA _pg_shard_id WITH (publish = 'update, delete')" \
      -c "CREATE PUBLICATION p_filtered FOR TABLE t (id, n) WHERE (n > 0) WITH (publish = 'insert')"
    check "publications: the first id records this server" \
        "$(q -c "INSERT INTO t (n) VALUES (1)" -c "SELECT count(*) FROM _pg_shard_id.origin" 2>&1)" 1
    # rows of another server (as after a restore): the next backend replaces them, a DELETE
    q -c "INSERT INTO _pg_shard_id.origin (epoch, system_identifier, database) SELECT epoch, 42, database FROM _pg_shard_id.origin"
    check "publications: taking in another server's rows deletes them, under every publication" \
        "$(q -c "INSERT INTO t (n) VALUES (2)" -c "SELECT count(*) FILTER (WHERE system_identifier = 42) || '/' || (count(*) > 0) FROM _pg_shard_id.origin" 2>&1)" 0/true
    check "publications: shard_id_check() row publication" \
        "$(q -c "SELECT status FROM shard_id_check() WHERE \"check\" = 'publication'")" ok
    # the SQL before 0.6.0 (no replica identity): recording fails, the id does not
    q -c "ALTER TABLE _pg_shard_id.origin REPLICA IDENTITY DEFAULT" \
      -c "INSERT INTO _pg_shard_id.origin (epoch, system_identifier, database) SELECT epoch, 42, database FROM _pg_shard_id.origin"
    local out; out="$(q -c "INSERT INTO t (n) VALUES (3)" -c "SELECT count(*) FROM t" 2>&1)"
    check "publications: without a replica identity the id is issued, with a WARNING" \
        "$(echo "$out" | grep -c 'WARNING:  pg_shard_id: could not record this server')/$(echo "$out" | tail -1)" 1/3
    check "publications: shard_id_check() fails the publication row, naming the update" \
        "$(q -c "SELECT status || ' ' || (detail ~ 'ALTER EXTENSION pg_shard_id UPDATE') FROM shard_id_check() WHERE \"check\" = 'publication'")" "failed true"
    stop_cluster pubs
}
