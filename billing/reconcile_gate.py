"""Whether a month's close waits for its provider bill to be looked at.

A month whose imported bill has flagged differences nobody has acknowledged does not close:
the hourly close leaves it as it is (and says why in the log), and a close asked for by
hand is refused with the reason. Only the latest import of each account counts.
"""

from datetime import date, datetime

from django.utils.translation import gettext as _

from billing.models import Statement
from billing.reconcile_models import CostImport


def hold_reason(period: date | datetime) -> str:
    """Why the month cannot close yet, or "" when nothing holds it (nor once it is
    closed: an import of a closed month changes nothing of it)."""
    day = date(period.year, period.month, 1)
    waiting = list(
        CostImport.objects.filter(period=day, status=CostImport.Status.REVIEW)
        .order_by("pk")
        .values_list("file_name", "flagged_count")
    )
    if not waiting:
        return ""
    if Statement.objects.filter(period=day).exclude(status=Statement.Status.DRAFT).exists():
        return ""
    return _(
        "%(period)s waits for its provider bill to be looked at: %(files)s. "
        "Acknowledge the differences on the reconciliation page, then the month closes."
    ) % {
        "period": f"{day:%Y-%m}",
        "files": ", ".join(
            _("%(file)s (%(count)s flagged)") % {"file": name, "count": count}
            for name, count in waiting
        ),
    }
