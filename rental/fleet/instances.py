"""Launching instances: claim, try the places in turn, record the cloud's answer, fail
with a reason, mark running (the sync is in ``sync.py``, ending in ``termination.py``).

Provider calls are never made inside a database transaction: each function
reads and claims rows, commits, calls the cloud, then records the result in a
second short transaction. Every claim is a conditional update, so a duplicate
task delivery finds nothing to do.
"""

import json
import random
from datetime import datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone
from django.utils.translation import gettext_noop

from portal import audit
from portal.errors import InvalidInput
from portal.notifications import Event, notify
from portal.phrases import Phrase, Text, bounded
from rental import jobs
from rental.catalog import volumes
from rental.catalog.keys import keys_for_launch
from rental.fleet import launching, recovery
from rental.fleet.agent_install import agent_config, cloud_config
from rental.fleet.cloud import LaunchRetry, installation_tags, provider_for
from rental.fleet.failover import (
    Attempt,
    GiveUp,
    Place,
    TryAt,
    attempt_number,
    client_token,
    next_try,
)
from rental.fleet.termination import finish_if_all_terminated
from rental.loans.locks import lock_leases_of
from rental.loans.messages import lease_name
from rental.loans.usage import stop_billing_and_terminate
from rental.models import Instance, Reservation, TerminationReason, UsageRecord
from rental.providers.base import (
    TAG_PROJECT,
    TAG_REQUESTER,
    TAG_RESERVATION,
    CloudInstance,
    LaunchSpec,
    ProviderError,
    ProviderErrorKind,
)

State = Instance.State
Status = Reservation.Status


def launch_spec(instance: Instance) -> LaunchSpec:
    lease = instance.reservation
    image = launching.image_for(lease, instance.offering)
    tags = {
        **installation_tags(),
        TAG_PROJECT: lease.project.slug,
        TAG_RESERVATION: str(lease.pk),
        TAG_REQUESTER: lease.requester.get_username(),
    }
    keys = keys_for_launch(lease)
    user_data = cloud_config(instance, ssh_keys=keys)
    return LaunchSpec(
        region=instance.region,
        instance_type=instance.offering.instance_type,
        image_id=image.image_id if image else "",
        market=instance.market,
        tags=tuple(sorted(tags.items())),
        zone=instance.zone,
        user_data=user_data,
        name=f"gpu-portal {lease.project.slug} lease {lease.pk}",
        # Own servers (the ssh driver) set the account and the agent up themselves.
        ssh_public_keys=tuple(keys),
        agent_config=json.dumps(agent_config(instance)),
    )


def _claim_launch(instance_id: int, now: datetime) -> bool:
    claimed = Instance.objects.filter(pk=instance_id, state=State.REQUESTED).update(
        state=State.LAUNCHING, claimed_at=now, launch_attempts=F("launch_attempts") + 1
    )
    if claimed:
        return True
    # A claim whose worker died before recording a cloud id may be taken over once it is
    # stale; the driver's idempotency key makes a second launch find the first instance.
    stale = now - timedelta(seconds=settings.PORTAL_LAUNCH_STALE_SECONDS)
    return bool(
        Instance.objects.filter(
            pk=instance_id, state=State.LAUNCHING, external_id="", claimed_at__lt=stale
        ).update(claimed_at=now, launch_attempts=F("launch_attempts") + 1)
    )


def provision_instance(*, instance_id: int, now: datetime | None = None) -> None:
    """Launch one instance, exactly once however often this is delivered (L1), trying the
    places of rental.fleet.failover in turn (L2).

    Every call is an attempt row. Raises LaunchRetry (with the countdown the decision
    chose) while a try is left; bad requests and bad credentials, spent attempts and the
    provisioning timeout fail the lease with a message a person can act on.
    """
    now = now or timezone.now()
    if not _claim_launch(instance_id, now):
        return
    instance = Instance.objects.select_related(
        "reservation__project",
        "reservation__requester",
        "reservation__image",
        "reservation__gpu_model",
        "reservation__offering",
        "offering__account",  # whether its driver boots the lease's image
        "account",
    ).get(pk=instance_id)
    places = launching.launch_places(instance)
    attempts = launching.attempts_of(instance_id)
    decision = _next_try(instance, places, attempts, now=now)
    if isinstance(decision, GiveUp):
        message = launching.failure_message(
            instance, attempts, decision, last_message=instance.last_error, now=now
        )
        fail_instance(instance_id=instance_id, message=message, now=now)
        return
    try:
        earlier = recovery.earlier_launch(instance, attempts, decision.place)
        if earlier is not None:  # an earlier call elsewhere created it after all
            place, cloud = earlier
            launching.aim(instance, place, now=now)
            record_launch(instance_id=instance_id, cloud=cloud, now=now)
            return
        launching.aim(instance, decision.place, now=now)
        number = attempt_number(attempts=attempts, place=decision.place)
        cloud = provider_for(instance).launch(
            launch_spec(instance),
            idempotency_key=instance.idempotency_key,
            client_token=client_token(instance.idempotency_key, number),
        )
    except InvalidInput as no_rate:  # its currency has no exchange rate in force
        fail_instance(instance_id=instance_id, message=no_rate.text, now=now)
        return
    except ProviderError as exc:
        launching.record_attempt(
            instance, decision.place, kind=exc.kind.value, message=exc.message, at=now
        )
        if exc.kind != ProviderErrorKind.TRANSIENT:
            # The cloud refused, so nothing was created: a lease ended meanwhile need not
            # wait for this launch (terminate_instance waits for a launch in flight).
            _release_launch_of_ended(instance_id)
        attempts.append(Attempt(decision.place, exc.kind.value, now))
        after = _next_try(instance, places, attempts, now=now)
        if isinstance(after, GiveUp):
            message = launching.failure_message(
                instance, attempts, after, last_message=exc.message, now=now
            )
            fail_instance(instance_id=instance_id, message=message, now=now)
            return
        countdown = max(after.wait, 1)
        Instance.objects.filter(pk=instance_id, state=State.LAUNCHING).update(
            state=State.REQUESTED,
            last_error=exc.message[:500],
            next_attempt_at=now + timedelta(seconds=countdown),
        )
        raise LaunchRetry(exc.message, countdown=countdown) from exc
    launching.record_attempt(instance, decision.place, kind="", message="", at=now)
    record_launch(instance_id=instance_id, cloud=cloud, now=now)


def _next_try(
    instance: Instance, places: list[Place], attempts: list[Attempt], *, now: datetime
) -> TryAt | GiveUp:
    if attempts and not attempts[-1].kind:
        # The cloud accepted a launch whose answer was not recorded: the same place again,
        # where the idempotency key finds that instance.
        return TryAt(attempts[-1].place, 0)
    return next_try(
        places=places,
        attempts=attempts,
        policy=launching.launch_policy(),
        started_at=instance.provisioning_since or instance.reservation.start,
        now=now,
        jitter=random.random(),
    )


def _release_launch_of_ended(instance_id: int) -> None:
    if Instance.objects.filter(pk=instance_id, state=State.STOPPING, external_id="").update(
        claimed_at=None
    ):
        jobs.terminate_now([instance_id])


@transaction.atomic
def record_launch(*, instance_id: int, cloud: CloudInstance, now: datetime) -> None:
    instance = Instance.objects.select_for_update().get(pk=instance_id)
    if instance.external_id:
        return
    _link(instance, cloud, now=now)
    audit.record(
        actor=None,
        verb="instance.launched",
        obj=instance,
        project=instance.reservation.project_id,
        source="worker",
        at=now,
        after={"external_id": cloud.external_id, "zone": cloud.zone},
    )
    if instance.state in (State.TERMINATED, State.FAILED):
        # The row was closed while its launch was in flight: what the cloud created for it
        # must not outlive it. Back to stopping, so the terminate confirms the end.
        Instance.objects.filter(pk=instance.pk).update(state=State.STOPPING)
        jobs.terminate_on_commit(instance.pk)
    elif instance.state == State.STOPPING:  # the lease ended while the launch was in flight
        jobs.terminate_on_commit(instance.pk)
    else:
        pair = (instance.account_id, instance.region)
        transaction.on_commit(lambda: jobs.sync_soon(*pair))


def _link(instance: Instance, cloud: CloudInstance, *, now: datetime) -> None:
    instance.external_id = cloud.external_id
    instance.zone = cloud.zone
    instance.public_address = cloud.public_address
    instance.private_address = cloud.private_address
    instance.launched_at = cloud.launched_at or now
    instance.tags = dict(cloud.tags)
    if cloud.login_user:  # own servers: the lease's own account
        instance.ssh_user = cloud.login_user
    instance.last_error = ""
    instance.save()


@transaction.atomic
def fail_instance(
    *,
    instance_id: int,
    message: Text,
    now: datetime | None = None,
    code: str = "launch_failed",
) -> None:
    """A launch that cannot succeed: the instance and its lease fail with a reason; what
    the cloud may have created for it is terminated."""
    now = now or timezone.now()
    lock_leases_of([instance_id])  # the lock order: the lease before its instances
    instance = Instance.objects.select_for_update().get(pk=instance_id)
    if instance.state not in (State.REQUESTED, State.LAUNCHING):
        return
    instance.termination_reason = TerminationReason.FAILED
    instance.last_error = bounded(message, 500)
    if instance.external_id or instance.attempts.filter(kind__in=("", "transient")).exists():
        # An earlier call may have created it (accepted, or no answer): terminate whatever
        # carries its key. No launch of it is in flight any more.
        instance.state = State.STOPPING
        instance.claimed_at = None
        jobs.terminate_on_commit(instance.pk)
    else:
        instance.state = State.FAILED
        instance.terminated_at = now
    instance.save()
    lease = Reservation.objects.select_for_update().get(pk=instance.reservation_id)
    audit.record(
        actor=None,
        verb="instance.failed",
        obj=instance,
        project=lease.project_id,
        source="worker",
        at=now,
        after={"message": message},
    )
    if lease.status in (Status.PROVISIONING, Status.ACTIVE):
        lease.status = Status.ENDING
        lease.end_reason = TerminationReason.FAILED
        lease.status_code = code
        lease.status_message = bounded(message, 300)
        lease.ended_at = now
        lease.save()
        for other in lease.instances.select_for_update().exclude(pk=instance.pk):
            stop_billing_and_terminate(other, reason=TerminationReason.FAILED, at=now)
        finish_if_all_terminated(lease.pk)
        notify(
            [lease.requester],
            subject=Phrase(gettext_noop("Could not start %(lease)s"), lease=lease_name(lease)),
            body=message,
            link=lease.get_absolute_url(),
            event=Event.LEASE_STARTED,
            project=lease.project_id,
        )


def mark_running(instance: Instance, cloud: CloudInstance, *, now: datetime) -> None:
    """Within the caller's transaction: the instance runs; billing starts now (B1)."""
    lease = instance.reservation
    instance.state = State.RUNNING
    instance.running_at = now
    instance.public_address = cloud.public_address or instance.public_address
    instance.private_address = cloud.private_address or instance.private_address
    instance.zone = cloud.zone or instance.zone
    instance.save()
    UsageRecord.objects.create(
        instance=instance,
        project_id=lease.project_id,
        gpu_model_id=lease.gpu_model_id,
        tier=lease.tier,
        market=instance.market,
        gpu_count=instance.gpu_count,
        start=now,
        rate=(instance.rate_per_hour / instance.gpu_count).quantize(Decimal("0.000001")),
        currency=instance.currency,
        exchange_rate=instance.exchange_rate,
        exchange_rate_ref_id=instance.exchange_rate_ref_id,
    )
    audit.record(
        actor=None,
        verb="instance.running",
        obj=instance,
        project=lease.project_id,
        source="worker",
        at=now,
        after={"address": instance.public_address},
    )
    volumes.attach_when_running(instance, now=now)
    locked = Reservation.objects.select_for_update().get(pk=lease.pk)
    if (
        locked.status == Status.PROVISIONING
        and not locked.instances.exclude(
            state__in=(State.RUNNING, State.STOPPING, State.TERMINATED, State.FAILED)
        ).exists()
    ):
        locked.status = Status.ACTIVE
        if locked.notice_due_at is None:  # a lease told it is preempted keeps saying why
            locked.status_code = ""
            locked.status_message = ""
        locked.save()
        notify(
            [locked.requester],
            subject=Phrase(gettext_noop("Ready: %(lease)s"), lease=lease_name(locked)),
            body=Phrase(
                gettext_noop("SSH: %(user)s@%(host)s"),
                user=instance.ssh_user,
                host=instance.public_address,
            ),
            link=locked.get_absolute_url(),
            event=Event.LEASE_STARTED,
            project=locked.project_id,
        )
