from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("rental", "0014_account_cloud_id")]

    operations = [
        migrations.AddField(
            model_name="instance",
            name="terminate_sent_at",
            field=models.DateTimeField(blank=True, null=True, verbose_name="termination sent at"),
        ),
    ]
