"""The pools pages: every pool at a glance, one pool and its week of bookings, and, for
admins, the pool's daily configuration on the same page: its capacity, commitment and
cost sharing, a degraded mark with its reason, and its offerings' prices and
availability. Each change goes through one service (``rental.loans.pools``,
``rental.catalog.offerings``); a refusal shows the page again with the message beside
the field it names, and nothing is written."""

from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect, QueryDict
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from portal import access
from portal.errors import DomainError
from rental import selectors
from rental.catalog import offerings, own_host_reads
from rental.loans import fair_share, pool_week, pools, queue, waiting
from rental.models import Offering, Pool
from rental.models.capacity import DEGRADED_REASON_LENGTH

# Rows of a pool's queue a page shows (each with why it is behind the one above).
QUEUE_PER_PAGE = 50


@dataclass(frozen=True)
class Refused:
    """A change the service refused: which form, the field it named, its message, and
    what was typed (shown again, so the person corrects rather than retypes)."""

    form: str
    field: str
    message: str
    values: QueryDict


@dataclass
class Field:
    """One input of an admin form on the pool page, as the template draws it."""

    name: str
    label: str
    hint: str = ""
    value: str = ""
    error: str = ""
    choices: list[tuple[str, str]] = field(default_factory=list)
    step: str = "1"


def _may_see_pools(user: Any) -> bool:
    return access.sees_everything(user) or bool(access.roles(user))


def _pool_or_404(pk: int) -> Pool:
    pool = Pool.objects.select_related("gpu_model").filter(pk=pk).first()
    if pool is None:
        raise Http404
    return pool


def _typed(value: Decimal | None) -> str:
    """A stored decimal as an input shows it: ``2.5`` for 2.500000, ``1400`` for 1400.00."""
    if value is None:
        return ""
    text = f"{value:f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


@login_required
def pool_list(request: HttpRequest) -> HttpResponse:
    if not _may_see_pools(request.user):
        raise Http404
    overviews = selectors.pool_overviews(Pool.objects.select_related("gpu_model"))
    return render(request, "rental/capacity/pools.html", {"pools": overviews})


@login_required
def pool_detail(request: HttpRequest, pk: int) -> HttpResponse:
    """A pool at a glance and its week: booked capacity against C (reserved, guaranteed
    floor, free) so a person can see where a booking fits before asking; its queue in
    admission order (project, GPUs, priority, why each is behind the one above) and, in a
    fair pool, each project's usage figure (Q5). Admins also get the pool's settings and
    prices."""
    if not _may_see_pools(request.user):
        raise Http404
    return _pool_page(request, _pool_or_404(pk))


@login_required
def pool_queue(request: HttpRequest, pk: int) -> HttpResponse:
    """The pool page's queue, loaded after it (HTMX): waiting requests in admission order,
    why each is behind the one above and, in a fair pool, each project's figure (Q5). A
    fixed number of queries however many projects wait (``queue.queue_of``)."""
    if not _may_see_pools(request.user):
        raise Http404
    pool = _pool_or_404(pk)
    now = timezone.now()
    found = queue.queue_of(pool, now=now)
    # The order needs every waiting lease; the words and rows only the page's.
    page = Paginator(found.leases, QUEUE_PER_PAGE).get_page(request.GET.get("queue_page"))
    first = max(page.start_index() - 1, 0)
    return render(
        request,
        "rental/capacity/_pool_queue.html",
        {
            "pool": pool,
            "queue_page": page,
            # Nothing queued: no figures to read either.
            "queue_rows": waiting.queue_rows(found, first, page.end_index()),
            "fair_figures": fair_share.project_figures(pool, now=now),
        },
    )


def _pool_page(
    request: HttpRequest, pool: Pool, *, refused: Refused | None = None, status: int = 200
) -> HttpResponse:
    overview = selectors.pool_overview(pool)
    context: dict[str, Any] = {
        "overview": overview,
        # What the pool costs is the admins' and finance's business, not every member's.
        "show_cost": access.sees_everything(request.user),
        **_week(request, pool),
    }
    if context["show_cost"]:
        month = (
            timezone.now().astimezone(UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        )
        context["unbilled"] = selectors.unbilled_cloud_time(pool.gpu_model_id, since=month)
    own_offered = None
    if access.is_admin(request.user):
        context |= _admin_forms(pool, overview.guaranteed_total, refused)
        # The admin's page lists every offering already: hosts are looked up only where
        # one is an own server's (discovery keeps one per host model), one query less.
        own_offered = any(
            row["offering"].account.driver == "ssh" for row in context["offering_rows"]
        )
    # The company's own servers with GPUs of this model: each GPU free or leased.
    context["own_servers"] = own_host_reads.pool_hosts(
        pool.gpu_model_id, request.user, offered=own_offered
    )
    return render(request, "rental/capacity/pool.html", context, status=status)


def _week(request: HttpRequest, pool: Pool) -> dict[str, Any]:
    now_hour = timezone.now().astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    today = now_hour.date()
    try:
        first = (
            date.fromisoformat(request.GET.get("week", "")) if request.GET.get("week") else today
        )
    except ValueError:
        first = today
    if not 2000 <= first.year < 2100:  # as the API's week; 9999-12-31 has no next week
        first = today
    monday = first - timedelta(days=first.weekday())
    since = datetime.combine(monday, time(0), tzinfo=UTC)
    steps = pool_week.week(pool, since=since)
    # Each cell's words and id are made here, once a cell: 168 template blocks a page
    # cost more than the rest of the page.
    says = _(
        "%(at)s UTC: %(r)s GPUs booked beyond the guarantees, %(g)s guaranteed in all, %(f)s free"
    )
    for step in steps:
        step["says"] = says % {
            "at": step["start"].strftime("%Y-%m-%d %H:%M"),
            "r": step["reserved"],
            "g": step["guaranteed"],
            "f": step["free"],
        }
        step["key"] = step["start"].strftime("%Y%m%d-%H")
        step["is_now"] = step["start"] == now_hour
    days = [monday + timedelta(days=day) for day in range(7)]
    rows = [
        {"hour": hour, "cells": [steps[day * 24 + hour] for day in range(7)]} for hour in range(24)
    ]
    return {
        "days": days,
        "rows": rows,
        "monday": monday,
        "previous": monday - timedelta(days=7),
        "next": monday + timedelta(days=7),
        # The hour now, to mark its cell, and its day and hour headers in this week only.
        "now_hour": now_hour,
        "now_row": now_hour.hour if monday <= today < monday + timedelta(days=7) else None,
        "today": today,
    }


def _admin_forms(pool: Pool, guaranteed: int, refused: Refused | None) -> dict[str, Any]:
    """The admin's forms of the pool page, filled with the stored values, or with what
    was typed and the refusal's message beside its field."""

    def fill(form: str, fields: list[Field]) -> list[Field]:
        if refused is None or refused.form != form:
            return fields
        for item in fields:
            item.value = refused.values.get(item.name, "")
            if item.name == refused.field:
                item.error = refused.message
        return fields

    settings = fill(
        "settings",
        [
            Field(
                "capacity",
                _("Capacity (GPUs)"),
                _(
                    "C: how many GPUs the portal may run at once. Below the %(g)s GPUs "
                    "guaranteed to projects, the pool is degraded."
                )
                % {"g": guaranteed},
                str(pool.capacity),
            ),
            Field(
                "committed_gpus",
                _("Committed GPUs"),
                _(
                    "K: GPUs reserved or rented by the month, at most the capacity; "
                    "0, or at least the %(g)s guaranteed, so every guarantee is prepaid."
                )
                % {"g": guaranteed},
                str(pool.committed_gpus),
            ),
            Field(
                "committed_monthly_cost",
                _("Committed monthly cost"),
                _("F: what the committed GPUs cost per month, shared between the projects."),
                _typed(pool.committed_monthly_cost),
                step="0.01",
            ),
            Field(
                "apportionment",
                _("Cost sharing"),
                _("How the monthly cost and the metered usage are split between projects."),
                pool.apportionment,
                choices=[(str(v), str(label)) for v, label in Pool.Apportionment.choices],
            ),
            Field(
                "residual",
                _("Unassigned commitment"),
                _("In hybrid sharing: who pays for committed GPUs that no guarantee covers."),
                pool.residual,
                choices=[(str(v), str(label)) for v, label in Pool.Residual.choices],
            ),
            Field(
                "fair_share",
                _("Queue order among burst requests"),
                _(
                    "Fair share: waiting burst and spot requests of the same priority go in "
                    "the order of their projects' recent usage of this pool per guaranteed "
                    "GPU, least first. Guarantees, reclaim and ceilings are unchanged."
                ),
                "true" if pool.fair_share else "false",
                choices=[
                    ("false", _("By project over its guarantee, then submission")),
                    ("true", _("Fair share: by decayed usage, then submission")),
                ],
            ),
            Field(
                "fair_share_half_life_hours",
                _("Fair share half-life (hours)"),
                _(
                    "Usage counts half after this long, a quarter after twice as long; "
                    "168 hours is 7 days."
                ),
                _typed(pool.fair_share_half_life_hours),
                step="0.01",
            ),
            Field(
                "placement_order",
                _("Placement order"),
                _("Where a lease is placed first when several provider accounts sell its GPUs."),
                pool.placement_order,
                choices=[(str(v), str(label)) for v, label in Pool.PlacementOrder.choices],
            ),
            Field(
                "placement_accounts",
                _("Provider accounts tried first"),
                _("Provider account ids, tried in this order before the others, e.g. [3, 1]."),
                ", ".join(str(pk) for pk in pool.placement_accounts or ()),
            ),
        ],
    )
    degraded = fill(
        "degraded",
        [
            Field(
                "reason",
                _("Reason"),
                _("What people should know, e.g. “the cloud cut our GPU quota in us-east-1”."),
            )
        ],
    )
    rows = []
    # A fixed order (not by price), so a row stays where it was after its price changes.
    sold_here = (
        Offering.objects.filter(gpu_model_id=pool.gpu_model_id)
        .select_related("account")
        .order_by("account__name", "region", "gpus_per_instance", "instance_type", "pk")
    )
    for offering in sold_here:
        form = f"offering-{offering.pk}"
        fields = fill(
            form,
            [
                Field(
                    "on_demand_price_per_hour",
                    _("On-demand price per hour"),
                    value=_typed(offering.on_demand_price_per_hour),
                    step="0.000001",
                ),
                Field(
                    "spot_price_per_hour",
                    _("Spot price per hour"),
                    _("Empty: not sold on spot."),
                    _typed(offering.spot_price_per_hour),
                    step="0.000001",
                ),
            ],
        )
        available = offering.is_available
        if refused is not None and refused.form == form:
            available = refused.values.get("is_available") == "on"
        rows.append(
            {
                "offering": offering,
                "form": form,
                "fields": fields,
                "available": available,
                "other_error": refused.message
                if refused is not None
                and refused.form == form
                and refused.field not in {f.name for f in fields}
                else "",
            }
        )
    return {
        "settings_fields": settings,
        "settings_error": refused.message
        if refused is not None
        and refused.form == "settings"
        and refused.field not in {f.name for f in settings}
        else "",
        "degraded_fields": degraded,
        "degraded_error": refused.message
        if refused is not None and refused.form == "degraded" and refused.field != "reason"
        else "",
        "degraded_reason_length": DEGRADED_REASON_LENGTH,
        "offering_rows": rows,
    }


def _admin_pool(request: HttpRequest, pk: int) -> Pool:
    """The pool an admin changes; anyone else gets 404, as for every admin page."""
    access.require_admin(request.user)
    return _pool_or_404(pk)


def _refused(request: HttpRequest, pool: Pool, form: str, error: DomainError) -> HttpResponse:
    return _pool_page(
        request,
        pool,
        refused=Refused(form, error.field or "", error.message, request.POST),
        status=error.page_status,
    )


@login_required
@require_POST
def pool_settings(request: HttpRequest, pk: int) -> HttpResponse:
    """An admin saves the pool's capacity, commitment, cost sharing and queue order."""
    pool = _admin_pool(request, pk)
    try:
        pools.configure_pool(
            actor=request.user,
            gpu_model=pool.gpu_model_id,
            **{
                name: request.POST.get(name, "")
                for name in pools.SETTINGS
                # A form drawn before the fair share settings existed leaves them as they are.
                if name in request.POST
                or name not in (*pools.FAIR_SHARE_SETTINGS, *pools.PLACEMENT_SETTINGS)
            },
        )
    except DomainError as error:
        return _refused(request, pool, "settings", error)
    messages.success(request, _("The pool's settings are saved."))
    return redirect("rental:pool", pk=pk)


@login_required
@require_POST
def pool_degraded(request: HttpRequest, pk: int) -> HttpResponse:
    """An admin marks the pool degraded with a reason, or clears the mark."""
    pool = _admin_pool(request, pk)
    try:
        if request.POST.get("action") == "clear":
            pool = pools.clear_degraded(actor=request.user, gpu_model=pool.gpu_model_id)
            done = (
                _(
                    "The mark is cleared; the pool is still degraded while its capacity "
                    "is below its guarantees."
                )
                if pool.state == Pool.State.DEGRADED
                else _("The mark is cleared; the pool is OK.")
            )
        else:
            pools.mark_degraded(
                actor=request.user,
                gpu_model=pool.gpu_model_id,
                reason=request.POST.get("reason", ""),
            )
            done = _("The pool is marked degraded; the admins are told.")
    except DomainError as error:
        return _refused(request, pool, "degraded", error)
    messages.success(request, done)
    return redirect("rental:pool", pk=pk)


@login_required
@require_POST
def offering_terms(request: HttpRequest, pk: int, offering_pk: int) -> HttpResponse:
    """An admin saves one offering's prices and whether it is sold."""
    pool = _admin_pool(request, pk)
    offering = Offering.objects.filter(pk=offering_pk, gpu_model_id=pool.gpu_model_id).first()
    if offering is None:
        raise Http404
    try:
        offerings.set_offering_terms(
            actor=request.user,
            offering=offering,
            on_demand_price_per_hour=request.POST.get("on_demand_price_per_hour", ""),
            spot_price_per_hour=request.POST.get("spot_price_per_hour", ""),
            is_available=request.POST.get("is_available") == "on",
        )
    except DomainError as error:
        return _refused(request, pool, f"offering-{offering.pk}", error)
    messages.success(
        request,
        _("%(type)s in %(region)s is saved.")
        % {"type": offering.instance_type, "region": offering.region},
    )
    return HttpResponseRedirect(reverse("rental:pool", args=[pk]) + f"#offering-{offering.pk}")
