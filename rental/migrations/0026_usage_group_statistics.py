"""PostgreSQL's estimate of how many groups the month's usage makes.

The bill sums usage runs per (project, GPU model, market, tier, rate, currency,
exchange rate) in one aggregate (billing.periods.GROUP_FIELDS). Without statistics on
those columns together, PostgreSQL multiplies their separate counts of distinct values
and expects about 400,000 groups where there are about 1,600, so it sorts the month's
runs instead of hashing them: closing a month of 4,000,000 runs took 2.3× the time of
2,000,000. With these statistics (``ndistinct``, filled by ANALYZE and autovacuum) it
hashes them, and the time follows the runs. Nothing to do on SQLite (the demo)."""

from django.db import migrations

COLUMNS = (
    "project_id, gpu_model_id, market, tier, rate, currency, exchange_rate, exchange_rate_ref_id"
)


def create(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(
            "CREATE STATISTICS IF NOT EXISTS usage_billing_groups (ndistinct) "
            f"ON {COLUMNS} FROM rental_usagerecord"
        )


def drop(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("DROP STATISTICS IF EXISTS usage_billing_groups")


class Migration(migrations.Migration):
    dependencies = [("rental", "0025_account_options")]

    operations = [migrations.RunPython(create, drop)]
