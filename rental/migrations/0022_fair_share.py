from decimal import Decimal
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("rental", "0021_lease_page_indexes"),
    ]

    operations = [
        migrations.AddField(
            model_name="pool",
            name="fair_share",
            field=models.BooleanField(default=False, verbose_name="fair share ordering"),
        ),
        migrations.AddField(
            model_name="pool",
            name="fair_share_half_life_hours",
            field=models.DecimalField(
                decimal_places=2,
                default=Decimal("168"),
                max_digits=8,
                verbose_name="fair share half-life (hours)",
            ),
        ),
        migrations.AddConstraint(
            model_name="pool",
            constraint=models.CheckConstraint(
                condition=models.Q(("fair_share_half_life_hours__gt", 0)),
                name="pool_fair_share_half_life_positive",
            ),
        ),
    ]
