"""schemathesis over the lease side of the published schema (leases, instances, usage,
watches): generated requests, valid and invalid, as alice (engineer of alpha) with a
running lease in alpha and one in gamma. No answer is a server error or breaks the
schema, and a refused request (4xx) writes nothing.

About 1,900 requests in 3-4 minutes on two cores, so it runs only when asked:
``PORTAL_FUZZ=1 .venv/bin/pytest tests/api/test_fuzz_leases.py -p no:cacheprovider``.
"""

import os
from datetime import timedelta
from pathlib import Path

import pytest
import schemathesis
import yaml
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from django.utils import timezone
from hypothesis import HealthCheck, settings
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from portal import tokens
from portal.api.throttling import PerUserRateThrottle, TokenRateThrottle
from tests.api.leases_world import row_counts, running_lease

pytestmark = pytest.mark.skipif(not os.environ.get("PORTAL_FUZZ"), reason="PORTAL_FUZZ=1")

SCHEMA_FILE = Path(__file__).resolve().parents[2] / "docs" / "api" / "openapi.yaml"
schema = schemathesis.openapi.from_dict(yaml.safe_load(SCHEMA_FILE.read_text()))
schema.app = get_wsgi_application()
schema = schema.include(path_regex=r"^/api/v1/(leases|instances|usage|availability-watches)")
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


@pytest.fixture
def token(f0, monkeypatch):
    monkeypatch.setattr(TokenRateThrottle, "THROTTLE_RATES", {"token": "100000/min"})
    monkeypatch.setattr(PerUserRateThrottle, "THROTTLE_RATES", {"user": "100000/min"})
    # The WSGI handler would close the test's connection (and its transaction) after
    # each request; Django's test client does the same.
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    running_lease(f0)
    running_lease(f0, project=f0.gamma)
    _, raw = tokens.create_token(
        actor=f0.alice, name="fuzz", expires_at=timezone.now() + timedelta(days=1)
    )
    yield raw
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@schema.parametrize()
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
def test_it_answers_every_generated_request_within_the_schema(case, token):
    before = row_counts()
    response = case.call(headers={"Authorization": f"Bearer {token}"})
    case.validate_response(response, checks=CHECKS)
    if 400 <= response.status_code < 500:
        assert row_counts() == before, (case.method, case.formatted_path, response.status_code)
