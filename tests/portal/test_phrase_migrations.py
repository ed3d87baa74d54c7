"""The migrations that keep notifications and reasons as phrases keep every row written
before as its plain text, which reads as it did; going back writes English words."""

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from portal.models import Notification
from portal.phrases import Phrase
from rental.models import Instance, Reservation

NOW = datetime(2026, 4, 6, 10, 0, tzinfo=UTC)
BEFORE = [("portal", "0002_api_tokens"), ("rental", "0011_instance_fillfactor")]


def migrate(targets):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets or executor.loader.graph.leaf_nodes())
    return executor.loader.project_state(targets or None).apps


@pytest.mark.django_db(transaction=True)
def test_old_rows_keep_their_text_and_going_back_writes_english(f0):
    old = migrate(BEFORE)
    old.get_model("portal", "Notification").objects.create(
        user_id=f0.alice.pk, subject="Ready: #1 (before phrases)", body="SSH: ubuntu@203.0.113.7"
    )
    lease = old.get_model("rental", "Reservation").objects.create(
        project_id=f0.alpha.pk,
        requester_id=f0.alice.pk,
        gpu_model_id=f0.model.pk,
        gpu_count=1,
        start=NOW,
        end=NOW + timedelta(hours=1),
        status="failed",
        status_message="No capacity (written before phrases).",
    )
    old.get_model("rental", "Instance").objects.create(
        reservation_id=lease.pk,
        account_id=f0.account.pk,
        offering_id=f0.offering.pk,
        region="us-east-1",
        gpu_count=1,
        rate_per_hour=1,
        idempotency_key="k-1",
        last_error="InsufficientInstanceCapacity",
        health_message="The card is L4.",
    )

    migrate(None)

    note = Notification.objects.get()
    assert (note.subject, note.body) == ("Ready: #1 (before phrases)", "SSH: ubuntu@203.0.113.7")
    lease = Reservation.objects.get()
    assert lease.status_message == "No capacity (written before phrases)."
    instance = Instance.objects.get()
    assert (instance.last_error, instance.health_message) == (
        "InsufficientInstanceCapacity",
        "The card is L4.",
    )

    Reservation.objects.filter(pk=lease.pk).update(
        status_message=Phrase("The provider ended the instance.")
    )
    back = migrate(BEFORE)
    assert (
        back.get_model("rental", "Reservation").objects.get().status_message
        == "The provider ended the instance."
    )
    assert back.get_model("portal", "Notification").objects.get().subject == (
        "Ready: #1 (before phrases)"
    )
    migrate(None)
