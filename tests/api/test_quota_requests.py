"""``/api/v1/quota-requests``: members ask for a new G or L with a reason; managers decide
ceilings, admins guarantees (``quota_requests.decide_quota_request``, rule Q1), and the
asker is told."""

import pytest
from django.urls import reverse

from portal.models import AuditEvent
from rental.loans import quota_requests
from rental.models import Quota, QuotaRequest
from tests import factories
from tests.api.catalog_support import HUGE, NOT_JSON, client_for, counts, finance, post_raw
from tests.notices import told

pytestmark = pytest.mark.django_db

LIST = "/api/v1/quota-requests"


def ask(f0, project=None, *, who=None, **change) -> QuotaRequest:
    project = project or f0.alpha
    return quota_requests.request_quota_change(
        actor=who or f0.engineer_of(project),
        project=project,
        gpu_model=f0.model,
        reason="a bigger run",
        **change,
    )


def decide(pk: int, verdict: str) -> str:
    return reverse(f"api:quota-request-{verdict}", args=[pk])


def test_it_lets_a_member_ask_for_a_new_ceiling_and_tells_the_managers(f0):
    body = {"project": "alpha", "gpu_model": f0.model.pk, "ceiling": 7, "reason": "ranking v2"}
    answer = client_for(f0.alice).post(LIST, body, format="json")
    assert answer.status_code == 201, answer.content
    asked = QuotaRequest.objects.get()
    assert answer.json() == {
        "id": asked.pk,
        "project": "alpha",
        "gpu_model": f0.model.pk,
        "gpu_model_name": "A100 80GB",
        "guaranteed": None,
        "ceiling": 7,
        "reason": "ranking v2",
        "status": "pending",
        "requested_by": "alice",
        "created_at": answer.json()["created_at"],
        "needs_admin": False,
        "may_decide": False,
        "decided_by": None,
        "decided_at": None,
        "decision_comment": "",
    }
    assert (asked.requested_by, asked.ceiling, asked.guaranteed) == (f0.alice, 7, None)
    assert AuditEvent.objects.get(verb="quota_request.created").source == "api"
    assert told(f0.alpha_manager, has="Alpha")


def test_it_lets_only_members_ask(f0):
    body = {"project": "alpha", "gpu_model": f0.model.pk, "ceiling": 7, "reason": "why not"}
    for who in (f0.bob, f0.admin, finance(), f0.outsider):  # as on the project page
        assert client_for(who).post(LIST, body, format="json").status_code == 404
    assert client_for(None).post(LIST, body, format="json").status_code == 401
    assert not QuotaRequest.objects.exists()


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"ceiling": 7, "reason": "  "}, "reason"),
        ({"ceiling": 7, "reason": HUGE}, "reason"),
        ({"ceiling": 7, "reason": "nul \x00 byte"}, "reason"),
        ({"ceiling": "seven", "reason": "r"}, "ceiling"),
        ({"ceiling": 10**9, "reason": "r"}, "ceiling"),
        ({"guaranteed": -1, "reason": "r"}, "guaranteed"),
        ({"ceiling": 7, "reason": "r", "project": HUGE}, "project"),
        ({"ceiling": 7, "reason": "r", "gpu_model": "A100"}, "gpu_model"),
        ({"ceiling": 7, "reason": "r", "gpu_model": 10**12}, "gpu_model"),
        ({"ceiling": 7, "reason": ["r"]}, "reason"),
    ],
)
def test_it_answers_400_naming_the_field_and_writes_nothing(f0, change, field):
    before = counts()
    body = {"project": "alpha", "gpu_model": f0.model.pk, **change}
    answer = client_for(f0.alice).post(LIST, body, format="json")
    assert answer.status_code == 400, answer.content
    assert field in answer.json()["errors"]
    assert counts() == before


def test_it_answers_409_to_a_request_that_asks_for_nothing_and_writes_nothing(f0):
    """Neither a guarantee nor a ceiling: each is optional, but not both at once."""
    before = counts()
    body = {"project": "alpha", "gpu_model": f0.model.pk, "reason": "nothing asked"}
    answer = client_for(f0.alice).post(LIST, body, format="json")
    assert answer.status_code == 409, answer.content
    assert answer.json()["field"] == "ceiling" and "errors" not in answer.json()
    assert counts() == before


def test_it_answers_404_to_a_gpu_model_the_project_has_no_quota_for(f0):
    other = factories.gpu_model("H100 80GB")
    body = {"project": "alpha", "gpu_model": other.pk, "ceiling": 2, "reason": "try"}
    answer = client_for(f0.alice).post(LIST, body, format="json")
    assert answer.status_code == 404, answer.content
    assert (answer.json()["code"], answer.json()["field"]) == ("not_found", "gpu_model")
    assert "errors" not in answer.json()
    assert post_raw(client_for(f0.alice), LIST, NOT_JSON).status_code == 400
    assert not QuotaRequest.objects.exists()


def test_it_lists_the_requests_of_the_callers_projects(f0):
    mine = ask(f0, ceiling=7)
    theirs = ask(f0, f0.gamma, ceiling=5)
    decided = ask(f0, f0.beta, guaranteed=3)
    quota_requests.decide_quota_request(actor=f0.admin, request=decided, approve=True)
    assert [r["id"] for r in client_for(f0.alice).get(LIST).json()["results"]] == [mine.pk]
    assert client_for(f0.alice).get(decide(theirs.pk, "detail")).status_code == 404
    everyone = client_for(finance()).get(LIST).json()["results"]
    assert [r["id"] for r in everyone] == [decided.pk, theirs.pk, mine.pk]  # newest first
    admin = client_for(f0.admin)
    assert [r["id"] for r in admin.get(LIST + "?status=approved").json()["results"]] == [decided.pk]
    assert [r["id"] for r in admin.get(LIST + "?project=gamma").json()["results"]] == [theirs.pk]
    assert admin.get(LIST + "?status=maybe").status_code == 400
    manager_view = client_for(f0.alpha_manager).get(decide(mine.pk, "detail")).json()
    assert manager_view["may_decide"] is True and manager_view["needs_admin"] is False


def test_it_lets_a_manager_approve_a_ceiling_and_tells_the_asker(f0):
    asked = ask(f0, ceiling=7)
    answer = client_for(f0.alpha_manager).post(
        decide(asked.pk, "approve"), {"comment": "go"}, format="json"
    )
    assert answer.status_code == 200, answer.content
    assert (answer.json()["status"], answer.json()["decided_by"]) == ("approved", "alma")
    assert Quota.objects.get(project=f0.alpha).ceiling == 7
    event = AuditEvent.objects.get(verb="quota_request.approved")
    assert event.source == "api" and event.actor == f0.alpha_manager
    assert told(f0.alice, has="approved")
    again = client_for(f0.alpha_manager).post(decide(asked.pk, "reject"), {"comment": "no"})
    assert again.status_code == 409 and again.json()["code"] == "invalid_transition"
    assert QuotaRequest.objects.get().status == "approved"


def test_it_refuses_a_manager_deciding_a_guarantee(f0):
    asked = ask(f0, guaranteed=3)
    before = counts()
    answer = client_for(f0.alpha_manager).post(decide(asked.pk, "approve"), {}, format="json")
    assert answer.status_code == 403
    assert answer.json()["code"] == "guarantee_needs_admin"
    assert counts() == before
    assert (QuotaRequest.objects.get().status, Quota.objects.get(project=f0.alpha).guaranteed) == (
        "pending",
        2,
    )
    engineer = client_for(f0.alice).post(decide(ask(f0, ceiling=9).pk, "approve"), {})
    assert engineer.status_code == 403 and engineer.json()["code"] == "ceiling_needs_manager"


def test_it_refuses_an_admins_approval_that_breaks_q1_with_its_figures(f0):
    asked = ask(f0, guaranteed=5)  # Σ G would be 5 + 4 + 0 = 9 > C = 8
    before = counts()
    answer = client_for(f0.admin).post(decide(asked.pk, "approve"), {}, format="json")
    assert answer.status_code == 409
    body = answer.json()
    assert body["code"] == "guarantees_over_capacity" and "errors" not in body
    assert body["figures"] == {"total": 9, "bound": 8, "left": 4}
    assert counts() == before and QuotaRequest.objects.get().status == "pending"
    no_comment = client_for(f0.admin).post(decide(asked.pk, "reject"), {}, format="json")
    assert no_comment.status_code == 409
    said = no_comment.json()
    assert (said["code"], said["field"]) == ("comment_required", "comment")
    assert counts() == before and QuotaRequest.objects.get().status == "pending"
    rejected = client_for(f0.admin).post(
        decide(asked.pk, "reject"), {"comment": "the pool is full"}, format="json"
    )
    assert rejected.status_code == 200
    assert (rejected.json()["status"], rejected.json()["decision_comment"]) == (
        "rejected",
        "the pool is full",
    )
    assert told(f0.alice, has="rejected")


def test_it_hides_another_projects_request_from_its_deciders(f0):
    theirs = ask(f0, f0.gamma, ceiling=5)
    for who in (f0.alpha_manager, f0.alice, f0.bob):
        answer = client_for(who).post(decide(theirs.pk, "approve"), {}, format="json")
        assert answer.status_code == 404
    assert QuotaRequest.objects.get().status == "pending"


@pytest.mark.parametrize(
    "body", [{"comment": HUGE}, {"comment": "\x00"}, {"comment": {"a": 1}}, [1]]
)
def test_it_answers_400_to_a_bad_decision_and_writes_nothing(f0, body):
    asked = ask(f0, ceiling=7)
    before = counts()
    answer = client_for(f0.alpha_manager).post(decide(asked.pk, "reject"), body, format="json")
    assert answer.status_code == 400
    assert counts() == before


def test_it_lists_requests_in_a_fixed_number_of_queries(f0, django_assert_num_queries):
    ask(f0, ceiling=7)
    client = client_for(f0.alpha_manager)
    with django_assert_num_queries(4):  # finance, roles, count, page
        assert len(client.get(LIST).json()["results"]) == 1
    for n in range(14):
        ask(f0, ceiling=n, who=f0.alpha_manager if n % 2 else f0.alice)
    client = client_for(f0.alpha_manager)
    with django_assert_num_queries(4):
        assert len(client.get(LIST).json()["results"]) == 15
