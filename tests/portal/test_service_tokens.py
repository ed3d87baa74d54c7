"""Service tokens (portal/service_tokens.py): a manager makes one for the project (shown
once, stored as a digest), a pipeline uses it on the API as a personal token is used; it
acts only in its project and within its scopes, is audited under its name, stops at once
when revoked or expired, never logs into the web pages and is no person in any list."""

from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from portal import memberships, projectconfig, service_tokens
from portal.errors import InvalidInput, NotPermitted
from portal.models import AuditEvent, ServiceToken
from rental.models import Reservation, SshKey
from tests.api.leases_world import client_for, row_counts, running_lease

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl ci@build"


def make(f0, *scopes: str, name: str = "ci-nightly", days: int = 30, project=None):
    return service_tokens.create_service_token(
        actor=f0.alpha_manager,
        project=project or f0.alpha,
        name=name,
        scopes=list(scopes) or ["read"],
        expires_at=timezone.now() + timedelta(days=days),
    )


def bearer(raw: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client


def tokens_url(project) -> str:
    return reverse("api:project-service-token-list", kwargs={"slug": project.slug})


def ask(f0, **changes) -> dict:
    return {
        "project": "alpha",
        "gpu_model": f0.model.pk,
        "gpu_count": 1,
        "duration_hours": "4",
        "purpose": "nightly evaluation",
        **changes,
    }


# --- Making one ---------------------------------------------------------------------------


def test_it_makes_a_token_on_the_page_and_shows_it_only_in_that_answer(f0, client):
    client.force_login(f0.alpha_manager)
    url = reverse("service_tokens", args=["alpha"])
    response = client.post(url, {"name": "ci-nightly", "days": "30", "scopes": ["read", "leases"]})
    assert response.status_code == 200
    assert "no-store" in response["Cache-Control"]
    row = ServiceToken.objects.get(project=f0.alpha)
    html = response.content.decode()
    start = html.index('id="new-token">') + len('id="new-token">')
    raw = html[start : html.index("</code>", start)]
    assert raw.startswith("gps_") and raw.startswith(row.prefix)
    assert row.digest == service_tokens.digest(raw) and raw not in str(row.__dict__)
    assert row.scopes == ["read", "leases"] and row.created_by == f0.alpha_manager
    assert timedelta(days=29) < row.expires_at - timezone.now() <= timedelta(days=30)
    again = client.get(url).content.decode()
    assert raw not in again and "ci-nightly" in again and row.prefix in again
    assert "alma" in again  # created by
    assert raw not in str(dict(client.session))
    event = AuditEvent.objects.get(verb="service_token.created")
    assert (event.actor, event.project, event.source) == (f0.alpha_manager, f0.alpha, "web")
    assert event.after["scopes"] == ["read", "leases"] and raw not in str(event.after)


def test_the_project_page_links_to_it_for_managers_only(f0, client):
    client.force_login(f0.alpha_manager)
    assert 'id="project-service-tokens"' in client.get("/projects/alpha/").content.decode()
    client.force_login(f0.alice)
    assert 'id="project-service-tokens"' not in client.get("/projects/alpha/").content.decode()
    assert client.get(reverse("service_tokens", args=["alpha"])).status_code == 404


def test_the_page_names_the_field_of_a_refusal_and_writes_nothing(f0, client):
    client.force_login(f0.alpha_manager)
    url = reverse("service_tokens", args=["alpha"])
    before = row_counts()
    response = client.post(url, {"name": "ci", "days": "30"})
    assert response.status_code == 200
    assert 'id="token-scopes-error"' in response.content.decode()
    response = client.post(url, {"name": "", "days": "30", "scopes": ["read"]})
    assert 'id="token-name-error"' in response.content.decode()
    assert row_counts() == before


def test_the_api_makes_one_for_managers_and_admins_only(f0):
    body = {"name": "ci", "scopes": ["read"], "expires_at": (timezone.now() + timedelta(days=7))}
    for who in (f0.alice, f0.bob, f0.outsider):
        before = row_counts()
        assert client_for(who).post(tokens_url(f0.alpha), body, format="json").status_code == 404
        assert row_counts() == before
    answer = client_for(f0.alpha_manager).post(tokens_url(f0.alpha), body, format="json")
    assert answer.status_code == 201, answer.content
    assert answer["Cache-Control"] == "no-store"
    raw = answer.json()["token"]
    assert raw.startswith("gps_") and answer.json()["scopes"] == ["read"]
    listed = client_for(f0.alpha_manager).get(tokens_url(f0.alpha))
    assert raw not in listed.content.decode() and listed.json()["results"][0]["name"] == "ci"
    gamma = client_for(f0.admin).post(tokens_url(f0.gamma), {**body, "name": "x"}, format="json")
    assert gamma.status_code == 201
    assert client_for(f0.alpha_manager).get(tokens_url(f0.gamma)).status_code == 404


@pytest.mark.parametrize(
    ("change", "field", "status"),
    [
        ({"scopes": []}, "scopes", 400),
        ({"scopes": ["write"]}, "scopes", 400),
        ({"name": ""}, "name", 400),
        ({"expires_at": "2020-01-01T00:00:00Z"}, "expires_at", 409),
        ({"days": 400}, "expires_at", 409),
    ],
)
def test_the_api_refuses_bad_input_naming_the_field(f0, change, field, status):
    days = change.pop("days", 7)
    body = {
        "name": "ci",
        "scopes": ["read"],
        "expires_at": (timezone.now() + timedelta(days=days)).isoformat(),
        **change,
    }
    before = row_counts()
    answer = client_for(f0.alpha_manager).post(tokens_url(f0.alpha), body, format="json")
    assert answer.status_code == status, answer.content
    found = answer.json()
    assert field in found.get("errors", {}) or found.get("field") == field
    assert row_counts() == before


def test_a_name_is_one_live_token_per_project(f0):
    make(f0, name="ci")
    with pytest.raises(InvalidInput) as refused:
        make(f0, name="ci")
    assert refused.value.code == "name_taken"
    row = ServiceToken.objects.get(name="ci")
    service_tokens.revoke_service_token(actor=f0.alpha_manager, token=row)
    make(f0, name="ci")  # a revoked token's name is free again
    assert ServiceToken.objects.filter(name="ci").count() == 2


def test_only_a_manager_of_the_project_makes_or_revokes_one(f0):
    with pytest.raises(NotPermitted):
        make(f0, project=f0.gamma)
    row, _raw = make(f0)
    with pytest.raises(NotPermitted):
        service_tokens.revoke_service_token(actor=f0.alice, token=row)


# --- Using one ------------------------------------------------------------------------------


def test_it_reads_what_an_engineer_of_its_project_sees_and_nothing_else(f0):
    _row, raw = make(f0, "read")
    ours, theirs = running_lease(f0), running_lease(f0, project=f0.gamma)
    api = bearer(raw)
    listed = api.get(reverse("api:lease-list")).json()["results"]
    assert [lease["id"] for lease in listed] == [ours.pk]
    assert api.get(reverse("api:lease-detail", args=[ours.pk])).status_code == 200
    assert api.get(reverse("api:lease-detail", args=[theirs.pk])).status_code == 404
    projects = api.get(reverse("api:project-list")).json()["results"]
    assert [(p["slug"], p["role"]) for p in projects] == [("alpha", "engineer")]
    assert api.get(reverse("api:project-detail", args=["gamma"])).status_code == 404
    me = api.get(reverse("api:me")).json()
    assert me["projects"] == [{"slug": "alpha", "name": "Alpha", "role": "engineer"}]
    assert me["is_admin"] is False and me["is_finance"] is False


def test_it_refuses_a_call_outside_its_scopes_naming_the_scope(f0):
    _row, read_only = make(f0, "read", name="reader")
    _row, leases_only = make(f0, "leases", name="asker")
    before = row_counts()
    refused = bearer(read_only).post(reverse("api:lease-list"), ask(f0), format="json")
    assert refused.status_code == 403
    assert refused.json()["code"] == "missing_scope" and "“leases”" in refused.json()["detail"]
    refused = bearer(leases_only).get(reverse("api:lease-list"))
    assert refused.status_code == 403 and "“read”" in refused.json()["detail"]
    assert row_counts() == before


@pytest.mark.parametrize(
    ("method", "url", "body"),
    [
        ("post", "/api/v1/tokens", {"name": "escape", "expires_at": "2030-01-01T00:00:00Z"}),
        ("get", "/api/v1/tokens", None),
        ("post", "/api/v1/projects/alpha/service-tokens", {"name": "x", "scopes": ["read"]}),
        ("post", "/api/v1/projects/alpha/members", {"username": "olga", "role": "engineer"}),
        ("post", "/api/v1/projects/alpha/config", {}),
        ("post", "/api/v1/quota-requests", {}),
    ],
)
def test_it_never_makes_calls_no_scope_covers(f0, method, url, body):
    _row, raw = make(f0, "read", "leases")
    before = row_counts()
    answer = getattr(bearer(raw), method)(url, body, format="json")
    assert answer.status_code == 403, answer.content
    assert answer.json()["code"] == "not_for_service_tokens"
    assert row_counts() == before


def test_it_asks_for_a_lease_in_its_project_and_ends_it_with_the_leases_scope(f0):
    row, raw = make(f0, "read", "leases")
    api = bearer(raw)
    key = api.post(reverse("api:ssh-key-list"), {"name": "ci", "public_key": KEY}, format="json")
    assert key.status_code == 201, key.content
    asked = ask(f0, ssh_keys=[key.json()["id"]])
    answer = api.post(reverse("api:lease-list"), asked, format="json")
    assert answer.status_code == 201, answer.content
    lease = Reservation.objects.get(pk=answer.json()["id"])
    assert lease.requester == row.account and lease.project == f0.alpha
    assert list(lease.ssh_keys.all()) == list(SshKey.objects.filter(user=row.account))
    elsewhere = api.post(reverse("api:lease-list"), ask(f0, project="gamma"), format="json")
    assert elsewhere.status_code == 404 and elsewhere.json()["field"] == "project"
    alices = running_lease(f0)  # a colleague's lease: not the token's to end
    assert api.post(reverse("api:lease-end", args=[alices.pk]), {}).status_code == 404
    refused = api.post(reverse("api:lease-approve", args=[lease.pk]), {}, format="json")
    assert refused.status_code == 403
    ended = api.post(reverse("api:lease-cancel", args=[lease.pk]), {}, format="json")
    if ended.status_code == 409:  # already provisioning: ended instead of cancelled
        ended = api.post(reverse("api:lease-end", args=[lease.pk]), {}, format="json")
    assert ended.status_code == 200, ended.content


def test_revoking_stops_it_at_the_next_request(f0):
    row, raw = make(f0, "read")
    api = bearer(raw)
    assert api.get(reverse("api:me")).status_code == 200
    answer = client_for(f0.alpha_manager).post(
        reverse("api:project-service-token-revoke", args=["alpha", row.pk]), {}, format="json"
    )
    assert answer.status_code == 200 and answer.json()["revoked"] is True
    refused = api.get(reverse("api:me"))
    assert refused.status_code == 401 and "revoked" in refused.json()["detail"]
    row.refresh_from_db()
    assert row.revoked_at is not None and row.account.is_active is False
    event = AuditEvent.objects.get(verb="service_token.revoked")
    assert (event.actor, event.project, event.source) == (f0.alpha_manager, f0.alpha, "api")


def test_the_page_revokes_one(f0, client):
    row, raw = make(f0)
    client.force_login(f0.alpha_manager)
    response = client.post(reverse("service_token_revoke", args=["alpha", row.pk]))
    assert response.status_code == 302
    assert bearer(raw).get(reverse("api:me")).status_code == 401
    client.force_login(f0.alice)
    other, _raw = make(f0, name="other")
    assert client.post(reverse("service_token_revoke", args=["alpha", other.pk])).status_code == 404
    assert ServiceToken.objects.get(pk=other.pk).revoked_at is None


def test_an_expired_token_is_refused(f0):
    row, raw = make(f0)
    ServiceToken.objects.filter(pk=row.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert bearer(raw).get(reverse("api:me")).status_code == 401
    # Its account reaches nothing either, whatever asks for it.
    assert not service_tokens.access.roles(ServiceToken.objects.get(pk=row.pk).account)


def test_its_actions_are_audited_under_its_name(f0, client):
    row, raw = make(f0, "read", "leases")
    answer = bearer(raw).post(reverse("api:lease-list"), ask(f0), format="json")
    assert answer.status_code == 201, answer.content
    event = AuditEvent.objects.filter(actor=row.account).order_by("at", "id").first()
    assert event is not None and event.source == "api"
    client.force_login(f0.admin)
    page = client.get(reverse("audit_log")).content.decode()
    assert "service token ci-nightly (Alpha)" in page
    listed = client_for(f0.admin).get(
        reverse("api:audit-event-list"), {"actor": row.account.username}
    )
    names = {item["actor_name"] for item in listed.json()["results"]}
    assert names == {"service token ci-nightly (Alpha)"}


# --- No person -------------------------------------------------------------------------------


def test_its_account_cannot_log_into_the_web_pages(f0):
    row, _raw = make(f0)
    assert not row.account.has_usable_password()
    web = Client()
    answer = web.post("/login/", {"username": row.account.username, "password": ""})
    assert answer.status_code == 200 and "_auth_user_id" not in web.session
    web.force_login(row.account)  # a session made anyhow is no one's
    assert web.get("/").status_code == 302
    assert web.get("/projects/alpha/").status_code == 302


def test_it_is_no_person_in_any_list_or_picker(f0, client):
    row, _raw = make(f0)
    username = row.account.username
    client.force_login(f0.alpha_manager)
    assert username not in client.get("/projects/alpha/").content.decode()
    members = client_for(f0.alpha_manager).get("/api/v1/projects/alpha/members").json()
    assert username not in str(members)
    project = client_for(f0.alpha_manager).get("/api/v1/projects/alpha").json()
    assert project["members"] == 2  # alice and alma
    added = client_for(f0.alpha_manager).post(
        "/api/v1/projects/alpha/members", {"username": username, "role": "engineer"}, format="json"
    )
    assert added.status_code == 404 and added.json()["field"] == "username"
    with pytest.raises(NotPermitted):
        memberships.set_membership(
            actor=f0.admin, project=f0.alpha, user=row.account, role="engineer"
        )
    text = projectconfig.export_project(f0.alpha)
    assert username not in text
    with pytest.raises(InvalidInput) as refused:  # configuration as code makes no member of it
        projectconfig.plan(text.replace("username: alice", f"username: {username}"), actor=f0.admin)
    assert refused.value.field == "members[0].username"
    f0.admin.is_superuser = True  # Django's admin pages of users: superusers
    f0.admin.save(update_fields=["is_superuser"])
    client.force_login(f0.admin)
    users = client.get("/admin/auth/user/").content.decode()
    assert username not in users and "alice" in users
    picker = client.get(
        "/admin/autocomplete/",
        {"app_label": "portal", "model_name": "membership", "field_name": "user", "term": "svc"},
    )
    assert picker.status_code == 200 and username not in picker.content.decode()


def test_the_token_is_in_no_log_line_and_no_audit_event(f0, caplog):
    caplog.set_level("DEBUG")
    body = {"name": "ci", "scopes": ["read"], "expires_at": timezone.now() + timedelta(days=7)}
    answer = client_for(f0.alpha_manager).post(tokens_url(f0.alpha), body, format="json")
    raw = answer.json()["token"]
    api = bearer(raw)
    assert api.get(reverse("api:me")).status_code == 200
    assert api.post(reverse("api:lease-list"), ask(f0), format="json").status_code == 403
    client_for(f0.alpha_manager).post(
        reverse("api:project-service-token-revoke", args=["alpha", answer.json()["id"]])
    )
    assert api.get(reverse("api:me")).status_code == 401
    assert caplog.records  # the refusals were logged, without the token
    assert raw not in caplog.text and raw[4:] not in caplog.text
    events = list(AuditEvent.objects.values_list("before", "after"))
    assert len(events) == 2 and raw not in str(events)
