"""What the request form opens on and offers, read in a fixed number of queries: the
project's quotas, its running GPUs, the person's last request and the offerings on sale
(``request_choices``), the model and count it opens on (``request_default``), and which
asks would run now (``runs_now``)."""

from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from django.db.models import (
    OuterRef,
    Q,
    Subquery,
    Sum,
)

from portal.models import Project
from rental.models import (
    GpuModel,
    Market,
    Offering,
    Quota,
    Reservation,
    Tier,
)
from rental.selectors import (
    QuotaStatus,
    approved_beyond,
    fitting,
    on_sale,
    pool_of,
    quota_status,
    quotas_in_use,
    would_run,
)


def runs_now(*, project: Project | int, asks: Iterable[tuple[int, int]]) -> set[tuple[int, int]]:
    """Of these asks, ``(GPU model id, GPUs)``, those the project's on-demand request would
    run now, before anyone decides: within its guarantee (Q2: Ug + n ≤ G), or as burst
    within its ceiling (U + n ≤ L) with that many GPUs free in the pool (Q4); and within
    the quota's auto-approve GPU limit. Bookings, the priority and the budget cap are the
    estimate's to tell. Two queries, whatever the number of asks."""
    asks = set(asks)
    model_ids = sorted({model_id for model_id, _n in asks})
    if not model_ids:
        return set()
    quotas = {
        quota.gpu_model_id: quota
        for quota in Quota.objects.filter(
            project=project, gpu_model_id__in=model_ids, gpu_model__pool__isnull=False
        ).select_related("gpu_model__pool")
    }
    holding = Reservation.objects.filter(gpu_model_id__in=model_ids, status__in=Reservation.HOLDING)
    used = {
        row["gpu_model_id"]: row
        for row in holding.values("gpu_model_id")
        .annotate(
            pool=Sum("gpu_count"),
            guaranteed=Sum("gpu_count", filter=Q(project=project, tier=Tier.GUARANTEED)),
            non_spot=Sum("gpu_count", filter=Q(project=project) & ~Q(tier=Tier.SPOT)),
        )
        .order_by()
    }
    running = set()
    for model_id, n in asks:
        quota = quotas.get(model_id)
        row = used.get(model_id) or {}
        if quota is not None and would_run(
            quota,
            n,
            pool_running=row.get("pool") or 0,
            used_guaranteed=row.get("guaranteed") or 0,
            used=row.get("non_spot") or 0,
        ):
            running.add((model_id, n))
    return running


def request_default(
    *, user, project: Project | int, gpu_model_ids: Iterable[int]
) -> tuple[int, int] | None:
    """The GPU model and count a new request form opens on, as ``(model id, GPUs)``: the
    last request this person made in the project, when an offering still carries that
    many GPUs on demand and they would run now (``runs_now``); else the model on which
    one on-demand GPU would run now at the lowest price per GPU-hour (ties by name); None
    when none would. Four queries, whatever the number of models."""
    ids = list(gpu_model_ids)
    last = (
        Reservation.objects.filter(requester=user, project=project, gpu_model_id__in=ids)
        .order_by("-submitted_at", "-pk")
        .values_list("gpu_model_id", "gpu_count")
        .first()
    )
    offerings: dict[int, list[Offering]] = defaultdict(list)
    for offering in on_sale().filter(gpu_model_id__in=ids).select_related("gpu_model"):
        offerings[offering.gpu_model_id].append(offering)
    return _default_ask(last, offerings, lambda asks: runs_now(project=project, asks=asks))


def _default_ask(
    last: tuple[int, int] | None,
    offerings: dict[int, list[Offering]],
    running_of: Callable[[dict[tuple[int, int], Offering]], set[tuple[int, int]]],
) -> tuple[int, int] | None:
    """``request_default`` once its rows are read: ``offerings`` on sale by GPU model,
    ``running_of`` the asks of those given that would run now."""
    market = Market.ON_DEMAND
    cheapest: dict[tuple[int, int], Offering] = {}
    for ask in {(model_id, 1) for model_id in offerings} | ({last} if last else set()):
        fits = fitting(offerings.get(ask[0], ()), gpu_count=ask[1], market=market)
        if fits:
            cheapest[ask] = fits[0]
    running = running_of(cheapest)
    if last is not None and last in running:
        return last
    ones = [ask for ask in running if ask[1] == 1]
    if not ones:
        return None
    return min(
        ones,
        key=lambda ask: (cheapest[ask].rate_per_gpu_hour(market), cheapest[ask].gpu_model.name),
    )


@dataclass(frozen=True)
class RequestChoices:
    """What the request form offers and previews for one project and person, read in
    two queries whatever the size of the lease history (``request_choices``)."""

    # By GPU model id: the project's quotas, each with its GPU model and pool, and
    # annotated with ``pool_running``, ``used_guaranteed``, ``used`` (``quota_status``'s
    # figures) and the person's last request for the model (``last_at``, ``last_count``).
    quotas: dict[int, Quota]
    # The available offerings of those models (any account), account and model loaded,
    # in ``offerings_of``'s order.
    offerings: list[Offering]

    @property
    def gpu_models(self) -> list[GpuModel]:
        """``requestable_gpu_models``: a quota above zero and an available offering."""
        offered = {offering.gpu_model_id for offering in self.offerings}
        return sorted(
            (
                quota.gpu_model
                for quota in self.quotas.values()
                if quota.ceiling > 0 and quota.gpu_model_id in offered
            ),
            key=lambda model: (model.name, model.pk),
        )

    def on_sale(self, gpu_model_id: int) -> list[Offering]:
        """``offerings_of`` the model."""
        return [
            offering
            for offering in self.offerings
            if offering.gpu_model_id == gpu_model_id and offering.account.is_active
        ]

    def default(self, gpu_model_ids: Iterable[int]) -> tuple[int, int] | None:
        """``request_default`` over these models."""
        ids = set(gpu_model_ids)
        mine = [
            quota
            for model_id, quota in self.quotas.items()
            if model_id in ids and getattr(quota, "last_at", None) is not None
        ]
        newest = max(mine, key=lambda quota: quota.last_at, default=None)
        last = (newest.gpu_model_id, newest.last_count) if newest else None
        return _default_ask(
            last, {model_id: self.on_sale(model_id) for model_id in ids}, self._running
        )

    def _running(self, asks: Iterable[tuple[int, int]]) -> set[tuple[int, int]]:
        running = set()
        for model_id, n in asks:
            quota = self.quotas.get(model_id)
            if quota is None or pool_of(quota.gpu_model) is None:
                continue
            if would_run(
                quota,
                n,
                pool_running=quota.pool_running,
                used_guaranteed=quota.used_guaranteed,
                used=quota.used,
            ):
                running.add((model_id, n))
        return running

    def quota_status(self, project: Project | int, gpu_model_id: int) -> QuotaStatus:
        """``quota_status`` from the rows already read (one more query only when the
        project runs above its ceiling, to say who approved it)."""
        quota = self.quotas.get(gpu_model_id)
        if quota is None:
            return quota_status(project=project, gpu_model=gpu_model_id)
        pool = pool_of(quota.gpu_model)
        return QuotaStatus(
            guaranteed=quota.guaranteed,
            ceiling=quota.ceiling,
            used_guaranteed=quota.used_guaranteed,
            used=quota.used,
            pool_capacity=pool.capacity if pool else 0,
            pool_running=quota.pool_running,
            approved_beyond=(
                approved_beyond(project, [gpu_model_id]).get(gpu_model_id, ())
                if quota.used > quota.ceiling
                else ()
            ),
        )


def request_choices(*, user, project: Project | int) -> RequestChoices:
    """``RequestChoices`` of ``project`` for ``user``, in two queries; without ``user``
    (a form being sent), no last request is read and ``default`` has none."""
    quotas = quotas_in_use(Quota.objects.filter(project=project)).order_by("pk")
    if user is not None:
        # Through the requester's newest-first index: the first of their leases that
        # matches, not all of them.
        last = Reservation.objects.filter(
            requester=user, project=project, gpu_model=OuterRef("gpu_model")
        ).order_by("-submitted_at", "-pk")
        quotas = quotas.annotate(
            last_at=Subquery(last.values("submitted_at")[:1]),
            last_count=Subquery(last.values("gpu_count")[:1]),
        )
    by_model: dict[int, Quota] = {}
    for quota in quotas:
        by_model.setdefault(quota.gpu_model_id, quota)  # as ``quota_for``: the first
    offerings = list(
        Offering.objects.filter(gpu_model_id__in=list(by_model), is_available=True)
        .select_related("account", "gpu_model")
        .order_by("gpus_per_instance", "on_demand_price_per_hour", "pk")
    )
    return RequestChoices(quotas=by_model, offerings=offerings)
