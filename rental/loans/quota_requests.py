"""Quota-change requests decided in the portal: a member asks for a new G or L with a
reason; a manager decides ceilings, an admin decides guarantees (Σ G is bounded by the
pool, Q1). Each decision is audited and the asker is told. Managers also set their
quotas' auto-approve limits, within the caps the admin allows."""

from datetime import datetime

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from portal import access, approvals, audit
from portal.errors import Conflict, InvalidInput, InvalidTransition, NotPermitted
from portal.models import Project
from portal.numbers import whole_number
from portal.text import COMMENT_LENGTH, REASON_LENGTH, plain_text
from rental import jobs
from rental.loans import messages
from rental.loans.quotas import check_quota
from rental.loans.standing import lock_pool
from rental.models import GpuModel, Quota, QuotaRequest

# The most GPUs a quota change or an auto-approve limit may name, and the most hours a
# limit may name: far above any pool (the API's bound too).
MOST = 100_000


def _count(value: object, field: str, label: object = "") -> int | None:
    """A whole number of GPUs (or hours) from 0 to ``MOST``; None when left empty."""
    if value in (None, ""):
        return None
    return whole_number(value, field=field, maximum=MOST, label=label)


def needs_admin(request: QuotaRequest) -> bool:
    """A change of G is an admin's decision; a change of L alone a manager's."""
    return request.guaranteed is not None


def may_decide(user, request: QuotaRequest) -> bool:
    if needs_admin(request):
        return access.is_admin(user)
    return access.can_manage(user, request.project_id)


@transaction.atomic
def request_quota_change(
    *,
    actor,
    project: Project,
    gpu_model: GpuModel,
    guaranteed: object = None,
    ceiling: object = None,
    reason: str,
    now: datetime | None = None,
    source: str = "web",
) -> QuotaRequest:
    if not access.can_request_for(actor, project):
        raise NotPermitted(_("Only members of %(project)s can ask.") % {"project": project})
    now = now or timezone.now()
    g = _count(guaranteed, "guaranteed", _("New guarantee G"))
    ceiling_value = _count(ceiling, "ceiling", _("New ceiling L"))
    if g is None and ceiling_value is None:
        raise Conflict(
            _("Ask for a new guarantee, a new ceiling, or both."),
            code="nothing_asked",
            field="ceiling",
        )
    reason = plain_text(reason, field="reason", max_length=REASON_LENGTH, label=_("Reason"))
    if not reason:
        raise InvalidInput(_("Say why the project needs the change."), field="reason")
    request = QuotaRequest.objects.create(
        project=project,
        gpu_model=gpu_model,
        requested_by=actor,
        guaranteed=g,
        ceiling=ceiling_value,
        reason=reason,
        created_at=now,
    )
    audit.record(
        actor=actor,
        verb="quota_request.created",
        obj=request,
        project=project,
        source=source,
        at=now,
        after={"guaranteed": g, "ceiling": ceiling_value},
    )
    messages.quota_change_asked(request, by_admin=needs_admin(request))
    return request


@transaction.atomic
def decide_quota_request(
    *,
    actor,
    request: QuotaRequest,
    approve: bool,
    comment: str = "",
    now: datetime | None = None,
    source: str = "web",
) -> QuotaRequest:
    """Approve (the quota changes, checked by Q1 under the pool lock) or reject (a comment
    is required). A decided request cannot be decided again."""
    if not may_decide(actor, request):
        raise NotPermitted(
            _("Only an admin decides guarantees.")
            if needs_admin(request)
            else _("Only a manager of the project decides its ceiling."),
            code="guarantee_needs_admin" if needs_admin(request) else "ceiling_needs_manager",
        )
    now = now or timezone.now()
    pool = lock_pool(request.gpu_model_id)
    request = QuotaRequest.objects.select_for_update().get(pk=request.pk)
    if request.status != QuotaRequest.Status.PENDING:
        raise InvalidTransition(_("This request is already decided."))
    comment = plain_text(comment, field="comment", max_length=COMMENT_LENGTH, label=_("Comment"))
    if not approve and not comment:
        # One form and one endpoint both approve and reject: the comment it needs to
        # reject is a rule over two inputs, not one field's.
        raise Conflict(
            _("Say why the request is rejected."), code="comment_required", field="comment"
        )
    self_approved = approve and approvals.self_approval(
        actor, requester_id=request.requested_by_id, project=request.project_id
    )
    before: dict = {}
    if approve:
        quota = Quota.objects.filter(
            project_id=request.project_id, gpu_model_id=request.gpu_model_id
        ).first()
        current_g = quota.guaranteed if quota else 0
        current_l = quota.ceiling if quota else 0
        g = current_g if request.guaranteed is None else request.guaranteed
        ceiling = current_l if request.ceiling is None else request.ceiling
        weight = quota.weight if quota else 1
        check_quota(
            pool=pool, project=request.project_id, guaranteed=g, ceiling=ceiling, weight=weight
        )
        before = {"guaranteed": current_g, "ceiling": current_l}
        Quota.objects.update_or_create(
            project_id=request.project_id,
            gpu_model_id=request.gpu_model_id,
            defaults={"guaranteed": g, "ceiling": ceiling},
        )
    request.status = QuotaRequest.Status.APPROVED if approve else QuotaRequest.Status.REJECTED
    request.decided_by = actor
    request.decided_at = now
    request.decision_comment = comment
    request.save()
    audit.record(
        actor=actor,
        verb="quota_request.approved" if approve else "quota_request.rejected",
        obj=request,
        project=request.project_id,
        source=source,
        at=now,
        before=before,
        after={
            "guaranteed": request.guaranteed,
            "ceiling": request.ceiling,
            "comment": request.decision_comment,
            **({"self_approved": True} if self_approved else {}),
        },
    )
    messages.quota_change_decided(request, approved=approve)
    if approve:
        jobs.admit_queued_on_commit(request.gpu_model_id)
    return request


@transaction.atomic
def set_auto_approve_limits(
    *,
    actor,
    quota: Quota,
    max_gpus: object,
    max_hours: object,
    now: datetime | None = None,
    source: str = "web",
) -> Quota:
    """A manager sets the quota's auto-approve limits, within what the admin allows: at
    most the admin's caps on the quota, the ceiling L, and the site's maximum lease."""
    if not access.can_manage(actor, quota.project_id):
        raise NotPermitted(_("Only a manager of the project sets its auto-approve limits."))
    now = now or timezone.now()
    quota = Quota.objects.select_for_update().get(pk=quota.pk)
    gpus, hours = _count(max_gpus, "max_gpus_per_lease"), _count(max_hours, "max_hours_per_lease")
    gpu_cap = min(c for c in (quota.auto_approve_gpus_cap, quota.ceiling) if c is not None)
    hour_cap = min(
        c for c in (quota.auto_approve_hours_cap, settings.PORTAL_MAX_LEASE_HOURS) if c is not None
    )
    if not access.is_admin(actor):
        if gpus is None or gpus > gpu_cap:
            raise Conflict(
                _("At most %(cap)s GPUs, as the admin allows.") % {"cap": gpu_cap},
                code="over_admin_cap",
                field="max_gpus_per_lease",
            )
        if hours is None or hours > hour_cap:
            raise Conflict(
                _("At most %(cap)s hours, as the admin allows.") % {"cap": hour_cap},
                code="over_admin_cap",
                field="max_hours_per_lease",
            )
    before = {"max_gpus": quota.max_gpus_per_lease, "max_hours": quota.max_hours_per_lease}
    quota.max_gpus_per_lease, quota.max_hours_per_lease = gpus, hours
    quota.save(update_fields=["max_gpus_per_lease", "max_hours_per_lease"])
    audit.record(
        actor=actor,
        verb="quota.auto_approve_set",
        obj=quota,
        project=quota.project_id,
        source=source,
        at=now,
        before=before,
        after={"max_gpus": gpus, "max_hours": hours},
    )
    return quota


@transaction.atomic
def set_auto_approve_caps(
    *,
    actor,
    quota: Quota,
    gpus_cap: object,
    hours_cap: object,
    now: datetime | None = None,
    source: str = "web",
) -> Quota:
    """An admin sets how high the project's managers may set the quota's auto-approve
    limits (empty: up to the ceiling L and the site's maximum lease). Limits already above
    a lowered cap come down to it, in the same audited change."""
    if not access.is_admin(actor):
        raise NotPermitted(_("Only admins set the caps on auto-approve limits."))
    now = now or timezone.now()
    quota = Quota.objects.select_for_update().get(pk=quota.pk)
    gpus = _count(gpus_cap, "auto_approve_gpus_cap")
    hours = _count(hours_cap, "auto_approve_hours_cap")
    if gpus is not None and gpus > quota.ceiling:
        raise Conflict(
            _("At most %(ceiling)s GPUs: the quota's ceiling L.") % {"ceiling": quota.ceiling},
            code="cap_over_ceiling",
            field="auto_approve_gpus_cap",
        )
    if hours is not None and hours > settings.PORTAL_MAX_LEASE_HOURS:
        raise Conflict(
            _("At most %(max)s hours: the site's maximum lease.")
            % {"max": settings.PORTAL_MAX_LEASE_HOURS},
            code="cap_over_max_lease",
            field="auto_approve_hours_cap",
        )
    before = {
        "gpus_cap": quota.auto_approve_gpus_cap,
        "hours_cap": quota.auto_approve_hours_cap,
        "max_gpus": quota.max_gpus_per_lease,
        "max_hours": quota.max_hours_per_lease,
    }
    quota.auto_approve_gpus_cap, quota.auto_approve_hours_cap = gpus, hours
    # A limit above its new cap, or no limit at all under a cap, comes down to the cap.
    if gpus is not None and (quota.max_gpus_per_lease is None or quota.max_gpus_per_lease > gpus):
        quota.max_gpus_per_lease = gpus
    if hours is not None and (
        quota.max_hours_per_lease is None or quota.max_hours_per_lease > hours
    ):
        quota.max_hours_per_lease = hours
    quota.save(
        update_fields=[
            "auto_approve_gpus_cap",
            "auto_approve_hours_cap",
            "max_gpus_per_lease",
            "max_hours_per_lease",
        ]
    )
    audit.record(
        actor=actor,
        verb="quota.auto_approve_caps_set",
        obj=quota,
        project=quota.project_id,
        source=source,
        at=now,
        before=before,
        after={
            "gpus_cap": gpus,
            "hours_cap": hours,
            "max_gpus": quota.max_gpus_per_lease,
            "max_hours": quota.max_hours_per_lease,
        },
    )
    return quota
