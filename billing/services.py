"""State changes of the money side: closing a period, sign-off and disputes, corrections,
budgets and their alerts. One transaction each, an audit event each, mail on commit."""

import logging
from datetime import date, datetime, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from billing import rollups, spend
from billing.apportion import Line
from billing.models import LineDispute, Statement, StatementLine
from billing.money import AMOUNT_LIMIT, CENT, RATE_PLACES
from billing.periods import period_end, period_start
from billing.reconcile_gate import hold_reason
from billing.selectors import manual_lines
from billing.statements import PeriodLines, compute_period
from portal import access, audit, notifications
from portal.errors import Conflict, InvalidInput, InvalidTransition, NotPermitted
from portal.models import FINANCE_GROUP, AuditEvent, Membership, Project
from portal.phrases import Joined, Phrase
from portal.text import COMMENT_LENGTH, plain_text

log = logging.getLogger(__name__)

SOURCE = "web"


def _line_row(statement: Statement, line: Line) -> StatementLine:
    return StatementLine(
        statement=statement,
        kind=line.kind,
        gpu_model_id=line.gpu_model_id,
        market=line.market,
        tier=line.tier,
        quantity=line.quantity,
        unit_price=line.unit_price.quantize(RATE_PLACES),
        amount=line.amount.quantize(CENT),
        description=line.description[:300],
        references=line.references,
        locked=True,
    )


def line_signature(line: Any) -> tuple:
    """What must be bit-identical between a closed line and its recomputation."""
    return (
        line.kind,
        line.gpu_model_id,
        line.market,
        line.tier,
        str(line.quantity),
        str(line.unit_price),
        str(line.amount),
        line.description,
        line.references,
    )


def _period_label(period: date | datetime) -> str:
    return f"{period:%Y-%m}"


@transaction.atomic
def close_period(*, period: date | datetime, actor: Any = None, now: datetime | None = None) -> int:
    """Close a month (P1): write every project's lines once, lock them, fix the totals.

    Idempotent: a statement already closed is left as it is. Every active project gets
    a statement (zero when it used nothing); overhead no project pays goes on the
    platform's statement. Returns the number of statements closed now.
    """
    now = now or timezone.now()
    start = period_start(period)
    if now < period_end(start):
        raise InvalidTransition(
            _("%(period)s is still open; it closes after it ends.")
            % {"period": _period_label(start)},
            code="period_open",
        )
    held = hold_reason(start)
    if held:
        raise InvalidTransition(held, code="bill_not_looked_at")
    computed = compute_period(period=start, now=now, from_usage=True)
    _check_rollups(computed, now=now)
    project_ids = set(Project.objects.filter(is_active=True).values_list("pk", flat=True))
    project_ids |= {p for p in computed.lines if p is not None}
    project_ids |= set(
        Statement.objects.filter(period=start.date(), project__isnull=False).values_list(
            "project_id", flat=True
        )
    )
    targets: list[int | None] = sorted(project_ids)
    if computed.for_project(None):
        targets.append(None)
    existing = {
        statement.project_id: statement
        for statement in Statement.objects.select_for_update()
        .filter(period=start.date())
        .order_by("pk")
    }
    manual = manual_lines(project_ids=None, period=start)
    missing = [p for p in targets if p not in existing]
    # Another close of the same month at the same moment (a second beat, a redelivered
    # task) may be inserting these too: the insert waits for it and skips its rows, and
    # they are read back, locked, with what it made of them (closed: left as they are).
    Statement.objects.bulk_create(
        [
            Statement(project_id=p, period=start.date(), currency=settings.PORTAL_CURRENCY)
            for p in missing
        ],
        ignore_conflicts=True,
    )
    if missing:
        existing.update(
            {
                statement.project_id: statement
                for statement in Statement.objects.select_for_update()
                .filter(period=start.date())
                .order_by("pk")
                if statement.project_id in missing
            }
        )
    slugs = dict(Project.objects.filter(pk__in=project_ids).values_list("pk", "slug"))
    managers: dict[int, list] = {}
    for membership in Membership.objects.filter(
        project_id__in=project_ids, role=Membership.Role.MANAGER, user__is_active=True
    ).select_related("user"):
        managers.setdefault(membership.project_id, []).append(membership.user)
    closing: list[Statement] = []
    rows: list[StatementLine] = []
    events: list[AuditEvent] = []
    notes: list[tuple[list, notifications.Message]] = []
    for project_id in targets:
        statement = existing[project_id]
        if statement.status != Statement.Status.DRAFT:
            continue
        lines = computed.for_project(project_id)
        rows += [_line_row(statement, line) for line in lines]
        extra = manual.get(project_id, []) if project_id is not None else []
        statement.total = sum((line.amount for line in lines), Decimal("0.00")) + sum(
            (line.amount for line in extra), Decimal("0.00")
        )
        statement.status = Statement.Status.CLOSED
        statement.closed_at = now
        closing.append(statement)
        events.append(
            AuditEvent(
                at=now,
                actor=actor if getattr(actor, "is_authenticated", False) else None,
                verb="statement.close",
                object_type=Statement._meta.label_lower,
                object_id=str(statement.pk),
                project_id=project_id,
                after={
                    "period": _period_label(start),
                    "total": str(statement.total),
                    "lines": len(lines),
                },
                source="worker" if actor is None else SOURCE,
            )
        )
        link = (
            reverse("billing:statement", args=[slugs[project_id]])
            + f"?period={_period_label(start)}"
            if project_id is not None
            else ""
        )
        if project_id is not None and managers.get(project_id):
            notes.append(
                (
                    managers[project_id],
                    notifications.Message(
                        subject=Phrase(
                            gettext_noop("Statement for %(period)s is ready for sign-off"),
                            period=_period_label(start),
                        ),
                        body=Phrase(gettext_noop("Total: %(total)s"), total=statement.total),
                        link=link,
                        event=notifications.Event.STATEMENT_READY,
                        project=project_id,
                    ),
                )
            )
    # One insert each for the audit trail and the notifications, and the mail after commit:
    # a month of 300 projects closes in bulk, not 300 round trips.
    AuditEvent.objects.bulk_create(events, batch_size=500)
    notifications.notify_many(notes)
    Statement.objects.bulk_update(closing, ["status", "total", "closed_at"], batch_size=500)
    StatementLine.objects.bulk_create(rows, batch_size=2000)
    StatementLine.objects.filter(
        statement__period=start.date(), statement__status=Statement.Status.CLOSED, locked=False
    ).update(locked=True)
    return len(closing)


def recompute_closed(*, period: date | datetime, now: datetime | None = None) -> dict:
    """Recompute a closed month from the same usage and compare it line by line with what
    was written. Returns {project id: (stored signatures, recomputed signatures)} for the
    statements that differ; empty means bit-identical."""
    start = period_start(period)
    computed = compute_period(period=start, now=now or timezone.now())
    differences = {}
    for statement in Statement.objects.filter(period=start.date()).exclude(
        status=Statement.Status.DRAFT
    ):
        stored = [
            line_signature(line)
            for line in statement.lines.exclude(kind__in=("adjustment", "credit")).order_by("id")
        ]
        fresh = [
            line_signature(_line_row(statement, line))
            for line in computed.for_project(statement.project_id)
        ]
        if stored != fresh:
            differences[statement.project_id] = (stored, fresh)
    return differences


def closes_at(period: date | datetime) -> datetime:
    """When a month's statements close by themselves (P1): its end plus the site's grace
    (``PORTAL_STATEMENT_GRACE_HOURS``). The hourly closing task closes it at its first run
    from then on; there is no other way to close a month."""
    return period_end(period_start(period)) + timedelta(hours=settings.PORTAL_STATEMENT_GRACE_HOURS)


def _check_rollups(computed: PeriodLines, *, now: datetime) -> None:
    """A closing month's lines come from its usage runs; the rollups its draft statements
    were read from must give the very same lines. A difference is a defect, logged in full
    (the closed lines are the runs', whatever the rollups say). A month with nothing rolled
    up has nothing to check (its drafts were read from the runs too)."""
    if not rollups.serve(start=computed.start, now=now):
        return
    drafted = compute_period(period=computed.start, now=now)
    if drafted.lines != computed.lines or drafted.pools != computed.pools:
        log.error(
            "usage rollups of %s differ from its usage runs: %s lines from the runs, "
            "%s from the rollups; total %s against %s",
            computed.start.strftime("%Y-%m"),
            sum(len(lines) for lines in computed.lines.values()),
            sum(len(lines) for lines in drafted.lines.values()),
            computed.total(),
            drafted.total(),
        )


def close_due_periods(*, now: datetime | None = None) -> int:
    """The periodic task's work: close last month once its grace has passed."""
    now = now or timezone.now()
    previous = period_start(period_start(now) - timedelta(days=1))
    if now < closes_at(previous):
        return 0
    rollups.roll_up_usage()
    statements = Statement.objects.filter(period=previous.date())
    already_closed = statements.exclude(status=Statement.Status.DRAFT).exists()
    if already_closed and not statements.filter(status=Statement.Status.DRAFT).exists():
        return 0  # closed on an earlier run; closing is idempotent but not free
    held = hold_reason(previous)
    if held:
        log.warning("the month's close waits: %s", held)
        return 0
    return close_period(period=previous, now=now)


# Sign-off and disputes (P2).


@transaction.atomic
def approve_statement(
    *, statement_id: int, actor: Any, now: datetime | None = None, source: str = SOURCE
) -> Statement:
    now = now or timezone.now()
    statement = (
        Statement.objects.select_for_update(of=("self",))
        .select_related("project")
        .get(pk=statement_id)
    )
    if statement.project is None or not access.can_manage(actor, statement.project):
        raise NotPermitted(_("Only the project's manager signs off its statement."))
    if statement.status not in (Statement.Status.CLOSED, Statement.Status.DISPUTED):
        raise InvalidTransition(
            _("Only a closed statement can be signed off; this one is %(status)s.")
            % {"status": statement.get_status_display()},
            code="not_closed",
        )
    if LineDispute.objects.filter(
        line__statement=statement, status=LineDispute.Status.OPEN
    ).exists():
        raise InvalidTransition(
            _("A line of this statement is still disputed; wait for the answer."),
            code="open_dispute",
        )
    before = statement.status
    statement.status = Statement.Status.APPROVED
    statement.decided_by = actor
    statement.decided_at = now
    statement.save(update_fields=["status", "decided_by", "decided_at"])
    audit.record(
        actor=actor,
        verb="statement.approve",
        obj=statement,
        project=statement.project,
        source=source,
        before={"status": before},
        after={"status": statement.status},
        at=now,
    )
    notifications.notify(
        [*notifications.admins(), *_finance_users()],
        subject=Phrase(
            gettext_noop("%(project)s signed off its %(period)s statement"),
            project=statement.project.name,
            period=_period_label(statement.period),
        ),
        link=reverse("billing:finance") + f"?period={_period_label(statement.period)}",
    )
    return statement


@transaction.atomic
def dispute_line(
    *, line_id: int, actor: Any, comment: str, now: datetime | None = None, source: str = SOURCE
) -> LineDispute:
    now = now or timezone.now()
    comment = plain_text(comment, field="comment", max_length=COMMENT_LENGTH, label=_("Comment"))
    if not comment:
        raise InvalidInput(_("Say what is wrong with the line."), field="comment")
    line = StatementLine.objects.select_related("statement__project").get(pk=line_id)
    statement = Statement.objects.select_for_update().get(pk=line.statement_id)
    project = line.statement.project
    if project is None or not access.can_manage(actor, project):
        raise NotPermitted(_("Only the project's manager disputes its statement."))
    if statement.status not in (Statement.Status.CLOSED, Statement.Status.DISPUTED):
        raise InvalidTransition(
            _("Only a line of a closed, not yet signed-off statement can be disputed."),
            code="not_closed",
        )
    dispute = LineDispute.objects.create(line=line, comment=comment, raised_by=actor, raised_at=now)
    Statement.objects.filter(pk=statement.pk).update(status=Statement.Status.DISPUTED)
    audit.record(
        actor=actor,
        verb="statement.dispute",
        obj=dispute,
        project=project,
        source=source,
        after={"line": line.pk, "amount": line.amount, "comment": comment},
        at=now,
    )
    notifications.notify(
        notifications.admins(),
        subject=Phrase(
            gettext_noop("%(project)s disputes a line of its %(period)s statement"),
            project=project.name,
            period=_period_label(statement.period),
        ),
        body=Joined([f"{line.description}: {line.amount}", comment], "\n"),
        link=reverse("billing:statement", args=[project.slug])
        + f"?period={_period_label(statement.period)}",
    )
    return dispute


def _open_statement(project: Project, now: datetime) -> Statement:
    statement, _created = Statement.objects.get_or_create(
        project=project,
        period=period_start(now).date(),
        defaults={"currency": settings.PORTAL_CURRENCY},
    )
    if statement.status != Statement.Status.DRAFT:
        raise InvalidTransition(_("The open period is already closed."), code="period_closed")
    return statement


def parse_amount(value: Any, *, field: str = "amount", label: object = "") -> Decimal:
    """``value`` as an amount in whole cents below 10^12 (the amount columns' 14 digits)
    either side of zero, or InvalidInput on ``field``; the message starts with ``label``
    when given, for a page that shows it away from the field."""

    def refused(message: str) -> InvalidInput:
        if label:
            message = _("%(field)s: %(problem)s") % {"field": label, "problem": message}
        return InvalidInput(message, field=field)

    try:
        amount = Decimal(str(value).strip())
    except (InvalidOperation, ValueError):
        raise refused(_("Enter an amount such as 12.50.")) from None
    if not amount.is_finite() or abs(amount) >= AMOUNT_LIMIT:
        raise refused(_("Enter an amount below 1,000,000,000,000, such as 12.50."))
    if amount.quantize(Decimal("0.01")) != amount:
        raise refused(_("Enter an amount in whole cents, such as 12.50."))
    return amount


@transaction.atomic
def add_correction(
    *,
    project: Project,
    actor: Any,
    kind: str,
    amount: Any,
    description: str,
    dispute_id: int | None = None,
    now: datetime | None = None,
    source: str = SOURCE,
) -> StatementLine:
    """An admin's correction (P2): an adjustment (any sign) or a credit (a positive sum
    given back, booked negative) on the project's statement for the open period."""
    _require_admin(actor)
    description = (description or "").strip()
    if not description:
        raise InvalidInput(_("Say why the correction is made."), field="description")
    return _correct(
        project=project,
        actor=actor,
        kind=kind,
        amount=amount,
        description=description,
        dispute_id=dispute_id,
        now=now,
        source=source,
    )


def _correct(
    *,
    project: Project,
    actor: Any,
    kind: str,
    amount: Any,
    description: str,
    dispute_id: int | None,
    now: datetime | None,
    source: str,
) -> StatementLine:
    """``add_correction`` with its description given (a dispute's answer writes its own)."""
    now = now or timezone.now()
    _require_admin(actor)
    if kind not in ("adjustment", "credit"):
        raise InvalidInput(_("A correction is an adjustment or a credit."), field="kind")
    if amount is None or not str(amount).strip():
        # Optional beside an answer alone; needed with a kind: a rule over two fields.
        raise Conflict(
            _("Amount: give the correction's amount."), code="amount_required", field="amount"
        )
    value = parse_amount(amount, label=_("Amount"))
    if kind == "credit":
        if value <= 0:
            raise Conflict(
                _("A credit is a positive amount given back."),
                code="credit_not_positive",
                field="amount",
            )
        value = -value
    statement = _open_statement(project, now)
    line = StatementLine.objects.create(
        statement=statement,
        kind=kind,
        amount=value,
        description=description[:300],
        references={"dispute_id": dispute_id} if dispute_id else {},
        created_by=actor,
        created_at=now,
    )
    spend.add_manual_line(project_id=project.pk, period=now, amount=value)
    audit.record(
        actor=actor,
        verb=f"statement.{kind}",
        obj=line,
        project=project,
        source=source,
        after={"amount": value, "description": description, "period": _period_label(now)},
        at=now,
    )
    return line


@transaction.atomic
def answer_dispute(
    *,
    dispute_id: int,
    actor: Any,
    answer: str,
    kind: str = "",
    amount: Any = None,
    now: datetime | None = None,
    source: str = SOURCE,
) -> LineDispute:
    """An admin answers a dispute, with an adjustment or credit line in the open period
    when money changes hands, or with an explanation alone."""
    now = now or timezone.now()
    _require_admin(actor)
    dispute = (
        LineDispute.objects.select_for_update(of=("self",))
        .select_related("line__statement__project")
        .get(pk=dispute_id)
    )
    if dispute.status != LineDispute.Status.OPEN:
        raise InvalidTransition(_("This dispute is already answered."), code="answered")
    answer = plain_text(answer, field="answer", max_length=COMMENT_LENGTH, label=_("Answer"))
    if not answer:
        raise InvalidInput(_("Write the answer the manager will read."), field="answer")
    project = dispute.line.statement.project
    correction = None
    if kind:
        correction = _correct(
            project=project,
            actor=actor,
            kind=kind,
            amount=amount,
            description=_("Correction of “%(line)s” (%(period)s): %(answer)s")
            % {
                "line": dispute.line.description[:120],
                "period": _period_label(dispute.line.statement.period),
                "answer": answer[:100],
            },
            dispute_id=dispute.pk,
            now=now,
            source=source,
        )
    dispute.status = LineDispute.Status.ANSWERED
    dispute.answer = answer
    dispute.answered_by = actor
    dispute.answered_at = now
    dispute.correction = correction
    dispute.save()
    statement = dispute.line.statement
    if not LineDispute.objects.filter(
        line__statement=statement, status=LineDispute.Status.OPEN
    ).exists():
        Statement.objects.filter(pk=statement.pk, status=Statement.Status.DISPUTED).update(
            status=Statement.Status.CLOSED
        )
    audit.record(
        actor=actor,
        verb="statement.dispute_answer",
        obj=dispute,
        project=project,
        source=source,
        after={"answer": answer, "correction": correction.amount if correction else None},
        at=now,
    )
    notifications.notify(
        [dispute.raised_by, *notifications.managers_of(project)],
        subject=Phrase(
            gettext_noop("Your dispute of a %(period)s line was answered"),
            period=_period_label(statement.period),
        ),
        body=answer,
        link=reverse("billing:statement", args=[project.slug])
        + f"?period={_period_label(statement.period)}",
    )
    return dispute


def _require_admin(actor: Any) -> None:
    if not access.is_admin(actor):
        raise NotPermitted(_("Only an admin corrects a statement."))


def _finance_users() -> list:
    return list(get_user_model().objects.filter(groups__name=FINANCE_GROUP, is_active=True))


# Budgets (BU1–BU3).
