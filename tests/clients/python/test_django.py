"""Django 5 with a next_shard_id database default (db_default), as the README's recipe says."""
import io
import os
import pathlib
import sys

import django
import pytest
from django.conf import settings
from django.core.management import call_command

sys.path.insert(0, str(pathlib.Path(__file__).parent / "djangoapp"))
settings.configure(
    DATABASES={"default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": os.environ["PGDATABASE"], "USER": os.environ["PGUSER"],
        "HOST": os.environ["PGHOST"], "PORT": os.environ["PGPORT"],
    }},
    INSTALLED_APPS=["photos"],
    USE_TZ=True,
)
django.setup()

from django.db import connection  # noqa: E402  (after setup)
from photos.models import Photo  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def migrated():
    call_command("migrate", "photos", "zero", verbosity=0)
    call_command("migrate", verbosity=0)
    yield


def test_the_migration_makes_the_default_and_the_sequence():
    with connection.cursor() as c:
        c.execute("SELECT pg_get_expr(adbin, adrelid) FROM pg_attrdef WHERE adrelid = 'photos_photo'::regclass")
        assert c.fetchone()[0] == "next_shard_id('photos_photo_id_seq'::regclass, 4)"
        c.execute("SELECT pg_get_serial_sequence('photos_photo', 'id')")
        assert c.fetchone()[0] == "public.photos_photo_id_seq"


def test_create_gets_the_id_from_the_database():
    p = Photo.objects.create(note="one")
    assert isinstance(p.id, int) and p.id > 2**53
    assert Photo.objects.get(pk=p.id).note == "one"
    with connection.cursor() as c:
        c.execute("SELECT shard_id_extract_shard(%s)", [p.id])
        assert c.fetchone()[0] == 4


def test_bulk_create_makes_every_id_but_does_not_read_them_back():
    """Django 5.2 reads back only AutoField primary keys from bulk inserts: the rows get their
    ids, the objects keep a DatabaseDefault placeholder (README: use create(), or read back)."""
    photos = Photo.objects.bulk_create([Photo(note=f"bulk {i}") for i in range(1000)])
    assert not any(isinstance(p.id, int) for p in photos)
    ids = list(Photo.objects.filter(note__startswith="bulk ").values_list("id", flat=True))
    assert len(ids) == len(set(ids)) == 1000
    with connection.cursor() as c:
        c.execute("SELECT count(*) FROM photos_photo WHERE shard_id_extract_shard(id) = 4 AND note LIKE 'bulk %%'")
        assert c.fetchone()[0] == 1000


def test_makemigrations_finds_nothing_to_change():
    out = io.StringIO()
    call_command("makemigrations", "photos", "--check", "--dry-run", stdout=out)  # exits 1 on changes
    assert "No changes detected" in out.getvalue()
