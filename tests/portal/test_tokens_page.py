"""The API tokens page: a named token with an expiry, shown once, listed with its last use,
revoked; only its owner reaches it."""

from datetime import timedelta

import pytest
from django.utils import timezone

from portal import tokens
from portal.models import ApiToken, AuditEvent
from tests import factories


@pytest.fixture
def alice(db):
    return factories.user("alice")


@pytest.fixture
def page(client, alice):
    client.force_login(alice)
    return client


def test_it_makes_a_token_and_shows_it_only_in_that_answer(page, alice):
    response = page.post("/tokens/", {"name": "laptop", "days": "30"})
    assert response.status_code == 200
    assert "no-store" in response["Cache-Control"]
    row = ApiToken.objects.get(user=alice)
    html = response.content.decode()
    start = html.index('id="new-token">') + len('id="new-token">')
    raw = html[start : html.index("</code>", start)]
    assert raw.startswith(row.prefix) and tokens.digest(raw) == row.digest
    assert timedelta(days=29) < row.expires_at - timezone.now() <= timedelta(days=30)
    again = page.get("/tokens/").content.decode()
    assert raw not in again and "laptop" in again and row.prefix in again
    assert raw not in str(dict(page.session))


def test_an_htmx_form_gets_the_partial_with_the_token(page, alice):
    response = page.post("/tokens/", {"name": "ci", "days": "7"}, HTTP_HX_REQUEST="true")
    html = response.content.decode()
    assert html.startswith('<div id="tokens">') and "<html" not in html
    assert 'id="new-token"' in html


def test_it_shows_the_last_use(page, alice):
    row, raw = tokens.create_token(
        actor=alice, name="used", expires_at=timezone.now() + timedelta(days=1)
    )
    assert "never" in page.get("/tokens/").content.decode()
    tokens.authenticate(raw)
    row.refresh_from_db()
    assert f"{row.last_used_at:%Y-%m-%d %H:%M}" in page.get("/tokens/").content.decode()


@pytest.mark.parametrize(
    ("form", "error"),
    [
        ({"name": "", "days": "30"}, "Give the token a name"),
        ({"name": "x" * 81, "days": "30"}, "At most 80 characters"),
        ({"name": "ok", "days": "1000"}, "Choose how long it lasts"),
        ({"name": "ok", "days": "soon"}, "Choose how long it lasts"),
    ],
)
def test_it_refuses_bad_input_and_writes_nothing(page, form, error):
    response = page.post("/tokens/", form)
    assert response.status_code == 200
    assert error in response.content.decode()
    assert not ApiToken.objects.exists()


def test_it_revokes_a_token(page, alice):
    row, raw = tokens.create_token(
        actor=alice, name="old", expires_at=timezone.now() + timedelta(days=1)
    )
    response = page.post(f"/tokens/{row.pk}/revoke/")
    assert response.status_code == 302
    row.refresh_from_db()
    assert row.revoked_at is not None
    assert tokens.authenticate(raw) is None
    assert AuditEvent.objects.filter(verb="token.revoked", source="web").exists()
    assert "revoked" in page.get("/tokens/").content.decode()


def test_nobody_else_sees_or_revokes_a_token(client, alice, db):
    row, _raw = tokens.create_token(
        actor=alice, name="mine", expires_at=timezone.now() + timedelta(days=1)
    )
    client.force_login(factories.user("root", staff=True))
    assert "mine" not in client.get("/tokens/").content.decode()
    assert client.post(f"/tokens/{row.pk}/revoke/").status_code == 404
    row.refresh_from_db()
    assert row.revoked_at is None


def test_it_is_in_chinese_too(page):
    page.cookies["django_language"] = "zh-hans"
    html = page.get("/tokens/").content.decode()
    assert "API 令牌" in html
