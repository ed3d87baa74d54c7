"""Launches that lost their worker (L1): found by a sweep of the rows, never by waiting
for the broker, and driven again without a second cloud instance.

A claim is taken to be dead once it is older than PORTAL_LAUNCH_STALE_SECONDS, which is
sized from the driver's bounded calls (see the settings); the sweep runs every
PORTAL_LAUNCH_SWEEP_INTERVAL seconds and only reads and updates rows (no cloud call), so
a launch whose worker died is sent again within stale + sweep interval of its claim:
25 + 5 = 30 s, one sync period. The launch sent again finds what the dead one created:
by its tag (describe by idempotency key) and, when the describe does not list it yet,
by the ClientToken of the same attempt, which makes the cloud answer with that instance.
"""

from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from rental import jobs
from rental.fleet.failover import Attempt, Place, uncertain_places
from rental.models import Instance, ProviderAccount, Reservation
from rental.providers.base import TAG_IDEMPOTENCY_KEY, CloudInstance, CloudState
from rental.providers.registry import get_provider

State = Instance.State
Status = Reservation.Status
GONE = (CloudState.TERMINATED, CloudState.SHUTTING_DOWN)


def sweep_launches(*, now: datetime | None = None) -> list[int]:
    """Send again every launch of a provisioning lease that no live worker holds: claimed
    (launching, no cloud id) longer ago than the stale-claim time, or requested and not
    claimed within that time of its admission or of its scheduled retry (a message lost,
    or taken by a worker that died). Each is sent at most once per stale-claim time.
    Returns the instance ids sent."""
    now = now or timezone.now()
    stale = now - timedelta(seconds=settings.PORTAL_LAUNCH_STALE_SECONDS)
    provisioning = Instance.objects.filter(reservation__status=Status.PROVISIONING)
    claim_is_dead = {"state": State.LAUNCHING, "external_id": "", "claimed_at__lt": stale}
    dead_ids = list(provisioning.filter(**claim_is_dead).values_list("pk", flat=True))
    # Back to requested, conditionally: a claim renewed, or a launch the sync has found
    # meanwhile, is left alone. The condition names the row's own columns only, so that
    # PostgreSQL checks it again on the row it updates once any lock on it is released (a
    # condition through the lease's join is a subquery, answered from the statement's
    # snapshot: a row the sync has just marked running would be put back). The launch sent
    # below claims it again and looks for what the dead one created.
    if dead_ids:
        Instance.objects.filter(pk__in=dead_ids, **claim_is_dead).update(
            state=State.REQUESTED, claimed_at=None
        )
    lost = provisioning.filter(state=State.REQUESTED).filter(
        Q(next_attempt_at__isnull=True, reservation__start__lt=stale)
        | Q(next_attempt_at__lt=stale)
        | Q(pk__in=dead_ids)
    )
    ids = list(lost.values_list("pk", flat=True))
    if ids:
        Instance.objects.filter(pk__in=ids, state=State.REQUESTED).update(next_attempt_at=now)
        jobs.provision_now(ids)
    return ids


def sweep_terminations(*, now: datetime | None = None) -> list[int]:
    """Send again every termination whose worker died or whose message was lost: a row
    ``stopping`` whose termination was sent (or started) longer ago than the stale-claim
    time. A row first seen stopping is noted (its termination has just been sent on
    commit), so a termination is sent again within the stale-claim time plus two sweep
    intervals of the row becoming ``stopping``, whatever happened to the region's sync.
    A spot instance under notice is noted at the notice's end (``terminate_sent_at`` in
    the future) and never sent early. Returns the instance ids sent."""
    now = now or timezone.now()
    stale = now - timedelta(seconds=settings.PORTAL_LAUNCH_STALE_SECONDS)
    stopping = Instance.objects.filter(state=State.STOPPING)
    rows = list(stopping.values_list("pk", "terminate_sent_at"))  # terminations in flight
    first_seen = [pk for pk, sent_at in rows if sent_at is None]
    if first_seen:
        stopping.filter(pk__in=first_seen, terminate_sent_at__isnull=True).update(
            terminate_sent_at=now
        )
    lost = [pk for pk, sent_at in rows if sent_at is not None and sent_at < stale]
    if not lost:
        return []
    # Rows a termination is working on are locked by it and skipped; the others are
    # marked sent in the same transaction, so two sweeps never both send one.
    with transaction.atomic():
        ids = list(
            stopping.filter(pk__in=lost, terminate_sent_at__lt=stale)
            .select_for_update(skip_locked=True)
            .values_list("pk", flat=True)
        )
        if ids:
            Instance.objects.filter(pk__in=ids).update(terminate_sent_at=now)
    jobs.terminate_now(ids)
    return ids


def termination_is_stale(instance: Instance, *, now: datetime) -> bool:
    """Whether a ``stopping`` row's termination may have been lost (see above)."""
    stale = now - timedelta(seconds=settings.PORTAL_LAUNCH_STALE_SECONDS)
    return instance.terminate_sent_at is None or instance.terminate_sent_at < stale


def earlier_launch(
    instance: Instance, attempts: list[Attempt], place: Place
) -> tuple[Place, CloudInstance] | None:
    """Before a launch at ``place``: an instance that an earlier, unanswered call at
    another account or region created, found by the instance's tag there. (At the same
    place the driver's own look-up by tag and the ClientToken find it.) No call is made
    unless an earlier call elsewhere went unanswered or was accepted."""
    for earlier in uncertain_places(attempts):
        if (earlier.account_id, earlier.region) == (place.account_id, place.region):
            continue
        account = ProviderAccount.objects.get(pk=earlier.account_id)
        found = get_provider(account.config()).describe(
            region=earlier.region, tag_filter={TAG_IDEMPOTENCY_KEY: instance.idempotency_key}
        )
        live = [item for item in found if item.state not in GONE]
        if live:
            return earlier, live[0]
    return None
