"""Idle reaping (L6): what the portal does with the count (``idle_rules``): warn the
engineer, alert the manager, reap the lease, and take an engineer's word that the
instance is still in use."""

from collections.abc import Sequence
from datetime import datetime

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from portal import audit
from portal.errors import InvalidTransition, NotPermitted
from portal.notifications import Event, managers_of, notify
from portal.phrases import Phrase, duration
from rental.agent.idle_rules import (
    ACTIVE,
    IdleEvent,
    IdlePolicy,
    IdleSample,
    classify,
    idle_counts,
    idle_events,
)
from rental.loans.ending import end_reservation
from rental.loans.locks import lock_leases_of
from rental.loans.messages import instance_name, lease_name
from rental.models import Instance, Priority, Reservation, TerminationReason, UtilizationSample


def policy_for(priority: str) -> IdlePolicy:
    numbers = settings.PORTAL_IDLE_POLICY.get(priority, {})
    return IdlePolicy(
        threshold_percent=settings.PORTAL_IDLE_THRESHOLD_PERCENT,
        require_nobody_connected=settings.PORTAL_IDLE_REQUIRE_NOBODY_CONNECTED,
        warn=numbers.get("warn", 20),
        reap=numbers.get("reap"),
        alert_manager=numbers.get("alert_manager"),
    )


def _as_idle_sample(row: UtilizationSample) -> IdleSample:
    return IdleSample(at=row.at, gpu_utilization=row.gpu_utilization, ssh_sessions=row.ssh_sessions)


def _window(policy: IdlePolicy) -> int:
    return max(n for n in (policy.warn, policy.reap, policy.alert_manager) if n is not None)


def count_before(instance: Instance, policy: IdlePolicy, *, before: datetime) -> int:
    """The consecutive-idle count the instance had before ``before`` (since its reset)."""
    rows = UtilizationSample.objects.filter(instance=instance, at__lt=before)
    if instance.idle_reset_at:
        rows = rows.filter(at__gt=instance.idle_reset_at)
    recent = list(rows.order_by("-at")[: _window(policy) + 1])
    recent.reverse()
    counts = idle_counts([_as_idle_sample(row) for row in recent], policy)
    return counts[-1] if counts else 0


def apply_new_samples(instance: Instance, samples: Sequence[IdleSample], *, now: datetime) -> None:
    """Within the caller's transaction, after the new samples are stored: warn, alert or
    reap according to the lease's priority."""
    lease = instance.reservation
    if lease.status != Reservation.Status.ACTIVE or not samples:
        return
    policy = policy_for(lease.priority)
    fresh = [s for s in samples if not instance.idle_reset_at or s.at > instance.idle_reset_at]
    if not fresh:
        return
    # A busy first sample resets the count: the history need not be read (most heartbeats).
    first_busy = classify(fresh[0], policy) == ACTIVE
    start = 0 if first_busy else count_before(instance, policy, before=fresh[0].at)
    for event in idle_events(fresh, policy, start=start):
        if event.action == "warn":
            _warn(instance, lease, event, policy, now=now)
        elif event.action == "alert_manager":
            _alert_manager(instance, lease, event)
        elif event.action == "reap" and lease.priority != Priority.PRODUCTION:
            _reap(instance, lease, event, now=now)
            return
    # Busy again after a warning: the warning no longer stands.
    last_active = max((s.at for s in fresh if classify(s, policy) == ACTIVE), default=None)
    if instance.idle_warned_at and last_active and last_active > instance.idle_warned_at:
        instance.idle_warned_at = None
        instance.save(update_fields=["idle_warned_at"])


def _warn(instance: Instance, lease: Reservation, event: IdleEvent, policy: IdlePolicy, *, now):
    instance.idle_warned_at = event.at
    instance.save(update_fields=["idle_warned_at"])
    heartbeat = settings.PORTAL_AGENT_HEARTBEAT_SECONDS
    idle_for = duration(event.count * heartbeat)
    if policy.reap is not None and lease.priority != Priority.PRODUCTION:
        body = Phrase(
            gettext_noop(
                "Every GPU of %(instance)s has been below %(threshold)s %% for %(elapsed)s. "
                "It will be ended as idle after %(left)s more of idling unless you say you "
                "are still using it."
            ),
            instance=instance_name(instance),
            threshold=policy.threshold_percent,
            elapsed=idle_for,
            left=duration((policy.reap - event.count) * heartbeat),
        )
    else:
        body = Phrase(
            gettext_noop(
                "Every GPU of %(instance)s has been below %(threshold)s %% for %(elapsed)s."
            ),
            instance=instance_name(instance),
            threshold=policy.threshold_percent,
            elapsed=idle_for,
        )
    notify(
        [lease.requester],
        subject=Phrase(gettext_noop("Idle: %(lease)s"), lease=lease_name(lease)),
        body=body,
        link=lease.get_absolute_url(),
        event=Event.IDLE_WARNING,
        project=lease.project_id,
    )
    audit.record(
        actor=None,
        verb="instance.idle_warned",
        obj=instance,
        project=lease.project_id,
        source="worker",
        at=event.at,
        after={"idle_samples": event.count},
    )


def _alert_manager(instance: Instance, lease: Reservation, event: IdleEvent) -> None:
    notify(
        managers_of(lease.project_id),
        subject=Phrase(gettext_noop("Idle production lease: %(lease)s"), lease=lease_name(lease)),
        body=Phrase(
            gettext_noop(
                "%(instance)s of a production lease has had %(count)s idle samples in a row. "
                "Production leases are never reaped; please check with %(user)s."
            ),
            instance=instance_name(instance),
            count=event.count,
            user=lease.requester.get_username(),
        ),
        link=lease.get_absolute_url(),
        event=Event.IDLE_WARNING,
        project=lease.project_id,
    )
    audit.record(
        actor=None,
        verb="instance.idle_alerted",
        obj=instance,
        project=lease.project_id,
        source="worker",
        at=event.at,
        after={"idle_samples": event.count},
    )


def _reap(instance: Instance, lease: Reservation, event: IdleEvent, *, now: datetime) -> None:
    end_reservation(
        actor=None, reservation=lease, reason=TerminationReason.IDLE, now=event.at, source="worker"
    )
    Reservation.objects.filter(pk=lease.pk).update(
        status_message=Phrase(
            gettext_noop("Ended after %(count)s idle samples in a row."), count=event.count
        )
    )
    notify(
        [lease.requester],
        subject=Phrase(gettext_noop("Reaped as idle: %(lease)s"), lease=lease_name(lease)),
        body=Phrase(
            gettext_noop(
                "Every GPU stayed below the idle threshold for %(count)s samples in a row."
            ),
            count=event.count,
        ),
        link=lease.get_absolute_url(),
        event=Event.IDLE_WARNING,
        project=lease.project_id,
    )


@transaction.atomic
def still_using(
    *, actor, instance: Instance, now: datetime | None = None, source: str = "web"
) -> Instance:
    """ "I'm still using it": the idle count starts again from zero, once per warning."""
    now = now or timezone.now()
    lock_leases_of([instance.pk])  # the lock order: the lease before its instance
    instance = (
        Instance.objects.select_for_update().select_related("reservation").get(pk=instance.pk)
    )
    lease = instance.reservation
    if actor.pk != lease.requester_id:
        raise NotPermitted(_("Only the engineer who requested this lease can keep it."))
    if instance.idle_warned_at is None or (
        instance.idle_reset_at and instance.idle_reset_at >= instance.idle_warned_at
    ):
        raise InvalidTransition(_("There is no idle warning to answer."))
    if lease.status != Reservation.Status.ACTIVE:
        raise InvalidTransition(_("This lease is no longer active."))
    instance.idle_reset_at = max(now, instance.agent_last_sample_at or now)
    instance.save(update_fields=["idle_reset_at"])
    audit.record(
        actor=actor,
        verb="instance.idle_reset",
        obj=instance,
        project=lease.project_id,
        source=source,
        at=now,
    )
    return instance
