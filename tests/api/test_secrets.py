"""A provider credential, a personal token's raw value and a session id appear in no API
answer (but the one 201 that creates the token) and in no log line.

Every API URL with an access-matrix rule (tests/access) is requested with the token and
with the session, and as an admin after creating a provider account with credentials
through the API, after failed and refused calls that put lines in the log; each answer's
body and headers (the session cookie itself aside) and every captured log record are
searched for every secret, and so is every line the JSON log format
(``PORTAL_LOG_FORMAT=json``) writes for them: each must parse as one JSON object.
"""

import base64
import io
import json
import logging
from datetime import timedelta

import pytest
from django.conf import settings
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from portal.logs import JsonFormatter, RequestIdFilter
from tests.access import world as world_module
from tests.access.test_matrix import RULES
from tests.factories import PASSWORD


@pytest.fixture
def world(db, settings):
    settings.PORTAL_MAX_PENDING_PER_USER = 100
    return world_module.build()


def _visible(response) -> str:
    headers = "\n".join(
        f"{name}: {value}" for name, value in response.items() if name.lower() != "set-cookie"
    )
    body = (
        "" if getattr(response, "streaming", False) else response.content.decode(errors="replace")
    )
    return headers + "\n" + body


KEY_ID = "AKIDAPISECRET0042"
SECRET_KEY = "wJalrXUtnFEMI-api-secret-never-shown"


@pytest.fixture
def json_log():
    """The JSON log format's lines, as the console handler writes them."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(RequestIdFilter())
    handler.setFormatter(JsonFormatter())
    logging.getLogger().addHandler(handler)
    try:
        yield stream
    finally:
        logging.getLogger().removeHandler(handler)


def test_no_answer_or_log_line_shows_a_credential_a_token_or_a_session_id(world, caplog, json_log):
    caplog.set_level(logging.DEBUG)
    user = world.users["manager"]
    pair = base64.b64encode(f"{user.username}:{PASSWORD}".encode()).decode()
    maker = APIClient()
    maker.credentials(HTTP_AUTHORIZATION=f"Basic {pair}")
    expires = (timezone.now() + timedelta(days=2)).isoformat()
    created = maker.post("/api/v1/tokens", {"name": "ci", "expires_at": expires}, format="json")
    assert created.status_code == 201
    raw = created.json()["token"]

    browser = APIClient()
    assert browser.login(username=user.username, password=PASSWORD)
    session_id = browser.cookies[settings.SESSION_COOKIE_NAME].value
    assert len(session_id) > 20

    scripted = APIClient()
    scripted.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    answers = []
    # Refused and failing calls log warnings: none of them may carry the secrets.
    broken = APIClient()
    broken.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}x")
    answers.append(broken.get("/api/v1/me"))
    answers.append(scripted.post("/api/v1/tokens", {"name": "ci", "expires_at": expires}))
    answers.append(browser.post("/api/v1/tokens", {"name": "x" * 200}, format="json"))
    answers.append(scripted.get("/api/v1/audit-events"))
    admin = APIClient()
    admin.force_authenticate(world.users["admin"])
    account = {
        "name": "Scripted cloud",
        "driver": "aws",
        "regions": ["us-east-1"],
        "endpoint_url": "http://127.0.0.1:9",
        "access_key_id": KEY_ID,
        "secret_access_key": SECRET_KEY,
    }
    made = admin.post("/api/v1/provider-accounts", account, format="json")
    assert made.status_code == 201, made.content
    answers += [made, admin.post(f"/api/v1/provider-accounts/{made.json()['id']}/validate")]
    answers.append(admin.post("/api/v1/provider-accounts", account, format="json"))  # refused
    answered = 0
    for name, rule in sorted(RULES.items()):
        if not name.startswith("api:") or rule.get is None:
            continue
        url = reverse(name, kwargs=rule.kwargs(world) if rule.kwargs else {})
        for client in (scripted, browser, admin):
            answers.append(client.get(url))
            answered += 1
    answers.append(browser.get("/api/schema/"))
    answers.append(browser.get("/api/docs/"))
    answers.append(browser.get("/tokens/"))

    assert answered >= 10
    assert {answer.status_code for answer in answers} >= {200, 401, 400}
    for answer in answers:
        text = _visible(answer)
        assert raw not in text and raw[4:] not in text, answer.wsgi_request.path
        assert session_id not in text, answer.wsgi_request.path
        for secret in (KEY_ID, SECRET_KEY, "test-secret-value"):  # "test-…": F0's account
            assert secret not in text, answer.wsgi_request.path
    logged = "\n".join(record.getMessage() for record in caplog.records)
    logged += "\n".join(str(record.__dict__) for record in caplog.records)
    assert "Unauthorized" in logged  # the failed calls were logged …
    assert raw not in logged and raw[4:] not in logged  # … without the token
    assert session_id not in logged
    assert PASSWORD not in logged and pair not in logged
    assert KEY_ID not in logged and SECRET_KEY not in logged
    lines = [json.loads(line) for line in json_log.getvalue().splitlines()]
    assert any(
        line["message"].startswith("Unauthorized") and len(line.get("request_id", "")) == 32
        for line in lines
    )
    written = json_log.getvalue()
    for secret in (raw, raw[4:], session_id, PASSWORD, pair, KEY_ID, SECRET_KEY):
        assert secret not in written
