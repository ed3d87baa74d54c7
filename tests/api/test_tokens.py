"""``/api/v1/tokens``: the caller's own tokens, the raw token in the 201 answer only, revoke,
and HTTP Basic on POST /tokens alone, counted by the login throttle."""

import base64
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from portal import login_throttle, tokens
from portal.models import ApiToken, AuditEvent, LoginLock
from tests import factories

URL = "/api/v1/tokens"


@pytest.fixture
def alice(db):
    return factories.user("alice")


@pytest.fixture
def bob(db):
    return factories.user("bob")


def session(user) -> APIClient:
    client = APIClient()
    client.force_login(user)
    return client


def basic(username: str, password: str, *, address: str = "10.0.0.1") -> APIClient:
    client = APIClient(REMOTE_ADDR=address)
    pair = base64.b64encode(f"{username}:{password}".encode()).decode()
    client.credentials(HTTP_AUTHORIZATION=f"Basic {pair}")
    return client


def bearer(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


def in_days(days: int) -> str:
    return (timezone.now() + timedelta(days=days)).isoformat()


def make(user, name: str = "ci", days: int = 30):
    return tokens.create_token(
        actor=user, name=name, expires_at=timezone.now() + timedelta(days=days)
    )


def test_it_creates_a_token_and_shows_it_once(alice):
    client = session(alice)
    response = client.post(URL, {"name": "pipeline", "expires_at": in_days(30)}, format="json")
    assert response.status_code == 201
    body = response.json()
    raw = body["token"]
    assert raw.startswith("gpp_")
    assert response["Cache-Control"] == "no-store"
    row = ApiToken.objects.get(user=alice)
    assert body["id"] == row.pk and body["name"] == "pipeline"
    assert row.digest == tokens.digest(raw) and raw.startswith(row.prefix)
    assert body["prefix"] == row.prefix and body["revoked"] is False
    assert AuditEvent.objects.get(verb="token.created").source == "api"
    listed = client.get(URL)
    one = client.get(f"{URL}/{row.pk}")
    assert raw not in listed.content.decode() and raw not in one.content.decode()
    assert "token" not in one.json() and "digest" not in one.json()
    assert bearer(raw).get("/api/v1/me").json()["username"] == "alice"


def test_it_lists_only_the_callers_tokens_with_their_last_use(alice, bob):
    _used, raw = make(alice, "used")
    make(alice, "idle")
    theirs, _ = make(bob, "theirs")
    bearer(raw).get("/api/v1/me")
    response = session(alice).get(URL)
    assert response.status_code == 200
    results = response.json()["results"]
    assert {item["name"] for item in results} == {"used", "idle"}
    by_name = {item["name"]: item for item in results}
    assert by_name["used"]["last_used_at"] is not None
    assert by_name["idle"]["last_used_at"] is None
    assert session(alice).get(f"{URL}/{theirs.pk}").status_code == 404
    assert session(alice).post(f"{URL}/{theirs.pk}/revoke").status_code == 404
    theirs.refresh_from_db()
    assert theirs.revoked_at is None


def test_it_filters_revoked_tokens(alice):
    row, _ = make(alice, "old")
    make(alice, "new")
    tokens.revoke_token(actor=alice, token=row)
    client = session(alice)
    assert [t["name"] for t in client.get(f"{URL}?revoked=true").json()["results"]] == ["old"]
    assert [t["name"] for t in client.get(f"{URL}?revoked=false").json()["results"]] == ["new"]
    assert len(client.get(URL).json()["results"]) == 2


@pytest.mark.parametrize("value", ["null", "yes", "%00", ""])
def test_it_refuses_a_revoked_filter_that_is_not_true_or_false(alice, value):
    """Empty too: a filter given with no value is a 400, not the filter left off."""
    answer = session(alice).get(f"{URL}?revoked={value}")
    assert answer.status_code == 400, answer.content
    assert "revoked" in answer.json()["errors"]


def test_it_revokes_a_token_which_stops_working_at_once(alice):
    row, raw = make(alice)
    client = bearer(raw)
    assert client.get("/api/v1/me").status_code == 200
    response = session(alice).post(f"{URL}/{row.pk}/revoke")
    assert response.status_code == 200
    assert response.json()["revoked"] is True and response.json()["revoked_at"]
    row.refresh_from_db()
    assert row.revoked_at is not None
    assert bearer(raw).get("/api/v1/me").status_code == 401
    again = session(alice).post(f"{URL}/{row.pk}/revoke")
    assert again.status_code == 409
    assert again.json()["code"] == "revoked"
    assert AuditEvent.objects.filter(verb="token.revoked", source="api").count() == 1


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "", "expires_at": "2030-01-01T00:00:00Z"}, "name"),
        ({"name": "x" * 81, "expires_at": "2030-01-01T00:00:00Z"}, "name"),
        ({"name": "a\u0000b", "expires_at": "2030-01-01T00:00:00Z"}, "name"),
        ({"name": ["a"], "expires_at": "2030-01-01T00:00:00Z"}, "name"),
        ({"name": "ok"}, "expires_at"),
        ({"name": "ok", "expires_at": "tomorrow"}, "expires_at"),
    ],
)
def test_it_refuses_bad_input_with_the_field_and_writes_nothing(alice, body, field):
    response = session(alice).post(URL, body, format="json")
    assert response.status_code == 400
    assert field in response.json()["errors"]
    assert not ApiToken.objects.exists()
    assert not AuditEvent.objects.exists()


@pytest.mark.parametrize(
    ("expires_at", "code"),
    [
        ("2001-01-01T00:00:00Z", "expiry_past"),
        ("9999-12-31T00:00:00Z", "expiry_too_far"),
    ],
)
def test_it_answers_409_to_an_expiry_outside_what_the_site_allows(alice, expires_at, code):
    """A well-formed time, but already past or beyond the longest life a token may have."""
    response = session(alice).post(URL, {"name": "ok", "expires_at": expires_at}, format="json")
    assert response.status_code == 409, response.content
    assert (response.json()["code"], response.json()["field"]) == (code, "expires_at")
    assert "errors" not in response.json()
    assert not ApiToken.objects.exists()
    assert not AuditEvent.objects.exists()


def test_it_refuses_a_body_that_is_not_json(alice):
    response = session(alice).post(URL, "name=x", content_type="application/x-www-form-urlencoded")
    assert response.status_code in (400, 415)
    response = session(alice).post(URL, "{not json", content_type="application/json")
    assert response.status_code == 400
    assert not ApiToken.objects.exists()


def test_it_refuses_a_second_live_token_of_the_same_name(alice):
    make(alice, "ci")
    response = session(alice).post(URL, {"name": "ci", "expires_at": in_days(1)}, format="json")
    assert response.status_code == 409
    assert (response.json()["code"], response.json()["field"]) == ("name_taken", "name")
    assert ApiToken.objects.count() == 1


def test_a_script_makes_its_first_token_with_a_password(alice):
    response = basic("alice", factories.PASSWORD).post(
        URL, {"name": "first", "expires_at": in_days(7)}, format="json"
    )
    assert response.status_code == 201
    raw = response.json()["token"]
    assert bearer(raw).get("/api/v1/me").json()["username"] == "alice"


def test_a_password_works_on_post_tokens_only(alice):
    client = basic("alice", factories.PASSWORD)
    assert client.get("/api/v1/me").status_code == 401
    assert client.get(URL).status_code == 401
    row, _ = make(alice)
    assert client.post(f"{URL}/{row.pk}/revoke").status_code == 401
    row.refresh_from_db()
    assert row.revoked_at is None


def test_a_wrong_password_is_401_and_writes_nothing(alice):
    response = basic("alice", "wrong").post(URL, {"name": "x", "expires_at": in_days(1)})
    assert response.status_code == 401
    assert response.json()["code"] == "authentication_failed"
    assert not ApiToken.objects.exists()


@pytest.fixture
def frozen(monkeypatch):
    """The login throttle's clock stands still: its waits (seconds) never run out here."""
    monkeypatch.setattr(login_throttle, "clock", lambda: 1_800_000_000.0)


def test_password_guessing_locks_the_account_only_after_many_failures(alice, settings):
    settings.LOGIN_THROTTLE_ACCOUNT_ATTEMPTS = 3
    body = {"name": "x", "expires_at": in_days(1)}
    for attempt in range(2):
        client = basic("alice", f"guess-{attempt}", address=f"10.0.1.{attempt}")
        assert client.post(URL, body, format="json").status_code == 401
    # Guessed at from elsewhere, alice still makes her token from her own address.
    mine = basic("alice", factories.PASSWORD, address="10.0.2.1").post(URL, body, format="json")
    assert mine.status_code == 201
    assert basic("alice", "guess-2", address="10.0.1.2").post(URL, body).status_code == 401
    right = basic("alice", factories.PASSWORD, address="10.0.2.1").post(URL, body, format="json")
    assert right.status_code == 429
    assert right.json()["code"] == "throttled"
    assert "This account is locked" in right.json()["detail"]
    assert 1 <= int(right["Retry-After"]) <= settings.LOGIN_THROTTLE_WINDOW
    assert ApiToken.objects.count() == 1
    assert LoginLock.objects.get().username == "alice"
    # The same lock as the login page's: it is locked there too.
    page = Client(REMOTE_ADDR="10.0.2.2")
    locked = page.post("/login/", {"username": "alice", "password": factories.PASSWORD})
    assert locked.status_code == 429


def test_failures_on_the_login_page_slow_the_api_from_the_same_address(
    alice, settings, client, frozen
):
    settings.LOGIN_THROTTLE_ATTEMPTS = 2
    for _ in range(2):
        client.post("/login/", {"username": "alice", "password": "wrong"}, REMOTE_ADDR="10.0.0.1")
    body = {"name": "x", "expires_at": in_days(1)}
    response = basic("alice", factories.PASSWORD, address="10.0.0.1").post(URL, body)
    assert response.status_code == 429
    assert response["Retry-After"] == "1"
    assert response.json()["detail"] == (
        "Too many failed logins for this account from here. Try again in 1 second."
    )
    assert not ApiToken.objects.exists()
    elsewhere = basic("alice", factories.PASSWORD, address="10.0.0.2").post(URL, body)
    assert elsewhere.status_code == 201


def test_password_guessing_is_stopped_per_address(alice, settings):
    settings.LOGIN_THROTTLE_ADDRESS_ATTEMPTS = 4
    factories.user("greta")
    body = {"name": "x", "expires_at": in_days(1)}
    for index in range(4):
        client = basic(f"someone-{index}", "guess", address="10.9.9.9")
        assert client.post(URL, body, format="json").status_code == 401
    same = basic("greta", factories.PASSWORD, address="10.9.9.9").post(URL, body, format="json")
    assert same.status_code == 429
    other = basic("greta", factories.PASSWORD, address="10.9.9.10").post(URL, body, format="json")
    assert other.status_code == 201


def test_an_inactive_user_gets_no_token(alice):
    alice.is_active = False
    alice.save()
    response = basic("alice", factories.PASSWORD).post(
        URL, {"name": "x", "expires_at": in_days(1)}, format="json"
    )
    assert response.status_code == 401
    assert not ApiToken.objects.exists()


def test_anonymous_callers_get_401(db):
    assert APIClient().get(URL).status_code == 401
    assert APIClient().post(URL, {}, format="json").status_code == 401


@pytest.mark.parametrize("count", [2, 15])
def test_the_list_is_a_fixed_number_of_queries(alice, count, django_assert_num_queries):
    for index in range(count):
        make(alice, f"t{index}")
    client = session(alice)
    client.get(URL)  # the session's first request writes its clock
    with django_assert_num_queries(4):
        response = client.get(f"{URL}?page_size=200")
    assert len(response.json()["results"]) == count
