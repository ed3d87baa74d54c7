"""Logging in: a working login, and throttling after repeated failures (DESIGN.md §5)."""

import pytest
from django.contrib.auth import get_user_model
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


def test_it_locks_one_account_without_locking_others_behind_the_same_address(db, client):
    factories.user("erik")
    factories.user("greta")
    for _ in range(5):
        client.post(reverse("login"), {"username": "erik", "password": "wrong"})
    response = client.post(reverse("login"), {"username": "erik", "password": factories.PASSWORD})
    assert response.status_code == 429
    assert "_auth_user_id" not in client.session
    response = client.post(reverse("login"), {"username": "greta", "password": factories.PASSWORD})
    assert response.status_code == 302
    assert client.session["_auth_user_id"] == str(get_user_model().objects.get(username="greta").pk)


def test_it_locks_an_address_after_many_failures_on_many_accounts(db, client, settings):
    settings.LOGIN_THROTTLE_ADDRESS_ATTEMPTS = 8
    factories.user("greta")
    for i in range(8):
        client.post(reverse("login"), {"username": f"guess{i}", "password": "wrong"})
    response = client.post(reverse("login"), {"username": "greta", "password": factories.PASSWORD})
    assert response.status_code == 429
    assert "_auth_user_id" not in client.session
    # Another address is not affected.
    response = client.post(
        reverse("login"),
        {"username": "greta", "password": factories.PASSWORD},
        REMOTE_ADDR="198.51.100.9",
    )
    assert response.status_code == 302


def test_it_throttles_the_admin_login_the_same_way(db, client):
    factories.user("root", staff=True)
    url = reverse("admin:login")
    for _ in range(30):
        client.post(url, {"username": "root", "password": "wrong"})
    response = client.post(url, {"username": "root", "password": factories.PASSWORD})
    assert response.status_code == 429
    assert "Too many failed logins" in response.content.decode()
    assert "_auth_user_id" not in client.session


def test_it_counts_admin_failures_against_the_portal_login(db, client):
    factories.user("root", staff=True)
    for _ in range(5):
        client.post(reverse("admin:login"), {"username": "root", "password": "wrong"})
    response = client.post(reverse("login"), {"username": "root", "password": factories.PASSWORD})
    assert response.status_code == 429
