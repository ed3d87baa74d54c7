"""Every write of the catalog and capacity API, each field in turn given an odd value
(wrong type, out of range, huge, NUL, nested): a 400 or a rule's answer, never a 500,
and nothing written when refused."""

import pytest

from rental.loans import quota_requests
from rental.models import Quota
from tests.api.catalog_support import client_for, counts

pytestmark = pytest.mark.django_db

ODD = [None, True, -1, 2**64, 1.5, "x" * 100_000, "\x00", "💥" * 50, {"a": 1}, [1, 2]]
ADMINS_ONLY = ("/capacity", "/api/v1/quotas", "/api/v1/provider-accounts")


def writes(f0):
    quota = Quota.objects.get(project=f0.alpha)
    asked = quota_requests.request_quota_change(
        actor=f0.alice, project=f0.alpha, gpu_model=f0.model, ceiling=7, reason="more"
    )
    return [
        ("post", f"/api/v1/pools/{f0.pool.pk}/capacity", {"capacity": 9}),
        (
            "post",
            "/api/v1/quotas",
            {"project": "beta", "gpu_model": f0.model.pk, "guaranteed": 1, "ceiling": 2},
        ),
        ("patch", f"/api/v1/quotas/{quota.pk}", {"guaranteed": 1, "ceiling": 3, "weight": "2"}),
        (
            "post",
            f"/api/v1/quotas/{quota.pk}/auto-approve-limits",
            {"max_gpus_per_lease": 1, "max_hours_per_lease": 2},
        ),
        (
            "post",
            "/api/v1/quota-requests",
            {"project": "alpha", "gpu_model": f0.model.pk, "ceiling": 5, "reason": "r"},
        ),
        ("post", f"/api/v1/quota-requests/{asked.pk}/reject", {"comment": "no"}),
        ("post", "/api/v1/images", {"lease": 1, "name": "env"}),
        ("post", "/api/v1/ssh-keys", {"name": "k", "public_key": "ssh-ed25519 AAAA"}),
        (
            "post",
            "/api/v1/volumes",
            {"project": "alpha", "name": "v", "size_gb": 5, "zone": "us-east-1a"},
        ),
        (
            "post",
            "/api/v1/provider-accounts",
            {
                "name": "n",
                "driver": "aws",
                "regions": ["us-east-1"],
                "endpoint_url": "",
                "is_active": True,
                "access_key_id": "",
                "secret_access_key": "",
                "session_token": "",
            },
        ),
    ]


def test_it_never_answers_500_and_writes_nothing_when_it_refuses(f0):
    # The admin for the admin-only writes, alpha's manager for the rest (members only).
    for method, url, body in writes(f0):
        admins_only = url.endswith(ADMINS_ONLY) or (method == "patch")
        who = f0.admin if admins_only else None
        for field in body:
            for odd in ODD:
                client = client_for(who or f0.alpha_manager)
                before = counts()
                answer = getattr(client, method)(url, {**body, field: odd}, format="json")
                where = f"{method} {url} {field}={str(odd)[:20]!r}"
                assert answer.status_code < 500, where
                assert answer["Content-Type"].startswith("application/json"), where
                if answer.status_code >= 400:
                    assert counts() == before, where
