"""Reconciliation with the provider's bill: importing a month's bill, looking at what it
flags, and correcting a difference with an adjustment line in the open period.

An import reads the whole file before it writes anything: a file that cannot be read
leaves no row behind. Nothing of a closed statement is ever touched here; a correction is
``billing.services.add_correction``'s adjustment line in the open month (P2).
"""

from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from typing import IO, Any

from django.conf import settings
from django.db import transaction
from django.db.models import Count, Q, QuerySet, Sum
from django.utils import timezone
from django.utils.translation import gettext as _

from billing import services
from billing.models import Statement, StatementLine
from billing.money import quantize
from billing.periods import period_end, period_start
from billing.reconcile_match import build_items
from billing.reconcile_models import CostImport, CostImportItem
from billing.reconcile_parse import Bill, BillFileError, read_csv, read_parquet
from portal import access, audit
from portal.errors import Conflict, InvalidInput, InvalidTransition, NotPermitted
from portal.models import Project
from portal.text import COMMENT_LENGTH, plain_text
from rental.models import ProviderAccount

SOURCE = "web"
FILE_NAME_LENGTH = 200


def threshold() -> Decimal:
    return Decimal(settings.PORTAL_RECONCILE_THRESHOLD_PERCENT)


def _require_finance(actor: Any) -> None:
    if not access.sees_everything(actor):
        raise NotPermitted(_("Only finance and admins import and review the provider's bill."))


def read_bill(file: IO[bytes], *, fmt: str, period: date) -> Bill:
    """The file read as a bill of ``fmt``, or InvalidInput on ``file`` naming the line."""
    try:
        if fmt == CostImport.Format.CUR_PARQUET:
            return read_parquet(file, period=period, currency=settings.PORTAL_CURRENCY)
        if fmt in (CostImport.Format.CUR_CSV, CostImport.Format.SIMPLE_CSV):
            return read_csv(
                file,
                period=period,
                currency=settings.PORTAL_CURRENCY,
                cur=fmt == CostImport.Format.CUR_CSV,
            )
    except BillFileError as invalid:
        raise InvalidInput(str(invalid), field="file", code="bad_bill_file") from None
    raise InvalidInput(_("Choose the file's format."), field="format")


def import_bill(
    *,
    actor: Any,
    file: IO[bytes],
    file_name: str,
    fmt: str,
    period: date | datetime,
    account: ProviderAccount | None,
    now: datetime | None = None,
    source: str = SOURCE,
) -> CostImport:
    """Read a month's bill, match it to the portal's instances and keep the result; the
    import replaces an earlier one of the same account and month (kept, marked replaced)."""
    _require_finance(actor)
    now = now or timezone.now()
    start = period_start(period)
    if start >= now:
        raise InvalidInput(_("That month has not begun."), field="period")
    bill = read_bill(file, fmt=fmt, period=start.date())
    limit = threshold()
    items = build_items(
        bill,
        account_id=account.pk if account else None,
        start=start,
        now=min(now, period_end(start)),
        threshold=limit,
    )
    flagged = sum(1 for item in items if item.flagged)
    with transaction.atomic():
        CostImport.objects.filter(period=start.date(), account=account).exclude(
            status=CostImport.Status.SUPERSEDED
        ).update(status=CostImport.Status.SUPERSEDED)
        record = CostImport.objects.create(
            account=account,
            period=start.date(),
            file_name=(file_name or "bill")[:FILE_NAME_LENGTH],
            format=fmt,
            imported_by=actor,
            imported_at=now,
            line_count=bill.line_count,
            instance_line_count=bill.instance_line_count,
            currency=bill.currency,
            provider_total=bill.instance_total,
            other_total=bill.other_total,
            portal_total=sum((item.portal_cost for item in items), Decimal(0)),
            threshold_percent=limit,
            flagged_count=flagged,
            status=CostImport.Status.REVIEW if flagged else CostImport.Status.CLEAR,
        )
        for item in items:
            item.cost_import = record
        CostImportItem.objects.bulk_create(items, batch_size=2000)
        audit.record(
            actor=actor,
            verb="bill.import",
            obj=record,
            source=source,
            after={
                "period": f"{start:%Y-%m}",
                "file": record.file_name,
                "lines": bill.line_count,
                "provider": quantize(record.provider_total),
                "portal": quantize(record.portal_total),
                "flagged": flagged,
            },
            at=now,
        )
    return record


@transaction.atomic
def acknowledge(
    *, actor: Any, import_id: int, note: str, now: datetime | None = None, source: str = SOURCE
) -> CostImport:
    """Finance or an admin says the flagged differences were looked at (with a note); the
    month may then close."""
    _require_finance(actor)
    record = CostImport.objects.select_for_update().get(pk=import_id)
    if record.status != CostImport.Status.REVIEW:
        raise InvalidTransition(
            _("Only an import with differences to look at can be acknowledged."),
            code="not_under_review",
        )
    note = plain_text(note, field="note", max_length=COMMENT_LENGTH, label=_("Note"))
    if not note:
        raise InvalidInput(_("Say what was found and what is done about it."), field="note")
    record.status = CostImport.Status.ACKNOWLEDGED
    record.acknowledged_by = actor
    record.acknowledged_at = now or timezone.now()
    record.acknowledgement = note
    record.save(update_fields=["status", "acknowledged_by", "acknowledged_at", "acknowledgement"])
    audit.record(
        actor=actor,
        verb="bill.acknowledge",
        obj=record,
        source=source,
        after={"note": note, "flagged": record.flagged_count},
        at=record.acknowledged_at,
    )
    return record


@transaction.atomic
def correct_item(
    *,
    actor: Any,
    item_id: int,
    amount: Any,
    description: str = "",
    now: datetime | None = None,
    source: str = SOURCE,
) -> StatementLine:
    """An adjustment line for an item's project in the open period, as a dispute's answer
    makes (an admin's correction, P2); once per item. Nothing closed changes."""
    if not access.is_admin(actor):
        raise NotPermitted(_("Only an admin corrects a statement."))
    item = (
        CostImportItem.objects.select_for_update(of=("self",))
        .select_related("cost_import", "project")
        .get(pk=item_id)
    )
    if item.correction_id is not None:
        raise Conflict(_("This item was corrected already."), code="corrected", field="amount")
    if item.project is None:
        raise Conflict(
            _("No project to charge: the portal does not know whose this resource is."),
            code="no_project",
            field="amount",
        )
    if item.cost_import.currency != settings.PORTAL_CURRENCY:
        raise Conflict(
            _("The bill is in %(currency)s; statements are in %(billing)s.")
            % {"currency": item.cost_import.currency, "billing": settings.PORTAL_CURRENCY},
            code="other_currency",
            field="amount",
        )
    text = (description or "").strip() or _(
        "Provider's bill %(period)s, %(resource)s: charged %(provider)s, portal %(portal)s"
    ) % {
        "period": f"{item.cost_import.period:%Y-%m}",
        "resource": item.resource_id,
        "provider": quantize(item.provider_cost),
        "portal": quantize(item.portal_cost),
    }
    line = services.add_correction(
        project=item.project,
        actor=actor,
        kind=StatementLine.Kind.ADJUSTMENT,
        amount=amount,
        description=text,
        now=now,
        source=source,
    )
    line.references = {"cost_import_item": item.pk, "cost_import": item.cost_import_id}
    line.save(update_fields=["references"])
    item.correction = line
    item.save(update_fields=["correction"])
    return line


def suggested_correction(item: CostImportItem) -> Decimal:
    """What the project was under- (positive) or over-charged, to the cent."""
    return quantize(item.provider_cost - item.portal_cost)


# Reads for the pages.


def imports_of(period: date) -> QuerySet[CostImport]:
    return CostImport.objects.filter(period=period).select_related(
        "account", "imported_by", "acknowledged_by"
    )


def holding_imports(period: date) -> list[CostImport]:
    """The month's imports whose flags nobody has looked at yet (they hold the close)."""
    return list(
        CostImport.objects.filter(period=period, status=CostImport.Status.REVIEW).order_by("pk")
    )


@dataclass(frozen=True)
class Rollup:
    label: str
    key: int | None
    portal: Decimal
    provider: Decimal
    items: int
    flagged: int
    threshold: Decimal

    @property
    def difference(self) -> Decimal:
        return self.provider - self.portal

    @property
    def beyond(self) -> bool:
        """Whether the difference is beyond the threshold (RC3, as for an instance)."""
        base = max(abs(self.portal), abs(self.provider))
        return abs(self.difference) * 100 > self.threshold * base if base else False

    @property
    def percent(self) -> Decimal | None:
        base = max(abs(self.portal), abs(self.provider))
        return (self.difference * 100 / base).quantize(Decimal("0.01")) if base else None


def _rollup(record: CostImport, field: str, names: dict[int, str], unknown: str) -> list[Rollup]:
    rows = (
        record.items.order_by()
        .values(field)
        .annotate(
            portal=Sum("portal_cost"),
            provider=Sum("provider_cost"),
            count=Count("id"),
            flags=Count("id", filter=Q(flagged=True)),
        )
    )
    out = [
        Rollup(
            names.get(row[field], unknown) if row[field] else unknown,
            row[field],
            row["portal"],
            row["provider"],
            row["count"],
            row["flags"],
            record.threshold_percent,
        )
        for row in rows
    ]
    return sorted(out, key=lambda rollup: (not rollup.beyond, rollup.label))


def rollups(record: CostImport) -> tuple[list[Rollup], list[Rollup]]:
    """Per project and per GPU model: the portal's and the provider's cost (two queries,
    plus one for the names)."""
    projects = dict(Project.objects.values_list("pk", "name"))
    # GPU model names: read with the rollup's keys.
    models = dict(
        record.items.exclude(gpu_model=None)
        .values_list("gpu_model_id", "gpu_model__name")
        .distinct()
        .order_by()
    )
    return (
        _rollup(record, "project_id", projects, _("No project known")),
        _rollup(record, "gpu_model_id", models, _("Unknown GPU model")),
    )


def items_of(record: CostImport, *, flagged_only: bool) -> QuerySet[CostImportItem]:
    items = record.items.select_related(
        "project", "gpu_model", "explaining_offering__gpu_model", "correction"
    ).order_by("-flagged", "resource_id", "pk")
    return items.filter(flagged=True) if flagged_only else items


def latest_import(period: date) -> CostImport | None:
    return (
        CostImport.objects.filter(period=period)
        .exclude(status=CostImport.Status.SUPERSEDED)
        .order_by("-imported_at", "-pk")
        .first()
    )


def closed_period(period: date) -> bool:
    """Whether the month has closed statements (an import never changes them)."""
    return Statement.objects.filter(period=period).exclude(status=Statement.Status.DRAFT).exists()
