"""The Django recipe of the README ("ORMs and migrations"): a next_shard_id database default
(Django 5.0+ `db_default`), returned by INSERT ... RETURNING into the primary key."""
from django.db import models
from django.utils.deconstruct import deconstructible


@deconstructible(path="photos.models.NextShardId")
class NextShardId(models.Func):
    """next_shard_id(sequence, shard) as an expression Django can put in a DEFAULT."""

    function = "next_shard_id"
    output_field = models.BigIntegerField()

    def __init__(self, sequence, shard):
        super().__init__(models.Value(sequence), models.Value(shard))


class Photo(models.Model):
    # BigIntegerField: an int in Python, exact at any size. The sequence is created by the
    # migration (RunSQL): Django has no sequence operation.
    id = models.BigIntegerField(primary_key=True, db_default=NextShardId("photos_photo_id_seq", 4))
    note = models.TextField()
