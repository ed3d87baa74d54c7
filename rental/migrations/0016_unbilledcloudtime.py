from decimal import Decimal

import django.db.models.deletion
from django.db import migrations, models

import rental.models.currency


class Migration(migrations.Migration):
    dependencies = [("rental", "0015_instance_terminate_sent_at")]

    operations = [
        migrations.CreateModel(
            name="UnbilledCloudTime",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("gpu_count", models.PositiveSmallIntegerField(verbose_name="GPUs")),
                ("market", models.CharField(choices=[("on_demand", "On-demand"), ("spot", "Spot")], max_length=16, verbose_name="market")),
                ("start", models.DateTimeField(db_index=True, verbose_name="billing stopped at")),
                ("end", models.DateTimeField(verbose_name="the cloud ended it at")),
                ("gpu_seconds", models.PositiveBigIntegerField(verbose_name="GPU-seconds")),
                ("rate", models.DecimalField(decimal_places=6, max_digits=12, verbose_name="rate per GPU-hour")),
                ("currency", models.CharField(default=rental.models.currency.billing_currency, max_length=3, verbose_name="currency")),
                ("exchange_rate", models.DecimalField(decimal_places=8, default=Decimal("1"), max_digits=20, verbose_name="exchange rate at launch")),
                ("gpu_model", models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name="+", to="rental.gpumodel")),
                ("instance", models.OneToOneField(on_delete=django.db.models.deletion.PROTECT, related_name="unbilled", to="rental.instance")),
            ],
            options={
                "verbose_name": "unbilled cloud time",
                "verbose_name_plural": "unbilled cloud time",
                "ordering": ["start", "id"],
                "constraints": [models.CheckConstraint(condition=models.Q(("end__gt", models.F("start"))), name="unbilled_ends_after_start")],
            },
        ),
    ]
