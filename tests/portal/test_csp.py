"""Content-Security-Policy on every answer (pages, partials, the API, errors), and no
inline script or style left in the templates that would need it relaxed."""

import re
from pathlib import Path

import pytest
from django.test import Client
from rest_framework.test import APIClient

from portal.csp import DOCS_POLICY, POLICY

TEMPLATES = Path(__file__).resolve().parents[2] / "templates"
REQUIRED = [
    "default-src 'self'",
    "script-src 'self'",
    "object-src 'none'",
    "base-uri 'self'",
    "form-action 'self'",
    "frame-ancestors 'none'",
]


def directives(header: str) -> dict[str, str]:
    return dict(part.strip().split(" ", 1) for part in header.split(";"))


def test_the_policy_is_strict():
    for part in REQUIRED:
        assert part in POLICY
    policy = directives(POLICY)
    assert policy["style-src"] == "'self'"
    assert policy["img-src"] == "'self' data:"
    assert "unsafe-inline" not in POLICY and "unsafe-eval" not in POLICY
    docs = directives(DOCS_POLICY)
    assert docs["script-src"] == "'self'"  # the docs pages relax styles only
    assert "unsafe-eval" not in DOCS_POLICY


@pytest.mark.parametrize(
    ("who", "path", "status"),
    [
        ("alice", "/", 200),
        ("alice", "/leases/", 200),
        ("alice", "/projects/alpha/", 200),
        ("alice", "/tokens/", 200),
        ("alice", "/panels/leases/", 200),
        ("alice", "/projects/gamma/", 404),
        ("alice", "/leases/?project=%00", 400),
        (None, "/login/", 200),
        (None, "/", 302),
        ("alma", "/approvals/", 200),
        ("root", "/admin/", 200),
        ("root", "/audit/", 200),
    ],
)
def test_every_page_answers_with_the_policy(f0, who, path, status):
    client = Client()
    users = {"alice": f0.alice, "alma": f0.alpha_manager, "root": f0.admin}
    if who:
        client.force_login(users[who])
    response = client.get(path)
    if status is not None:
        assert response.status_code == status
    assert response["Content-Security-Policy"] == POLICY


@pytest.mark.parametrize(
    "path", ["/api/v1/me", "/api/v1/projects", "/api/v1/nothing-here", "/api/schema/"]
)
def test_every_api_answer_has_the_policy(f0, path):
    client = APIClient()
    client.force_login(f0.alice)
    assert client.get(path)["Content-Security-Policy"] == POLICY
    assert APIClient().get(path)["Content-Security-Policy"] == POLICY


def test_the_api_docs_get_their_own_policy_and_load_no_inline_script(db):
    for path in ("/api/docs/", "/api/redoc/"):
        response = Client().get(path)
        assert response.status_code == 200
        assert response["Content-Security-Policy"] == DOCS_POLICY
        html = response.content.decode()
        assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", html), path
    script = Client().get("/api/docs/?script=")
    assert script.status_code == 200
    assert script["Content-Type"].startswith("application/javascript")
    assert "SwaggerUIBundle" in script.content.decode()


def test_no_template_has_an_inline_script_style_or_handler():
    offenders = []
    for template in TEMPLATES.rglob("*.html"):
        text = template.read_text()
        if re.search(r"<script(?![^>]*\bsrc=)[^>]*>", text):
            offenders.append(f"{template.name}: inline <script>")
        if re.search(r"<style\b", text) and "drf_spectacular" not in str(template):
            offenders.append(f"{template.name}: <style>")
        if re.search(r"\sstyle=\"", text):
            offenders.append(f"{template.name}: style attribute")
        if re.search(r"\son[a-z]+=\"|hx-on|javascript:", text):
            offenders.append(f"{template.name}: inline handler")
    assert offenders == []
