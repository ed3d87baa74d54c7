from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("rental", "0020_usage_rollup_flag_lease_order"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="reservation",
            index=models.Index(
                models.F("requester"),
                models.F("project"),
                models.OrderBy(models.F("submitted_at"), descending=True),
                models.OrderBy(models.F("id"), descending=True),
                name="lease_requester_newest_first",
            ),
        ),
        migrations.AddIndex(
            model_name="reservation",
            index=models.Index(
                models.F("requester"),
                models.OrderBy(models.F("submitted_at"), descending=True),
                models.OrderBy(models.F("id"), descending=True),
                condition=models.Q(
                    (
                        "status__in",
                        [
                            "pending_approval",
                            "scheduled",
                            "queued",
                            "provisioning",
                            "active",
                            "ending",
                            "stopped",
                        ],
                    )
                ),
                name="lease_requester_in_progress",
            ),
        ),
        migrations.AddIndex(
            model_name="reservation",
            index=models.Index(
                fields=["status", "submitted_at", "id"], name="lease_status_oldest_first"
            ),
        ),
    ]
