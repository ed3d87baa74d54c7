"""Logging in: a working login, and throttling after repeated failures (DESIGN.md §5)."""

import pytest
from django.core.cache import cache
from django.urls import reverse

from tests import factories


@pytest.fixture(autouse=True)
def _empty_cache():
    cache.clear()
    yield
    cache.clear()


def test_it_logs_in_and_lands_on_the_dashboard(db, client):
    factories.user("erik")
    response = client.post(reverse("login"), {"username": "erik", "password": factories.PASSWORD})
    assert response.status_code == 302
    assert response["Location"] == reverse("dashboard")
    assert client.get(reverse("dashboard")).status_code == 200


def test_it_throttles_repeated_failures_even_with_the_right_password(db, client, settings):
    settings.LOGIN_THROTTLE_ATTEMPTS = 3
    factories.user("erik")
    for _ in range(3):
        response = client.post(reverse("login"), {"username": "erik", "password": "wrong"})
        assert response.status_code == 200
    response = client.post(reverse("login"), {"username": "erik", "password": factories.PASSWORD})
    assert response.status_code == 429
    assert "Too many failed logins" in response.content.decode()
    assert "_auth_user_id" not in client.session


def test_it_logs_out_with_a_post(db, client):
    user = factories.user("erik")
    client.force_login(user)
    assert client.post(reverse("logout")).status_code == 302
    assert client.get(reverse("dashboard")).status_code == 302
