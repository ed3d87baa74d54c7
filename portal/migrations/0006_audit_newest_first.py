from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("portal", "0005_login_locks"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="auditevent",
            index=models.Index(
                models.OrderBy(models.F("at"), descending=True),
                models.OrderBy(models.F("id"), descending=True),
                name="audit_newest_first",
            ),
        ),
    ]
