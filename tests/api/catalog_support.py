"""What the catalog and capacity API tests share: a client per user, the row counts that
show nothing was written, and the bad bodies every write must answer with a 400."""

import json
from typing import Any

from django.apps import apps
from rest_framework.test import APIClient

from tests import factories


def client_for(user: Any) -> APIClient:
    """A client authenticated as a fresh copy of ``user``: what one request of theirs sees
    (roles are cached per user object, as per request in the portal)."""
    client = APIClient()
    if user is not None:
        client.force_authenticate(type(user).objects.get(pk=user.pk))
    return client


def counts() -> dict[str, int]:
    """Rows per model: equal before and after a refused write means nothing was written."""
    return {model._meta.label: model.objects.count() for model in apps.get_models()}


def finance():
    return factories.user("fiona", finance=True)


def post_raw(client: APIClient, url: str, body: bytes, *, method: str = "post"):
    return getattr(client, method)(url, body, content_type="application/json")


NOT_JSON = b"{this is not json"
NUL = "bad\x00name"
HUGE = "x" * 100_000


def as_json(data: Any) -> bytes:
    return json.dumps(data).encode()
