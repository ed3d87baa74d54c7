"""An own server's state from each look at it: answering, or not answering for longer
than PORTAL_OWN_HOST_GRACE_SECONDS (then its pools are degraded, its live leases at
risk, and their engineers, their projects' managers and the admins told once; told once
again when it answers). GPUs busy with processes that no live lease stands for are
recorded and reported as orphans, like cloud instances no row stands for (L4), named by
host and GPU index; the portal never ends a process it did not start.
"""

from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.urls import reverse
from django.utils.translation import gettext_noop

from portal import audit
from portal.notifications import Message, admins, managers_of, notify_many
from portal.phrases import Joined, Phrase
from rental.fleet.orphans import report_orphans
from rental.loans.messages import lease_name
from rental.loans.pools import refresh_state
from rental.models import Instance, Orphan, OwnHost, Pool
from rental.providers.base import HostReport

State = OwnHost.State


def grace() -> timedelta:
    return timedelta(seconds=settings.PORTAL_OWN_HOST_GRACE_SECONDS)


def apply_report(*, host_id: int, report: HostReport, gpus: list[dict], now: datetime) -> OwnHost:
    """Keep one look at a host (its GPUs as ``own_hosts._gpus`` made them, empty when it
    did not answer): checked now; answering, it keeps the GPUs found and pins the host key
    learned when none is pinned; not answering, its last GPUs are kept and the time it
    stopped answering, and past the grace period it is ``unreachable``. A change of state
    is audited, degrades or restores the pools of its GPU models and tells people once."""
    with transaction.atomic():
        host = OwnHost.objects.select_for_update().select_related("account").get(pk=host_id)
        before = host.state
        host.checked_at = now
        host.state_message = report.message[:2000]
        if report.reachable:
            host.gpus = gpus
            host.state, host.unreachable_since = State.OK, None
            if not host.host_key and report.host_key:
                host.host_key = report.host_key
        else:
            host.unreachable_since = host.unreachable_since or now
            if now - host.unreachable_since >= grace():
                host.state = State.UNREACHABLE
        host.save()
        if host.state != before:
            _state_changed(host, before=before, now=now)
        if report.reachable:
            _note_orphans(host, report, now=now)
    return host


def _state_changed(host: OwnHost, *, before: str, now: datetime) -> None:
    """Audited; the pools of its GPU models degraded or restored; people told (never for
    the first answer of a host not checked before)."""
    audit.record(
        actor=None,
        verb="own_host.state",
        obj=host,
        source="worker",
        at=now,
        before={"state": before},
        after={"state": host.state, "message": host.state_message[:200]},
    )
    for pool in (
        Pool.objects.select_for_update()
        .filter(gpu_model_id__in=list(host.gpu_models()))
        .select_related("gpu_model")
    ):
        refresh_state(pool, now=now)
    if host.state == State.UNREACHABLE:
        _tell(host, down=True)
    elif before == State.UNREACHABLE:
        _tell(host, down=False)


def live_instances(host: OwnHost) -> list[Instance]:
    """The live instances on ``host``: placed in its zone, or holding its GPUs in its last
    report."""
    keys = [gpu["lease"] for gpu in host.gpus if gpu.get("lease")]
    return list(
        Instance.objects.filter(account_id=host.account_id, state__in=Instance.LIVE)
        .filter(Q(zone=host.name) | Q(idempotency_key__in=keys))
        .select_related("reservation__project", "reservation__requester", "reservation__gpu_model")
    )


def _tell(host: OwnHost, *, down: bool) -> None:
    """Each lease on the host: its engineer and its project's managers; the admins once
    with every lease named."""
    instances = live_instances(host)
    if down:
        subject = gettext_noop("At risk: %(lease)s (server %(host)s is not answering)")
        body = Phrase(
            gettext_noop(
                "The own GPU server %(host)s has not answered since %(since)s UTC. Your "
                "lease's processes may have stopped; save what you can once it answers "
                "again. You are told again when it does."
            ),
            host=host.name,
            since=host.unreachable_since,
        )
    else:
        subject = gettext_noop("Server %(host)s answers again: %(lease)s")
        body = Phrase(
            gettext_noop("The own GPU server %(host)s answers again; your lease runs on it."),
            host=host.name,
        )
    batch = []
    for instance in instances:
        lease = instance.reservation
        batch.append(
            (
                [lease.requester, *managers_of(lease.project_id)],
                Message(
                    subject=Phrase(subject, lease=lease_name(lease), host=host.name),
                    body=body,
                    link=lease.get_absolute_url(),
                ),
            )
        )
        audit.record(
            actor=None,
            verb="lease.at_risk" if down else "lease.out_of_risk",
            obj=lease,
            project=lease.project_id,
            source="worker",
            after={"host": host.name, "instance": instance.pk},
        )
    admin_subject = (
        gettext_noop("Own GPU server %(host)s is not answering")
        if down
        else gettext_noop("Own GPU server %(host)s answers again")
    )
    batch.append(
        (
            admins(),
            Message(
                subject=Phrase(admin_subject, host=host.name),
                body=Joined(
                    [
                        host.state_message or "-",  # the driver's words, as they came
                        *(lease_name(instance.reservation) for instance in instances),
                    ],
                    "\n",
                ),
                link=reverse("admin:rental_ownhost_change", args=[host.pk]),
            ),
        )
    )
    notify_many(batch)


def _orphan_id(host: OwnHost, what: str) -> str:
    return f"{host.name}:{what}"[:64]


def stray_work(host: OwnHost, report: HostReport) -> dict[str, dict]:
    """GPUs busy with processes while no allocation of the portal holds them, by orphan
    id. (An allocation whose key is no live instance's is the sync's orphan: the driver's
    describe lists it with this installation's tag, L4.)"""
    held = {index for _key, indexes in report.leases for index in indexes}
    return {
        _orphan_id(host, f"gpu{gpu.index}"): {
            "host": host.name,
            "gpu_index": gpu.index,
            "pids": list(gpu.busy_pids),
        }
        for gpu in report.gpus
        if gpu.busy_pids and gpu.index not in held
    }


def _note_orphans(host: OwnHost, report: HostReport, *, now: datetime) -> None:
    """Record what ``stray_work`` finds as orphans of the host's account (their region is
    the host's name), close those no longer seen, and report to the admins, once, those
    seen at least the orphan grace period apart (as cloud orphans are)."""
    found = stray_work(host, report)
    region = host.name[:32]
    mine = Orphan.objects.filter(account_id=host.account_id, region=region)
    open_ = mine.exclude(status__in=(Orphan.Status.TERMINATED, Orphan.Status.ADOPTED))
    open_.exclude(external_id__in=list(found)).update(
        status=Orphan.Status.TERMINATED, last_seen_at=now
    )
    if not found:
        return
    existing = set(
        Orphan.objects.filter(account_id=host.account_id, external_id__in=list(found)).values_list(
            "external_id", flat=True
        )
    )
    Orphan.objects.filter(account_id=host.account_id, external_id__in=existing).update(
        last_seen_at=now, status=Orphan.Status.OPEN
    )
    Orphan.objects.bulk_create(
        Orphan(
            account_id=host.account_id,
            region=region,
            external_id=external_id,
            instance_type=_what(tags),
            cloud_state="running",
            tags=tags,
            first_seen_at=now,
            last_seen_at=now,
        )
        for external_id, tags in found.items()
        if external_id not in existing
    )
    due = list(
        Orphan.objects.filter(
            account_id=host.account_id,
            region=region,
            external_id__in=list(found),
            reported_at__isnull=True,
            first_seen_at__lte=now - timedelta(seconds=settings.PORTAL_ORPHAN_GRACE_SECONDS),
        )
    )
    report_orphans(account=host.account, orphans=due, now=now)


def _what(tags: dict) -> str:
    """An orphan's "instance type" column for an own server: which GPU."""
    return f"GPU {tags['gpu_index']}"
