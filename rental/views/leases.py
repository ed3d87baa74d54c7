"""Web pages of a lease: ask for GPUs (the form and its live estimate), the lease list, a
lease's page and its live status, ending it. Views parse input, call one service or
selector, and render."""

from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db.models import Prefetch, Subquery
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from portal import access
from portal.errors import DomainError, InvalidInput, QuotaExceeded, form_again, put_on_form
from portal.keyset import keyset_page
from portal.models import Project
from rental import selectors
from rental.catalog import images, volumes
from rental.catalog.capabilities import lease_can, runs_own_system
from rental.catalog.images import check_image_fits
from rental.catalog.own_host_reads import mark_silent_servers
from rental.fleet import launching
from rental.forms import (
    DecisionForm,
    ExtendForm,
    LeaseRequestForm,
    RescheduleForm,
    SaveImageForm,
)
from rental.loans import ending, extension, lease_request
from rental.loans.admission import preview_admission
from rental.loans.expected_start import (
    ExpectedStarts,
    expected_text,
    request_expected,
    sent_now_text,
)
from rental.loans.request_reads import RequestReads
from rental.loans.reservations import preview_booking
from rental.loans.validation import parse_hours, validated
from rental.loans.waiting import lease_wait
from rental.models import DataVolume, LaunchAttempt, Offering, Reservation, Tier
from rental.providers.base import Capability
from rental.selectors import QuotaStatus
from rental.views import agent as agent_views

Status = Reservation.Status

# A page that shows any of these keeps asking for news every few seconds.
POLL_WHILE = frozenset(
    {Status.PENDING_APPROVAL, Status.QUEUED, Status.PROVISIONING, Status.ACTIVE, Status.ENDING}
)
STATUS_GROUPS = {
    "active": Reservation.HOLDING,
    "waiting": (Status.PENDING_APPROVAL, Status.SCHEDULED, Status.QUEUED),
    "ended": Reservation.FINAL,
}
LEASES_PER_PAGE = 25
# Up to this many projects, a member's lease list reads each project's page apart.
SPLIT_MAX = 20


def any_changing(leases: Any) -> bool:
    return any(lease.status in POLL_WHILE for lease in leases)


def may_end_lease(user: Any, lease: Reservation) -> bool:
    return access.can_act_on_lease(user, lease)


def may_save_image(user: Any, lease: Reservation) -> bool:
    if lease.status not in images.SAVABLE_STATUSES:
        return False
    return access.can_manage(user, lease.project_id) or (
        lease.requester_id == user.pk and access.can_request_for(user, lease.project_id)
    )


# The services name a booking's start ``start``; the form's field is ``start_at``.
FORM_FIELD_OF = {"start": "start_at"}


# --- Asking for GPUs -------------------------------------------------------------------


@dataclass(frozen=True)
class Estimate:
    """What the request form shows before it is sent: quota, price and admission preview."""

    quota: QuotaStatus | None
    offering: Offering | None
    instance_count: int
    gpu_count: int
    hours: Decimal | None
    rate_per_gpu_hour: Decimal | None
    rate_per_hour: Decimal | None
    total: Decimal | None
    outcome: str  # guaranteed | burst | spot | queued | approval | refused | invalid
    title: str
    message: str = ""
    code: str = ""
    volume: DataVolume | None = None  # the launch is placed in its zone
    # When it would most likely start, for a request that would wait ("" otherwise).
    expected: str = ""


def estimate(form: LeaseRequestForm) -> Estimate:
    """Read-only preview of what ``submit_reservation`` would do with the form's values.

    The same checks in the same order (R1, auto-approve limits, Q2, Q4), without locks,
    so a request that races another may still land differently."""
    project, gpu_model = form.current_project, form.current_gpu_model
    gpu_count, market = form.current_gpu_count, form.current_market
    priority = form.current_priority
    offering = form.current_offering
    choices = form.choices
    quota = choices.quota_status(project, gpu_model.pk) if choices and gpu_model else None
    try:
        hours: Decimal | None = parse_hours(form.raw_duration)
    except InvalidInput:
        hours = None
    rate = offering.rate_per_gpu_hour(market) if offering else None
    per_hour = rate * gpu_count if rate is not None else None
    price = {
        "quota": quota,
        "offering": offering,
        "instance_count": gpu_count // offering.gpus_per_instance if offering else 0,
        "gpu_count": gpu_count,
        "hours": hours,
        "rate_per_gpu_hour": rate,
        "rate_per_hour": per_hour,
        "total": per_hour * hours if per_hour is not None and hours is not None else None,
        "volume": form.current_volume,
    }
    if "gpu_count" in form.too_large:
        return Estimate(
            **price,
            outcome="invalid",
            title=_("Cannot be sent as it is"),
            message=_("GPUs: ask for at most %(max)s.") % {"max": form.too_large["gpu_count"]},
            code="invalid",
        )
    if project is None or gpu_model is None:
        return Estimate(
            **price,
            outcome="invalid",
            title=_("Nothing to rent yet"),
            message=_("None of your projects has a quota for a GPU model on sale."),
        )
    # The rows R1 and the preview decide on, as the form has read them.
    quota_row = choices.quotas.get(gpu_model.pk) if choices else None
    reads = (
        RequestReads(
            waiting=None, quota=quota_row, offerings=form.on_sale, images=form.usable_images
        )
        if offering is not None
        else None
    )
    try:
        validated(
            project=project,
            gpu_model=gpu_model,
            gpu_count=gpu_count,
            offering=offering,
            duration_hours=form.raw_duration,
            priority=priority,
            market=market,
            image=form.current_image,
            reads=reads,
        )
        if form.current_volume is not None:
            volumes.check_volume(
                form.current_volume,
                project=project,
                gpu_model=gpu_model,
                gpu_count=gpu_count,
                market=market,
                offering=form.offerings_by_pk.get(form.raw_offering),
            )
        check_image_fits(form.current_image, offering)
        decision = preview_admission(
            project=project,
            gpu_model=gpu_model,
            gpu_count=gpu_count,
            hours=hours,
            priority=priority,
            market=market,
            start=form.current_start,
            pool=getattr(gpu_model, "pool", None),
            quota=quota_row,
        )
    except QuotaExceeded as error:
        return Estimate(
            **price, outcome="refused", title=_("Refused"), message=error.message, code=error.code
        )
    except InvalidInput as error:
        return Estimate(
            **price,
            outcome="invalid",
            title=_("Cannot be sent as it is"),
            message=error.message,
            code=error.code,
        )
    start = form.current_start
    if start is not None and decision.status != Status.PENDING_APPROVAL:
        try:
            preview_booking(
                project=project,
                gpu_model=gpu_model,
                gpu_count=gpu_count,
                market=market,
                start=start,
                hours=hours,
            )
        except (QuotaExceeded, InvalidInput) as error:
            return Estimate(
                **price,
                outcome="refused",
                title=_("Cannot be booked"),
                message=error.message,
                code=error.code,
            )
        return Estimate(
            **price,
            outcome="scheduled",
            title=_("Booked from %(at)s UTC") % {"at": start.strftime("%Y-%m-%d %H:%M")},
            message=_(
                "The pool has room over the whole window (R2); the GPUs are freed for it "
                "just before the start."
            ),
        )
    if decision.status == Status.PENDING_APPROVAL:
        return Estimate(
            **price,
            outcome="approval",
            title=_("Needs a manager's approval"),
            message=decision.message,
            code=decision.code,
            expected=sent_now(form, hours, approval=True),
        )
    if decision.status == Status.QUEUED:
        return Estimate(
            **price,
            outcome="queued",
            title=_("Queued for capacity (%(tier)s)") % {"tier": Tier(decision.tier).label},
            message=decision.message,
            code=decision.code,
            expected=sent_now(form, hours),
        )
    titles = {
        Tier.GUARANTEED: _("Starts now, guaranteed"),
        Tier.BURST: _("Starts now, as burst"),
        Tier.SPOT: _("Starts now, on spot"),
    }
    details = {
        Tier.GUARANTEED: _("Within the project's guarantee: never preempted by other projects."),
        Tier.BURST: _(
            "Above the guarantee, within the ceiling: may be preempted when another "
            "project takes back its guarantee."
        ),
        Tier.SPOT: _("Spot capacity is cheaper and may be interrupted at any time."),
    }
    return Estimate(
        **price,
        outcome=decision.tier,
        title=titles.get(decision.tier, Tier(decision.tier).label),
        message=details.get(decision.tier, ""),
    )


def sent_now(form: LeaseRequestForm, hours: Decimal | None, *, approval: bool = False) -> str:
    """The request form's "if you send this now, it would most likely start at …": the
    request added to its pool's queue now (one query: the pool's live leases with their
    quotas)."""
    pool = getattr(form.current_gpu_model, "pool", None)
    if pool is None or hours is None or form.current_project is None:
        return ""
    choices = form.choices
    expected = request_expected(
        pool=pool,
        project_id=form.current_project.pk,
        quota=choices.quotas.get(pool.gpu_model_id) if choices else None,
        gpu_count=form.current_gpu_count,
        hours=hours,
        priority=form.current_priority,
        market=form.current_market,
        approved=approval,
    )
    return sent_now_text(expected, approval=approval)


def _submitted_message(lease: Reservation) -> str:
    values = {"id": lease.pk, "tier": lease.get_tier_display().lower()}
    if lease.status == Status.PROVISIONING:
        return _("Lease #%(id)s admitted as %(tier)s; its instances are starting.") % values
    if lease.status == Status.QUEUED:
        return _("Lease #%(id)s is queued: %(reason)s") % {**values, "reason": lease.status_message}
    if lease.status == Status.PENDING_APPROVAL:
        return _("Lease #%(id)s waits for a manager's approval: %(reason)s") % {
            **values,
            "reason": lease.status_message,
        }
    return _("Lease #%(id)s is %(status)s.") % {
        **values,
        "status": lease.get_status_display().lower(),
    }


@login_required
def lease_new(request: HttpRequest) -> HttpResponse:
    status = 200
    if request.method == "POST":
        form = LeaseRequestForm(request.POST, user=request.user)
        if form.is_valid():
            data = form.cleaned_data
            try:
                lease = lease_request.submit_lease(
                    actor=request.user,
                    ssh_keys=list(data["ssh_keys"]),
                    data_volume=data["data_volume"],
                    project=data["project"],
                    gpu_model=data["gpu_model"],
                    gpu_count=data["gpu_count"],
                    duration_hours=data["duration_hours"],
                    priority=data["priority"],
                    market=data["market"],
                    offering=data["offering"],
                    image=data["image"],
                    purpose=data["purpose"],
                    requeue_on_preemption=data["requeue_on_preemption"],
                    allow_other_instance_types=data["allow_other_instance_types"],
                    start=data["start_at"] if data.get("start_mode") == "later" else None,
                    source="web",
                )
            except DomainError as error:
                put_on_form(form, error, FORM_FIELD_OF)
                status = error.page_status
            else:
                messages.success(request, _submitted_message(lease))
                return redirect(lease)
        else:
            status = 400
    else:
        form = LeaseRequestForm(user=request.user, project_slug=request.GET.get("project", ""))
    return render(
        request,
        "rental/leases/lease_new.html",
        {"form": form, "estimate": estimate(form) if form.projects else None},
        status=status,
    )


@login_required
@require_POST
def lease_estimate(request: HttpRequest) -> HttpResponse:
    """The estimate panel, plus the choices that depend on what was picked (out of band)."""
    form = LeaseRequestForm(request.POST, user=request.user, checks_keys=False)
    if not form.projects:
        raise Http404
    return render(
        request,
        "rental/leases/_estimate.html",
        {"form": form, "estimate": estimate(form), "oob": True},
    )


# --- Following leases ------------------------------------------------------------------


def _lease_list_context(request: HttpRequest) -> dict[str, Any]:
    """One page of the leases the user may see, newest first, after or before a cursor
    (``portal.keyset``): the page reads its rows through the newest-first indexes, the
    last page as the first, and nothing counts the whole list."""
    leases = Reservation.objects.all()
    project = request.GET.get("project", "")
    group = request.GET.get("status", "")
    # A member of a few projects: each project's newest leases through its own index
    # (``keyset_page``'s split), rather than all their leases sorted. The split is the
    # access rule itself: its values are the projects ``access.scope`` lets them see.
    mine = sorted(access.roles(request.user))
    split = None
    if not project and not access.sees_everything(request.user) and 1 < len(mine) <= SPLIT_MAX:
        split = ("project_id", mine)
    else:
        leases = access.scope(leases, request.user)
    if project:
        # The project's id as a value, so the project's newest-first index is walked.
        leases = leases.filter(
            project_id=Subquery(Project.objects.filter(slug=project).values("pk")[:1])
        )
    if group in STATUS_GROUPS:
        leases = leases.filter(status__in=STATUS_GROUPS[group])
    page = keyset_page(
        selectors.lease_rows(leases),
        request.GET,
        size=LEASES_PER_PAGE,
        moment="submitted_at",
        split=split,
    )
    if group == "waiting":
        # The waiting list says when each lease would start: each pool of its leases is
        # read and played once (3 queries a pool), whatever the number of leases.
        starts = ExpectedStarts()
        for lease in page:
            lease.expected_start = expected_text(starts.of(lease))
    return {
        "page": page,
        "polling": any_changing(page),
        "project": project,
        "group": group,
        "query": request.GET.urlencode(),
    }


@login_required
def lease_list(request: HttpRequest) -> HttpResponse:
    context = _lease_list_context(request)
    context["projects"] = access.visible_projects(request.user).only("slug", "name")
    context["groups"] = [
        ("active", _("Running")),
        ("waiting", _("Waiting")),
        ("ended", _("Ended")),
    ]
    return render(request, "rental/leases/leases.html", context)


@login_required
def lease_list_partial(request: HttpRequest) -> HttpResponse:
    return render(request, "rental/leases/_lease_list.html", _lease_list_context(request))


SIDE_ACTIONS = (
    "may_extend",
    "may_decide_extension",
    "may_stop",
    "may_save_image",
    "reschedule_form",
)


def _lease_context(request: HttpRequest, pk: int) -> dict[str, Any]:
    # The accounts come with the rows: their drivers say what the lease can do.
    leases = selectors.leases().select_related("offering__account")
    lease = access.get_visible_or_404(leases, request.user, pk=pk)
    wait = lease_wait(lease)
    expected = expected_text(ExpectedStarts().of(lease))
    instances = list(
        lease.instances.select_related("account", "offering").prefetch_related(
            Prefetch("attempts", queryset=LaunchAttempt.objects.select_related("account"))
        )
    )
    launching.describe_attempts(instances)  # own servers' answers in words
    mark_silent_servers(instances)  # at risk: an own server that does not answer
    may_connect = access.can_see_connection(request.user, lease)
    agent_views.instance_views(lease, instances, connection=may_connect)
    context = {
        "lease": lease,
        "instances": instances,
        "may_connect": may_connect,
        # Attached to this lease's instance (a later lease may hold the volume now).
        "volume_attached": lease.data_volume is not None
        and lease.data_volume.attached_instance_id in {i.pk for i in instances},
        "may_end": lease.can_end and may_end_lease(request.user, lease),
        "may_stop": agent_views.may_stop(request.user, lease)
        and lease_can(lease, Capability.STOP_START, instances),
        "own_system": runs_own_system(lease, instances),
        "may_save_image": may_save_image(request.user, lease)
        and lease_can(lease, Capability.IMAGES, instances),
        "polling": lease.status in POLL_WHILE,
        "wait": wait,
        "wait_hint": wait.hint,
        "expected_start": expected,
        "may_extend": lease.status in extension.EXTENDABLE
        and lease.notice_due_at is None
        and may_end_lease(request.user, lease),
        "may_decide_extension": lease.extension_until is not None
        and access.can_manage(request.user, lease.project_id),
        "reschedule_form": RescheduleForm.of(lease)
        if lease.status == Reservation.Status.SCHEDULED
        and lease.reclaim_due_at is None
        and may_end_lease(request.user, lease)
        else None,
    }
    # What the side actions show; the status poll sends them again when it changes.
    shown = [bool(context[name]) for name in SIDE_ACTIONS] + [bool(wait.position)]
    context["actions_key"] = "-".join(
        [lease.status, *("1" if flag else "0" for flag in shown), str(lease.extension_until)]
    )
    # The side actions' forms, empty; a refused one is drawn again as it was sent.
    context["extend_form"] = ExtendForm()
    context["extension_form"] = extension_decision_form()
    context["save_image_form"] = SaveImageForm()
    return context


def extension_decision_form(data: Any = None) -> DecisionForm:
    """A manager's comment on a lease's extension, on the lease page."""
    return DecisionForm(data, auto_id="extension-%s", placeholder=_("Comment"))


def lease_form_again(request: HttpRequest, pk: int, *, status: int, **forms: Any) -> HttpResponse:
    """The lease page with a side action's refused form as it was sent, its errors inside
    it (``extend_form``, ``extension_form``, ``reschedule_form``, ``save_image_form``);
    for HTMX the side actions alone. A form with errors is drawn even where the lease no
    longer allows its action, so that the refusal says why."""
    context = _lease_context(request, pk)
    context.update(forms)
    return form_again(
        request,
        page="rental/leases/lease.html",
        partial="rental/leases/_lease_side_actions.html",
        context=context,
        status=status,
    )


@login_required
def lease_detail(request: HttpRequest, pk: int) -> HttpResponse:
    return render(request, "rental/leases/lease.html", _lease_context(request, pk))


@login_required
def lease_status_partial(request: HttpRequest, pk: int) -> HttpResponse:
    context = _lease_context(request, pk)
    context["side_oob"] = request.GET.get("actions") != context["actions_key"]
    return render(request, "rental/leases/_lease_status.html", context)


@login_required
@require_POST
def lease_end(request: HttpRequest, pk: int) -> HttpResponse:
    lease = access.get_lease_to_act_on_or_404(
        Reservation.objects.select_related("project"), request.user, pk=pk
    )
    try:
        lease = ending.end_reservation(actor=request.user, reservation=lease, source="web")
    except DomainError as error:
        messages.error(request, error.message)
    else:
        if lease.status == Status.CANCELLED:
            messages.success(request, _("Lease #%(id)s is cancelled.") % {"id": lease.pk})
        else:
            messages.success(
                request,
                _("Lease #%(id)s is ending; its instances are being terminated.")
                % {"id": lease.pk},
            )
    return redirect("rental:lease", pk=pk)
