#!/usr/bin/env python3
"""Checks that the release files agree with each other, without building anything.

* one version everywhere: Cargo.toml, core/Cargo.toml, META.json (the release and the extension it
  provides) and the newest section of CHANGELOG.md;
* META.json has what PGXN's META spec 1.0.0 requires, names files that exist, and the license
  it names is the one in LICENSE;
* the current version's install script is committed (sql/pg_shard_id--VERSION.sql; the upgrade
  test checks that it equals the generated one), and every released version reaches the current
  one through the upgrade scripts in sql/;
* the control file takes its version from Cargo.toml;
* META.json's release_status is stable exactly when CHANGELOG.md dates the version;
* the supported majors agree: Cargo.toml's pgNN features, the scripts' default PG_VERSIONS,
  META.json's oldest PostgreSQL and docs/install.md's table.

Prints one line per check and "release files: N passed, M failed"; exits 1 if any failed.
"""

import json
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
passed = failed = 0


def check(name, actual, expected):
    global passed, failed
    if actual == expected:
        passed += 1
        print(f"  ok    {name} ({actual})")
    else:
        failed += 1
        print(f"  FAIL  {name}: got {actual!r}, expected {expected!r}")


def cargo_version(path):
    match = re.search(r'^version = "([^"]+)"', (REPO / path).read_text(), re.M)
    return match.group(1) if match else None


def version_key(v):
    return tuple(int(part) for part in v.split("."))


version = cargo_version("Cargo.toml")
check("core/Cargo.toml has the extension's version", cargo_version("core/Cargo.toml"), version)

meta = json.loads((REPO / "META.json").read_text())
check("META.json version", meta.get("version"), version)
required = ["name", "abstract", "version", "maintainer", "license", "provides", "meta-spec"]
check("META.json has every required key", [k for k in required if k not in meta], [])
check("META.json meta-spec", meta.get("meta-spec", {}).get("version"), "1.0.0")
provided = meta.get("provides", {}).get("pg_shard_id", {})
check("META.json provides pg_shard_id at this version", provided.get("version"), version)
for key in ("file", "docfile"):
    check(f"META.json provides.{key} exists", (REPO / provided.get(key, "-")).is_file(), True)
check(
    "META.json provides.file is the current install script",
    provided.get("file"),
    f"sql/pg_shard_id--{version}.sql",
)
check("META.json license", meta.get("license"), "postgresql")
check(
    "LICENSE is the PostgreSQL License",
    (REPO / "LICENSE").read_text().startswith("PostgreSQL License"),
    True,
)

changelog = (REPO / "CHANGELOG.md").read_text()
released = re.findall(r"^## \[(\d+\.\d+\.\d+)\]", changelog, re.M)
check("CHANGELOG.md's newest release is this version", released[:1], [version])

control = (REPO / "pg_shard_id.control").read_text()
check("the control file takes its version from Cargo.toml",
      "default_version = '@CARGO_VERSION@'" in control, True)

scripts = [p.name for p in (REPO / "sql").glob("pg_shard_id--*.sql")]
installs = sorted(
    (m.group(1) for s in scripts if (m := re.fullmatch(r"pg_shard_id--([\d.]+)\.sql", s))),
    key=version_key,
)
upgrades = {}
for s in scripts:
    if m := re.fullmatch(r"pg_shard_id--([\d.]+)--([\d.]+)\.sql", s):
        upgrades.setdefault(m.group(1), []).append(m.group(2))
check("the current version's install script is committed", version in installs, True)
check("it is the newest install script", installs[-1:], [version])


def reaches(v, seen=()):
    return v == version or any(
        reaches(n, seen + (v,)) for n in upgrades.get(v, []) if n not in seen
    )


for old in installs[:-1]:
    check(f"{old} upgrades to {version} through sql/", reaches(old), True)
for old, targets in sorted(upgrades.items()):
    for new in targets:
        check(
            f"upgrade script {old}--{new} goes forward to a released version",
            version_key(old) < version_key(new) and new in installs,
            True,
        )

# A release is dated in CHANGELOG.md exactly when META.json calls it stable (PGXN's
# release_status): "unreleased" goes with "testing" or "unstable", a date with "stable".
dated = re.search(rf"^## \[{re.escape(version)}\] - (\d{{4}}-\d{{2}}-\d{{2}})$", changelog, re.M)
check("META.json's release_status agrees with CHANGELOG.md (stable exactly when dated)",
      meta.get("release_status") == "stable", bool(dated))

# The supported majors, said the same everywhere: Cargo.toml's pgNN features, the default
# PG_VERSIONS of scripts/test.sh, package.sh and bench.sh, META.json's oldest PostgreSQL, and
# the rows docs/install.md calls "built and tested here".
features = sorted(int(m) for m in re.findall(r"^pg(\d+) = ", (REPO / "Cargo.toml").read_text(), re.M))
for script in ("scripts/test.sh", "scripts/package.sh", "scripts/bench.sh"):
    defaults = re.findall(r"PG_VERSIONS:-([\d ]+)\}", (REPO / script).read_text())
    check(f"{script}'s default PG_VERSIONS are Cargo.toml's pgNN features",
          sorted({tuple(sorted(int(v) for v in d.split())) for d in defaults}), [tuple(features)])
oldest = meta.get("prereqs", {}).get("runtime", {}).get("requires", {}).get("PostgreSQL", "")
check("META.json's oldest PostgreSQL is the oldest feature", oldest, f"{features[0]}.0.0" if features else None)
tested = sorted(int(m) for m in re.findall(r"^\| (\d+) \| built and tested here", (REPO / "docs/install.md").read_text(), re.M))
check("docs/install.md's tested majors are Cargo.toml's pgNN features", tested, features)

print(f"\nrelease files: {passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
