"""Images: whether one runs on an offering (the form's CUDA check), and saving a lease's
instance as an image for its project (EC2 CreateImage through the driver contract).

Saving is a row first (state ``pending``, an idempotency key), then the cloud side in a
task that polls until the cloud says ``available`` or ``failed``. The driver tags the
image with the key, so a task delivered twice finds the first image instead of making a
second one. A project image appears in the request form once available.
"""

import re
import uuid
from datetime import datetime

from django.conf import settings
from django.db import transaction
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from portal import access, audit
from portal.errors import InvalidInput, InvalidTransition, NotPermitted
from portal.notifications import notify
from portal.phrases import Phrase, Text, bounded, duration
from portal.text import plain_text
from rental import jobs
from rental.catalog.capabilities import check_lease_can
from rental.catalog.image_rules import driver_conflict
from rental.models import Image, Instance, Offering, Reservation
from rental.providers.base import (
    TAG_INSTALLATION,
    TAG_PROJECT,
    Capability,
    ImageState,
    ProviderError,
)
from rental.providers.registry import get_provider

State = Image.State
SAVABLE_STATUSES = (Reservation.Status.ACTIVE, Reservation.Status.STOPPED)
SAVABLE_STATES = (Instance.State.RUNNING, Instance.State.STOPPED)
# The task polls every POLL_SECONDS; an image still pending after MAX_POLLS fails.
POLL_SECONDS = 30
MAX_POLLS = 240  # two hours
_CLOUD_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9()\[\] ./'@_-]+")


# --- Does it run there? ----------------------------------------------------------------


def conflict_message(image: Image | None, offering: Offering | None) -> str:
    """Why ``image`` cannot run on ``offering``'s hosts, naming both versions; ``""``
    when it can (or when the versions to tell are not recorded)."""
    if image is None or offering is None:
        return ""
    conflict = driver_conflict(
        image_cuda=image.cuda_version,
        image_driver=image.driver_version,
        offering_max_cuda=offering.max_cuda_version,
        offering_driver=offering.driver_version,
    )
    if conflict is None:
        return ""
    values = {
        "image": image.name,
        "need": conflict.image_needs,
        "type": offering.instance_type,
        "have": conflict.offering_has,
    }
    if conflict.kind == "cuda":
        return (
            _(
                "%(image)s needs CUDA %(need)s, but the driver of %(type)s supports CUDA "
                "up to %(have)s. Pick an image with CUDA %(have)s or older, or another "
                "instance type."
            )
            % values
        )
    return (
        _(
            "%(image)s needs NVIDIA driver %(need)s or newer, but %(type)s runs driver "
            "%(have)s. Pick another image or instance type."
        )
        % values
    )


def check_image_fits(image: Image | None, offering: Offering | None) -> None:
    """Refuse (a field error on the image) an image whose CUDA the offering's driver
    cannot run: the instance would be marked unhealthy at its first heartbeat (L8)."""
    message = conflict_message(image, offering)
    if message:
        raise InvalidInput(message, code="image_needs_newer_driver", field="image")


# --- Save as image ---------------------------------------------------------------------


def _check_actor(actor, lease: Reservation) -> None:
    """The requester saves their own lease; a manager of the project any of its leases."""
    if access.can_manage(actor, lease.project):
        return
    if lease.requester_id == actor.pk and access.can_request_for(actor, lease.project):
        return
    raise NotPermitted(
        _("Only the lease's requester or a manager of %(project)s can save it as an image.")
        % {"project": lease.project}
    )


@transaction.atomic
def save_as_image(
    *,
    actor,
    reservation: Reservation,
    name: str,
    now: datetime | None = None,
    source: str = "web",
) -> Image:
    """Record a pending project image of the lease's instance and send its CreateImage."""
    now = now or timezone.now()
    _check_actor(actor, reservation)
    name = " ".join(plain_text(name, field="name", max_length=100, label=_("Name")).split())
    if not name:
        raise InvalidInput(_("Give the image a name."), field="name")
    if len(name) > 100:
        raise InvalidInput(_("Keep the name under 100 characters."), field="name")
    lease = (
        Reservation.objects.select_for_update(of=("self",))
        .select_related("image")
        .get(pk=reservation.pk)
    )
    if lease.status not in SAVABLE_STATUSES:
        raise InvalidTransition(_("Only a running or stopped lease can be saved as an image."))
    check_lease_can(lease, Capability.IMAGES)  # 400: a driver without images
    instance = (
        lease.instances.select_for_update()
        .filter(state__in=SAVABLE_STATES)
        .exclude(external_id="")
        .order_by("pk")
        .first()
    )
    if instance is None:
        raise InvalidTransition(_("This lease has no running or stopped instance to save."))
    if Image.objects.filter(project_id=lease.project_id, name=name).exists():
        raise InvalidInput(
            _("%(project)s already has an image named “%(name)s”.")
            % {"project": lease.project, "name": name},
            field="name",
        )
    base = lease.image
    image = Image.objects.create(
        name=name,
        account_id=instance.account_id,
        region=instance.region,
        image_id="",
        os=base.os if base else "",
        driver_version=base.driver_version if base else "",
        cuda_version=base.cuda_version if base else "",
        frameworks=base.frameworks if base else "",
        framework_versions=dict(base.framework_versions) if base else {},
        ssh_user=base.ssh_user if base else instance.ssh_user or "ubuntu",
        project_id=lease.project_id,
        source_reservation=lease,
        source_instance=instance,
        created_by=actor,
        state=State.PENDING,
        idempotency_key=f"{settings.PORTAL_INSTALLATION_ID}-img-{uuid.uuid4().hex}"[:64],
        created_at=now,
    )
    audit.record(
        actor=actor,
        verb="image.requested",
        obj=image,
        project=lease.project_id,
        source=source,
        at=now,
        after={"name": name, "lease": lease.pk, "instance": instance.external_id},
    )
    jobs.save_image_on_commit(image.pk)
    return image


def _cloud_name(image: Image) -> str:
    """Unique per account and region (EC2 refuses a second image of one name)."""
    safe = _CLOUD_NAME_UNSAFE.sub("-", image.name).strip() or "image"
    return f"gpu-portal {image.project.slug} {image.pk} {safe}"[:128]


def advance_image(*, image_id: int, now: datetime | None = None) -> bool:
    """One step of the cloud side: CreateImage once (idempotent), then describe. Returns
    True when the image is settled (available or failed), False to poll again. A
    retryable ProviderError propagates (the task retries); any other fails the image."""
    image = Image.objects.select_related("account", "project", "source_instance").get(pk=image_id)
    if image.state != State.PENDING:
        return True
    provider = get_provider(image.account.config())
    try:
        if not image.image_id:
            source = image.source_instance
            if source is None or not source.external_id:
                fail_image(
                    image_id=image.pk,
                    message=Phrase(gettext_noop("The instance to save is gone.")),
                    now=now,
                )
                return True
            cloud = provider.create_image(
                source.external_id,
                region=image.region,
                name=_cloud_name(image),
                idempotency_key=image.idempotency_key,
                tags=(
                    (TAG_INSTALLATION, settings.PORTAL_INSTALLATION_ID),
                    (TAG_PROJECT, image.project.slug),
                ),
            )
            Image.objects.filter(pk=image.pk, image_id="").update(image_id=cloud.image_id)
        else:
            found = provider.describe_images([image.image_id], region=image.region)
            if not found:
                fail_image(
                    image_id=image.pk,
                    message=Phrase(gettext_noop("The cloud no longer knows this image.")),
                    now=now,
                )
                return True
            cloud = found[0]
    except ProviderError as error:
        if error.retryable:
            raise
        fail_image(image_id=image.pk, message=str(error), now=now)
        return True
    if cloud.state == ImageState.AVAILABLE:
        _settle(image.pk, state=State.AVAILABLE, message="", now=now)
        return True
    if cloud.state == ImageState.FAILED:
        _settle(image.pk, state=State.FAILED, message=cloud.state_reason, now=now)
        return True
    return False


def fail_image(*, image_id: int, message: Text, now: datetime | None = None) -> None:
    _settle(image_id, state=State.FAILED, message=message, now=now)


def give_up(*, image_id: int, now: datetime | None = None) -> None:
    fail_image(
        image_id=image_id,
        message=Phrase(
            gettext_noop("Still not available after %(elapsed)s."),
            elapsed=duration(POLL_SECONDS * MAX_POLLS),
        ),
        now=now,
    )


@transaction.atomic
def _settle(image_id: int, *, state: str, message: Text, now: datetime | None) -> None:
    now = now or timezone.now()
    image = Image.objects.select_for_update(of=("self",)).select_related("project").get(pk=image_id)
    if image.state != State.PENDING:
        return  # a duplicate delivery settled it already: told once
    image.state = state
    image.state_message = bounded(message or "", 300)
    image.available_at = now if state == State.AVAILABLE else None
    image.save(update_fields=["state", "state_message", "available_at"])
    audit.record(
        actor=None,
        verb=f"image.{state}",
        obj=image,
        project=image.project_id,
        source="worker",
        at=now,
        before={"state": State.PENDING},
        after={"state": state, "image_id": image.image_id},
    )
    if state == State.AVAILABLE:
        subject = Phrase(
            gettext_noop(
                "Image “%(name)s” is ready; pick it when you request GPUs for %(project)s."
            ),
            name=image.name,
            project=image.project.name if image.project else "",
        )
        body = ""
    else:
        subject = Phrase(gettext_noop("Image “%(name)s” could not be saved."), name=image.name)
        body = image.state_message
    transaction.on_commit(
        lambda: notify(
            [image.created_by], subject=subject, body=body, link=reverse("rental:images")
        )
    )
