"""Promotion (Q3): when a project's guaranteed use falls, its oldest burst leases that now
fit become guaranteed, the lease page shows it, the audit log has it, and billing sees
each second in the tier it ran in."""

from datetime import timedelta

import pytest
from django.urls import reverse

from portal.models import AuditEvent
from rental.fleet import instances, sync, termination
from rental.loans import admission, ending, queue
from rental.models import Reservation, Tier, UsageRecord
from tests import factories
from tests.rental.loans.conftest import at

Status = Reservation.Status


def fresh(lease):
    return Reservation.objects.get(pk=lease.pk)


def test_it_promotes_the_oldest_burst_leases_that_fit(f0, lease):
    a1 = lease(f0.alpha, 2, at("09:00"))
    older = lease(f0.alpha, 1, at("09:10"))
    big = lease(f0.alpha, 2, at("09:20"))
    newer = lease(f0.alpha, 1, at("09:30"))
    assert [x.tier for x in (a1, older, big, newer)] == ["guaranteed"] + ["burst"] * 3

    ending.end_reservation(actor=f0.alice, reservation=a1, now=at("10:00"))
    queue.admit_queued(gpu_model=f0.model, now=at("10:00"))
    # G 2 is free: the oldest (1 GPU) fits, then the 2-GPU one does not, the newer 1 does.
    assert [fresh(x).tier for x in (older, big, newer)] == ["guaranteed", "burst", "guaranteed"]
    event = AuditEvent.objects.get(verb="lease.promoted", object_id=str(older.pk))
    assert (event.before, event.after) == ({"tier": "burst"}, {"tier": "guaranteed"})


def test_a_promoted_lease_is_no_longer_reclaimable(f0, lease):
    a1 = lease(f0.alpha, 2, at("09:00"))
    a2 = lease(f0.alpha, 2, at("09:10"), priority="learning")
    lease(f0.beta, 4, at("09:20"))
    ending.end_reservation(actor=f0.alice, reservation=a1, now=at("10:00"))
    queue.admit_queued(gpu_model=f0.model, now=at("10:00"))
    assert fresh(a2).tier == Tier.GUARANTEED
    lease(f0.gamma, 2, at("10:01"))  # burst into the 2 free GPUs
    Reservation.objects.filter(project=f0.beta).update(tier=Tier.GUARANTEED)
    # beta's own request at full guarantee is burst; only spot could be taken.
    queued = lease(f0.beta, 2, at("10:05"))
    assert queued.status == Status.QUEUED
    assert fresh(a2).notice_due_at is None


def test_the_lease_page_shows_the_promotion(f0, lease, client):
    a1 = lease(f0.alpha, 2, at("09:00"))
    a2 = lease(f0.alpha, 2, at("09:10"))
    ending.end_reservation(actor=f0.alice, reservation=a1, now=at("10:00"))
    queue.admit_queued(gpu_model=f0.model, now=at("10:00"))
    client.force_login(f0.alice)
    page = client.get(reverse("rental:lease", kwargs={"pk": a2.pk})).content.decode()
    assert "Promoted to guaranteed at 2026-04-06 10:00 UTC" in page


@pytest.fixture
def f0c(db, cloud):
    return factories.fixture_f0(endpoint_url=cloud.url)


def test_it_splits_running_usage_at_the_promotion(f0c):
    def go(gpus, when):
        made = admission.submit_reservation(
            actor=f0c.alice,
            project=f0c.alpha,
            gpu_model=f0c.model,
            gpu_count=gpus,
            duration_hours=8,
            priority="experiment",
            market="on_demand",
            now=when,
        )
        for instance in made.instances.all():
            instances.provision_instance(instance_id=instance.pk, now=when)
        return made

    a1, a2 = go(2, at("09:00")), go(1, at("09:00"))
    sync.sync_instances(now=at("09:00:30"))
    ending.end_reservation(actor=f0c.alice, reservation=a1, now=at("10:00"))
    for instance in a1.instances.all():  # what the terminate task does
        termination.terminate_instance(instance_id=instance.pk, now=at("10:00"))
    assert fresh(a1).status == Status.ENDED
    queue.admit_queued(gpu_model=f0c.model, now=at("10:00"))
    records = list(
        UsageRecord.objects.filter(instance__reservation=a2).values_list("tier", "start", "end")
    )
    assert records == [
        ("burst", at("09:00:30"), at("10:00")),
        ("guaranteed", at("10:00"), None),
    ]
    assert at("10:00") - at("09:00:30") == timedelta(seconds=3570)
