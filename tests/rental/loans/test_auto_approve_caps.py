"""Auto-approve limits per quota: a manager sets them on the project page within what the
admin allows; the admin sets those caps on the same page. Both through services with an
audit event; a refusal is an error beside the field that caused it, nothing written."""

import pytest
from django.urls import reverse

from portal.errors import InvalidInput, NotPermitted
from portal.models import AuditEvent
from rental.loans import quota_requests
from rental.models import Quota


@pytest.fixture
def quota(f0):
    return Quota.objects.get(project=f0.alpha)  # G 2, L 6


def caps_url(f0, quota):
    return reverse("rental:quota_auto_approve_caps", args=[f0.alpha.slug, quota.pk])


def limits_url(f0, quota):
    return reverse("rental:quota_auto_approve", args=[f0.alpha.slug, quota.pk])


def test_an_admin_sets_the_caps_with_an_audit_event(f0, quota):
    quota_requests.set_auto_approve_caps(actor=f0.admin, quota=quota, gpus_cap=3, hours_cap=24)
    quota.refresh_from_db()
    assert (quota.auto_approve_gpus_cap, quota.auto_approve_hours_cap) == (3, 24)
    event = AuditEvent.objects.get(verb="quota.auto_approve_caps_set")
    assert (event.actor, event.project_id) == (f0.admin, f0.alpha.pk)
    assert event.after["gpus_cap"] == 3 and event.after["hours_cap"] == 24


def test_lowering_a_cap_brings_the_limits_down_to_it(f0, quota):
    Quota.objects.filter(pk=quota.pk).update(max_gpus_per_lease=4, max_hours_per_lease=None)
    quota_requests.set_auto_approve_caps(actor=f0.admin, quota=quota, gpus_cap=2, hours_cap=12)
    quota.refresh_from_db()
    assert (quota.max_gpus_per_lease, quota.max_hours_per_lease) == (2, 12)
    event = AuditEvent.objects.get(verb="quota.auto_approve_caps_set")
    assert event.before["max_gpus"] == 4 and event.after["max_gpus"] == 2


@pytest.mark.parametrize(
    ("gpus", "hours", "field", "message"),
    [
        ("7", "", "auto_approve_gpus_cap", "At most 6 GPUs: the quota's ceiling L."),
        ("", "10000", "auto_approve_hours_cap", "the site's maximum lease"),
        ("two", "", "auto_approve_gpus_cap", "Enter a whole number from 0 to 100,000."),
        ("", "-1", "auto_approve_hours_cap", "Enter a whole number from 0 to 100,000."),
        ("", "1.5", "auto_approve_hours_cap", "Enter a whole number from 0 to 100,000."),
        ("", "1" + "0" * 26, "auto_approve_hours_cap", "Enter a whole number from 0 to 100,000."),
    ],
)
def test_bad_caps_are_field_errors_and_write_nothing(f0, quota, gpus, hours, field, message):
    with pytest.raises(InvalidInput) as refused:
        quota_requests.set_auto_approve_caps(
            actor=f0.admin, quota=quota, gpus_cap=gpus, hours_cap=hours
        )
    assert refused.value.field == field
    assert message in refused.value.message
    quota.refresh_from_db()
    assert (quota.auto_approve_gpus_cap, quota.auto_approve_hours_cap) == (None, None)
    assert not AuditEvent.objects.filter(verb="quota.auto_approve_caps_set").exists()


def test_only_admins_set_caps(f0, quota):
    with pytest.raises(NotPermitted):
        quota_requests.set_auto_approve_caps(
            actor=f0.alpha_manager, quota=quota, gpus_cap=6, hours_cap=""
        )


def test_the_admin_sets_caps_on_the_project_page(f0, quota, client):
    client.force_login(f0.admin)
    page = client.get(reverse("rental:project", args=[f0.alpha.slug])).content.decode()
    assert f'id="auto-approve-caps-form-{quota.pk}"' in page
    response = client.post(
        caps_url(f0, quota), {"auto_approve_gpus_cap": "2", "auto_approve_hours_cap": "8"}
    )
    assert response.status_code == 302
    quota.refresh_from_db()
    assert (quota.auto_approve_gpus_cap, quota.auto_approve_hours_cap) == (2, 8)
    page = client.get(reverse("rental:project", args=[f0.alpha.slug])).content.decode()
    assert "The admin lets managers raise them to" in page and "2 GPUs" in page


def test_a_bad_cap_shows_beside_its_field(f0, quota, client):
    client.force_login(f0.admin)
    response = client.post(
        caps_url(f0, quota), {"auto_approve_gpus_cap": "9", "auto_approve_hours_cap": ""}
    )
    assert response.status_code == 400
    page = response.content.decode()
    assert f'id="error-cap-gpus-{quota.pk}">At most 6 GPUs: the quota&#x27;s ceiling L.' in page
    assert 'value="9"' in page  # what was sent stays in the field
    quota.refresh_from_db()
    assert quota.auto_approve_gpus_cap is None


def test_a_manager_above_the_cap_is_refused_naming_the_cap(f0, quota, client):
    Quota.objects.filter(pk=quota.pk).update(auto_approve_gpus_cap=2, auto_approve_hours_cap=8)
    client.force_login(f0.alpha_manager)
    page = client.get(reverse("rental:project", args=[f0.alpha.slug])).content.decode()
    assert f'id="auto-approve-form-{quota.pk}"' in page
    assert f'id="auto-approve-caps-form-{quota.pk}"' not in page  # caps are the admin's
    response = client.post(
        limits_url(f0, quota), {"max_gpus_per_lease": "3", "max_hours_per_lease": "8"}
    )
    assert response.status_code == 400
    assert (
        f'id="error-aa-gpus-{quota.pk}">At most 2 GPUs, as the admin allows.'
        in response.content.decode()
    )
    response = client.post(
        limits_url(f0, quota), {"max_gpus_per_lease": "2", "max_hours_per_lease": "9"}
    )
    assert f'id="error-aa-hours-{quota.pk}">At most 8 hours, as the admin allows.' in (
        response.content.decode()
    )
    quota.refresh_from_db()
    assert (quota.max_gpus_per_lease, quota.max_hours_per_lease) == (None, None)
    response = client.post(
        limits_url(f0, quota), {"max_gpus_per_lease": "2", "max_hours_per_lease": "8"}
    )
    assert response.status_code == 302
    quota.refresh_from_db()
    assert (quota.max_gpus_per_lease, quota.max_hours_per_lease) == (2, 8)
    assert AuditEvent.objects.filter(verb="quota.auto_approve_set", actor=f0.alpha_manager)


def test_who_may_post(f0, quota, client):
    gamma_quota = Quota.objects.get(project=f0.gamma)
    cases = [
        (f0.alice, caps_url(f0, quota), 404),  # an engineer of alpha
        (f0.alice, limits_url(f0, quota), 404),
        (f0.alpha_manager, caps_url(f0, quota), 404),  # a manager: limits only
        (f0.bob, limits_url(f0, quota), 404),  # beta's engineer: not his project
        (
            f0.alpha_manager,
            reverse("rental:quota_auto_approve", args=[f0.gamma.slug, gamma_quota.pk]),
            404,
        ),
        # A quota of another project under alpha's address is not found either.
        (
            f0.admin,
            reverse("rental:quota_auto_approve_caps", args=[f0.alpha.slug, gamma_quota.pk]),
            404,
        ),
    ]
    for user, url, status in cases:
        client.force_login(user)
        assert client.post(url, {"auto_approve_gpus_cap": "1"}).status_code == status, url
    gamma_quota.refresh_from_db()
    quota.refresh_from_db()
    assert quota.auto_approve_gpus_cap is None and gamma_quota.auto_approve_gpus_cap is None
