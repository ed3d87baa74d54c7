from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("rental", "0017_outbox"),
    ]

    operations = [
        migrations.AddField(
            model_name="outboxmessage",
            name="retries",
            field=models.PositiveIntegerField(default=0, verbose_name="retries"),
        ),
    ]
