#!/usr/bin/env bash
# Builds the release packages into target/packages/ (not committed), for each major:
#   postgresql-NN-pg-shard-id_VERSION_amd64.deb, named and laid out as the PostgreSQL apt
#       repository's (apt.postgresql.org) and Debian's extension packages are: the library in
#       /usr/lib/postgresql/NN/lib, the control file and scripts in /usr/share/postgresql/NN/extension;
#       Depends on postgresql-NN and the glibc the library needs. Built against this machine's
#       server of that major (Debian's 15; the relocatable builds of the wheels for 16-18, see
#       lib.sh: the same major's ABI), tested by tests/package/run.sh in that layout;
#   pg_shard_id-VERSION-pgNN-linux-x86_64.tar.gz with lib/ and extension/ inside, for any other
#       layout: into `pg_config --pkglibdir` and `pg_config --sharedir`/extension of that major's
#       pg_config (INSTALL.txt inside says so);
#   The SQL edition (any PostgreSQL 15+, no library; issue 56):
#       pg_shard_id_sql-VERSION.tar.gz with scripts/sql_edition.sh's four files (the plain script,
#       the pg_tle installer, the extension script and its control file) and a SHA256SUMS.
# Each package holds the library, the control file, the current version's install script and every
# upgrade script (sql/pg_shard_id--A--B.sql), which is all CREATE EXTENSION and
# ALTER EXTENSION ... UPDATE need. It has no maintainer scripts: it does not edit postgresql.conf or
# restart anything (README "Install from a package" says what to do).
#
# Usage: scripts/package.sh [MAJOR...]   (default: $PG_VERSIONS, or "15 16 17 18")
# Writes SHA256SUMS beside them (every package in target/packages/). Prints the path of each
# package it built, one per line, last.
source "$(dirname "$0")/lib.sh"
cd "$REPO"

OUT="$REPO/target/packages"
ARCH=amd64
[ "$(uname -m)" = x86_64 ] || { echo "packages are built for x86_64 only" >&2; exit 2; }

# package_tree MAJOR DIR: cargo pgrx package's staging tree (paths as pg_config reports them)
package_tree() {
    rm -rf "$2"
    cargo pgrx package --pg-config "$PG_CONFIG" --no-default-features --features "pg$1" \
        --out-dir "$2" >"$RUN_DIR/package-$1.log" 2>&1 || { cat "$RUN_DIR/package-$1.log"; return 1; }
}

# The newest glibc symbol version the library links against (e.g. 2.34).
glibc_needed() {
    objdump -T "$1" | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -V | tail -1
}

# build_deb MAJOR TREE: the .deb of the files package_tree put in TREE, in the apt layout
build_deb() {
    local major="$1" tree="$2" stage="$RUN_DIR/deb-$1"
    local name="postgresql-$major-pg-shard-id"
    local lib="$stage/usr/lib/postgresql/$major/lib/pg_shard_id.so"
    rm -rf "$stage"
    mkdir -p "$(dirname "$lib")" "$stage/usr/share/postgresql/$major/extension"
    cp "$tree$("$PG_CONFIG" --pkglibdir)/pg_shard_id.so" "$lib"
    cp "$tree$("$PG_CONFIG" --sharedir)"/extension/pg_shard_id* "$stage/usr/share/postgresql/$major/extension/"
    strip --strip-unneeded "$lib"
    mkdir -p "$stage/DEBIAN" "$stage/usr/share/doc/$name"
    cp LICENSE "$stage/usr/share/doc/$name/copyright"
    cp README.md CHANGELOG.md "$stage/usr/share/doc/$name/"
    gzip -9n "$stage/usr/share/doc/$name/CHANGELOG.md"
    # the monitoring recipe (monitoring/README.md): the exporter's queries and the alert rules
    mkdir -p "$stage/usr/share/doc/$name/monitoring"
    cp monitoring/queries.yaml monitoring/alerts.yaml monitoring/README.md "$stage/usr/share/doc/$name/monitoring/"
    cat >"$stage/DEBIAN/control" <<EOF
Package: $name
Version: $EXTENSION_VERSION
Architecture: $ARCH
Maintainer: the pg_shard_id developers <pg-shard-id@localhost>
Depends: postgresql-$major, libc6 (>= $(glibc_needed "$lib"))
Section: database
Priority: optional
Installed-Size: $(du -sk --exclude=DEBIAN "$stage" | cut -f1)
Description: time-ordered, shard-tagged 64-bit ids for PostgreSQL $major that never repeat
 next_shard_id(seq, shard) packs a 41-bit millisecond timestamp, a 13-bit logical
 shard and 10 bits of a sequence into a bigint, with a cluster-wide guard so that
 no id repeats at any rate. Add pg_shard_id to shared_preload_libraries, restart,
 then CREATE EXTENSION pg_shard_id (or ALTER EXTENSION pg_shard_id UPDATE).
EOF
    (cd "$stage" && find usr -type f -exec md5sum {} + | sort -k2) >"$stage/DEBIAN/md5sums"
    mkdir -p "$OUT"
    local deb="$OUT/${name}_${EXTENSION_VERSION}_$ARCH.deb"
    dpkg-deb --root-owner-group -Zxz --build "$stage" "$deb" >/dev/null
    echo "$deb"
}

# build_tarball MAJOR TREE: the tarball of the files package_tree put in TREE
build_tarball() {
    local major="$1" stage="$2"
    local name="pg_shard_id-$EXTENSION_VERSION-pg$major-linux-x86_64"
    local tree="$RUN_DIR/$name"
    rm -rf "$tree"
    mkdir -p "$tree/lib" "$tree/extension"
    cp "$stage$("$PG_CONFIG" --pkglibdir)/pg_shard_id.so" "$tree/lib/"
    strip --strip-unneeded "$tree/lib/pg_shard_id.so"
    cp "$stage$("$PG_CONFIG" --sharedir)"/extension/pg_shard_id* "$tree/extension/"
    cp LICENSE README.md CHANGELOG.md "$tree/"
    mkdir -p "$tree/monitoring"
    cp monitoring/queries.yaml monitoring/alerts.yaml monitoring/README.md "$tree/monitoring/"
    cat >"$tree/INSTALL.txt" <<EOF
pg_shard_id $EXTENSION_VERSION for PostgreSQL $major (x86_64 Linux, glibc >= $(glibc_needed "$tree/lib/pg_shard_id.so"))

  PG_CONFIG=/usr/lib/postgresql/$major/bin/pg_config   # the PostgreSQL $major server's (here Debian's
                                                      # layout; \`which pg_config\` is the newest major's)
  "\$PG_CONFIG" --version                              # must say PostgreSQL $major
  install -m 644 lib/pg_shard_id.so "\$("\$PG_CONFIG" --pkglibdir)/"
  install -m 644 extension/* "\$("\$PG_CONFIG" --sharedir)/extension/"

with the pg_config of the PostgreSQL $major server: on a host with several majors, the bare
pg_config is the newest one's, and a library built for $major must not go there. Use install (or copy to a new file and
rename it), never cp over an installed library: install replaces the file, while cp rewrites it
in place, and a running server that has the library loaded then crashes at its next connection. Then add pg_shard_id to
shared_preload_libraries in postgresql.conf (keeping what is there), restart the server, and run
CREATE EXTENSION pg_shard_id (new) or ALTER EXTENSION pg_shard_id UPDATE (an upgrade)
in each database that uses it. README.md has the details.
EOF
    mkdir -p "$OUT"
    local tarball="$OUT/$name.tar.gz"
    tar -C "$RUN_DIR" --owner=0 --group=0 --sort=name -czf "$tarball" "$name"
    rm -rf "$tree"
    echo "$tarball"
}

majors=("$@")
[ ${#majors[@]} -gt 0 ] || read -r -a majors <<<"${PG_VERSIONS:-15 16 17 18}"
mkdir -p "$RUN_DIR"
built=()
# the SQL edition: one tarball for every version (it is SQL); listed first, so that the last line
# stays the last version's package (tests/package/run.sh takes it)
sql_name="pg_shard_id_sql-$EXTENSION_VERSION"
rm -rf "$RUN_DIR/$sql_name"
bash "$REPO/scripts/sql_edition.sh" "$RUN_DIR/$sql_name" >/dev/null
(cd "$RUN_DIR/$sql_name" && sha256sum -- * > SHA256SUMS)
mkdir -p "$OUT"
tar -C "$RUN_DIR" --owner=0 --group=0 --sort=name -czf "$OUT/$sql_name.tar.gz" "$sql_name"
built+=("$OUT/$sql_name.tar.gz")
for major in "${majors[@]}"; do
    select_pg "$major"
    say "packaging pg_shard_id $EXTENSION_VERSION for PostgreSQL $major"
    package_tree "$major" "$RUN_DIR/package-$major"
    built+=("$(build_tarball "$major" "$RUN_DIR/package-$major")" "$(build_deb "$major" "$RUN_DIR/package-$major")")
done
(cd "$OUT" && sha256sum -- *.deb *.tar.gz >SHA256SUMS)
printf '%s\n' "${built[@]}"
