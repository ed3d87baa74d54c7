"""Sessions end when idle (sliding) and after an absolute maximum, on a controlled clock."""

from datetime import timedelta
from unittest import mock

import pytest
from django.urls import reverse

from tests import factories


@pytest.fixture
def clock(t0):
    now = {"at": t0}
    with mock.patch("django.utils.timezone.now", side_effect=lambda: now["at"]):
        yield now


def logged_in(client, clock):
    client.force_login(factories.user("erik"))
    assert client.get(reverse("dashboard")).status_code == 200  # the session's clock starts


def test_it_ends_a_session_idle_past_the_limit(db, client, clock, settings):
    settings.PORTAL_SESSION_IDLE_SECONDS = 3600
    logged_in(client, clock)
    clock["at"] += timedelta(minutes=59)
    assert client.get(reverse("dashboard")).status_code == 200
    clock["at"] += timedelta(minutes=61)
    response = client.get(reverse("dashboard"))
    assert response.status_code == 302
    assert "/login/" in response["Location"]
    assert "_auth_user_id" not in client.session


def test_it_slides_the_idle_limit_with_each_request(db, client, clock, settings):
    settings.PORTAL_SESSION_IDLE_SECONDS = 3600
    logged_in(client, clock)
    for _ in range(5):  # 5 × 50 min: never idle an hour, active over 4 hours
        clock["at"] += timedelta(minutes=50)
        assert client.get(reverse("dashboard")).status_code == 200


def test_it_ends_an_active_session_at_the_absolute_maximum(db, client, clock, settings):
    settings.PORTAL_SESSION_IDLE_SECONDS = 3600
    settings.PORTAL_SESSION_MAX_SECONDS = 3 * 3600
    logged_in(client, clock)
    for _ in range(5):
        clock["at"] += timedelta(minutes=50)
        client.get(reverse("dashboard"))
    response = client.get(reverse("dashboard"))
    assert response.status_code == 302
    assert "_auth_user_id" not in client.session
