"""The shape of the access matrix's rules (one per URL name; a URL without one fails).

Each rules module (``rules_web.py``, ``rules_api_*.py``) exports ``RULES: dict[str, Expect]``
keyed by the URL's full name (``rental:lease``, ``api:lease-detail``). The matrix test
walks the URL configuration, finds the rule of every named URL and requests it as each
of ``ROLES``; ``kwargs(world)`` builds the URL's arguments from the shared world (it may
create the object it needs), ``outsider_kwargs(world)`` the same for an object of
another project, which everybody but admins and finance must get as 404.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

ROLES = ("engineer", "other_engineer", "manager", "admin", "finance", "anonymous")

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
