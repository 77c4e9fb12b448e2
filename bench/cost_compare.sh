#!/usr/bin/env bash
# Per-id cost of earlier releases beside this build, in one run: each release's library is built
# from its commit (once per PostgreSQL major, cached in $PG_WHEEL_CACHE/builds/COMMIT-pgMAJOR),
# installed, and measured with bench/cost_gate.sh (callgrind, instructions per id above
# nextval(), marginal); then this build is installed again and measured.
#   bench/cost_compare.sh                    0.3.0 and 0.5.0 beside this build, PostgreSQL 15
#   PG_MAJOR=18 bench/cost_compare.sh 0.5.0=0eea5d9
source "$(dirname "$0")/../scripts/lib.sh"
releases=("$@")
[ ${#releases[@]} -gt 0 ] || releases=(0.3.0=0b3df35 0.5.0=0eea5d9)
PKGLIB="$("$PG_CONFIG" --pkglibdir)"
EXT_DIR="$("$PG_CONFIG" --sharedir)/extension"

build_release() { # build_release COMMIT: its package files, cached
    local commit; commit="$(git -C "$REPO" rev-parse "$1^{commit}")"
    local dir="$PG_WHEEL_CACHE/builds/$commit-pg$PG_MAJOR"
    if ! [ -f "$dir/lib/pg_shard_id.so" ]; then
        local src="$RUN_DIR/build-src" stage="$RUN_DIR/build-stage"
        say "building ${commit:0:7} for PostgreSQL $PG_MAJOR (minutes, once)" >&2
        rm -rf "$src" "$stage" && mkdir -p "$src"
        git -C "$REPO" archive "$commit" | tar -x -C "$src"
        (cd "$src" && CARGO_TARGET_DIR="$REPO/target/previous-release" cargo pgrx package \
            --pg-config "$PG_CONFIG" --no-default-features --features "pg$PG_MAJOR" --out-dir "$stage") \
            >"$RUN_DIR/build-$PG_MAJOR.log" 2>&1 || { tail -30 "$RUN_DIR/build-$PG_MAJOR.log" >&2; return 1; }
        rm -rf "$dir.tmp" && mkdir -p "$dir.tmp/lib" "$dir.tmp/extension"
        cp "$stage$PKGLIB/pg_shard_id.so" "$dir.tmp/lib/"
        cp "$stage$EXT_DIR"/pg_shard_id* "$dir.tmp/extension/"
        chmod -R a+rX "$dir.tmp"
        mv "$dir.tmp" "$dir"
        rm -rf "$src" "$stage"
    fi
    echo "$dir"
}
install_release() { # install_release DIR: its library, control file and scripts, each renamed into place
    local stage="$RUN_DIR/release-install"
    rm -rf "$stage" && mkdir -p "$stage$PKGLIB" "$stage$EXT_DIR"
    cp "$1"/lib/* "$stage$PKGLIB/"
    cp "$1"/extension/* "$stage$EXT_DIR/"
    install_tree "$stage"
    rm -rf "$stage"
}
measure() { { bash "$REPO/bench/cost_gate.sh" 2>&1 || true; } | sed -n "s/.*above nextval(): //p" | tail -1; }

mkdir -p "$RUN_DIR"
rows=()
for r in "${releases[@]}"; do
    dir="$(build_release "${r#*=}")"
    install_release "$dir"
    rows+=("${r%%=*} (${r#*=}) $(measure)")
done
install_extension release >/dev/null
rows+=("this build ($(git -C "$REPO" rev-parse --short HEAD)) $(measure)")
echo
echo "Instructions per id above nextval() (callgrind, marginal over $(( ${GATE_IDS:-20000} )) ids, borrow, PostgreSQL $PG_MAJOR):"
for row in "${rows[@]}"; do echo "  $row"; done
