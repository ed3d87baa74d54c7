"""The shape of the access matrix's rules (one per URL name; a URL without one fails).

Each rules module (``rules_web.py``, ``rules_api_*.py``) exports ``RULES: dict[str, Expect]``
keyed by the URL's full name (``rental:lease``, ``api:lease-detail``). The matrix test
walks the URL configuration, finds the rule of every named URL and requests it as each
of ``ROLES``; ``kwargs(world)`` builds the URL's arguments from the shared world (it may
create the object it needs), ``outsider_kwargs(world)`` the same for an object of
another project, which everybody but admins and finance must get as 404.

A project's service tokens (portal/service_tokens.py) are checked too: ``SERVICE_ROLES``
are tokens of alpha (the world's project), one per scope. A bearer token is no login: a
web page answers them as it answers an anonymous visitor. On the API a token gets the
engineer's answer where one of its scopes covers the call (any GET needs ``read``; the
writes in ``SERVICE_WRITES`` need the scope named there), a 403 anywhere else and on
``SERVICE_NEVER`` whatever its scopes. A rule's ``service`` gives the answer where a token
that holds the scope is answered otherwise than the engineer (alice asked for the world's
lease; the token did not).
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

ROLES = ("engineer", "other_engineer", "manager", "admin", "finance", "anonymous")
# Service tokens of alpha, by their scopes.
SERVICE_ROLES = {"service_read": ("read",), "service_leases": ("leases",)}
# The API's writes a scope allows, by URL name (a POST there), as the docs promise.
SERVICE_WRITES = {
    "api:lease-list": "leases",
    "api:lease-cancel": "leases",
    "api:lease-extend": "leases",
    "api:lease-end": "leases",
    "api:ssh-key-list": "leases",
}
# What no service token calls, not even to read: tokens are made by people.
SERVICE_NEVER = {
    "api:token-list",
    "api:token-detail",
    "api:token-revoke",
    "api:project-service-token-list",
    "api:project-service-token-detail",
    "api:project-service-token-revoke",
}

# A status per role, in ROLES order. One int, or a tuple of allowed ints (e.g. (400, 409)
# for a POST with an empty body by someone who may post: refused by validation or rule,
# never 2xx with nothing asked, never 500).
Status = int | tuple[int, ...]


@dataclass(frozen=True)
class Expect:
    get: tuple[Status, ...] | None = None  # None: the URL does not answer GET (405 expected)
    post: tuple[Status, ...] | None = None  # a POST with an empty body; None: not checked
    kwargs: Callable[[Any], dict[str, Any]] | None = None
    outsider_kwargs: Callable[[Any], dict[str, Any]] | None = None
    note: str = ""
    # "get"/"post" → a service token's answer where its scope covers the call but it is
    # not answered as the engineer is; absent: the engineer's.
    service: dict[str, Status] = field(default_factory=dict)
