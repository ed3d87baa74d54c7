"""A NUL byte in any field of any form the site takes is answered as bad input: a field
error, a message or the 400 page, never a server error."""

import pytest
from django.urls import NoReverseMatch, URLPattern, URLResolver, get_resolver, reverse

from rental.loans import admission

FIELDS = [
    "name",
    "comment",
    "reason",
    "answer",
    "purpose",
    "hours",
    "public_key",
    "gpu_model",
    "ceiling",
    "guaranteed",
    "monthly_amount",
    "thresholds",
    "days",
    "decision",
    "kind",
    "amount",
    "size_gb",
    "zone",
    "username",
    "password",
    "max_gpus_per_lease",
    "max_hours_per_lease",
    "auto_approve_gpus_cap",
    "auto_approve_hours_cap",
    "cap_policy",
    "start_at",
    "end_at",
    "language",
    "next",
]


def site_routes() -> list[tuple[str, list[str]]]:
    """Every named route of the site (not the API, the admin or the agent's heartbeat),
    with the names of its URL arguments."""
    found = []

    def walk(patterns, prefix: str) -> None:
        for item in patterns:
            if isinstance(item, URLResolver):
                if item.namespace in ("admin", "api") or str(item.pattern).startswith("api"):
                    continue
                space = f"{prefix}{item.namespace}:" if item.namespace else prefix
                walk(item.url_patterns, space)
            elif isinstance(item, URLPattern) and item.name:
                found.append((prefix + item.name, list(item.pattern.converters)))

    walk(get_resolver().url_patterns, "")
    return sorted({(name, tuple(args)) for name, args in found})


@pytest.mark.parametrize("who", ["admin", "alpha_manager"])
def test_no_form_of_the_site_breaks_on_a_nul_byte(f0, client, who):
    lease = admission.submit_reservation(
        actor=f0.alice,
        project=f0.alpha,
        gpu_model=f0.model,
        gpu_count=1,
        duration_hours=2,
        priority="experiment",
        market="on_demand",
    )
    client.force_login(getattr(f0, who))
    values = {"pk": lease.pk, "slug": f0.alpha.slug, "period": "2026-11", "token": "x"}
    tried = []
    for name, args in site_routes():
        if name == "logout":
            continue
        client.force_login(getattr(f0, who))  # a route may have ended the session
        try:
            url = reverse(name, kwargs={arg: values.get(arg, 1) for arg in args})
        except NoReverseMatch:
            continue
        response = client.post(url, dict.fromkeys(FIELDS, "a\x00b"))
        assert response.status_code < 500, (url, response.status_code)
        tried.append(url)
    assert len(tried) > 30
