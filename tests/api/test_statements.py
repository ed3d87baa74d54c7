"""``/api/v1/statements``, ``/statement-lines/{id}/dispute`` and ``/disputes``: who reads
which statement, sign-off, disputes and their answers through billing's services, and the
CSV and PDF exports."""

import csv
import io
from datetime import timedelta
from decimal import Decimal

import pytest
from rest_framework.test import APIClient

from billing import services
from billing.models import LineDispute, Statement, StatementLine
from portal.models import AuditEvent
from rental.models import Pool
from tests import factories
from tests.billing.helpers import at, lease, run

APRIL = at(2026, 4, 1)
MAY = at(2026, 5, 1)
LINE_FIELDS = {
    "id",
    "kind",
    "gpu_model",
    "market",
    "tier",
    "quantity",
    "unit_price",
    "amount",
    "description",
    "disputes",
}


@pytest.fixture
def closed(f0):
    """April closed: alpha 200 burst GPU-hours, beta 2000 guaranteed, gamma 300 burst."""
    Pool.objects.filter(pk=f0.pool.pk).update(
        committed_gpus=6, committed_monthly_cost=Decimal("5400.00")
    )
    run(lease(f0, f0.alpha, tier="burst"), start=APRIL, hours=200)
    run(lease(f0, f0.gamma, tier="burst"), start=APRIL, hours=300)
    run(lease(f0, f0.beta, tier="guaranteed", gpus=4), start=APRIL, hours=500, gpus=4)
    services.close_period(period=APRIL, now=MAY + timedelta(hours=48))
    f0.finance = factories.user("fiona", finance=True)
    return f0


def as_user(user) -> APIClient:
    client = APIClient()
    client.force_login(user)
    return client


def statement_of(slug: str) -> Statement:
    return Statement.objects.get(project__slug=slug, period=APRIL.date())


def test_members_list_their_projects_statements_and_finance_all(closed):
    alpha = as_user(closed.alice).get("/api/v1/statements").json()["results"]
    assert [(s["project"], s["period"], s["status"], s["total"]) for s in alpha] == [
        ("alpha", "2026-04", "closed", "2300.00")
    ]
    everyone = as_user(closed.finance).get("/api/v1/statements").json()["results"]
    assert [s["project"] for s in everyone] == ["alpha", "beta", "gamma"]
    assert {s["total"] for s in everyone} == {
        str(s.total) for s in Statement.objects.filter(project__isnull=False)
    }
    assert as_user(closed.outsider).get("/api/v1/statements").json()["results"] == []


def test_it_filters_statements_by_project_period_and_status(closed):
    client = as_user(closed.admin)
    assert client.get("/api/v1/statements?project=beta").json()["count"] == 1
    assert client.get("/api/v1/statements?period=2026-04&status=closed").json()["count"] == 3
    assert client.get("/api/v1/statements?period=2026-03").json()["count"] == 0
    assert client.get("/api/v1/statements?status=approved").json()["count"] == 0
    bad = client.get("/api/v1/statements?period=April")
    assert bad.status_code == 400
    assert "period" in bad.json()["errors"]


def test_the_detail_shows_every_line_with_its_figures_and_nothing_of_instances(closed):
    statement = statement_of("alpha")
    response = as_user(closed.finance).get(f"/api/v1/statements/{statement.pk}")
    assert response.status_code == 200
    body = response.json()
    assert body["project"] == "alpha" and body["status"] == "closed"
    assert Decimal(body["total"]) == statement.total == Decimal("2300.00")
    stored = list(statement.lines.order_by("id"))
    assert [line["id"] for line in body["lines"]] == [line.pk for line in stored]
    for line, row in zip(body["lines"], stored, strict=True):
        assert set(line) == LINE_FIELDS
        assert Decimal(line["amount"]) == row.amount
        assert Decimal(line["quantity"]) == row.quantity
        assert line["kind"] == row.kind and line["description"] == row.description
    assert sum(Decimal(line["amount"]) for line in body["lines"]) == statement.total
    assert {line["gpu_model"] for line in body["lines"] if line["kind"] == "usage"} == {"A100 80GB"}
    text = response.content.decode()
    for secret in ("ip_address", "public_ip", "private_ip", "ssh", "reservation_id"):
        assert secret not in text


def test_an_outsider_gets_404_for_another_projects_statement(closed):
    gamma = statement_of("gamma")
    for user in (closed.alice, closed.alpha_manager, closed.outsider):
        client = as_user(user)
        assert client.get(f"/api/v1/statements/{gamma.pk}").status_code == 404
        assert client.get(f"/api/v1/statements/{gamma.pk}/export?format=csv").status_code == 404
        assert client.post(f"/api/v1/statements/{gamma.pk}/approve").status_code == 404
        line = gamma.lines.first()
        response = client.post(
            f"/api/v1/statement-lines/{line.pk}/dispute", {"comment": "no"}, format="json"
        )
        assert response.status_code == 404
    gamma.refresh_from_db()
    assert gamma.status == "closed"
    assert not LineDispute.objects.exists()


def test_the_preview_is_the_live_draft_of_the_open_month(closed):
    response = as_user(closed.alice).get("/api/v1/statements/preview?project=alpha&period=2026-04")
    assert response.status_code == 200
    assert response.json()["id"] == statement_of("alpha").pk
    assert Decimal(response.json()["total"]) == Decimal("2300.00")
    current = as_user(closed.alice).get("/api/v1/statements/preview?project=alpha")
    assert current.status_code == 200 and current.json()["status"] == "draft"
    assert as_user(closed.alice).get("/api/v1/statements/preview?project=gamma").status_code == 404
    assert as_user(closed.alice).get("/api/v1/statements/preview").status_code == 400
    bad = as_user(closed.alice).get("/api/v1/statements/preview?project=alpha&period=2026-13")
    assert bad.status_code == 400


def test_a_manager_signs_off_and_the_engineer_and_finance_cannot(closed):
    statement = statement_of("alpha")
    url = f"/api/v1/statements/{statement.pk}/approve"
    for user in (closed.alice, closed.finance):
        assert as_user(user).post(url).status_code == 404
    statement.refresh_from_db()
    assert statement.status == "closed"
    response = as_user(closed.alpha_manager).post(url)
    assert response.status_code == 200
    assert response.json()["status"] == "approved"
    assert response.json()["decided_by"] == "alma"
    statement.refresh_from_db()
    assert statement.status == "approved" and statement.decided_by == closed.alpha_manager
    assert AuditEvent.objects.get(verb="statement.approve").source == "api"
    again = as_user(closed.alpha_manager).post(url)
    assert again.status_code == 409
    assert again.json()["code"] == "not_closed"


def test_a_manager_disputes_a_line_and_an_admin_answers_with_a_credit(closed):
    statement = statement_of("alpha")
    line = statement.lines.filter(kind="usage").first()
    url = f"/api/v1/statement-lines/{line.pk}/dispute"
    assert as_user(closed.alice).post(url, {"comment": "x"}, format="json").status_code == 404
    response = as_user(closed.alpha_manager).post(
        url, {"comment": "We did not run that long."}, format="json"
    )
    assert response.status_code == 201
    dispute = LineDispute.objects.get()
    assert response.json()["id"] == dispute.pk and response.json()["status"] == "open"
    assert dispute.raised_by == closed.alpha_manager and dispute.line == line
    statement.refresh_from_db()
    assert statement.status == "disputed"
    blocked = as_user(closed.alpha_manager).post(f"/api/v1/statements/{statement.pk}/approve")
    assert blocked.status_code == 409 and blocked.json()["code"] == "open_dispute"
    detail = as_user(closed.alice).get(f"/api/v1/statements/{statement.pk}").json()
    disputed = next(row for row in detail["lines"] if row["id"] == line.pk)
    assert disputed["disputes"][0]["comment"] == "We did not run that long."

    answer_url = f"/api/v1/disputes/{dispute.pk}/answer"
    body = {"answer": "Credited.", "kind": "credit", "amount": "10.00"}
    for user in (closed.alpha_manager, closed.finance):
        assert as_user(user).post(answer_url, body, format="json").status_code == 404
    answered = as_user(closed.admin).post(answer_url, body, format="json")
    assert answered.status_code == 200
    assert answered.json()["status"] == "answered" and answered.json()["answered_by"] == "root"
    dispute.refresh_from_db()
    assert dispute.correction.amount == Decimal("-10.00")
    statement.refresh_from_db()
    assert statement.status == "closed"
    sources = set(
        AuditEvent.objects.filter(verb__startswith="statement.")
        .exclude(verb="statement.close")
        .values_list("source", flat=True)
    )
    assert sources == {"api"}


def test_disputes_are_listed_to_who_sees_the_statement(closed):
    line = statement_of("alpha").lines.first()
    services.dispute_line(line_id=line.pk, actor=closed.alpha_manager, comment="why?")
    assert as_user(closed.alice).get("/api/v1/disputes").json()["count"] == 1
    assert as_user(closed.bob).get("/api/v1/disputes").json()["count"] == 0
    assert (
        as_user(closed.admin).get("/api/v1/disputes?status=open&project=alpha").json()["count"] == 1
    )
    pk = LineDispute.objects.get().pk
    assert as_user(closed.bob).get(f"/api/v1/disputes/{pk}").status_code == 404


@pytest.mark.parametrize(
    "body",
    [{}, {"comment": ""}, {"comment": "   "}, {"comment": "x" * 2001}, {"comment": "a\u0000"}],
)
def test_a_dispute_needs_a_comment_and_bad_input_writes_nothing(closed, body):
    line = statement_of("alpha").lines.first()
    response = as_user(closed.alpha_manager).post(
        f"/api/v1/statement-lines/{line.pk}/dispute", body, format="json"
    )
    assert response.status_code == 400
    assert "comment" in response.json()["errors"]
    assert not LineDispute.objects.exists()
    assert statement_of("alpha").status == "closed"


def test_an_answer_with_a_bad_amount_writes_nothing(closed):
    line = statement_of("alpha").lines.first()
    dispute = services.dispute_line(line_id=line.pk, actor=closed.alpha_manager, comment="?")
    client = as_user(closed.admin)
    url = f"/api/v1/disputes/{dispute.pk}/answer"
    for body in (
        {"answer": "ok", "kind": "credit", "amount": "1e30"},
        {"answer": "ok", "kind": "credit", "amount": "abc"},
        {"answer": "ok", "kind": "refund", "amount": "1.00"},
        {"answer": "", "kind": "credit", "amount": "1.00"},
    ):
        assert client.post(url, body, format="json").status_code == 400, body
    dispute.refresh_from_db()
    assert dispute.status == "open"
    assert not StatementLine.objects.filter(kind__in=("credit", "adjustment")).exists()


def test_it_exports_a_statement_as_csv_and_pdf(closed):
    statement = statement_of("beta")
    client = as_user(closed.finance)
    response = client.get(f"/api/v1/statements/{statement.pk}/export?format=csv")
    assert response.status_code == 200
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    assert 'filename="statement-beta-2026-04.csv"' in response["Content-Disposition"]
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert len(rows) == statement.lines.count()
    assert sum(Decimal(row["amount"]) for row in rows) == statement.total
    pdf = client.get(f"/api/v1/statements/{statement.pk}/export?format=pdf")
    assert pdf.status_code == 200
    assert pdf["Content-Type"] == "application/pdf"
    assert pdf.content.startswith(b"%PDF")
    for wrong in ("xls", ""):
        bad = client.get(f"/api/v1/statements/{statement.pk}/export?format={wrong}")
        assert bad.status_code == 400
        assert bad["Content-Type"] == "application/json"


@pytest.mark.parametrize("extra", [0, 13])
def test_the_list_is_a_fixed_number_of_queries(closed, extra, django_assert_num_queries):
    for index in range(extra):
        factories.project(f"p{index:02}")
    services.close_period(period=at(2026, 3, 1), now=MAY)
    client = as_user(closed.finance)
    client.get("/api/v1/statements")
    with django_assert_num_queries(4):
        response = client.get("/api/v1/statements?page_size=200")
    assert response.json()["count"] == 3 + 3 + extra  # April, and March for every project
