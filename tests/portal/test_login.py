"""Logging in, and failed logins (portal.login_throttle): one account from one address
slows down, one address stops, one account locks only after far more failures from
anywhere, and an admin lifts the lock. Addresses behind trusted proxies."""

import pytest
from django.contrib.auth import get_user_model
from django.test import Client, RequestFactory
from django.urls import reverse

from portal import login_throttle
from portal.errors import NotPermitted
from portal.models import AuditEvent, LoginLock
from tests import factories

LOGIN = "/login/"


def attempt(username: str, password: str, *, address: str = "10.0.0.1", client=None, **meta):
    client = client or Client()
    return client.post(
        LOGIN, {"username": username, "password": password}, REMOTE_ADDR=address, **meta
    )


def logged_in(response) -> bool:
    return response.status_code == 302 and "_auth_user_id" in response.client.session


class Clock:
    """The throttle's clock, moved by the test (the waits are seconds long)."""

    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture(autouse=True)
def clock(monkeypatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(login_throttle, "clock", fake)
    return fake


def test_it_logs_in_and_lands_on_the_dashboard(db, client):
    factories.user("erik")
    response = client.post(reverse("login"), {"username": "erik", "password": factories.PASSWORD})
    assert response.status_code == 302
    assert response["Location"] == reverse("dashboard")
    assert client.get(reverse("dashboard")).status_code == 200


def test_it_logs_out_with_a_post(db, client):
    user = factories.user("erik")
    client.force_login(user)
    assert client.post(reverse("logout")).status_code == 302
    assert client.get(reverse("dashboard")).status_code == 302


def test_the_delay_doubles_up_to_its_most(settings):
    settings.LOGIN_THROTTLE_ATTEMPTS = 5
    settings.LOGIN_THROTTLE_DELAY_MAX = 300
    assert [login_throttle.delay(n) for n in range(4, 16)] == [
        0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300,
    ]  # fmt: skip


def test_it_slows_one_account_from_one_address_with_a_growing_delay(db, settings, clock):
    settings.LOGIN_THROTTLE_ATTEMPTS = 2
    factories.user("erik")
    assert [attempt("erik", "wrong").status_code for _ in range(2)] == [200, 200]

    early = attempt("erik", factories.PASSWORD)
    assert early.status_code == 429
    assert early["Retry-After"] == "1"
    assert "Try again in 1 second." in early.content.decode()
    assert not logged_in(early)

    # After the wait, one more wrong password: the next wait is twice as long.
    clock.advance(1)
    assert attempt("erik", "wrong").status_code == 200
    later = attempt("erik", factories.PASSWORD)
    assert later.status_code == 429
    assert later["Retry-After"] == "2"
    assert "Try again in 2 seconds." in later.content.decode()
    clock.advance(1)
    assert attempt("erik", factories.PASSWORD)["Retry-After"] == "1"

    # The refused tries were not counted: the right password works after the wait.
    clock.advance(1)
    assert logged_in(attempt("erik", factories.PASSWORD))
    assert not LoginLock.objects.exists()


def test_only_one_try_goes_through_per_wait(db, settings, clock):
    settings.LOGIN_THROTTLE_ATTEMPTS = 1
    factories.user("erik")
    attempt("erik", "wrong")
    clock.advance(1)
    # Two tries at the same moment (the first still checking its password): one turn.
    first = RequestFactory().post(LOGIN, REMOTE_ADDR="10.0.0.1")
    second = RequestFactory().post(LOGIN, REMOTE_ADDR="10.0.0.1")
    assert login_throttle.check(first, "erik") is None
    assert login_throttle.check(first, "erik") is None  # the same request asks again
    refusal = login_throttle.check(second, "erik")
    assert refusal is not None and (refusal.reason, refusal.retry_after) == ("pair", 1)
    # The same account from another address is not slowed.
    assert (
        login_throttle.check(RequestFactory().post(LOGIN, REMOTE_ADDR="10.0.0.2"), "erik") is None
    )


def test_it_slows_only_that_pair_not_the_account_elsewhere_nor_others_here(db, settings):
    settings.LOGIN_THROTTLE_ATTEMPTS = 3
    factories.user("erik")
    factories.user("greta")
    for _ in range(3):
        attempt("erik", "wrong", address="10.0.0.1")
    assert attempt("erik", factories.PASSWORD, address="10.0.0.1").status_code == 429
    # The same account from another address, and another account from this one.
    assert logged_in(attempt("erik", factories.PASSWORD, address="10.0.0.2"))
    greta = attempt("greta", factories.PASSWORD, address="10.0.0.1")
    assert logged_in(greta)
    assert greta.client.session["_auth_user_id"] == str(
        get_user_model().objects.get(username="greta").pk
    )


def test_it_stops_an_address_after_many_failures_on_many_accounts(db, settings):
    settings.LOGIN_THROTTLE_ADDRESS_ATTEMPTS = 8
    factories.user("greta")
    for i in range(8):
        attempt(f"guess{i}", "wrong", address="198.51.100.1")
    response = attempt("greta", factories.PASSWORD, address="198.51.100.1")
    assert response.status_code == 429
    assert response["Retry-After"] == str(settings.LOGIN_THROTTLE_WINDOW)
    assert "Too many failed logins from your address." in response.content.decode()
    assert not logged_in(response)
    assert logged_in(attempt("greta", factories.PASSWORD, address="198.51.100.9"))


def test_it_locks_an_account_only_after_many_failures_from_many_addresses(db, settings):
    settings.LOGIN_THROTTLE_ATTEMPTS = 2
    settings.LOGIN_THROTTLE_ACCOUNT_ATTEMPTS = 6
    factories.user("erik")
    for i in range(5):  # one short of the lock, from five places
        assert attempt("erik", "wrong", address=f"203.0.113.{i}").status_code == 200
    # Erik, from his own address, is not locked out by someone guessing elsewhere.
    assert logged_in(attempt("erik", factories.PASSWORD, address="10.0.0.1"))
    assert not LoginLock.objects.exists()

    assert attempt("Erik", "wrong", address="203.0.113.5").status_code == 200  # the 6th
    lock = LoginLock.objects.get()
    assert (lock.username, lock.failures, lock.lifted_at) == ("erik", 6, None)
    assert lock.in_force()
    event = AuditEvent.objects.get(verb="login_lock.locked")
    assert event.actor is None and event.object_id == str(lock.pk)

    locked = attempt("erik", factories.PASSWORD, address="10.0.0.77")
    assert locked.status_code == 429
    assert 1 <= int(locked["Retry-After"]) <= settings.LOGIN_THROTTLE_WINDOW
    assert "This account is locked" in locked.content.decode()
    assert "ask an administrator" in locked.content.decode()
    assert not logged_in(locked)
    assert LoginLock.objects.count() == 1  # a refused try is not another failure


def test_it_says_the_wait_in_the_readers_language(db, settings):
    settings.LOGIN_THROTTLE_ATTEMPTS = 1
    factories.user("erik")
    attempt("erik", "wrong")
    response = attempt("erik", "wrong", HTTP_ACCEPT_LANGUAGE="zh-hans")
    assert response.status_code == 429
    assert "1 秒后再试" in response.content.decode()


@pytest.fixture
def locked_erik(db, settings):
    settings.LOGIN_THROTTLE_ATTEMPTS = 1
    settings.LOGIN_THROTTLE_ACCOUNT_ATTEMPTS = 3
    factories.user("erik")
    for i in range(3):
        attempt("erik", "wrong", address=f"203.0.113.{i}")
    return LoginLock.objects.get()


def test_an_admin_sees_the_lock_and_lifts_it(locked_erik):
    root = factories.user("root", staff=True)
    admin = Client()
    admin.force_login(root)
    listing = admin.get(reverse("admin:portal_loginlock_changelist") + "?in_force=yes")
    assert listing.status_code == 200
    assert "erik" in listing.content.decode()

    response = admin.post(
        reverse("admin:portal_loginlock_changelist"),
        {"action": "lift", "_selected_action": [locked_erik.pk]},
        follow=True,
    )
    assert response.status_code == 200
    assert "1 lock lifted." in response.content.decode()
    locked_erik.refresh_from_db()
    assert locked_erik.lifted_by == root and not locked_erik.in_force()
    event = AuditEvent.objects.get(verb="login_lock.lifted")
    assert (event.actor, event.object_id, event.source) == (root, str(locked_erik.pk), "admin")
    # At once, and even from an address that had been made to wait.
    assert logged_in(attempt("erik", factories.PASSWORD, address="203.0.113.0"))


def test_nobody_but_an_admin_sees_or_lifts_a_lock(locked_erik):
    outsider = factories.user("olga")
    client = Client()
    client.force_login(outsider)
    listing = client.get(reverse("admin:portal_loginlock_changelist"))
    assert listing.status_code == 302  # to the admin's login
    client.post(
        reverse("admin:portal_loginlock_changelist"),
        {"action": "lift", "_selected_action": [locked_erik.pk]},
    )
    with pytest.raises(NotPermitted):
        login_throttle.lift_lock(actor=outsider, lock=locked_erik)
    locked_erik.refresh_from_db()
    assert locked_erik.in_force()
    assert not AuditEvent.objects.filter(verb="login_lock.lifted").exists()
    assert attempt("erik", factories.PASSWORD, address="10.0.0.5").status_code == 429


def test_it_counts_the_client_behind_a_trusted_proxy(db, settings):
    settings.PORTAL_TRUSTED_PROXIES = 1
    settings.LOGIN_THROTTLE_ADDRESS_ATTEMPTS = 4
    factories.user("greta")
    proxy = "10.0.0.254"  # every request arrives from the proxy
    for i in range(4):  # a new spoofed entry each time, left of the proxy's own
        forwarded = f"192.0.2.{i}, 203.0.113.7"
        attempt(f"guess{i}", "wrong", address=proxy, HTTP_X_FORWARDED_FOR=forwarded)
    stopped = attempt(
        "greta", factories.PASSWORD, address=proxy, HTTP_X_FORWARDED_FOR="192.0.2.99, 203.0.113.7"
    )
    assert stopped.status_code == 429
    # A colleague behind the same proxy is someone else.
    colleague = attempt(
        "greta", factories.PASSWORD, address=proxy, HTTP_X_FORWARDED_FOR="203.0.113.8"
    )
    assert logged_in(colleague)


def test_it_ignores_the_header_when_no_proxy_is_trusted(db, settings):
    settings.PORTAL_TRUSTED_PROXIES = 0
    settings.LOGIN_THROTTLE_ATTEMPTS = 2
    factories.user("erik")
    for i in range(2):
        attempt("erik", "wrong", address="203.0.113.7", HTTP_X_FORWARDED_FOR=f"192.0.2.{i}")
    spoofed = attempt(
        "erik", factories.PASSWORD, address="203.0.113.7", HTTP_X_FORWARDED_FOR="192.0.2.50"
    )
    assert spoofed.status_code == 429
    assert not logged_in(spoofed)


def test_it_throttles_the_admin_login_the_same_way(db):
    factories.user("root", staff=True)
    url = reverse("admin:login")
    client = Client(REMOTE_ADDR="10.0.0.1")
    for _ in range(30):
        client.post(url, {"username": "root", "password": "wrong"})
    response = client.post(url, {"username": "root", "password": factories.PASSWORD})
    assert response.status_code == 429
    assert int(response["Retry-After"]) >= 1
    assert "Too many failed logins" in response.content.decode()
    assert "_auth_user_id" not in client.session
    assert not LoginLock.objects.exists()  # the refused tries were never guesses


def test_it_counts_admin_failures_against_the_portal_login(db):
    factories.user("root", staff=True)
    for _ in range(5):
        Client().post(
            reverse("admin:login"),
            {"username": "root", "password": "wrong"},
            REMOTE_ADDR="10.0.0.1",
        )
    assert attempt("root", factories.PASSWORD, address="10.0.0.1").status_code == 429
