"""PORTAL_LOG_FORMAT=json: one JSON object a line with the time, level, logger, message
and the request's id (also sent back as X-Request-ID), and nothing else from the record.
(No credential in any line, JSON or not: tests/api/test_secrets.py.)"""

import io
import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from portal.logs import JsonFormatter, RequestIdFilter

ROOT = Path(__file__).resolve().parents[2]
KEYS = {"time", "level", "logger", "message", "request_id", "exception"}


@pytest.fixture
def json_lines() -> Iterator[io.StringIO]:
    """The root logger also writes JSON into a buffer, as the console handler would."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(RequestIdFilter())
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield stream
    finally:
        root.removeHandler(handler)


def parsed(stream: io.StringIO) -> list[dict]:
    lines = stream.getvalue().splitlines()
    assert lines, "nothing was logged"
    return [json.loads(line) for line in lines]


def test_it_writes_a_json_line_with_the_requests_id(db, client, json_lines):
    response = client.get("/api/v1/me", HTTP_X_REQUEST_ID="proxy-req-42")
    assert response.status_code == 401
    assert response["X-Request-ID"] == "proxy-req-42"
    [line] = [line for line in parsed(json_lines) if line["logger"] == "django.request"]
    assert line["level"] == "WARNING"
    assert line["message"] == "Unauthorized: /api/v1/me"
    assert line["request_id"] == "proxy-req-42"
    assert set(line) <= KEYS and line["time"].endswith("+00:00")


@pytest.mark.parametrize("given", ["has space", "x" * 65, "new\nline", ""])
def test_it_replaces_a_request_id_that_is_not_a_plain_token(db, client, json_lines, given):
    response = client.get("/api/v1/me", HTTP_X_REQUEST_ID=given)
    made = response["X-Request-ID"]
    assert made != given and len(made) == 32 and made.isalnum()
    [line] = [line for line in parsed(json_lines) if line["logger"] == "django.request"]
    assert line["request_id"] == made


def test_it_writes_a_traceback_on_the_same_line_and_no_extras(json_lines):
    log = logging.getLogger("portal.test")
    try:
        raise ValueError("the cause")
    except ValueError:
        log.exception("it broke", extra={"password": "extra-never-written"})
    log.warning("outside any request")
    broke, outside = parsed(json_lines)
    assert broke["message"] == "it broke" and broke["level"] == "ERROR"
    assert "ValueError: the cause" in broke["exception"]
    assert "request_id" not in broke and "request_id" not in outside
    assert "extra-never-written" not in json_lines.getvalue()
    assert len(json_lines.getvalue().splitlines()) == 2


def test_the_setting_switches_the_console_to_json_and_refuses_other_values():
    code = "import logging; logging.getLogger('portal.check').warning('hello %s', 'there')"
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "portal.settings"}
    done = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", code],
        cwd=ROOT,
        env={**env, "PORTAL_LOG_FORMAT": "json"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    [line] = [json.loads(text) for text in done.stderr.splitlines() if "portal.check" in text]
    assert line["message"] == "hello there" and line["logger"] == "portal.check"
    refused = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        env={**env, "PORTAL_LOG_FORMAT": "xml"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode != 0
    assert "PORTAL_LOG_FORMAT must be plain or json" in refused.stderr
