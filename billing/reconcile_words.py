"""What an item of a reconciled bill means, in sentences a finance person can act on."""

from decimal import Decimal

from django.utils.translation import gettext as _

from billing.money import quantize
from billing.reconcile_models import CostImport, CostImportItem

Finding = CostImportItem.Finding
HOURS = Decimal("0.01")


def _cents(value: str | Decimal) -> Decimal:
    return quantize(Decimal(value))


def _hours(value: str | Decimal) -> Decimal:
    return Decimal(value).quantize(HOURS)


def _market(market: str) -> str:
    return _("spot") if market == "spot" else _("on-demand")


def _offering(item: CostImportItem) -> str:
    offering = item.explaining_offering
    return str(offering) if offering is not None else "—"


def _price(item: CostImportItem, price: dict) -> str:
    figures = {
        "charged": price["charged"],
        "captured": price["captured"],
        "hours": _hours(price["hours"]),
        "offering": _offering(item),
        "catalog": price.get("catalog", ""),
        "market": _market(price.get("catalog_market", "")),
    }
    explained = price.get("explained")
    if explained == "own_now":
        return (
            _(
                "Charged %(charged)s an hour for %(hours)s hours; the rate captured at launch "
                "was %(captured)s. The catalog price of %(offering)s is now %(catalog)s "
                "(%(market)s): the price changed after the launch."
            )
            % figures
        )
    if explained == "other_offering":
        return (
            _(
                "Charged %(charged)s an hour for %(hours)s hours: the catalog price of "
                "%(offering)s (%(market)s), not the %(captured)s captured at launch from the "
                "offering it was launched as."
            )
            % figures
        )
    return (
        _(
            "Charged %(charged)s an hour for %(hours)s hours; the rate captured at launch was "
            "%(captured)s. The catalog price of %(offering)s (%(market)s, %(catalog)s an hour) "
            "is not what the provider charges: correct it in the catalog."
        )
        % figures
    )


def _days(rows: list, missing: bool) -> list[str]:
    said = []
    for day, hours, cost in rows:
        figures = {"day": day, "hours": _hours(hours), "cost": _cents(cost)}
        if missing:
            said.append(
                _(
                    "The bill has no line for %(day)s, when the portal metered %(hours)s "
                    "hours (%(cost)s)."
                )
                % figures
            )
        else:
            said.append(
                _(
                    "The bill charges %(day)s (%(hours)s hours, %(cost)s), a day the portal "
                    "did not meter."
                )
                % figures
            )
    return said


def _unknown(item: CostImportItem) -> list[str]:
    details = item.details
    tags = details.get("tags", {})
    said = [
        _("The portal never knew this instance: %(hours)s hours of %(type)s charged %(cost)s.")
        % {
            "hours": _hours(item.provider_hours),
            "type": item.instance_type or "—",
            "cost": _cents(item.provider_cost),
        }
    ]
    if tags.get("installation") or tags.get("project"):
        said.append(
            _(
                "It carries the portal's tags (project “%(project)s”): launched for the "
                "portal but never recorded, or recorded under another account."
            )
            % {"project": tags.get("project", "—")}
        )
    else:
        said.append(_("It carries no tag of the portal: launched outside the portal."))
    if item.explaining_offering is not None and details.get("catalog"):
        said.append(
            _(
                "The catalog's %(offering)s costs %(catalog)s an hour (%(market)s); the "
                "provider charged %(charged)s."
            )
            % {
                "offering": _offering(item),
                "catalog": details["catalog"],
                "market": _market(details.get("catalog_market", "")),
                "charged": details.get("charged", "—"),
            }
        )
    return said


def explain(item: CostImportItem, record: CostImport) -> list[str]:
    """The item's findings in words, then its difference."""
    details = item.details
    said: list[str] = []
    if item.finding == Finding.UNKNOWN:
        said += _unknown(item)
    elif item.finding == Finding.PORTAL_ONLY:
        said.append(
            _("The portal metered %(hours)s hours (%(cost)s) that are not on the bill.")
            % {"hours": _hours(item.portal_hours), "cost": _cents(item.portal_cost)}
        )
    elif item.finding == Finding.CURRENCY:
        said.append(
            _("The portal's rate is in %(portal)s and the bill in %(bill)s: not compared.")
            % {"portal": details.get("portal_currency"), "bill": details.get("bill_currency")}
        )
    else:
        if "price" in details:
            said.append(_price(item, details["price"]))
        said += _days(details.get("missing_days", []), missing=True)
        said += _days(details.get("extra_days", []), missing=False)
        if item.finding == Finding.HOURS:
            said.append(
                _("The bill charges %(provider)s hours; the portal metered %(portal)s.")
                % {"provider": _hours(item.provider_hours), "portal": _hours(item.portal_hours)}
            )
    base = max(abs(item.portal_cost), abs(item.provider_cost))
    figures = {
        "difference": _cents(item.difference),
        "percent": (item.difference * 100 / base).quantize(HOURS) if base else Decimal(0),
        "threshold": record.threshold_percent,
    }
    if item.flagged:
        said.append(
            _("Difference %(difference)s (%(percent)s %%), beyond the %(threshold)s %% threshold.")
            % figures
        )
    elif item.finding == Finding.MATCHES:
        said.append(
            _("Matches: difference %(difference)s (%(percent)s %%), within %(threshold)s %%.")
            % figures
        )
    else:
        said.append(
            _("Difference %(difference)s (%(percent)s %%), within %(threshold)s %%.") % figures
        )
    return said
