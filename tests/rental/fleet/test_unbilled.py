"""Cloud time after billing stopped: a lease's usage closes at its end, the cloud charges
until it has terminated the instance. The gap is recorded at the cloud's time, shown on
the pool's page and carried by the month's cost as the pool's platform line."""

from datetime import timedelta
from decimal import ROUND_HALF_UP, Decimal

import pytest
from django.urls import reverse

from billing.statements import compute_period
from rental.fleet import instances, sync, termination
from rental.fleet.cloud import provider_for
from rental.loans import admission, ending
from rental.models import Instance, UnbilledCloudTime, UsageRecord

pytestmark = pytest.mark.django_db
State = Instance.State


def launched(f0c, t0) -> Instance:
    """A lease of one GPU launched at t0."""
    lease = admission.submit_reservation(
        actor=f0c.alice,
        project=f0c.alpha,
        gpu_model=f0c.model,
        gpu_count=1,
        duration_hours=2,
        priority="experiment",
        market="on_demand",
        now=t0,
    )
    instance = lease.instances.get()
    instances.provision_instance(instance_id=instance.pk, now=t0)
    return instance


def ended_lease(f0c, t0):
    """A lease that ran an hour and ended at t0 + 1 h: billing stopped, the instance
    stopping until a termination reaches the cloud."""
    instance = launched(f0c, t0)
    sync.sync_instances(now=t0 + timedelta(seconds=30))  # running: billed from here
    end = t0 + timedelta(hours=1)
    ending.end_reservation(actor=f0c.alice, reservation=instance.reservation, now=end)
    return Instance.objects.get(pk=instance.pk), end


@pytest.mark.parametrize("late", [40, 97])
def test_it_records_the_cloud_time_after_billing_stopped(f0c, cloud, t0, late):
    instance, end = ended_lease(f0c, t0)
    assert UsageRecord.objects.get(instance=instance).end == end

    # The termination's worker died; the one sent again reaches the cloud later.
    termination.terminate_instance(instance_id=instance.pk, now=end + timedelta(seconds=late))

    row = UnbilledCloudTime.objects.get()
    assert (row.instance_id, row.start, row.end) == (
        instance.pk,
        end,
        end + timedelta(seconds=late),
    )
    assert (row.gpu_seconds, row.rate, row.gpu_model_id) == (
        late,
        Decimal("2.500000"),
        f0c.model.pk,
    )
    # Marked terminated again (a duplicate delivery): still one row.
    termination.mark_terminated(instance_id=instance.pk, at=end + timedelta(seconds=late + 5))
    assert UnbilledCloudTime.objects.count() == 1


def test_it_records_nothing_when_the_cloud_ended_it_while_billing(f0c, cloud, t0):
    """Ended outside the portal: usage closes at the cloud's own time, nothing is unbilled."""
    instance = launched(f0c, t0)
    instance.refresh_from_db()
    provider_for(instance).terminate([instance.external_id], region="us-east-1")
    sync.sync_instances(now=t0 + timedelta(hours=1))
    assert Instance.objects.get(pk=instance.pk).state == State.TERMINATED
    assert not UnbilledCloudTime.objects.exists()


@pytest.mark.parametrize("late", [40, 97, 3600])
def test_the_month_carries_it_as_the_pools_platform_line(f0c, cloud, t0, late):
    instance, end = ended_lease(f0c, t0)
    termination.terminate_instance(instance_id=instance.pk, now=end + timedelta(seconds=late))

    computed = compute_period(period=t0, now=end + timedelta(days=1))
    [line] = [
        line for line in computed.for_project(None) if line.references.get("why") == "unbilled"
    ]
    expected = (Decimal(late) * Decimal("2.5") / 3600).quantize(
        Decimal("0.01"), rounding=ROUND_HALF_UP
    )
    assert (line.amount, line.gpu_seconds, line.references["instances"]) == (expected, late, 1)
    assert line.gpu_model_id == f0c.model.pk
    # The project's own lines bill exactly the time it ran until its end, not a second more.
    alpha = [line for line in computed.for_project(f0c.alpha.pk) if line.kind == "usage"]
    assert sum(line.gpu_seconds for line in alpha) == 3600 - 30


def test_the_pool_page_shows_it_to_admins(f0c, cloud, t0, client, settings):
    instance, end = ended_lease(f0c, t0)
    termination.terminate_instance(instance_id=instance.pk, now=end + timedelta(seconds=40))
    UnbilledCloudTime.objects.update(  # this month, whatever today's date
        start=end.replace(year=2099), end=end.replace(year=2099) + timedelta(seconds=40)
    )
    url = reverse("rental:pool", args=[f0c.model.pool.pk])
    client.force_login(f0c.admin)
    page = client.get(url, HTTP_ACCEPT_LANGUAGE="en").content.decode()
    assert "Unbilled cloud time this month" in page
    assert "0.01 GPU-hours (1 instance, 40 s after its billing stopped)" in page
    client.force_login(f0c.alice)
    assert "Unbilled cloud time" not in client.get(url).content.decode()
