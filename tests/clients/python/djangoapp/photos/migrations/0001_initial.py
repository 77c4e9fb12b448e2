from django.db import migrations, models

import photos.models


class Migration(migrations.Migration):
    initial = True
    dependencies = []
    operations = [
        migrations.RunSQL("CREATE SEQUENCE photos_photo_id_seq",
                          reverse_sql="DROP SEQUENCE IF EXISTS photos_photo_id_seq"),
        migrations.CreateModel(
            name="Photo",
            fields=[
                ("id", models.BigIntegerField(
                    db_default=photos.models.NextShardId("photos_photo_id_seq", 4),
                    primary_key=True, serialize=False)),
                ("note", models.TextField()),
            ],
        ),
        migrations.RunSQL("ALTER SEQUENCE photos_photo_id_seq OWNED BY photos_photo.id",
                          reverse_sql=migrations.RunSQL.noop),
    ]
