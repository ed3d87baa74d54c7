"""Expected start where people read it: the lease page of a queued or pending lease, the
waiting list, the request form before sending (within its query budget) and the API."""

import re
from datetime import timedelta

from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from rental.models import Reservation
from tests.api.leases_world import client_for

Status = Reservation.Status
MOST_QUERIES = 12  # tests/rental/views/test_page_costs.py


def minute(when) -> str:
    return when.strftime("%Y-%m-%d %H:%M")


def full_pool(f0, lease):
    """beta's 4 guaranteed GPUs end in 2 hours; alpha's 2 and gamma's 2 run all day."""
    now = timezone.now().replace(microsecond=0)
    frees = lease(f0.beta, 4, now - timedelta(hours=1), hours=3)
    lease(f0.alpha, 2, now - timedelta(hours=1), hours=20)
    lease(f0.gamma, 2, now - timedelta(hours=1), hours=20)
    return now, frees.end


def test_the_lease_page_and_the_waiting_list_say_when_a_queued_lease_starts(f0, lease, client):
    now, frees = full_pool(f0, lease)
    waiting = lease(f0.gamma, 2, now - timedelta(minutes=5), hours=1)
    assert waiting.status == Status.QUEUED
    client.force_login(f0.gary)
    sentence = f"Expected to start at about {minute(frees)} UTC (if nothing else changes)."
    page = client.get(reverse("rental:lease", kwargs={"pk": waiting.pk})).content.decode()
    assert sentence in page and 'id="lease-expected-start"' in page
    rows = client.get(reverse("rental:leases") + "?status=waiting").content.decode()
    assert re.search(rf'id="lease-expected-{waiting.pk}">{re.escape(sentence)}<', rows)


def test_the_lease_page_of_a_pending_lease_says_when_it_would_start_if_approved(f0, lease, client):
    now, frees = full_pool(f0, lease)
    pending = lease(f0.gamma, 3, now - timedelta(minutes=5), hours=1)  # 2 + 3 > L 4
    assert pending.status == Status.PENDING_APPROVAL
    client.force_login(f0.gary)
    page = client.get(reverse("rental:lease", kwargs={"pk": pending.pk})).content.decode()
    assert (
        "It waits for a manager&#x27;s approval; approved now, it would most likely start at "
        f"about {minute(frees)} UTC (if nothing else changes)."
    ) in page


def test_the_request_form_says_when_it_would_start_if_sent_now(f0, lease, client):
    _now, frees = full_pool(f0, lease)
    client.force_login(f0.alice)
    data = {
        "project": f0.alpha.pk,
        "gpu_model": f0.model.pk,
        "gpu_count": "2",
        "duration_hours": "3",
        "priority": "experiment",
        "market": "on_demand",
    }
    url = reverse("rental:lease_estimate")
    with CaptureQueriesContext(connection) as queued:
        answer = client.post(url, data, HTTP_HX_REQUEST="true").content.decode()
    assert 'data-outcome="queued"' in answer
    assert (
        f"If you send this now, it would most likely start at about {minute(frees)} UTC (if "
        "nothing else changes)."
    ) in answer
    # The same form when it would start now: the sentence costs one query.
    Reservation.objects.filter(project=f0.gamma).update(status=Status.ENDED)
    with CaptureQueriesContext(connection) as runs_now:
        answer = client.post(url, data, HTTP_HX_REQUEST="true").content.decode()
    assert 'data-outcome="burst"' in answer and "If you send this now" not in answer
    assert len(runs_now) <= MOST_QUERIES
    assert len(queued) - len(runs_now) == 1
    assert len(queued) <= MOST_QUERIES  # the panel reads no SSH key


def test_the_api_returns_the_expected_start_of_waiting_leases(f0, lease):
    now, frees = full_pool(f0, lease)
    waiting = lease(f0.gamma, 2, now - timedelta(minutes=5), hours=1)
    client = client_for(f0.gary)
    one = client.get(reverse("api:lease-detail", kwargs={"pk": waiting.pk})).json()
    assert one["expected_start"] == frees.isoformat().replace("+00:00", "Z")
    assert one["expected_start_reason"] == (
        f"Expected to start at about {minute(frees)} UTC (if nothing else changes)."
    )
    listed = {row["id"]: row for row in client.get(reverse("api:lease-list")).json()["results"]}
    assert listed[waiting.pk]["expected_start"] == one["expected_start"]
    running = next(row for row in listed.values() if row["status"] != "queued")
    assert (running["expected_start"], running["expected_start_reason"]) == (None, "")
