"""Data volumes (issue 8.9): a project's disks that outlive leases.

Created from the project page in a zone where an enabled offering runs, through the
driver contract (rental.fleet.volume_cloud, via rental.jobs); picked on the request
form, which places the launch in the volume's zone; attached when the lease's instance
runs, detached when it ends. Nothing but a person's explicit delete removes a volume:
reaping, the lease's end and the instance's termination never do.
"""

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from portal import access, audit
from portal.errors import Conflict, InvalidInput, InvalidTransition, NotPermitted
from portal.text import plain_text
from rental import jobs, selectors
from rental.catalog import storage
from rental.catalog.capabilities import drivers_that_can
from rental.models import DataVolume, GpuModel, Instance, Offering, Reservation
from rental.providers.base import Capability

VState = DataVolume.State
DEVICE = "/dev/sdf"


@dataclass(frozen=True)
class VolumeZone:
    """A zone a volume can be created in: an enabled offering runs there."""

    zone: str
    region: str
    account_id: int
    account_name: str
    rate_per_gb_month: Decimal

    @property
    def label(self) -> str:
        return f"{self.zone} ({self.account_name})"


def volume_zones() -> list[VolumeZone]:
    """Every (account, zone) listed by an available offering of an active account, with the
    lowest storage price of the offerings there; sorted by zone."""
    best: dict[tuple[int, str], VolumeZone] = {}
    offerings = Offering.objects.filter(
        is_available=True,
        account__is_active=True,
        account__driver__in=drivers_that_can(Capability.VOLUMES),  # own servers have none
    ).select_related("account")
    for offering in offerings.order_by("pk"):
        for zone in offering.zones or ():
            key = (offering.account_id, zone)
            price = offering.storage_price_per_gb_month
            if key not in best or price < best[key].rate_per_gb_month:
                best[key] = VolumeZone(
                    zone, offering.region, offering.account_id, offering.account.name, price
                )
    return sorted(best.values(), key=lambda z: (z.zone, z.account_name))


def why_no_zone(zones: list[VolumeZone]) -> str:
    """Why no data volume can be created in this installation, in words for the person
    on the project page; empty when some zone can take one (``volume_zones``)."""
    if zones:
        return ""
    if not selectors.on_sale().exists():
        return _(
            "No data volume can be created: no instance type is on sale, so there is no "
            "zone where a lease could use one."
        )
    volume_drivers = drivers_that_can(Capability.VOLUMES)
    if not selectors.on_sale().filter(account__driver__in=volume_drivers).exists():
        return _(
            "No data volume can be created: every instance type on sale runs where no "
            "data volume can be kept (own GPU servers keep none)."
        )
    return _(
        "No data volume can be created: no instance type on sale lists its availability "
        "zones, and a volume must be made in the zone where its leases will run. An admin "
        "can add the zones to the offerings."
    )


def _check_member(actor, project) -> None:
    if not access.can_request_for(actor, project):
        raise NotPermitted(
            _("Only members of %(project)s can manage its data volumes.") % {"project": project}
        )


def parse_size(value: object) -> int:
    try:
        size = int(str(value).strip())
    except (TypeError, ValueError):
        raise InvalidInput(_("Enter the size as a whole number of GB."), field="size_gb") from None
    maximum = settings.PORTAL_VOLUME_MAX_GB
    if not 1 <= size <= maximum:  # the site's setting: a rule, not the field's shape
        raise Conflict(
            _("A data volume is 1 to %(max)s GB.") % {"max": maximum},
            code="over_max_size",
            field="size_gb",
        )
    return size


@transaction.atomic
def create_volume(
    *,
    actor,
    project,
    name: str,
    size_gb: object,
    zone: str,
    now: datetime | None = None,
    source: str = "web",
) -> DataVolume:
    """Record a new volume (state ``creating``) and create it in the cloud on commit."""
    now = now or timezone.now()
    _check_member(actor, project)
    name = plain_text(name, field="name", max_length=80, label=_("Name"))
    if not name:
        raise InvalidInput(_("Give the volume a name of 1 to 80 characters."), field="name")
    size = parse_size(size_gb)
    choices = [z for z in volume_zones() if z.zone == zone]
    if not choices:
        raise Conflict(
            _("Pick a zone where an instance type is offered."), field="zone", code="bad_zone"
        )
    place = min(choices, key=lambda z: (z.rate_per_gb_month, z.account_id))
    live = (
        DataVolume.objects.select_for_update().filter(project=project).exclude(state=VState.DELETED)
    )
    if live.filter(name=name).exists():
        raise Conflict(
            _("%(project)s already has a volume named %(name)s.")
            % {"project": project, "name": name},
            code="name_taken",
            field="name",
        )
    volume = DataVolume.objects.create(
        project=project,
        account_id=place.account_id,
        name=name,
        region=place.region,
        zone=place.zone,
        size_gb=size,
        storage_rate_per_gb_month=place.rate_per_gb_month,
        created_by=actor if getattr(actor, "is_authenticated", False) else None,
        created_at=now,
    )
    audit.record(
        actor=actor,
        verb="volume.created",
        obj=volume,
        project=project.pk,
        source=source,
        at=now,
        after={"name": name, "size_gb": size, "zone": place.zone},
    )
    jobs.create_volume_on_commit(volume.pk)
    return volume


def busy_lease(volume: DataVolume) -> Reservation | None:
    """The lease (not finished) that holds this volume, if any."""
    return (
        Reservation.objects.filter(data_volume=volume)
        .exclude(status__in=Reservation.FINAL)
        .order_by("pk")
        .first()
    )


@transaction.atomic
def delete_volume(
    *, actor, volume: DataVolume, now: datetime | None = None, source: str = "web"
) -> DataVolume:
    """A person's explicit delete: only a volume attached nowhere and held by no lease."""
    now = now or timezone.now()
    _check_member(actor, volume.project)
    locked = DataVolume.objects.select_for_update().get(pk=volume.pk)
    holder = busy_lease(locked)
    if holder is not None:
        raise InvalidTransition(
            _("Lease #%(id)s uses this volume; end it first.") % {"id": holder.pk},
            code="volume_in_use",
        )
    if locked.state not in (VState.AVAILABLE, VState.FAILED) or locked.attached_instance_id:
        raise InvalidTransition(
            _("Only an available volume can be deleted; this one is %(state)s.")
            % {"state": locked.get_state_display().lower()},
            code="volume_in_use",
        )
    before = locked.state
    if locked.state == VState.FAILED and not locked.volume_id:
        locked.state, locked.deleted_at = VState.DELETED, now
    else:
        locked.state = VState.DELETING
        jobs.delete_volume_on_commit(locked.pk)
    locked.save(update_fields=["state", "deleted_at"])
    audit.record(
        actor=actor,
        verb="volume.deleted",
        obj=locked,
        project=locked.project_id,
        source=source,
        at=now,
        before={"state": before},
        after={"state": locked.state},
    )
    return locked


# -- on the request form ---------------------------------------------------------------


def offering_fits_volume(offering: Offering, volume: DataVolume) -> bool:
    """An offering can run next to the volume: same account and region, and the volume's
    zone among its zones (or it lists none, and the cloud is told the zone)."""
    return (offering.account_id, offering.region) == (volume.account_id, volume.region) and (
        not offering.zones or volume.zone in offering.zones
    )


def offerings_near(
    volume: DataVolume, *, gpu_model: GpuModel, gpu_count: int, market: str
) -> list[Offering]:
    """The offerings that carry ``gpu_count`` GPUs as one instance next to the volume,
    cheapest first (a volume attaches to one instance)."""
    return [
        offering
        for offering in selectors.fitting_offerings(
            gpu_model=gpu_model, gpu_count=gpu_count, market=market
        )
        if offering.gpus_per_instance == gpu_count and offering_fits_volume(offering, volume)
    ]


def check_volume(
    volume: DataVolume,
    *,
    project,
    gpu_model: GpuModel,
    gpu_count: int,
    market: str,
    offering: Offering | None = None,
) -> Offering:
    """The offering a lease of ``project`` with this volume runs on: the one picked if it
    runs in the volume's zone, else the cheapest there. InvalidInput naming the field
    when the volume is another project's, not available, held by a live lease, or in a
    zone no offering of the model serves with this many GPUs. Reads only: the request
    form's estimate asks it as it is; ``lease_request.submit_with_volume`` asks it under
    the lock."""
    if volume.project_id != project.pk:
        raise Conflict(_("This volume belongs to another project."), field="data_volume")
    if volume.state != VState.AVAILABLE or volume.attached_instance_id is not None:
        raise Conflict(
            _("The volume %(name)s is %(state)s, not available.")
            % {"name": volume.name, "state": volume.get_state_display().lower()},
            field="data_volume",
            code="volume_unavailable",
        )
    holder = busy_lease(volume)
    if holder is not None:
        raise Conflict(
            _("The volume %(name)s is already used by lease #%(id)s.")
            % {"name": volume.name, "id": holder.pk},
            field="data_volume",
            code="volume_in_use",
        )
    candidates = offerings_near(volume, gpu_model=gpu_model, gpu_count=gpu_count, market=market)
    if offering is not None and offering.pk not in {o.pk for o in candidates}:
        raise Conflict(
            _("%(type)s does not run in the volume's zone %(zone)s as one instance.")
            % {"type": offering.instance_type, "zone": volume.zone},
            field="offering",
            code="volume_zone",
        )
    if not candidates:
        raise Conflict(
            _(
                "No instance type carries %(n)s GPUs in one instance in %(zone)s, "
                "the zone of %(name)s."
            )
            % {"n": gpu_count, "zone": volume.zone, "name": volume.name},
            field="data_volume",
            code="volume_zone",
        )
    return offering or candidates[0]


# -- following the instance ------------------------------------------------------------


def attach_when_running(instance: Instance, *, now: datetime) -> None:
    """Within mark_running's transaction: the lease's volume is attached to its instance
    (on commit, through the driver). A resumed instance still has it: nothing to do."""
    volume_id = instance.reservation.data_volume_id
    if volume_id is None:
        return
    volume = DataVolume.objects.select_for_update().get(pk=volume_id)
    if volume.state != VState.AVAILABLE or volume.attached_instance_id is not None:
        return
    volume.state = VState.ATTACHING
    volume.attached_instance = instance
    volume.device = DEVICE
    volume.claimed_at = None
    volume.save(update_fields=["state", "attached_instance", "device", "claimed_at"])
    jobs.attach_volume_on_commit(volume.pk)


def release_from(ended: dict[int, datetime]) -> None:
    """Within the caller's transaction: the instances (id → when) are terminated; their
    volumes are detached and available again, never deleted."""
    if not ended:
        return
    for volume in DataVolume.objects.select_for_update().filter(
        attached_instance_id__in=list(ended)
    ):
        at = ended[volume.attached_instance_id]
        instance_id = volume.attached_instance_id
        volume.state = VState.AVAILABLE if volume.state != VState.DELETED else volume.state
        volume.attached_instance = None
        volume.device = ""
        volume.save(update_fields=["state", "attached_instance", "device"])
        audit.record(
            actor=None,
            verb="volume.detached",
            obj=volume,
            project=volume.project_id,
            source="worker",
            at=at,
            after={"instance": instance_id},
        )


def instance_ended(ended: dict[int, datetime]) -> None:
    """Within the caller's transaction: what an instance's termination means for storage —
    its volumes are released and its stopped disk stops being billed."""
    release_from(ended)
    storage.close_disks(ended)
