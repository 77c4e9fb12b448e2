"""SQLAlchemy 2 and Alembic with a next_shard_id DEFAULT, as the README's recipe says."""
import pathlib

import psycopg
import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.migration import MigrationContext
from sqlalchemy import BigInteger, Column, MetaData, Table, create_engine, select, text
from sqlalchemy.dialects import postgresql
from sqlalchemy.orm import Session
from sqlalchemy.schema import CreateTable

from conftest import decode, to_shortcode
from sa_models import Base, Photo, compare_server_default

HERE = pathlib.Path(__file__).parent


@pytest.fixture
def engine():
    with psycopg.connect(autocommit=True) as c:
        c.execute("DROP TABLE IF EXISTS sa_photos, alembic_version; DROP SEQUENCE IF EXISTS sa_photos_id_seq")
    e = create_engine("postgresql+psycopg://")  # libpq's PG* variables
    yield e
    e.dispose()


def alembic_config(engine):
    cfg = Config()
    cfg.set_main_option("script_location", str(HERE / "alembic"))
    cfg.set_main_option("sqlalchemy.url", engine.url.render_as_string(hide_password=False))
    return cfg


def seq_state(engine):
    with engine.connect() as c:
        return tuple(c.execute(text("SELECT last_value, is_called FROM sa_photos_id_seq")).one())


def test_autoincrement_true_would_silently_make_it_bigserial():
    t = Table("t", MetaData(), Column("id", BigInteger, primary_key=True, autoincrement=True,
                                      server_default=text("next_shard_id('s', 3)")))
    ddl = str(CreateTable(t).compile(dialect=postgresql.dialect()))
    assert "BIGSERIAL" in ddl and "next_shard_id" not in ddl
    assert "next_shard_id('sa_photos_id_seq', 3)" in str(
        CreateTable(Photo.__table__).compile(dialect=postgresql.dialect()))


def test_create_all_and_the_orm_get_ids_back_from_the_server(engine):
    Base.metadata.create_all(engine)  # creates the sequence first
    with Session(engine) as s:
        one = Photo(note="one")
        s.add(one)
        s.flush()  # INSERT ... RETURNING id
        assert isinstance(one.id, int) and one.id > 2**53
        many = [Photo(note=f"n{i}") for i in range(1000)]
        s.add_all(many)
        s.flush()  # insertmanyvalues, RETURNING
        ids = [p.id for p in many]
        assert len(set(ids)) == 1000
        s.commit()
        server = s.execute(select(Photo.id, text("shard_id_extract_shard(sa_photos.id)"))
                           .order_by(Photo.id)).all()
        assert sorted([one.id] + ids) == [r[0] for r in server]
        assert {r[1] for r in server} == {3}
        assert s.get(Photo, one.id).note == "one"


def test_decode_json_and_shortcodes_through_the_orm_match_the_server(engine):
    Base.metadata.create_all(engine)
    with Session(engine) as s:
        s.add_all([Photo(note=f"d{i}") for i in range(300)])
        s.commit()
        epoch = s.execute(text("SELECT epoch FROM pg_shard_id_info()")).scalar_one()
        rows = s.execute(text("SELECT p.id, d.ts, d.shard, d.seq, shard_id_to_shortcode(p.id), "
                              "shard_id_to_jsonb(p) FROM sa_photos p, shard_id_decode(p.id) d")).all()
        assert len(rows) == 300
        for id_, ts, shard, seq, code, doc in rows:
            assert decode(id_, epoch) == (ts, shard, seq)
            assert to_shortcode(id_) == code
            assert doc == {"id": str(id_), "note": s.get(Photo, id_).note}


def test_the_alembic_migration_runs_and_autogenerate_then_finds_nothing(engine):
    cfg = alembic_config(engine)
    command.upgrade(cfg, "head")
    with Session(engine) as s:
        p = Photo(note="migrated")
        s.add(p)
        s.commit()
        assert p.id > 2**53
    before = seq_state(engine)
    for _ in range(2):  # stable: nothing to do, twice
        with engine.connect() as c:
            ctx = MigrationContext.configure(c, opts={"compare_type": True,
                                                      "compare_server_default": compare_server_default})
            assert compare_metadata(ctx, Base.metadata) == []
    assert seq_state(engine) == before, "comparing defaults must not draw from the sequence"
    command.downgrade(cfg, "base")
    with engine.connect() as c:
        assert c.execute(text("SELECT to_regclass('sa_photos_id_seq')")).scalar() is None


def test_alembic_default_comparison_is_the_trap_the_recipe_avoids(engine):
    command.upgrade(alembic_config(engine), "head")
    before = seq_state(engine)
    with engine.connect() as c:
        ctx = MigrationContext.configure(c, opts={"compare_server_default": True})
        diffs = compare_metadata(ctx, Base.metadata)
    assert any(d[0][0] == "modify_default" for d in diffs if isinstance(d, list)), diffs
    assert seq_state(engine) != before, "Alembic's own comparison ran next_shard_id"
