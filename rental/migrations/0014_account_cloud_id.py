from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("rental", "0013_reasons_as_phrases")]

    operations = [
        migrations.AddField(
            model_name="provideraccount",
            name="cloud_account_id",
            field=models.CharField(blank=True, max_length=64, verbose_name="cloud account"),
        ),
    ]
