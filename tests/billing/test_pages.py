"""The money pages: statement with drill-down, sign-off and disputes, finance, exports."""

import csv
import io
from datetime import timedelta
from decimal import Decimal

import pytest
from django.urls import reverse
from django.utils import timezone

from billing import services
from billing.models import Budget, LineDispute, Statement, StatementLine
from billing.periods import period_start
from billing.selectors import draft_statement
from rental.catalog import storage
from rental.models import Pool
from tests import factories
from tests.billing.helpers import lease, run

NOW = timezone.now()
THIS_MONTH = period_start(NOW)
LAST_MONTH = period_start(THIS_MONTH - timedelta(days=1))


@pytest.fixture
def closed(f0):
    """Last month closed: K = 6 at $5,400; alpha 200 h burst, gamma 300 h burst, beta 4 GPUs
    guaranteed 100 h; this month a running burst lease of alpha."""
    Pool.objects.filter(pk=f0.pool.pk).update(
        committed_gpus=6, committed_monthly_cost=Decimal("5400.00")
    )
    run(lease(f0, f0.alpha, tier="burst"), start=LAST_MONTH, hours=200)
    run(lease(f0, f0.gamma, tier="burst"), start=LAST_MONTH, hours=300)
    run(lease(f0, f0.beta, tier="guaranteed", gpus=4), start=LAST_MONTH, hours=100, gpus=4)
    services.close_period(period=LAST_MONTH, now=THIS_MONTH + timedelta(seconds=1))
    f0.finance = factories.user("fiona", finance=True)
    return f0


def login(client, user):
    client.force_login(user)
    return client


def statement_url(project, **params):
    query = "&".join(f"{k}={v}" for k, v in params.items())
    return reverse("billing:statement", args=[project.slug]) + (f"?{query}" if query else "")


def test_it_shows_a_closed_statement_to_its_manager_with_sign_off(client, closed):
    response = login(client, closed.alpha_manager).get(
        statement_url(closed.alpha, period=f"{LAST_MONTH:%Y-%m}")
    )
    assert response.status_code == 200
    body = response.content.decode()
    assert 'id="approve-statement"' in body
    assert "$2,300.00" in body
    assert 'id="dispute-form-0"' in body


def test_an_engineer_sees_the_statement_without_sign_off_and_an_outsider_not_at_all(client, closed):
    url = statement_url(closed.alpha, period=f"{LAST_MONTH:%Y-%m}")
    body = login(client, closed.alice).get(url).content.decode()
    assert "approve-statement" not in body and "dispute-form" not in body
    assert login(client, closed.outsider).get(url).status_code == 404
    assert login(client, closed.outsider).get(url + "&format=csv").status_code == 404


def test_the_manager_signs_off_and_disputes_through_the_page(client, closed):
    login(client, closed.alpha_manager)
    line = StatementLine.objects.get(statement__project=closed.alpha, kind="usage")
    response = client.post(
        reverse("billing:line_dispute", args=[line.pk]), {"comment": "Too many hours."}
    )
    assert response.status_code == 302
    dispute = LineDispute.objects.get(line=line)
    assert dispute.comment == "Too many hours."
    login(client, closed.admin).post(
        reverse("billing:dispute_answer", args=[dispute.pk]),
        {"answer": "Credited.", "kind": "credit", "amount": "10.00"},
    )
    dispute.refresh_from_db()
    assert dispute.correction.amount == Decimal("-10.00")
    login(client, closed.alpha_manager).post(
        reverse("billing:statement_approve", args=[line.statement_id])
    )
    assert Statement.objects.get(pk=line.statement_id).status == "approved"


def test_an_engineer_cannot_approve_or_dispute(client, closed):
    login(client, closed.alice)
    statement = Statement.objects.get(project=closed.alpha)
    line = statement.lines.first()
    assert client.post(reverse("billing:statement_approve", args=[statement.pk])).status_code == 404
    assert (
        client.post(reverse("billing:line_dispute", args=[line.pk]), {"comment": "x"}).status_code
        == 404
    )
    assert Statement.objects.get(pk=statement.pk).status == "closed"
    assert not LineDispute.objects.exists()


def test_csv_is_csv_with_machine_readable_amounts(client, closed):
    response = login(client, closed.alpha_manager).get(
        statement_url(closed.alpha, period=f"{LAST_MONTH:%Y-%m}", format="csv")
    )
    assert response["Content-Type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert {row["kind"] for row in rows} == {"committed_share", "usage"}
    assert sum(Decimal(row["amount"]) for row in rows) == Decimal("2300.00")
    assert all(row["status"] == "closed" and row["project"] == "alpha" for row in rows)


def test_the_finance_page_lists_every_statement_with_totals(
    client, closed, django_assert_max_num_queries
):
    login(client, closed.finance)
    with django_assert_max_num_queries(12):
        response = client.get(reverse("billing:finance") + f"?period={LAST_MONTH:%Y-%m}")
    body = response.content.decode()
    assert response.status_code == 200
    for slug in ("alpha", "beta", "gamma"):
        assert f'id="finance-{slug}"' in body
    # 1,800 + 500 | 3,600 | 750
    assert "$6,650.00" in body
    csv_rows = list(
        csv.DictReader(
            io.StringIO(
                client.get(
                    reverse("billing:finance") + f"?period={LAST_MONTH:%Y-%m}&format=csv"
                ).content.decode()
            )
        )
    )
    assert sum(Decimal(row["amount"]) for row in csv_rows) == Decimal("6650.00")
    assert {row["project"] for row in csv_rows} == {"alpha", "beta", "gamma"}


def test_the_finance_page_is_for_finance_and_admins(client, closed):
    assert login(client, closed.alpha_manager).get(reverse("billing:finance")).status_code == 404
    assert login(client, closed.admin).get(reverse("billing:finance")).status_code == 200


def test_the_pdf_is_a_pdf(client, closed, tmp_path):
    response = login(client, closed.finance).get(
        reverse("billing:finance") + f"?period={LAST_MONTH:%Y-%m}&format=pdf"
    )
    assert response["Content-Type"] == "application/pdf"
    assert response.content.startswith(b"%PDF")
    single = login(client, closed.alpha_manager).get(
        statement_url(closed.alpha, period=f"{LAST_MONTH:%Y-%m}", format="pdf")
    )
    assert single.content.startswith(b"%PDF")


def test_the_open_month_is_a_live_draft_on_the_finance_page(client, closed):
    run(lease(closed, closed.alpha, tier="burst", status="active"), start=THIS_MONTH)
    response = login(client, closed.finance).get(reverse("billing:finance"))
    assert response.status_code == 200
    assert "Draft" in response.content.decode()


def test_a_usage_line_drills_down_to_its_intervals(client, closed):
    login(client, closed.alpha_manager)
    view = client.get(statement_url(closed.alpha, period=f"{LAST_MONTH:%Y-%m}"))
    rows = [row for row in view.context["rows"] if row["line"].kind == "usage"]
    url = reverse("billing:line", args=[closed.alpha.slug, f"{LAST_MONTH:%Y-%m}", rows[0]["index"]])
    body = client.get(url).content.decode()
    assert "alice" in body  # who requested it
    assert "720,000 GPU-seconds" in body  # 200 h, in words with its figures
    assert login(client, closed.outsider).get(url).status_code == 404


def test_a_committed_share_shows_its_formula(client, closed):
    login(client, closed.alpha_manager)
    view = client.get(statement_url(closed.alpha, period=f"{LAST_MONTH:%Y-%m}"))
    [row] = [row for row in view.context["rows"] if row["line"].kind == "committed_share"]
    body = client.get(
        reverse("billing:line", args=[closed.alpha.slug, f"{LAST_MONTH:%Y-%m}", row["index"]])
    ).content.decode()
    assert "This project pays $5,400.00 × 2 / 6 = $1,800.00" in body


def test_the_statement_shows_spend_per_requester(client, closed):
    body = (
        login(client, closed.alpha_manager)
        .get(statement_url(closed.alpha, period=f"{LAST_MONTH:%Y-%m}"))
        .content.decode()
    )
    assert 'id="spend-per-requester"' in body and "alice" in body and "$500.00" in body


def test_the_lease_page_partial_shows_cost_so_far(client, f0):
    running = lease(f0, f0.alpha, tier="burst", status="active")
    run(running, start=timezone.now() - timedelta(hours=2), gpus=1)
    response = login(client, f0.alice).get(reverse("billing:lease_cost", args=[running.pk]))
    assert "$5.00" in response.content.decode()
    assert (
        login(client, f0.outsider).get(reverse("billing:lease_cost", args=[running.pk])).status_code
        == 404
    )


def test_the_project_partial_draws_the_budget_chart(client, f0):
    Budget.objects.create(project=f0.alpha, monthly_amount=Decimal("100.00"))
    body = (
        login(client, f0.alpha_manager)
        .get(reverse("billing:statement_partial", args=[f0.alpha.slug]))
        .content.decode()
    )
    assert 'id="budget-chart"' in body and 'id="budget-form"' in body


def test_the_manager_sets_the_budget_through_the_form(client, f0):
    login(client, f0.alpha_manager).post(
        reverse("billing:budget_set", args=[f0.alpha.slug]),
        {"monthly_amount": "750.00", "thresholds": ["80:actual", "100:forecast", ""]},
    )
    budget = Budget.objects.get(project=f0.alpha)
    assert budget.monthly_amount == Decimal("750.00")
    assert budget.thresholds == [
        {"percent": 80, "kind": "actual"},
        {"percent": 100, "kind": "forecast"},
    ]
    assert (
        login(client, f0.alice)
        .post(reverse("billing:budget_set", args=[f0.alpha.slug]), {"monthly_amount": "1"})
        .status_code
        == 404
    )


@pytest.mark.parametrize(
    "amount", ["99999999999999999999999", "1000000000000", "-1000000000000", "1e400"]
)
def test_a_budget_too_big_for_its_column_is_a_field_error_and_nothing_is_saved(client, f0, amount):
    """Every page that reads a budget stays up: an amount the column cannot hold (14
    digits, two of them cents) is refused, saying why, instead of being stored."""
    answer = login(client, f0.alpha_manager).post(
        reverse("billing:budget_set", args=[f0.alpha.slug]),
        {"monthly_amount": amount, "thresholds": ["80:actual"]},
    )
    assert answer.status_code == 400  # the project page again, the amount's field says why
    error = answer.content.decode().split('id="budget-monthly_amount_error"', 1)[1]
    assert "Enter an amount below 1,000,000,000,000" in error.split("</div>", 1)[0]
    assert not Budget.objects.filter(project=f0.alpha).exists()
    assert login(client, f0.alpha_manager).get(reverse("dashboard")).status_code == 200


def test_the_largest_budget_the_column_holds_is_saved_and_read_back(client, f0):
    login(client, f0.alpha_manager).post(
        reverse("billing:budget_set", args=[f0.alpha.slug]),
        {"monthly_amount": "999999999999.99", "thresholds": ["80:actual"]},
    )
    assert Budget.objects.get(project=f0.alpha).monthly_amount == Decimal("999999999999.99")
    assert login(client, f0.alpha_manager).get(reverse("dashboard")).status_code == 200


def test_explain_on_the_stopped_disks_line_shows_its_figures(client, f0):
    """A stopped instance's disk is a storage line whose references count its items; the
    drill-down lists every figure (a key named "items" once broke the page: a template's
    ``mapping.items`` looks that key up first)."""
    stopped = lease(f0, f0.alpha, status="active")
    run(stopped, start=THIS_MONTH, hours=1)
    storage.open_disks(
        [stopped.instances.get()], project_id=f0.alpha.pk, at=THIS_MONTH + timedelta(hours=1)
    )
    view = draft_statement(project_id=f0.alpha.pk, period=THIS_MONTH, now=timezone.now())
    index = next(i for i, line in enumerate(view.lines) if line.kind == "storage")
    answer = login(client, f0.alpha_manager).get(
        reverse("billing:line", args=[f0.alpha.slug, f"{THIS_MONTH:%Y-%m}", index])
    )
    assert answer.status_code == 200
    body = answer.content.decode()
    assert "The disk of 1 stopped instance" in body and "GB-seconds ×" in body
    assert "month_seconds" not in body and "<dt>items</dt>" not in body
