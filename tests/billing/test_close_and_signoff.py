"""Closing a period (P1), the database guarding closed lines, bit-identical recompute,
sign-off and disputes answered by corrections in the open period (P2)."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import IntegrityError, transaction

from billing import services
from billing.models import LineDispute, Statement, StatementLine
from billing.selectors import draft_statement
from portal.errors import InvalidTransition, NotPermitted
from portal.models import AuditEvent, Notification
from rental.models import Pool
from tests.billing.helpers import at, lease, run

APRIL = at(2026, 4, 1)
MAY = at(2026, 5, 1)


@pytest.fixture
def april(f0):
    Pool.objects.filter(pk=f0.pool.pk).update(
        committed_gpus=6, committed_monthly_cost=Decimal("5400.00")
    )
    run(lease(f0, f0.alpha, tier="burst"), start=APRIL, hours=200)
    run(lease(f0, f0.gamma, tier="burst"), start=APRIL, hours=300)
    run(lease(f0, f0.beta, tier="guaranteed", gpus=4), start=APRIL, hours=500, gpus=4)
    # One run across the month's end, still running when the month closes.
    run(lease(f0, f0.gamma, tier="burst", status="active"), start=at(2026, 4, 30, 23, 0, 0))
    return f0


def test_it_closes_every_project_once_with_locked_lines(
    april, mailoutbox, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        closed = services.close_period(period=APRIL, now=MAY + timedelta(hours=48))
    assert closed == 3
    assert [message.to for message in mailoutbox] == [[april.alpha_manager.email]]
    statements = {s.project.slug: s for s in Statement.objects.select_related("project")}
    assert {slug: s.total for slug, s in statements.items()} == {
        "alpha": Decimal("2300.00"),
        "beta": Decimal("3600.00"),
        "gamma": Decimal("752.50"),  # 300 h + the last hour of April, at $2.50
    }
    assert all(s.status == "closed" for s in statements.values())
    assert not StatementLine.objects.filter(locked=False).exists()
    assert services.close_period(period=APRIL, now=MAY + timedelta(hours=49)) == 0
    assert StatementLine.objects.count() == sum(len(s.lines.all()) for s in statements.values())
    assert AuditEvent.objects.filter(verb="statement.close").count() == 3
    assert Notification.objects.filter(user=april.alpha_manager).count() == 1


def test_it_refuses_to_close_an_open_period(april):
    with pytest.raises(InvalidTransition):
        services.close_period(period=APRIL, now=at(2026, 4, 30, 23))


def test_the_database_refuses_to_change_or_delete_a_closed_line(april):
    services.close_period(period=APRIL, now=MAY + timedelta(hours=48))
    line = StatementLine.objects.filter(amount__gt=0).first()
    with pytest.raises(IntegrityError), transaction.atomic():
        StatementLine.objects.filter(pk=line.pk).update(amount=Decimal("0.01"))
    with pytest.raises(IntegrityError), transaction.atomic():
        StatementLine.objects.filter(pk=line.pk).delete()
    with pytest.raises(IntegrityError), transaction.atomic():
        Statement.objects.filter(pk=line.statement_id).delete()
    line.refresh_from_db()
    assert line.amount > Decimal("0.01")


def test_recomputing_a_closed_period_gives_bit_identical_lines(april):
    services.close_period(period=APRIL, now=MAY + timedelta(hours=48))
    assert services.recompute_closed(period=APRIL, now=MAY + timedelta(days=20)) == {}
    # A change of usage shows up as a difference (the comparison can fail).
    run(lease(april, april.alpha, tier="burst"), start=at(2026, 4, 20), hours=1)
    assert set(services.recompute_closed(period=APRIL, now=MAY + timedelta(days=20))) == {
        april.alpha.pk
    }


def test_the_periodic_task_closes_after_the_grace_only(april, settings):
    settings.PORTAL_STATEMENT_GRACE_HOURS = 48
    assert services.close_due_periods(now=MAY + timedelta(hours=47)) == 0
    assert not Statement.objects.exists()
    assert services.close_due_periods(now=MAY + timedelta(hours=48)) == 3
    assert services.close_due_periods(now=MAY + timedelta(hours=49)) == 0


def test_the_run_that_ended_in_may_bills_the_rest_in_may(april):
    services.close_period(period=APRIL, now=MAY + timedelta(hours=48))
    may = draft_statement(project_id=april.gamma.pk, period=MAY, now=MAY + timedelta(hours=2))
    assert may.total == Decimal("5.00")


def test_a_manager_approves_a_closed_statement(april):
    services.close_period(period=APRIL, now=MAY + timedelta(hours=48))
    statement = Statement.objects.get(project=april.alpha)
    with pytest.raises(NotPermitted):
        services.approve_statement(statement_id=statement.pk, actor=april.alice)
    services.approve_statement(statement_id=statement.pk, actor=april.alpha_manager)
    statement.refresh_from_db()
    assert statement.status == "approved"
    assert statement.decided_by == april.alpha_manager
    assert AuditEvent.objects.filter(verb="statement.approve").count() == 1
    with pytest.raises(InvalidTransition):
        services.approve_statement(statement_id=statement.pk, actor=april.alpha_manager)


def test_a_draft_cannot_be_approved(april):
    statement = Statement.objects.create(project=april.alpha, period=MAY.date())
    with pytest.raises(InvalidTransition):
        services.approve_statement(statement_id=statement.pk, actor=april.alpha_manager)


def test_a_dispute_is_answered_with_a_credit_in_the_open_period(april):
    services.close_period(period=APRIL, now=MAY + timedelta(hours=48))
    line = StatementLine.objects.get(statement__project=april.alpha, kind="usage")
    dispute = services.dispute_line(
        line_id=line.pk, actor=april.alpha_manager, comment="We never ran 200 h of burst."
    )
    assert Statement.objects.get(project=april.alpha).status == "disputed"
    assert Notification.objects.filter(user=april.admin).exists()
    with pytest.raises(InvalidTransition):
        services.approve_statement(statement_id=line.statement_id, actor=april.alpha_manager)
    now = at(2026, 5, 10, 12)
    services.answer_dispute(
        dispute_id=dispute.pk,
        actor=april.admin,
        answer="40 h were a stuck instance; credited.",
        kind="credit",
        amount="100.00",
        now=now,
    )
    dispute.refresh_from_db()
    assert dispute.status == LineDispute.Status.ANSWERED
    assert dispute.correction.amount == Decimal("-100.00")
    assert dispute.correction.statement.period == MAY.date()
    assert dispute.correction.locked is False
    # The closed line itself is unchanged; April is closed again, May shows the credit.
    line.refresh_from_db()
    assert line.amount == Decimal("500.00")
    assert Statement.objects.get(project=april.alpha, period=APRIL.date()).status == "closed"
    may = draft_statement(project_id=april.alpha.pk, period=MAY, now=now)
    assert [entry.kind for entry in may.lines][-1] == "credit"
    assert Notification.objects.filter(user=april.alpha_manager).count() >= 2
    verbs = set(AuditEvent.objects.values_list("verb", flat=True))
    assert {"statement.dispute", "statement.credit", "statement.dispute_answer"} <= verbs


def test_only_admins_answer_and_only_managers_dispute(april):
    services.close_period(period=APRIL, now=MAY + timedelta(hours=48))
    line = StatementLine.objects.filter(statement__project=april.alpha).first()
    with pytest.raises(NotPermitted):
        services.dispute_line(line_id=line.pk, actor=april.alice, comment="no")
    with pytest.raises(NotPermitted):
        services.dispute_line(line_id=line.pk, actor=april.outsider, comment="no")
    dispute = services.dispute_line(line_id=line.pk, actor=april.alpha_manager, comment="why?")
    with pytest.raises(NotPermitted):
        services.answer_dispute(dispute_id=dispute.pk, actor=april.alpha_manager, answer="ok")


def test_the_correction_is_closed_with_its_own_period(april):
    services.close_period(period=APRIL, now=MAY + timedelta(hours=48))
    services.add_correction(
        project=april.beta,
        actor=april.admin,
        kind="adjustment",
        amount="12.34",
        description="Support hours",
        now=at(2026, 5, 3),
    )
    services.close_period(period=MAY, now=at(2026, 6, 3))
    may = Statement.objects.get(project=april.beta, period=MAY.date())
    assert may.lines.filter(kind="adjustment", locked=True).count() == 1
    assert may.total == Decimal("3600.00") + Decimal("12.34")
