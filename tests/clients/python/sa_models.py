"""The SQLAlchemy 2 + Alembic recipe of the README ("ORMs and migrations"), used by the tests as is.

- The sequence is declared on the metadata (create_all creates it before the tables) and created
  by the migration by hand: Alembic's autogenerate never emits CREATE SEQUENCE.
- The id is BigInteger (Python int: exact at any size) with autoincrement=False: with
  autoincrement=True SQLAlchemy writes BIGSERIAL and silently drops the server_default.
- compare_server_default: Alembic compares server defaults by running both expressions in a
  SELECT, which calls next_shard_id twice (drawing from the sequence) and always sees a change.
  This comparison reads the text instead, for next_shard_id defaults only.
"""
import re

from sqlalchemy import BigInteger, Sequence, Text, text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    pass


photos_id_seq = Sequence("sa_photos_id_seq", metadata=Base.metadata)


class Photo(Base):
    __tablename__ = "sa_photos"
    id: Mapped[int] = mapped_column(
        BigInteger, primary_key=True, autoincrement=False,
        server_default=text("next_shard_id('sa_photos_id_seq', 3)"),
    )
    note: Mapped[str] = mapped_column(Text)


def _normalized(expr):
    # PostgreSQL shows next_shard_id('s'::regclass, 3), perhaps schema-qualified
    return re.sub(r"::regclass|\s|\b\w+\.(?=next_shard_id)", "", expr or "")


def compare_server_default(context, inspected_column, metadata_column, inspected_default,
                           metadata_default, rendered_metadata_default):
    """Alembic hook: True if changed, False if the same, None to let Alembic decide."""
    if "next_shard_id" not in (rendered_metadata_default or "") + (inspected_default or ""):
        return None
    return _normalized(inspected_default) != _normalized(rendered_metadata_default.strip("'\""))
