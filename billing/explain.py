"""Explain: what a statement line counted and how, in sentences with the line's own figures,
in the reader's language, with links to the leases, reservations and volumes behind it.

One function per kind builds the sentences from the line's references (the figures it
was computed from, kept with a closed line) and, where a line stands for rows, from those
rows: usage runs for a usage line, storage intervals for a storage line, the reservation
for a reservation line, the dispute for a correction. No raw key, code, boolean or ISO
moment reaches the reader: moments read ``2026-11-01 09:00`` (UTC), hours to two places.
"""

from collections.abc import Callable
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.urls import reverse
from django.utils.html import conditional_escape, format_html_join
from django.utils.safestring import SafeString
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from billing import linewords
from billing.currency import billing_currency
from billing.explain_parts import (
    MAX_LEASE_LINKS,
    MAX_ROWS,
    Context,
    Explanation,
    RunRow,
    StorageRow,
    gpu_seconds_of,
    in_period,
    lease_link,
    link,
    market_and_tier,
    money_ref,
    refs_of,
    rounded_once,
    say,
    span_of,
)
from billing.explain_shares import committed_share, platform, shared_residual
from billing.linewords import (
    decimal_text,
    hours_of,
    month_label,
    number,
    percent,
    when,
)
from billing.models import LineDispute
from billing.periods import whole_seconds
from billing.selectors import Interval, StatementView, intervals
from billing.storage import MONTH_SECONDS, StorageItem, items
from portal.models import Project
from portal.templatetags.portal_tags import money, rate
from rental.models import Reservation, TerminationReason

# Usage.


def _run_rows(runs: list[Interval], context: Context) -> list[RunRow]:
    start, end = context.view.period, context.end
    rows = []
    for run in runs[:MAX_ROWS]:
        counted = whole_seconds(min(run.end or end, end) - max(run.start, start))
        reason = ""
        if run.end_reason:
            try:
                reason = str(TerminationReason(run.end_reason).label)
            except ValueError:
                reason = ""
        rows.append(
            RunRow(
                lease=lease_link(run.reservation_id),
                requester=run.requester,
                start=when(run.start),
                end=when(run.end) if run.end else _("still running"),
                ended=reason,
                gpus=run.gpu_count,
                hours=hours_of(run.billed_seconds),
                gpu_hours=hours_of(run.gpu_seconds),
                gpu_seconds=number(run.gpu_seconds),
                rate=rate(run.rate)
                if not run.currency or run.currency == billing_currency()
                else f"{run.currency} {linewords.price_text(run.rate)}",
                minimum=run.billed_seconds > max(counted, 0),
            )
        )
    return rows


def _usage_what(line: Any, runs: list[Interval], context: Context) -> SafeString:
    kind = market_and_tier(line)
    if len(runs) == 1:
        run = runs[0]
        start = max(run.start, context.view.period)
        end = min(run.end or context.end, context.end)
        return say(
            ngettext(
                "%(n)s × %(model)s, %(kind)s, from %(start)s to %(end)s UTC (lease %(lease)s, "
                "requested by %(who)s): %(hours)s h on %(n)s GPU = %(gpu_hours)s GPU-hours.",
                "%(n)s × %(model)s, %(kind)s, from %(start)s to %(end)s UTC (lease %(lease)s, "
                "requested by %(who)s): %(hours)s h × %(n)s GPUs = %(gpu_hours)s GPU-hours.",
                run.gpu_count,
            ),
            n=run.gpu_count,
            model=context.model,
            kind=kind,
            start=when(start),
            end=_("now (still running)")
            if run.end is None and context.view.is_draft
            else when(end),
            lease=lease_link(run.reservation_id),
            who=run.requester,
            hours=hours_of(run.billed_seconds),
            gpu_hours=hours_of(run.gpu_seconds),
        )
    leases = sorted({run.reservation_id for run in runs})
    shown = format_html_join(", ", "{}", ((lease_link(pk),) for pk in leases[:MAX_LEASE_LINKS]))
    if len(leases) > MAX_LEASE_LINKS:
        shown = say(
            _("%(leases)s and %(more)s more"), leases=shown, more=len(leases) - MAX_LEASE_LINKS
        )
    first = max(min(run.start for run in runs), context.view.period)
    last_end = max((run.end or context.end) for run in runs)
    return say(
        ngettext(
            "%(runs)s run of %(model)s, %(kind)s, between %(start)s and %(end)s UTC on "
            "lease %(leases)s: %(gpu_hours)s GPU-hours in all.",
            "%(runs)s runs of %(model)s, %(kind)s, between %(start)s and %(end)s UTC on "
            "leases %(leases)s: %(gpu_hours)s GPU-hours in all.",
            len(runs),
        ),
        runs=len(runs),
        model=context.model,
        kind=kind,
        start=when(first),
        end=when(min(last_end, context.end)),
        leases=shown,
        gpu_hours=hours_of(sum(run.gpu_seconds for run in runs)),
    )


def _usage_how(line: Any, context: Context) -> list[SafeString]:
    refs = refs_of(line)
    seconds = gpu_seconds_of(line)
    hours = hours_of(seconds)
    if line.tier == "reserved" and refs.get("covered") is True:
        return [
            say(
                _(
                    "They ran inside a reservation's window, which its own reservation line "
                    "charges whether used or not, so they cost nothing here: %(amount)s."
                ),
                amount=money(line.amount),
            )
        ]
    if refs.get("mode") == "by_usage":
        return [
            say(
                _(
                    "In this pool the committed cost and all metered usage are shared by "
                    "GPU-hours used: %(fixed)s committed + %(metered)s metered = %(pot)s. This "
                    "project used %(mine)s of the %(all)s GPU-hours (%(percent)s %%), so its "
                    "share is %(share)s; this line is the part of that share for its "
                    "%(hours)s GPU-hours: %(amount)s."
                ),
                fixed=money_ref(refs, "F"),
                metered=money_ref(refs, "M"),
                pot=money_ref(refs, "pot"),
                mine=hours_of(int(refs.get("project_gpu_seconds") or 0)),
                all=hours_of(int(refs.get("all_gpu_seconds") or 0)),
                percent=percent(
                    int(refs.get("project_gpu_seconds") or 0), int(refs.get("all_gpu_seconds") or 0)
                ),
                share=money_ref(refs, "project_share"),
                hours=hours,
                amount=money(line.amount),
            ),
            say(_("Shares are rounded to the cent so that together they add up to the total.")),
        ]
    if refs.get("covered") is True:
        return [
            say(
                _(
                    "They ran in the guaranteed tier of a pool with committed GPUs, so the "
                    "pool's committed cost pays for them (the committed share line) and this "
                    "line is %(amount)s."
                ),
                amount=money(line.amount),
            )
        ]
    if "rate" not in refs:
        return [rounded_once(line.amount)]
    original = Decimal(str(refs["rate"]))
    if refs.get("exchange_rate_id"):
        currency = refs.get("currency", "")
        fx = f"{Decimal(str(refs['exchange_rate'])).normalize():f}"
        return [
            say(
                _(
                    "%(hours)s GPU-hours at %(currency)s %(original)s per GPU-hour, converted at "
                    "%(fx)s %(currency)s per %(billing)s (the rate in force when each instance "
                    "launched): %(seconds)s GPU-seconds × %(original)s ÷ 3,600 ÷ %(fx)s = "
                    "%(amount)s, rounded once to the cent."
                ),
                hours=hours,
                currency=currency,
                original=linewords.price_text(original),
                fx=fx,
                billing=billing_currency(),
                seconds=number(seconds),
                amount=money(line.amount),
            )
        ]
    return [
        say(
            _(
                "%(hours)s GPU-hours at %(rate)s per GPU-hour: %(seconds)s GPU-seconds × "
                "%(rate)s ÷ 3,600 = %(amount)s, rounded once to the cent."
            ),
            hours=hours,
            rate=rate(original),
            seconds=number(seconds),
            amount=money(line.amount),
        )
    ]


def _usage(line: Any, context: Context, result: Explanation) -> None:
    refs = refs_of(line)
    runs = intervals(
        project_id=context.project.pk,
        period=context.view.period,
        now=context.now if context.view.is_draft else max(context.now, context.end),
        gpu_model_id=line.gpu_model_id,
        market=line.market,
        tier=line.tier,
        rate=Decimal(str(refs["rate"])) if refs.get("rate") else None,
    )
    result.runs = _run_rows(runs, context)
    result.more_runs = max(len(runs) - MAX_ROWS, 0)
    if runs:
        result.sentences.append(_usage_what(line, runs, context))
    result.sentences += _usage_how(line, context)
    if any(row.minimum for row in result.runs):
        result.sentences.append(
            say(
                _(
                    "A run shorter than a minute that the platform did not end is billed a "
                    "full minute (marked “minimum” below)."
                )
            )
        )


# Reservations, storage, corrections.


def _reservation(line: Any, context: Context, result: Explanation) -> None:
    refs = refs_of(line)
    reservation = None
    if refs.get("reservation_id"):
        reservation = (
            Reservation.objects.filter(pk=refs["reservation_id"], project=context.project)
            .select_related("gpu_model")
            .first()
        )
    result.reservation = reservation
    n = int(refs.get("gpu_count") or 0)
    if reservation is not None:
        result.sentences.append(
            say(
                _("Reservation %(lease)s booked %(n)s × %(model)s from %(start)s to %(end)s UTC."),
                lease=lease_link(reservation.pk),
                n=n,
                model=context.model,
                start=when(reservation.start),
                end=when(reservation.end),
            )
        )
    window = int(refs.get("window_seconds") or 0)
    seconds = gpu_seconds_of(line)
    if "rate" in refs:
        original = Decimal(str(refs["rate"]))
        result.sentences.append(
            say(
                _(
                    "%(hours)s hours of its window fall %(span)s: %(n)s GPUs × %(hours)s h = "
                    "%(gpu_hours)s GPU-hours at %(rate)s per GPU-hour = %(amount)s, charged "
                    "whether the GPUs were used or not, rounded once to the cent."
                ),
                hours=hours_of(window),
                span=in_period(context),
                n=n,
                gpu_hours=hours_of(seconds),
                rate=rate(line.unit_price),
                amount=money(line.amount),
            )
        )
        if refs.get("exchange_rate_id"):
            result.sentences.append(
                say(
                    _(
                        "Priced in %(currency)s at %(original)s per GPU-hour and converted at "
                        "%(fx)s %(currency)s per %(billing)s, the rate in force when the window "
                        "began."
                    ),
                    currency=refs.get("currency", ""),
                    original=linewords.price_text(original),
                    fx=f"{Decimal(str(refs['exchange_rate'])).normalize():f}",
                    billing=billing_currency(),
                )
            )
    result.sentences.append(
        say(
            _(
                "GPU-hours used inside the window are not charged again: they show as a "
                "usage line “within the reservation” of %(zero)s."
            ),
            zero=money(Decimal("0.00")),
        )
    )


def _storage_rows(members: list[StorageItem], context: Context) -> list[StorageRow]:
    rows = []
    for item in members[:MAX_ROWS]:
        if item.kind == "volume":
            url = reverse("rental:project", args=[context.project.slug]) + "#volumes"
            what = _("Data volume")
        else:
            url = reverse("rental:lease", args=[item.reservation_id]) if item.reservation_id else ""
            what = _("Stopped instance's disk")
        label = item.name or "—"
        if item.kind != "volume" and item.reservation_id:
            label = _("%(name)s (lease #%(lease)s)") % {
                "name": label,
                "lease": item.reservation_id,
            }
        rows.append(
            StorageRow(
                name=link(url, label) if url else conditional_escape(label),
                what=what,
                size_gb=item.size_gb,
                start=when(item.start),
                end=when(item.end) if item.end else _("still kept"),
                hours=hours_of(item.seconds),
                gb_hours=hours_of(item.gb_seconds),
            )
        )
    return rows


def _storage(line: Any, context: Context, result: Explanation) -> None:
    refs = refs_of(line)
    kind = refs.get("storage", "")
    start = linewords.moment(refs.get("from")) or context.view.period
    end = linewords.moment(refs.get("to")) or context.end
    price = Decimal(str(refs["rate"])) if refs.get("rate") else None
    members = items(
        start=start,
        end=end,
        now=max(context.now, end) if not context.view.is_draft else context.now,
        project_ids=[context.project.pk],
        kind=kind,
        rate=price,
    )
    result.storage = _storage_rows(members, context)
    result.more_runs = max(len(members) - MAX_ROWS, 0)
    count = int(refs.get("items") or len(members))
    span = span_of(context, refs)
    if members:
        first = max(min(item.start for item in members), start)
        last = min(max(item.end or end for item in members), end)
        span = _("from %(start)s to %(end)s UTC") % {"start": when(first), "end": when(last)}
    if kind == "volume":
        what = ngettext(
            "%(n)s data volume of this project, kept %(span)s.",
            "%(n)s data volumes of this project, kept %(span)s.",
            count,
        )
    else:
        what = ngettext(
            "The disk of %(n)s stopped instance, kept while its lease was stopped %(span)s: "
            "GPU billing stops, the disk is billed as storage.",
            "The disks of %(n)s stopped instances, kept while their leases were stopped "
            "%(span)s: GPU billing stops, the disks are billed as storage.",
            count,
        )
    result.sentences.append(say(what, n=count, span=span))
    gb_seconds = int(refs.get("gb_seconds") or 0)
    result.sentences.append(
        say(
            _(
                "%(gb_hours)s GB-hours in all, that is %(gb_months)s GB-months (a GB-month is 30 "
                "days, 720 hours), at %(rate)s per GB-month: %(gb_seconds)s GB-seconds × "
                "%(rate)s ÷ 2,592,000 = %(amount)s, rounded once to the cent."
            ),
            gb_hours=hours_of(gb_seconds),
            gb_months=decimal_text(Decimal(gb_seconds) / MONTH_SECONDS, "0.0001"),
            rate=rate(price if price is not None else line.unit_price),
            gb_seconds=number(gb_seconds),
            amount=money(line.amount),
        )
    )


def _correction(line: Any, context: Context, result: Explanation) -> None:
    creator = getattr(line, "created_by", None)
    who = creator.get_username() if creator is not None else _("an admin")
    at = when(getattr(line, "created_at", None))
    if line.kind == "credit":
        result.sentences.append(
            say(
                _(
                    "A credit of %(given)s given back by %(who)s on %(when)s UTC, booked as "
                    "%(amount)s on this statement."
                ),
                given=money(-line.amount),
                who=who,
                when=at,
                amount=money(line.amount),
            )
        )
    else:
        result.sentences.append(
            say(
                _("An adjustment of %(amount)s added by %(who)s on %(when)s UTC."),
                amount=money(line.amount),
                who=who,
                when=at,
            )
        )
    dispute_id = refs_of(line).get("dispute_id")
    dispute = (
        LineDispute.objects.filter(pk=dispute_id)
        .select_related("line__statement__project", "line__gpu_model", "raised_by")
        .first()
        if dispute_id
        else None
    )
    if dispute is None:
        result.sentences.append(say(_("The reason given: “%(why)s”"), why=line.description))
        return
    disputed = dispute.line
    statement = disputed.statement
    url = (
        reverse("billing:statement", args=[statement.project.slug])
        + f"?period={statement.period:%Y-%m}"
    )
    title = linewords.title_of(
        disputed, names={disputed.gpu_model_id or 0: linewords.gpu_name(disputed)}
    )
    result.sentences.append(
        say(
            _(
                "It answers the dispute %(who)s raised on %(raised)s UTC about the line "
                "“%(line)s” of the %(period)s statement. The dispute: “%(comment)s” The "
                "answer: “%(answer)s”"
            ),
            who=dispute.raised_by.get_username(),
            raised=when(dispute.raised_at),
            line=title,
            period=link(url, month_label(statement.period)),
            comment=dispute.comment,
            answer=dispute.answer,
        )
    )


EXPLAINERS: dict[str, Callable[[Any, Context, Explanation], None]] = {
    "usage": _usage,
    "committed_share": committed_share,
    "reservation": _reservation,
    "shared_residual": shared_residual,
    "storage": _storage,
    "adjustment": _correction,
    "credit": _correction,
}


def explain(*, project: Project, view: StatementView, line: Any, now: datetime) -> Explanation:
    """Everything the Explain page says about one line of ``project``'s statement ``view``:
    its words (kind, name, quantity) and sentences, and the rows behind it."""
    names = linewords.gpu_model_names([line])
    [words] = linewords.words_for([line], names=names)
    model = names.get(getattr(line, "gpu_model_id", None) or 0, "")
    result = Explanation(words=words, model=model)
    context = Context(project=project, view=view, model=model, now=now)
    explainer = EXPLAINERS.get(line.kind)
    if explainer is not None:
        explainer(line, context, result)
    return result


def platform_sentences(*, view: StatementView, lines: list[Any], now: datetime) -> list[Any]:
    """Each platform line (overhead no project pays) with its name and why, for the finance
    page: [(line, words, sentences)]."""
    names = linewords.gpu_model_names(lines)
    result = []
    for line, words in zip(lines, linewords.words_for(lines, names=names), strict=True):
        explanation = Explanation(words=words, model=names.get(line.gpu_model_id or 0, ""))
        context = Context(project=None, view=view, model=explanation.model, now=now)
        if line.kind == "shared_residual":
            platform(line, context, explanation)
        result.append((line, words, explanation.sentences))
    return result
