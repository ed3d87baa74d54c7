"""The API's shared parts: authentication (tokens, session), one error shape, throttling
with Retry-After, and the schema with its offline docs kept up to date."""

import re
from datetime import timedelta
from pathlib import Path

import pytest
from django.core.management import call_command
from django.utils import timezone
from rest_framework.test import APIClient

from portal import tokens
from portal.api.throttling import PerUserRateThrottle, TokenRateThrottle
from portal.errors import InvalidInput, InvalidTransition
from portal.models import ApiToken, AuditEvent
from tests import factories

SCHEMA_FILE = Path(__file__).resolve().parents[2] / "docs" / "api" / "openapi.yaml"


@pytest.fixture
def alice(db):
    return factories.user("alice")


def bearer(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


def test_it_answers_401_with_a_challenge_without_credentials(db):
    response = APIClient().get("/api/v1/me")
    assert response.status_code == 401
    assert response.json()["code"] == "not_authenticated"
    assert response["WWW-Authenticate"].startswith("Bearer")


def test_it_authenticates_a_personal_token_and_stores_only_its_digest(alice):
    row, token = tokens.create_token(
        actor=alice, name="pipeline", expires_at=timezone.now() + timedelta(days=30)
    )
    assert token.startswith("gpp_") and len(token) > 40
    assert not ApiToken.objects.filter(digest=token).exists()
    assert token not in str(list(ApiToken.objects.values()))
    response = bearer(token).get("/api/v1/me")
    assert response.status_code == 200
    assert response.json()["username"] == "alice"
    row.refresh_from_db()
    assert row.last_used_at is not None
    assert AuditEvent.objects.filter(verb="token.created", object_id=str(row.pk)).exists()


def test_it_refuses_expired_revoked_and_malformed_tokens(alice, t0):
    row, token = tokens.create_token(
        actor=alice, name="old", expires_at=timezone.now() + timedelta(days=1)
    )
    ApiToken.objects.filter(pk=row.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert bearer(token).get("/api/v1/me").status_code == 401
    row2, token2 = tokens.create_token(
        actor=alice, name="new", expires_at=timezone.now() + timedelta(days=1)
    )
    tokens.revoke_token(actor=alice, token=row2)
    assert bearer(token2).get("/api/v1/me").status_code == 401
    with pytest.raises(InvalidTransition):
        tokens.revoke_token(actor=alice, token=row2)
    for junk in ("gpp_nope", "x" * 5000, "gpp_\u00e9"):
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {junk}")
        assert client.get("/api/v1/me").status_code == 401


def test_it_validates_token_names_and_expiry(alice):
    now = timezone.now()
    with pytest.raises(InvalidInput) as error:
        tokens.create_token(actor=alice, name="", expires_at=now + timedelta(days=1))
    assert error.value.field == "name"
    with pytest.raises(InvalidInput) as error:
        tokens.create_token(actor=alice, name="a", expires_at=now - timedelta(days=1))
    assert error.value.field == "expires_at"
    with pytest.raises(InvalidInput) as error:
        tokens.create_token(actor=alice, name="a", expires_at=now + timedelta(days=400))
    assert error.value.field == "expires_at"
    tokens.create_token(actor=alice, name="a", expires_at=now + timedelta(days=1))
    with pytest.raises(InvalidInput):
        tokens.create_token(actor=alice, name="a", expires_at=now + timedelta(days=1))
    assert ApiToken.objects.filter(user=alice).count() == 1


def test_it_accepts_the_session_of_the_portal_pages(alice):
    client = APIClient()
    client.force_login(alice)
    assert client.get("/api/v1/me").json()["username"] == "alice"


def test_it_throttles_per_token_with_retry_after(alice, monkeypatch):
    monkeypatch.setattr(TokenRateThrottle, "THROTTLE_RATES", {"token": "3/min"})
    _, token = tokens.create_token(
        actor=alice, name="busy", expires_at=timezone.now() + timedelta(days=1)
    )
    client = bearer(token)
    assert [client.get("/api/v1/me").status_code for _ in range(3)] == [200] * 3
    response = client.get("/api/v1/me")
    assert response.status_code == 429
    assert response.json()["code"] == "throttled"
    assert int(response["Retry-After"]) >= 1
    _, other = tokens.create_token(
        actor=alice, name="other", expires_at=timezone.now() + timedelta(days=1)
    )
    assert bearer(other).get("/api/v1/me").status_code == 200  # its own allowance


def test_it_throttles_per_user_across_tokens(alice, monkeypatch):
    monkeypatch.setattr(PerUserRateThrottle, "THROTTLE_RATES", {"user": "2/min"})
    made = [
        tokens.create_token(actor=alice, name=f"t{i}", expires_at=timezone.now() + timedelta(1))
        for i in range(3)
    ]
    codes = [bearer(token).get("/api/v1/me").status_code for _, token in made]
    assert codes == [200, 200, 429]


def test_it_serves_the_schema_and_offline_docs(db):
    response = APIClient().get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert response.status_code == 200
    schema = response.json()
    assert "/api/v1/me" in schema["paths"]
    assert {"Error", "ValidationError"} <= set(schema["components"]["schemas"])
    for page in ("/api/docs/", "/api/redoc/"):
        html = APIClient().get(page).content.decode()
        sources = re.findall(r'(?:src|href)="([^"]+)"', html)
        assert sources, page
        external = [s for s in sources if s.startswith(("http:", "https:", "//"))]
        assert external == [], f"{page} loads from outside the portal: {external}"


def test_the_committed_schema_is_up_to_date(db, tmp_path):
    """docs/api/openapi.yaml is the published contract; regenerate it with `make schema`."""
    fresh = tmp_path / "openapi.yaml"
    call_command("spectacular", file=str(fresh), validate=True, fail_on_warn=True)
    assert SCHEMA_FILE.read_text() == fresh.read_text(), (
        "The API changed: run `make schema` and commit docs/api/openapi.yaml"
    )


def test_it_answers_unknown_api_paths_in_the_error_shape_and_site_paths_as_a_page(alice):
    client = APIClient()
    client.force_authenticate(alice)
    for path in ("/api/v1/nothing-here", "/api/v1/projects/%E0%B8%81/config"):
        response = client.get(path)
        assert response.status_code == 404
        assert response["Content-Type"] == "application/json"
        assert response.json() == {"code": "not_found", "detail": "Not found."}
    page = client.get("/nothing-here/")
    assert page.status_code == 404
    assert page["Content-Type"].startswith("text/html")


def test_it_names_the_parameter_that_holds_a_nul_byte(alice):
    client = APIClient()
    client.force_authenticate(alice)
    response = client.get("/api/v1/me?verb=%00")
    assert response.status_code == 400
    assert list(response.json()["errors"]) == ["verb"]


def test_it_answers_a_body_that_is_not_json_with_errors(alice):
    project = factories.project("alpha")
    factories.member(alice, project, "manager")
    client = APIClient()
    client.force_authenticate(alice)
    response = client.generic(
        "POST", "/api/v1/projects/alpha/config", b"\xff\xfe", content_type="application/yaml"
    )
    assert response.status_code == 400
    assert response.json()["errors"] == {"non_field_errors": [response.json()["detail"]]}


def test_it_refuses_a_page_size_that_is_not_a_whole_number(alice):
    client = APIClient()
    client.force_authenticate(alice)
    for bad in ("true", "0", "-3", "1.5"):
        response = client.get(f"/api/v1/ssh-keys?page_size={bad}")
        assert response.status_code == 400, bad
        assert list(response.json()["errors"]) == ["page_size"]
    assert client.get("/api/v1/ssh-keys?page_size=500").status_code == 200
