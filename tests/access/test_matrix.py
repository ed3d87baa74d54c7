"""The access matrix, generated from the URL configuration.

Every named URL of the site (web pages and API endpoints; Django's own admin site, which
checks staff itself, aside) must have one rule in a ``tests/access/rules_*.py`` module: a
new URL without a rule fails ``test_every_url_has_a_rule``. Each rule is then requested
as every role of ``spec.ROLES`` (GET, and a POST with an empty body where the rule says),
and with an object of a project none of the non-site roles belongs to, which they must
get as 404. No answer to a role that may not see that project contains its secret.

Each request runs in a transaction that is rolled back, so a POST that is allowed does
not change the world the next role sees.

Then the same URLs as each of alpha's service tokens (``spec.SERVICE_ROLES``), sent as a
bearer token: the answer ``spec`` derives from its scopes, and a 404 (or the 403 of a
scope it lacks) for an object of another project.
"""

import importlib
import pkgutil
from typing import Any

import pytest
from django.db import transaction
from django.test import Client, override_settings
from django.urls import URLPattern, URLResolver, get_resolver, reverse
from rest_framework.test import APIClient

from tests import access as access_package
from tests.access import world as world_module
from tests.access.spec import ROLES, SERVICE_NEVER, SERVICE_ROLES, SERVICE_WRITES, Expect, Status

# Django's admin site guards itself (staff only) and is tested in
# tests/rental/catalog/test_admin_accounts.py.
UNRULED_NAMESPACES = {"admin"}
# Roles that may see every project: the outsider's object is visible to them.
SITE_ROLES = {"admin", "finance"}
# Public URLs whose answer to an anonymous visitor is a redirect elsewhere than the login.
PUBLIC_REDIRECTS = {"set_language", "logout"}


def all_rules() -> dict[str, Expect]:
    rules: dict[str, Expect] = {}
    for info in pkgutil.iter_modules(access_package.__path__):
        if not info.name.startswith("rules_"):
            continue
        module = importlib.import_module(f"tests.access.{info.name}")
        for name, rule in module.RULES.items():
            assert name not in rules, f"{name} has a rule in two modules"
            rules[name] = rule
    return rules


def url_names() -> dict[str, str]:
    """URL name → its pattern, for every named URL outside the unruled namespaces."""
    names: dict[str, str] = {}

    def walk(patterns, prefix: str, namespace: str | None) -> None:
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                if pattern.namespace in UNRULED_NAMESPACES:
                    continue
                inner = pattern.namespace
                full = f"{namespace}:{inner}" if namespace and inner else inner or namespace
                walk(pattern.url_patterns, prefix + str(pattern.pattern), full)
            elif isinstance(pattern, URLPattern):
                where = prefix + str(pattern.pattern)
                assert pattern.name, f"the URL {where!r} has no name, so it can have no rule"
                name = f"{namespace}:{pattern.name}" if namespace else pattern.name
                names.setdefault(name, where)

    walk(get_resolver().url_patterns, "", None)
    return names


RULES = all_rules()


def test_every_url_has_a_rule(db):
    names = url_names()
    missing = sorted(set(names) - set(RULES))
    assert not missing, "URLs without an access rule: " + ", ".join(
        f"{name} ({names[name]})" for name in missing
    )
    stale = sorted(set(RULES) - set(names))
    assert not stale, "rules for URLs that do not exist: " + ", ".join(stale)


def test_every_rule_names_a_status_for_every_role():
    for name, rule in RULES.items():
        for kind in ("get", "post"):
            statuses = getattr(rule, kind)
            assert statuses is None or len(statuses) == len(ROLES), f"{name}.{kind}"


def _client(name: str, user) -> Client:
    client = APIClient() if name.startswith("api") or name == "agent_heartbeat" else Client()
    if user is not None:
        client.force_login(user)
    return client


def _request(client: Client, method: str, url: str):
    with transaction.atomic():
        if method == "post":
            if isinstance(client, APIClient):
                response = client.post(url, {}, format="json")
            else:
                response = client.post(url)
        else:
            response = client.get(url)
        transaction.set_rollback(True)
    return response


def _allowed(expected) -> tuple[int, ...]:
    return expected if isinstance(expected, tuple) else (expected,)


def _check(response, expected, *, where: str, login_redirect: bool) -> None:
    allowed = _allowed(expected)
    assert response.status_code in allowed, f"{where}: {response.status_code}, want {allowed}"
    if response.status_code == 302 and login_redirect:
        assert "/login/" in response["Location"], f"{where}: {response['Location']}"


def _body(response) -> str:
    if getattr(response, "streaming", False):
        return ""
    return response.content.decode(errors="replace")


def _sees_other_project(role: str) -> bool:
    return role in SITE_ROLES


# Enough pending requests per person for every request the world and the POSTs make.
MAX_PENDING = 100


@pytest.fixture(scope="module")
def built(module_db):
    """The world, built once for the module (each request rolls back what it wrote)."""
    with module_db(), override_settings(PORTAL_MAX_PENDING_PER_USER=MAX_PENDING):
        return world_module.build()


@pytest.fixture
def world(db, settings, built):
    settings.PORTAL_MAX_PENDING_PER_USER = MAX_PENDING
    yield built
    built.extra.clear()  # what a rule made in this test was rolled back with it


@pytest.mark.parametrize("name", sorted(RULES))
def test_it_answers_every_role_as_its_rule_says(world, name):
    rule = RULES[name]
    kwargs: dict[str, Any] = rule.kwargs(world) if rule.kwargs else {}
    url = reverse(name, kwargs=kwargs)
    for index, role in enumerate(ROLES):
        client = _client(name, world.users[role])
        to_login = role == "anonymous" and name not in PUBLIC_REDIRECTS
        where = f"{role} GET {url}"
        response = _request(client, "get", url)
        if rule.get is None:
            assert response.status_code in (302, 401, 403, 404, 405), where
        else:
            _check(response, rule.get[index], where=where, login_redirect=to_login)
        if not _sees_other_project(role):
            assert world_module.SECRET not in _body(response), f"{where} shows gamma's lease"
        if rule.post is not None:
            where = f"{role} POST {url}"
            response = _request(client, "post", url)
            _check(response, rule.post[index], where=where, login_redirect=to_login)
            assert response.status_code < 500, where


@pytest.mark.parametrize(
    "name", sorted(name for name, rule in RULES.items() if rule.outsider_kwargs)
)
def test_it_hides_another_projects_objects(world, name):
    rule = RULES[name]
    url = reverse(name, kwargs=rule.outsider_kwargs(world))
    for role in ROLES:
        if _sees_other_project(role):
            continue
        client = _client(name, world.users[role])
        methods = ["get"] if rule.get is not None else []
        methods += ["post"] if rule.post is not None else []
        for method in methods:
            response = _request(client, method, url)
            where = f"{role} {method.upper()} {url}"
            if role == "anonymous":
                assert response.status_code in (302, 401, 403), where
            elif method == "get" and rule.get[ROLES.index(role)] == 405:
                # A POST-only URL refuses GET before it looks anything up.
                assert response.status_code == 405, where
            else:
                assert response.status_code == 404, f"{where}: {response.status_code}"
            assert world_module.SECRET not in _body(response), where


# --- Service tokens -------------------------------------------------------------------------


def _service_client(name: str, world, role: str) -> Client:
    client = _client(name, None)
    client.defaults["HTTP_AUTHORIZATION"] = f"Bearer {world.service_tokens[role]}"
    return client


def _service_expects(name: str, rule: Expect, method: str, role: str) -> Status:
    """What a service token of alpha with ``role``'s scopes gets (see ``spec``)."""
    statuses = getattr(rule, method)
    if not name.startswith("api:"):
        return statuses[ROLES.index("anonymous")]  # a bearer token is no login
    if name in SERVICE_NEVER:
        return 403
    needed = "read" if method == "get" else SERVICE_WRITES.get(name)
    if needed not in SERVICE_ROLES[role]:
        return 403
    return rule.service.get(method, statuses[ROLES.index("engineer")])


def test_every_service_rule_names_a_real_url():
    for name in (*SERVICE_WRITES, *SERVICE_NEVER):
        assert name in RULES, name
    for name, rule in RULES.items():
        assert set(rule.service) <= {"get", "post"}, name


@pytest.mark.parametrize("name", sorted(RULES))
def test_it_answers_service_tokens_as_their_scopes_say(world, name):
    rule = RULES[name]
    kwargs: dict[str, Any] = rule.kwargs(world) if rule.kwargs else {}
    url = reverse(name, kwargs=kwargs)
    to_login = name not in PUBLIC_REDIRECTS
    for role in SERVICE_ROLES:
        client = _service_client(name, world, role)
        for method in ("get", "post"):
            statuses = getattr(rule, method)
            if statuses is None and method == "post":
                continue
            response = _request(client, method, url)
            where = f"{role} {method.upper()} {url}"
            if statuses is None:
                assert response.status_code in (302, 401, 403, 404, 405), where
            else:
                expected = _service_expects(name, rule, method, role)
                _check(response, expected, where=where, login_redirect=to_login)
            if name.startswith("api:"):
                assert response.status_code < 500, where
            assert world_module.SECRET not in _body(response), f"{where} shows gamma's lease"
            if response.status_code == 403 and name.startswith("api:"):
                detail = response.json()["detail"]
                assert "scope" in detail or "token" in detail, f"{where}: {detail}"


@pytest.mark.parametrize(
    "name", sorted(name for name, rule in RULES.items() if rule.outsider_kwargs)
)
def test_service_tokens_never_reach_another_project(world, name):
    rule = RULES[name]
    url = reverse(name, kwargs=rule.outsider_kwargs(world))
    for role in SERVICE_ROLES:
        client = _service_client(name, world, role)
        for method in ("get", "post"):
            if getattr(rule, method) is None:
                continue
            response = _request(client, method, url)
            where = f"{role} {method.upper()} {url}"
            expected = _service_expects(name, rule, method, role)
            # A page answers as to anonymous visitors; a call no scope covers, or a GET of
            # a POST-only action, is refused before anything is looked up.
            refused_first = expected == 403 or (method == "get" and expected == 405)
            if not name.startswith("api:") or refused_first:
                assert response.status_code == expected, where
            else:
                assert response.status_code == 404, f"{where}: {response.status_code}"
            assert world_module.SECRET not in _body(response), where
