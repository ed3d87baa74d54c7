"""Quota configuration under rule Q1: Σ G ≤ C (≤ K when committed), and G ≤ L."""

from decimal import Decimal

from django.db import transaction
from django.db.models import Sum
from django.utils.translation import gettext as _

from portal import access, audit
from portal.errors import Conflict, InvalidInput, NotPermitted
from portal.models import Project
from rental.models import GpuModel, Pool, Quota


def check_quota(
    *, pool: Pool, project: Project | int, guaranteed: int, ceiling: int, weight: Decimal
) -> None:
    """Raise InvalidInput or Conflict naming the field when a quota would break Q1."""
    if guaranteed < 0:
        raise InvalidInput(_("The guarantee cannot be negative."), field="guaranteed")
    if ceiling < guaranteed:
        raise Conflict(
            _("The ceiling L (%(l)s) must be at least the guarantee G (%(g)s).")
            % {"l": ceiling, "g": guaranteed},
            code="ceiling_below_guarantee",
            field="ceiling",
        )
    if weight <= 0:
        raise InvalidInput(_("The weight must be more than zero."), field="weight")
    others = (
        Quota.objects.filter(gpu_model=pool.gpu_model_id)
        .exclude(project=project)
        .aggregate(total=Sum("guaranteed"))["total"]
        or 0
    )
    bound = pool.guarantee_bound
    if others + guaranteed > bound:
        what = _("committed GPUs K") if pool.committed_gpus else _("capacity C")
        raise Conflict(
            _(
                "Guarantees would total %(total)s GPUs, more than the pool's %(what)s "
                "(%(bound)s). At most %(left)s can be guaranteed here."
            )
            % {
                "total": others + guaranteed,
                "what": what,
                "bound": bound,
                "left": max(bound - others, 0),
            },
            code="guarantees_over_capacity",
            field="guaranteed",
            figures={
                "total": others + guaranteed,
                "bound": bound,
                "left": max(bound - others, 0),
            },
        )


@transaction.atomic
def set_quota(
    *,
    actor,
    project: Project,
    gpu_model: GpuModel,
    guaranteed: int,
    ceiling: int,
    weight: Decimal = Decimal("1"),
    max_hours_per_lease: int | None = None,
    max_gpus_per_lease: int | None = None,
    source: str = "web",
) -> Quota:
    """Create or change a project's quota for one GPU model (admins only)."""
    if not access.is_admin(actor):
        raise NotPermitted(_("Only admins configure quotas."))
    try:
        pool = Pool.objects.select_for_update().get(gpu_model=gpu_model)
    except Pool.DoesNotExist:
        raise Conflict(
            _("No pool is configured for %(model)s.") % {"model": gpu_model},
            code="no_pool",
            field="gpu_model",
        ) from None
    check_quota(pool=pool, project=project, guaranteed=guaranteed, ceiling=ceiling, weight=weight)
    quota = Quota.objects.filter(project=project, gpu_model=gpu_model).first()
    before = (
        {"guaranteed": quota.guaranteed, "ceiling": quota.ceiling, "weight": quota.weight}
        if quota
        else {}
    )
    quota, _created = Quota.objects.update_or_create(
        project=project,
        gpu_model=gpu_model,
        defaults={
            "guaranteed": guaranteed,
            "ceiling": ceiling,
            "weight": weight,
            "max_hours_per_lease": max_hours_per_lease,
            "max_gpus_per_lease": max_gpus_per_lease,
        },
    )
    audit.record(
        actor=actor,
        verb="quota.set",
        obj=quota,
        project=project,
        source=source,
        before=before,
        after={"guaranteed": guaranteed, "ceiling": ceiling, "weight": weight},
    )
    return quota
