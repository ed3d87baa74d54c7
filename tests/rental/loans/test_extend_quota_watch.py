"""Extend (point 5), quota changes decided in the portal (point 6), the availability
watch (point 3) and the degraded pool alert (Q1)."""

from datetime import timedelta

import pytest
from django.urls import reverse

from portal.errors import InvalidInput, NotPermitted, QuotaExceeded
from portal.models import AuditEvent
from rental.loans import admission, ending, extension, pools, queue, quota_requests
from rental.models import AvailabilityWatch, Pool, Quota, QuotaRequest, Reservation
from tests.notices import told
from tests.rental.loans.conftest import at

Status = Reservation.Status


def fresh(lease):
    return Reservation.objects.get(pk=lease.pk)


# Extend
def test_it_extends_within_the_limits_at_once(f0, lease):
    made = lease(f0.alpha, 2, at("09:00"), hours=4)
    extended = extension.extend_reservation(
        actor=f0.alice, reservation=made, hours="2", now=at("10:00")
    )
    assert extended.end == at("15:00")
    assert AuditEvent.objects.filter(verb="lease.extended", object_id=str(made.pk)).exists()


def test_it_refuses_an_extension_beyond_the_maximum_lease(f0, lease):
    made = lease(f0.alpha, 2, at("09:00"), hours=160)
    with pytest.raises(InvalidInput) as refused:
        extension.extend_reservation(actor=f0.alice, reservation=made, hours="9", now=at("10:00"))
    assert (refused.value.field, refused.value.code) == ("hours", "over_max_lease")
    assert fresh(made).end == made.end


def test_beyond_the_auto_approve_hours_it_goes_to_the_manager(f0, lease):
    Quota.objects.filter(project=f0.alpha).update(max_hours_per_lease=8)
    made = lease(f0.alpha, 2, at("09:00"), hours=6)
    asked = extension.extend_reservation(
        actor=f0.alice, reservation=made, hours="4", now=at("10:00")
    )
    assert (asked.end, asked.extension_until) == (at("15:00"), at("19:00"))
    assert told(f0.alpha_manager, starts="Extension")
    with pytest.raises(NotPermitted):
        extension.decide_extension(actor=f0.alice, reservation=made, approve=True)
    extension.decide_extension(actor=f0.alpha_manager, reservation=made, approve=True)
    assert (fresh(made).end, fresh(made).extension_until) == (at("19:00"), None)


def test_extending_a_booking_checks_r2_over_the_added_window(f0):
    now = at("12:00", day=3)

    def book(project, gpus, start, hours):
        return admission.submit_reservation(
            actor=f0.engineer_of(project),
            project=project,
            gpu_model=f0.model,
            gpu_count=gpus,
            duration_hours=hours,
            priority="experiment",
            market="on_demand",
            start=start,
            now=now,
        )

    alpha = book(f0.alpha, 4, at("09:00"), 8)
    book(f0.gamma, 1, at("17:00"), 1)
    with pytest.raises(QuotaExceeded, match=r"\[17:00, 18:00\) would need 9 of 8") as refused:
        extension.extend_reservation(actor=f0.alice, reservation=alpha, hours="1", now=now)
    assert fresh(alpha).end == at("17:00")
    # On the extension's own field: its hours make the window too long, not a start.
    assert (refused.value.field, refused.value.code) == ("hours", "reservation_conflict")


@pytest.mark.parametrize("hours", ["x", "0", "-1", "0.0001"])
def test_a_bad_number_of_hours_is_refused_on_the_extensions_field(f0, lease, hours):
    made = lease(f0.alpha, 2, at("09:00"), hours=4)
    with pytest.raises(InvalidInput) as refused:
        extension.extend_reservation(actor=f0.alice, reservation=made, hours=hours, now=at("10:00"))
    assert refused.value.field == "hours"
    assert fresh(made).end == made.end


def test_the_lease_page_extends(f0, lease, client):
    made = lease(f0.alpha, 1, at("09:00"), hours=2)
    client.force_login(f0.alice)
    response = client.post(reverse("rental:lease_extend", kwargs={"pk": made.pk}), {"hours": "x"})
    assert response.status_code == 400  # the lease page again, the error beside the hours
    assert 'id="extend-hours_error"' in response.content.decode()
    assert fresh(made).end == made.end
    client.post(reverse("rental:lease_extend", kwargs={"pk": made.pk}), {"hours": "1"})
    assert fresh(made).end == made.end + timedelta(hours=1)
    client.force_login(f0.bob)
    outsider = client.post(reverse("rental:lease_extend", kwargs={"pk": made.pk}), {"hours": "1"})
    assert outsider.status_code == 404


# Quota requests
def test_a_manager_decides_a_ceiling_and_the_asker_is_told(f0):
    asked = quota_requests.request_quota_change(
        actor=f0.alice, project=f0.alpha, gpu_model=f0.model, ceiling="7", reason="deadline"
    )
    assert told(f0.alpha_manager, starts="Quota")
    with pytest.raises(NotPermitted):
        quota_requests.decide_quota_request(actor=f0.alice, request=asked, approve=True)
    quota_requests.decide_quota_request(actor=f0.alpha_manager, request=asked, approve=True)
    assert Quota.objects.get(project=f0.alpha).ceiling == 7
    assert QuotaRequest.objects.get(pk=asked.pk).status == QuotaRequest.Status.APPROVED
    assert told(f0.alice, starts="Quota change")
    assert AuditEvent.objects.filter(verb="quota_request.approved").exists()


def test_only_an_admin_decides_a_guarantee_bounded_by_the_pool(f0):
    asked = quota_requests.request_quota_change(
        actor=f0.alice, project=f0.alpha, gpu_model=f0.model, guaranteed="5", reason="more"
    )
    with pytest.raises(NotPermitted):
        quota_requests.decide_quota_request(actor=f0.alpha_manager, request=asked, approve=True)
    # Σ G would be 5 + 4 + 0 = 9 > 8 (Q1): refused, nothing changes.
    with pytest.raises(InvalidInput, match="9"):
        quota_requests.decide_quota_request(actor=f0.admin, request=asked, approve=True)
    assert Quota.objects.get(project=f0.alpha).guaranteed == 2
    assert QuotaRequest.objects.get(pk=asked.pk).status == QuotaRequest.Status.PENDING
    quota_requests.decide_quota_request(
        actor=f0.admin, request=asked, approve=False, comment="no room"
    )
    assert QuotaRequest.objects.get(pk=asked.pk).status == QuotaRequest.Status.REJECTED


@pytest.mark.parametrize(
    ("changes", "field"),
    [({"ceiling": "x"}, "ceiling"), ({}, "ceiling"), ({"ceiling": "3", "reason": ""}, "reason")],
)
def test_bad_quota_requests_are_field_errors(f0, changes, field):
    args = {"reason": "why", **changes}
    with pytest.raises(InvalidInput) as refused:
        quota_requests.request_quota_change(
            actor=f0.alice, project=f0.alpha, gpu_model=f0.model, **args
        )
    assert refused.value.field == field
    assert not QuotaRequest.objects.exists()


def test_the_project_page_decides_a_quota_request(f0, client):
    client.force_login(f0.alice)
    client.post(
        reverse("rental:quota_request_new", kwargs={"slug": "alpha"}),
        {"gpu_model": f0.model.pk, "ceiling": "5", "reason": "a bigger run"},
    )
    asked = QuotaRequest.objects.get()
    client.force_login(f0.bob)
    url = reverse("rental:quota_request_decide", kwargs={"pk": asked.pk})
    assert client.post(url, {"decision": "approve"}).status_code == 404
    client.force_login(f0.alpha_manager)
    page = client.get(reverse("rental:project", kwargs={"slug": "alpha"})).content.decode()
    assert f'id="approve-quota-{asked.pk}"' in page
    client.post(url, {"decision": "approve"})
    assert Quota.objects.get(project=f0.alpha).ceiling == 5


def test_managers_set_auto_approve_limits_within_the_admins_caps(f0):
    quota = Quota.objects.get(project=f0.alpha)
    Quota.objects.filter(pk=quota.pk).update(auto_approve_hours_cap=24)
    with pytest.raises(InvalidInput) as refused:
        quota_requests.set_auto_approve_limits(
            actor=f0.alpha_manager, quota=quota, max_gpus=4, max_hours=48
        )
    assert refused.value.field == "max_hours_per_lease"
    with pytest.raises(InvalidInput):
        quota_requests.set_auto_approve_limits(
            actor=f0.alpha_manager, quota=quota, max_gpus=7, max_hours=8
        )  # above L = 6
    quota_requests.set_auto_approve_limits(
        actor=f0.alpha_manager, quota=quota, max_gpus=4, max_hours=24
    )
    assert Quota.objects.filter(pk=quota.pk, max_gpus_per_lease=4, max_hours_per_lease=24)
    with pytest.raises(NotPermitted):
        quota_requests.set_auto_approve_limits(actor=f0.alice, quota=quota, max_gpus=1, max_hours=1)


# Availability watch
def test_a_watcher_is_told_once_when_it_fits(f0, lease, client):
    lease(f0.beta, 4, at("09:00"))
    lease(f0.alpha, 2, at("09:00"))
    c = lease(f0.gamma, 2, at("09:00"))
    waiting = lease(f0.gamma, 2, at("09:10"))
    client.force_login(f0.gary)
    client.post(reverse("rental:lease_watch", kwargs={"pk": waiting.pk}))
    watch = AvailabilityWatch.objects.get(user=f0.gary)
    queue.admit_queued(gpu_model=f0.model, now=at("09:20"))
    assert AvailabilityWatch.objects.get(pk=watch.pk).notified_at is None
    Reservation.objects.filter(pk=waiting.pk).delete()
    ending.end_reservation(actor=f0.gary, reservation=c, now=at("10:00"))
    queue.admit_queued(gpu_model=f0.model, now=at("10:00"))
    queue.admit_queued(gpu_model=f0.model, now=at("10:01"))
    assert AvailabilityWatch.objects.get(pk=watch.pk).notified_at == at("10:00")
    assert len(told(f0.gary, has="are free now")) == 1


# Q1 degraded
def test_capacity_below_the_guarantees_degrades_the_pool_and_alerts_admins(f0):
    pools.set_capacity(actor=f0.admin, gpu_model=f0.model, capacity=5)
    assert Pool.objects.get(pk=f0.pool.pk).state == Pool.State.DEGRADED
    assert told(f0.admin, starts="Pool degraded")
    pools.set_capacity(actor=f0.admin, gpu_model=f0.model, capacity=8)
    assert Pool.objects.get(pk=f0.pool.pk).state == Pool.State.OK
    with pytest.raises(NotPermitted):
        pools.set_capacity(actor=f0.alpha_manager, gpu_model=f0.model, capacity=9)
