"""Fixtures of the SQL edition's tests (issue 56): clusters as tests/guarantee makes them (its
pgcluster.py), without pg_shard_id's library, and the edition built by scripts/sql_edition.sh."""

import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "tests", "guarantee"))

from pgcluster import PG_BIN, Cluster  # noqa: E402

BUILD = os.path.join(os.environ.get("PG_SHARD_ID_RUN_DIR", "/tmp/pg_shard_id"), "sql_edition")


def build_edition(folder=BUILD):
    """Builds the edition into folder (scripts/sql_edition.sh), readable by the postgres user."""
    subprocess.run(["bash", os.path.join(REPO, "scripts", "sql_edition.sh"), folder], check=True,
                   capture_output=True)
    os.chmod(folder, 0o755)
    for name in os.listdir(folder):
        os.chmod(os.path.join(folder, name), 0o644)
    return folder


@pytest.fixture(scope="session")
def edition():
    """The folder of the built edition."""
    return build_edition()


@pytest.fixture(scope="module")
def cluster(request):
    """A cluster without pg_shard_id's library (nothing preloaded)."""
    c = Cluster("sqled_" + request.module.__name__.replace("test_", ""), preload=False)
    yield c
    c.destroy()


def psql(cluster, dbname, *args, user="postgres", check=True):
    """Runs psql as `user` against `cluster`; returns the completed process."""
    cmd = [os.path.join(PG_BIN, "psql"), "-X", "-q", "-h", cluster.dir, "-p", str(cluster.port), "-U", user,
           "-d", dbname, "-v", "ON_ERROR_STOP=1", *args]
    return subprocess.run(cmd, check=check, capture_output=True, text=True)


def install_plain(cluster, dbname, edition, schema="ids", user="postgres"):
    """The plain script, as docs/managed.md#script runs it."""
    return psql(cluster, dbname, "-v", f"schema={schema}", "-f", os.path.join(edition, "pg_shard_id_sql.sql"), user=user)
