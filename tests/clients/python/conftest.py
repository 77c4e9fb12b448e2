"""Shared by the Python client tests: the recipes the README gives, and a fresh database each run.

The connection comes from libpq's PGHOST/PGPORT/PGUSER/PGDATABASE (tests/clients/run.sh sets them).
"""
import base64
import datetime as dt

import psycopg
import pytest

# Layout: 41 bits of ms since the epoch | 13 bits of shard | 10 bits of seq (README, "Layout").
def decode(id_: int, epoch: dt.datetime):
    return epoch + dt.timedelta(milliseconds=id_ >> 23), (id_ >> 10) & 8191, id_ & 1023


def to_shortcode(id_: int) -> str:
    return base64.urlsafe_b64encode(id_.to_bytes(8, "big")).rstrip(b"=").decode()


def from_shortcode(code: str) -> int:
    return int.from_bytes(base64.urlsafe_b64decode(code + "="), "big", signed=True)


@pytest.fixture
def conn():
    with psycopg.connect(autocommit=True) as c:
        yield c
