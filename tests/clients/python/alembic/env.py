"""Alembic environment of the recipe: compare_type and compare_server_default on, the latter
through sa_models.compare_server_default so next_shard_id defaults compare by text."""
from alembic import context
from sqlalchemy import create_engine

from sa_models import Base, compare_server_default

with create_engine(context.config.get_main_option("sqlalchemy.url")).connect() as connection:
    context.configure(connection=connection, target_metadata=Base.metadata, compare_type=True,
                      compare_server_default=compare_server_default)
    with context.begin_transaction():
        context.run_migrations()
