"""Fixtures of the guarantee's tests: one cluster per test module, a new database per test."""

import pytest

from pgcluster import Cluster


@pytest.fixture(scope="module")
def cluster(request):
    c = Cluster(request.module.__name__.replace("test_", ""))
    yield c
    c.destroy()


@pytest.fixture
def db(cluster, request):
    """A new database with the extension, named after the test."""
    name = "g_" + request.node.name.lower().replace("[", "_").replace("]", "").replace("-", "_")[:50]
    cluster.sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    cluster.sql(f"CREATE DATABASE {name}")
    cluster.sql("SET client_min_messages = warning; CREATE EXTENSION pg_shard_id", name)
    return name
