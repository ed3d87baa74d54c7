"""A pool's configuration and state (Q1): its capacity, commitment and cost sharing as an
admin sets them, degraded when C falls below Σ G or an admin marks it; and availability
watches."""

import json
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from django.db import transaction
from django.db.models import Sum
from django.utils import timezone
from django.utils.translation import gettext as _

from portal import access, audit
from portal.errors import Conflict, InvalidInput, InvalidTransition, NotPermitted
from portal.numbers import MAX_DIGITS_TYPED, decimal_number, whole_number
from portal.text import plain_text
from rental import jobs
from rental.loans import messages
from rental.loans.standing import lock_pool, pool_use
from rental.models import AvailabilityWatch, GpuModel, OwnHost, Pool, ProviderAccount, Quota
from rental.models.capacity import DEGRADED_REASON_LENGTH

# The most GPUs a pool may be configured with: far beyond any cloud account's quota, and
# within what every sum over pools keeps exact (the API's bound too).
MAX_GPUS = 1_000_000
# The fixed monthly cost's column: 14 digits with two decimals.
COST_BELOW = Decimal(10) ** 12
# What an admin changes on a pool: its capacity and commitment (Q1) and how its cost is
# shared (B5). The pool's GPU model is its identity; its state follows from these.
SETTINGS = (
    "capacity",
    "committed_gpus",
    "committed_monthly_cost",
    "apportionment",
    "residual",
    "fair_share",
    "fair_share_half_life_hours",
    "placement_order",
    "placement_accounts",
)
# The fair share settings (Q5); a page that does not send them leaves them as they are.
FAIR_SHARE_SETTINGS = ("fair_share", "fair_share_half_life_hours")
# Where its leases are placed (rental.catalog.placement_rules); likewise kept when left out.
PLACEMENT_SETTINGS = ("placement_order", "placement_accounts")
# A fair pool's half-life (Q5): more than 0, at most 9,999.99 hours (about 13 months: four
# digits, as the API's schema can say it), in hours to the hundredth.
MAX_HALF_LIFE_HOURS = Decimal("9999.99")
# How a yes-or-no setting may be typed: a form's select, the admin's checkbox, the API's bool.
YES = ("true", "on", "yes", "1")
NO = ("false", "off", "no", "0")


def guaranteed_total(pool: Pool) -> int:
    """Σ G over the quotas of the pool's GPU model."""
    return (
        Quota.objects.filter(gpu_model_id=pool.gpu_model_id).aggregate(g=Sum("guaranteed"))["g"]
        or 0
    )


def refresh_state(pool: Pool, *, now: datetime | None = None) -> Pool:
    """Within the caller's transaction, pool locked: C below Σ G, an admin's mark, or an
    own server of its GPU model not answering makes the pool ``degraded`` and alerts the
    admins once; with none of them it is ``ok`` again (Q1)."""
    total = guaranteed_total(pool)
    below = pool.capacity < total
    down = own_hosts_down(pool.gpu_model_id)
    state = Pool.State.DEGRADED if below or pool.degraded_reason or down else Pool.State.OK
    if state != pool.state:
        before = pool.state
        pool.state = state
        pool.save(update_fields=["state"])
        after: dict[str, Any] = {"state": state, "capacity": pool.capacity, "guaranteed": total}
        if pool.degraded_reason:
            after["degraded_reason"] = pool.degraded_reason
        if down:
            after["own_hosts_down"] = down
        audit.record(
            actor=None,
            verb="pool.state",
            obj=pool,
            source="worker",
            at=now or timezone.now(),
            before={"state": before},
            after=after,
        )
        if state == Pool.State.DEGRADED:
            messages.pool_degraded(pool, guaranteed=total, hosts_down=down)
    return pool


def own_hosts_down(gpu_model_id: int) -> list[str]:
    """The active own servers with GPUs of this model that are not answering (past their
    grace period): each makes the pool degraded until it answers again."""
    down = OwnHost.objects.filter(is_active=True, state=OwnHost.State.UNREACHABLE)
    return [host.name for host in down if gpu_model_id in host.gpu_models()]


def _require_admin(actor: Any) -> None:
    if not access.is_admin(actor):
        raise NotPermitted(_("Only admins configure pools."))


def check_settings(pool: Pool, *, guaranteed: int, **asked: Any) -> dict[str, Any]:
    """The settings ``asked`` (raw, as typed or as the API typed them; a name left out
    keeps its value) cleaned and checked against Q1 for a pool whose quotas guarantee
    ``guaranteed`` GPUs: C and K whole numbers, K ≤ C, a changed K > 0 at least Σ G (every
    guarantee prepaid), F in whole cents within its column, the cost modes known, fair
    share yes or no and its half-life a positive number of hours (Q5). Raises
    InvalidInput naming the first field at fault; returns every setting's new value.

    C may fall below Σ G: the capacity is what the cloud gives, and the pool then becomes
    degraded (``refresh_state``) rather than the change being refused."""
    unknown = set(asked) - set(SETTINGS)
    if unknown:
        raise ValueError(f"not pool settings: {sorted(unknown)}")
    if isinstance(pool.placement_accounts, str):  # lock_pool's written-out read: JSON text
        pool.placement_accounts = json.loads(pool.placement_accounts)
    values = {name: getattr(pool, name) for name in SETTINGS}
    if "capacity" in asked:
        values["capacity"] = whole_number(asked["capacity"], field="capacity", maximum=MAX_GPUS)
    if "committed_gpus" in asked:
        values["committed_gpus"] = whole_number(
            asked["committed_gpus"], field="committed_gpus", maximum=MAX_GPUS
        )
    capacity, committed = values["capacity"], values["committed_gpus"]
    if committed > capacity:
        if "committed_gpus" in asked and committed != pool.committed_gpus:
            raise Conflict(
                _("The committed GPUs K (%(k)s) cannot be more than the capacity C (%(c)s).")
                % {"k": committed, "c": capacity},
                code="committed_over_capacity",
                field="committed_gpus",
            )
        raise Conflict(
            _("The capacity must be a whole number of at least the committed GPUs (%(k)s).")
            % {"k": committed},
            code="committed_over_capacity",
            field="capacity",
        )
    if committed != pool.committed_gpus and 0 < committed < guaranteed:
        raise Conflict(
            _(
                "Guarantees total %(g)s GPUs: the committed GPUs K must be 0 or at least "
                "%(g)s, so that every guarantee is prepaid (rule Q1)."
            )
            % {"g": guaranteed},
            code="guarantees_over_capacity",
            field="committed_gpus",
            figures={"total": guaranteed, "bound": committed, "left": 0},
        )
    if "committed_monthly_cost" in asked:
        values["committed_monthly_cost"] = decimal_number(
            asked["committed_monthly_cost"],
            field="committed_monthly_cost",
            places=2,
            below=COST_BELOW,
        )
    for name, choices in (("apportionment", Pool.Apportionment), ("residual", Pool.Residual)):
        if name in asked:
            value = "" if asked[name] is None else str(asked[name])
            if value not in choices.values:
                raise InvalidInput(
                    _("Choose one of: %(choices)s.")
                    % {"choices": ", ".join(str(label) for label in choices.labels)},
                    field=name,
                )
            values[name] = value
    if "fair_share" in asked:
        fair = yes_or_no(asked["fair_share"])
        if fair is None:
            raise InvalidInput(_("Choose yes or no."), field="fair_share")
        values["fair_share"] = fair
    if "fair_share_half_life_hours" in asked:
        hours = half_life_hours(asked["fair_share_half_life_hours"])
        if hours is None:
            raise InvalidInput(
                _(
                    "Fair share half-life: enter a number of hours more than 0 and at most "
                    "%(max)s (about 13 months), with at most 2 decimal places; 168 is 7 days."
                )
                % {"max": f"{MAX_HALF_LIFE_HOURS:,}"},
                field="fair_share_half_life_hours",
            )
        values["fair_share_half_life_hours"] = hours
    if "placement_order" in asked:
        order = "" if asked["placement_order"] is None else str(asked["placement_order"])
        if order not in Pool.PlacementOrder.values:
            raise InvalidInput(
                _("Choose one of: %(choices)s.")
                % {"choices": ", ".join(str(label) for label in Pool.PlacementOrder.labels)},
                field="placement_order",
            )
        values["placement_order"] = order
    if "placement_accounts" in asked:
        values["placement_accounts"] = placement_accounts(asked["placement_accounts"])
    return values


def placement_accounts(value: Any) -> list[int]:
    """The provider accounts a pool tries first, as typed (a list, or ids separated by
    commas), checked: existing accounts, each once. Raises InvalidInput naming the field."""
    if value is None or value == "":
        return []
    items = value if isinstance(value, list) else str(value).strip(" []").split(",")
    ids: list[int] = []
    for item in items:
        text = str(item).strip()
        if not text.isdigit() or isinstance(item, bool) or len(text) > MAX_DIGITS_TYPED:
            raise InvalidInput(
                _("Provider accounts tried first: list account ids, e.g. [3, 1]."),
                field="placement_accounts",
            )
        if int(text) not in ids:
            ids.append(int(text))
    known = set(ProviderAccount.objects.filter(pk__in=ids).values_list("pk", flat=True))
    missing = [str(pk) for pk in ids if pk not in known]
    if missing:
        raise InvalidInput(
            _("No provider account has the id %(ids)s.") % {"ids": ", ".join(missing)},
            field="placement_accounts",
        )
    return ids


def yes_or_no(value: Any) -> bool | None:
    """A yes-or-no setting as typed (a form's select, the admin's checkbox, the API's
    bool) as a bool; None when it is neither."""
    if isinstance(value, bool):
        return value
    text = "" if value is None else str(value).strip().lower()
    return text in YES if text in YES or text in NO else None


def half_life_hours(value: Any) -> Decimal | None:
    """Q5's half-life as typed, in hours: more than 0, at most 9,999.99, to the hundredth
    of an hour; None otherwise."""
    text = "" if value is None or isinstance(value, bool) else str(value).strip()
    if not text or len(text) > MAX_DIGITS_TYPED:
        return None
    try:
        hours = Decimal(text)
    except InvalidOperation:
        return None
    if not hours.is_finite() or not 0 < hours <= MAX_HALF_LIFE_HOURS:
        return None
    if hours != hours.quantize(Decimal("0.01")):
        return None
    return hours.quantize(Decimal("0.01"))


@transaction.atomic
def configure_pool(
    *, actor: Any, gpu_model: GpuModel | int, source: str = "web", **asked: Any
) -> Pool:
    """An admin changes some of the pool's ``SETTINGS`` (a name left out keeps its
    value). Q1 is checked under the pool's lock (``check_settings``); a refusal writes
    nothing. The changed settings are written with one audit event (``pool.changed``,
    before and after of what changed), the state follows Q1, and the queue is admitted
    into any new room. Asking for the values the pool already has changes nothing."""
    _require_admin(actor)
    pool = lock_pool(gpu_model)
    values = check_settings(pool, guaranteed=guaranteed_total(pool), **asked)
    changed = [name for name in SETTINGS if values[name] != getattr(pool, name)]
    if not changed:
        return pool
    before = {name: getattr(pool, name) for name in changed}
    for name in changed:
        setattr(pool, name, values[name])
    pool.save(update_fields=changed)
    audit.record(
        actor=actor,
        verb="pool.changed",
        obj=pool,
        source=source,
        before=before,
        after={name: values[name] for name in changed},
    )
    refresh_state(pool)
    if "capacity" in changed:
        jobs.admit_queued_on_commit(pool.gpu_model_id)
    return pool


def set_capacity(
    *, actor: Any, gpu_model: GpuModel | int, capacity: Any, source: str = "web"
) -> Pool:
    """Change C alone (admins): ``configure_pool`` with the capacity only."""
    return configure_pool(actor=actor, gpu_model=gpu_model, capacity=capacity, source=source)


@transaction.atomic
def mark_degraded(
    *, actor: Any, gpu_model: GpuModel | int, reason: Any, source: str = "web"
) -> Pool:
    """An admin marks the pool degraded for a reason the numbers do not show (the cloud
    cut the account's GPUs, a region is down): the pool is degraded until the mark is
    cleared, the admins are told (``refresh_state``), and the mark is audited
    (``pool.marked_degraded``). A new reason replaces the old one."""
    _require_admin(actor)
    reason = plain_text(
        reason, field="reason", max_length=DEGRADED_REASON_LENGTH, label=_("Reason")
    )
    if not reason:
        # Marking and clearing share a form and an endpoint: the reason the mark needs is
        # a rule over two inputs, not one field's.
        raise Conflict(_("Say why the pool is degraded."), code="reason_required", field="reason")
    pool = lock_pool(gpu_model)
    if reason == pool.degraded_reason:
        return pool
    before = {"state": pool.state, "degraded_reason": pool.degraded_reason}
    pool.degraded_reason = reason
    pool.save(update_fields=["degraded_reason"])
    audit.record(
        actor=actor,
        verb="pool.marked_degraded",
        obj=pool,
        source=source,
        before=before,
        after={"state": Pool.State.DEGRADED, "degraded_reason": reason},
    )
    return refresh_state(pool)


@transaction.atomic
def clear_degraded(*, actor: Any, gpu_model: GpuModel | int, source: str = "web") -> Pool:
    """An admin clears their mark (``pool.degraded_cleared``). The pool is ``ok`` again
    unless its capacity is still below its guarantees (Q1), which only a change of C or
    of the quotas mends. A pool not marked by hand is refused (nothing to clear)."""
    _require_admin(actor)
    pool = lock_pool(gpu_model)
    if not pool.degraded_reason:
        raise InvalidTransition(
            _("This pool is not marked degraded by an admin; there is no mark to clear."),
            code="not_marked",
        )
    before = {"state": pool.state, "degraded_reason": pool.degraded_reason}
    pool.degraded_reason = ""
    pool.save(update_fields=["degraded_reason"])
    refresh_state(pool)
    audit.record(
        actor=actor,
        verb="pool.degraded_cleared",
        obj=pool,
        source=source,
        before=before,
        after={"state": pool.state},
    )
    return pool


@transaction.atomic
def watch_availability(*, actor, gpu_model: GpuModel, count: int) -> AvailabilityWatch:
    """'Tell me when this fits': one notification when ``count`` GPUs of the model are free."""
    if not access.roles(actor):
        raise NotPermitted(_("Only project members can watch a pool."))
    if not isinstance(count, int) or count < 1 or count > 100_000:
        raise InvalidInput(_("Ask for at least one GPU."), field="count")
    watch, _created = AvailabilityWatch.objects.get_or_create(
        user=actor, gpu_model=gpu_model, count=count, notified_at=None
    )
    return watch


@transaction.atomic
def stop_watching(*, actor, watch: AvailabilityWatch, source: str = "web") -> None:
    """Remove one of the actor's own availability watches."""
    if watch.user_id != actor.pk:
        raise NotPermitted(_("This is not your watch."))
    audit.record(
        actor=actor,
        verb="watch.deleted",
        obj=watch,
        source=source,
        before={"gpu_model": watch.gpu_model_id, "count": watch.count},
    )
    watch.delete()


def tell_watchers(pool: Pool, *, now: datetime) -> int:
    """Within the caller's transaction, pool locked: each watch whose count now fits is
    told once (claimed by a conditional update, so a second pass tells nobody)."""
    free = pool.capacity - pool_use(pool).held
    told = 0
    for watch in AvailabilityWatch.objects.filter(
        gpu_model_id=pool.gpu_model_id, notified_at__isnull=True, count__lte=free
    ).select_related("user"):
        if AvailabilityWatch.objects.filter(pk=watch.pk, notified_at__isnull=True).update(
            notified_at=now
        ):
            messages.room_appeared(watch, pool=pool, free=free)
            told += 1
    return told
