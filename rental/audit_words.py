"""How the compute side's audit events read (``portal.audit_log``): leases and their
instances, pools, quotas and their requests, the catalog, accounts, keys, images and
volumes, in the reader's language.

``REASONS`` gives the words of the reason codes a lease carries (why it waits, why it went
to a manager); the audit page shows these, never the codes.
"""

from collections.abc import Mapping
from typing import Any

from django.urls import reverse
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext_lazy

from portal.audit_log import (
    Kind,
    Named,
    Value,
    Verb,
    amount,
    choice,
    counted,
    data,
    labelled,
    numeric_ids,
    plain,
)
from portal.templatetags.portal_tags import money
from rental.loans.admission_checks import HELD_PREFIX
from rental.loans.queue import CEILING_BOOKED
from rental.models import (
    AvailabilityWatch,
    DataVolume,
    ExchangeRate,
    Image,
    Instance,
    Offering,
    OwnHost,
    Pool,
    ProviderAccount,
    Quota,
    QuotaRequest,
    Reservation,
    SshKey,
    TerminationReason,
    Tier,
)
from rental.models.launch import Orphan

# Why a lease waits, went to a manager or changed, by the code it stores.
REASONS: dict[str, Any] = {
    "over_auto_approve": _("beyond the quota's auto-approve limits"),
    "over_ceiling": _("over the project's ceiling"),
    "no_capacity": _("no free GPUs in the pool"),
    "needs_own_reclaim": _("waits for the project's own lower-priority leases"),
    "production_over_guarantee": _("production beyond the guarantee"),
    "scheduled": _("booked ahead"),
    "promoted": _("promoted to guaranteed"),
    "reclaiming": _("waits for the GPUs it takes back"),
    "preempting": _("preempted for another lease"),
    "requeued": _("queued again after preemption"),
    "rejected": _("rejected by a manager"),
    "adopted": _("adopted from an orphan instance"),
    "launch_failed": _("the launch failed"),
    "provisioning_timeout": _("the instance did not start in time"),
    "stop_expiry_warned": _("warned before a stopped instance is removed"),
    CEILING_BOOKED: _("waits for room under the ceiling beside its bookings"),
    f"{HELD_PREFIX}budget_cap": _("held by the project's budget cap"),
    f"{HELD_PREFIX}gpu_hour_cap": _("held by the project's GPU-hour allocation"),
}


def _lease_name(lease: Reservation) -> str:
    return _("lease #%(id)s (%(n)s × %(model)s)") % {
        "id": lease.pk,
        "n": lease.gpu_count,
        "model": lease.gpu_model.name,
    }


def _leases(ids: list[str]) -> Mapping[str, Named]:
    found = Reservation.objects.filter(pk__in=numeric_ids(ids)).select_related("gpu_model")
    return {str(lease.pk): Named(_lease_name(lease), lease.get_absolute_url()) for lease in found}


def _instances(ids: list[str]) -> Mapping[str, Named]:
    found = Instance.objects.filter(pk__in=numeric_ids(ids)).select_related(
        "reservation__gpu_model"
    )
    return {
        str(instance.pk): Named(
            _("instance %(name)s of %(lease)s")
            % {
                "name": instance.external_id or f"#{instance.pk}",
                "lease": _lease_name(instance.reservation),
            },
            instance.reservation.get_absolute_url(),
        )
        for instance in found
    }


def _pools(ids: list[str]) -> Mapping[str, Named]:
    found = Pool.objects.filter(pk__in=numeric_ids(ids)).select_related("gpu_model")
    return {
        str(pool.pk): Named(
            _("the %(model)s pool") % {"model": pool.gpu_model.name},
            reverse("rental:pool", args=[pool.pk]),
        )
        for pool in found
    }


def _quotas(ids: list[str]) -> Mapping[str, Named]:
    found = Quota.objects.filter(pk__in=numeric_ids(ids)).select_related("project", "gpu_model")
    return {
        str(quota.pk): Named(
            _("%(project)s on %(model)s")
            % {"project": quota.project.name, "model": quota.gpu_model.name},
            reverse("rental:project", args=[quota.project.slug]),
        )
        for quota in found
    }


def _quota_requests(ids: list[str]) -> Mapping[str, Named]:
    found = QuotaRequest.objects.filter(pk__in=numeric_ids(ids)).select_related(
        "project", "gpu_model"
    )
    return {
        str(asked.pk): Named(
            _("the quota request #%(id)s of %(project)s on %(model)s")
            % {"id": asked.pk, "project": asked.project.name, "model": asked.gpu_model.name},
            reverse("rental:project", args=[asked.project.slug]),
        )
        for asked in found
    }


def _offerings(ids: list[str]) -> Mapping[str, Named]:
    found = Offering.objects.filter(pk__in=numeric_ids(ids)).select_related("gpu_model__pool")
    named = {}
    for offering in found:
        pool = getattr(offering.gpu_model, "pool", None)
        named[str(offering.pk)] = Named(
            _("%(type)s in %(region)s (%(model)s)")
            % {
                "type": offering.instance_type,
                "region": offering.region,
                "model": offering.gpu_model.name,
            },
            reverse("rental:pool", args=[pool.pk]) + f"#offering-{offering.pk}" if pool else "",
        )
    return named


def _accounts(ids: list[str]) -> Mapping[str, Named]:
    return {
        str(account.pk): Named(
            _("the provider account “%(name)s”") % {"name": account.name},
            reverse("admin:rental_provideraccount_change", args=[account.pk]),
        )
        for account in ProviderAccount.objects.filter(pk__in=numeric_ids(ids))
    }


def _rates(ids: list[str]) -> Mapping[str, Named]:
    return {
        str(rate.pk): Named(
            _("the %(currency)s rate from %(at)s")
            % {"currency": rate.currency, "at": plain(rate.valid_from.isoformat())},
            reverse("admin:rental_exchangerate_change", args=[rate.pk]),
        )
        for rate in ExchangeRate.objects.filter(pk__in=numeric_ids(ids))
    }


def _keys(ids: list[str]) -> Mapping[str, Named]:
    return {
        str(key.pk): Named(_("the SSH key “%(name)s”") % {"name": key.name})
        for key in SshKey.objects.filter(pk__in=numeric_ids(ids))
    }


def _images(ids: list[str]) -> Mapping[str, Named]:
    return {
        str(image.pk): Named(
            _("the image “%(name)s”") % {"name": image.name}, reverse("rental:images")
        )
        for image in Image.objects.filter(pk__in=numeric_ids(ids))
    }


def _volumes(ids: list[str]) -> Mapping[str, Named]:
    found = DataVolume.objects.filter(pk__in=numeric_ids(ids)).select_related("project")
    return {
        str(volume.pk): Named(
            _("the data volume “%(name)s”") % {"name": volume.name},
            reverse("rental:project_volumes", args=[volume.project.slug]),
        )
        for volume in found
    }


def _watches(ids: list[str]) -> Mapping[str, Named]:
    found = AvailabilityWatch.objects.filter(pk__in=numeric_ids(ids)).select_related("gpu_model")
    return {
        str(watch.pk): Named(
            _("the wait for %(n)s × %(model)s") % {"n": watch.count, "model": watch.gpu_model}
        )
        for watch in found
    }


def _orphans(ids: list[str]) -> Mapping[str, Named]:
    return {
        str(orphan.pk): Named(
            _("the orphan instance %(id)s in %(region)s")
            % {"id": orphan.external_id, "region": orphan.region},
            reverse("admin:rental_orphan_change", args=[orphan.pk]),
        )
        for orphan in Orphan.objects.filter(pk__in=numeric_ids(ids))
    }


def _own_hosts(ids: list[str]) -> Mapping[str, Named]:
    return {
        str(host.pk): Named(
            _("the own GPU server “%(name)s”") % {"name": host.name},
            reverse("admin:rental_ownhost_change", args=[host.pk]),
        )
        for host in OwnHost.objects.filter(pk__in=numeric_ids(ids))
    }


def _lease_ref(value: Any) -> str:
    if value in (None, ""):
        return "—"
    return str(_("lease #%(id)s") % {"id": value})


def _lease_refs(value: Any) -> str:
    items = data(value)
    if not isinstance(items, list) or not items:
        return "—"
    return ", ".join(_lease_ref(item) for item in items)


GPUS = counted(ngettext_lazy("%(n)s GPU", "%(n)s GPUs", "n"))
HOURS = counted(ngettext_lazy("%(n)s hour", "%(n)s hours", "n"))
STATUS = choice(Reservation.Status)
REASON = labelled(dict(TerminationReason.choices))

VERBS = {
    # Leases
    "lease.submitted": Verb(_("%(actor)s asked for %(object)s"), _("Lease asked for")),
    "lease.approved": Verb(_("%(actor)s approved %(object)s"), _("Lease approved")),
    "lease.rejected": Verb(_("%(actor)s rejected %(object)s"), _("Lease rejected")),
    "lease.admitted": Verb(
        _("%(actor)s started %(object)s in the %(tier)s tier"), _("Lease started")
    ),
    "lease.promoted": Verb(
        _("%(actor)s promoted %(object)s to the %(tier)s tier"), _("Lease promoted")
    ),
    "lease.rescheduled": Verb(
        _("%(actor)s moved %(object)s to %(start)s – %(end)s"), _("Booking moved")
    ),
    "lease.reservation_starting": Verb(
        _("%(actor)s freed GPUs for %(object)s, which starts at %(starts_at)s"),
        _("Booking starting"),
    ),
    "lease.end_warned": Verb(
        _("%(actor)s warned that %(object)s ends at %(end)s"), _("Lease end warned")
    ),
    "lease.extension_asked": Verb(
        _("%(actor)s asked to extend %(object)s to %(end)s"), _("Extension asked")
    ),
    "lease.extended": Verb(_("%(actor)s extended %(object)s to %(end)s"), _("Lease extended")),
    "lease.extension_approved": Verb(
        _("%(actor)s approved extending %(object)s to %(end)s"), _("Extension approved")
    ),
    "lease.extension_rejected": Verb(
        _("%(actor)s refused to extend %(object)s"), _("Extension refused")
    ),
    "lease.preempted": Verb(
        _("%(actor)s preempted %(object)s for %(needed_by)s; it ends at %(ends_at)s"),
        _("Lease preempted"),
    ),
    "lease.requeued": Verb(
        _("%(actor)s queued %(object)s for the time %(from)s had left"), _("Lease queued again")
    ),
    "lease.spot_interrupted": Verb(
        _("The cloud interrupted the spot instance of %(object)s at %(interruption_at)s"),
        _("Spot interruption"),
    ),
    "lease.stopped": Verb(_("%(actor)s stopped %(object)s"), _("Lease stopped")),
    "lease.resumed": Verb(_("%(actor)s resumed %(object)s"), _("Lease resumed")),
    "lease.ended": Verb(_("%(actor)s ended %(object)s (%(reason)s)"), _("Lease ended")),
    "lease.at_risk": Verb(
        _("%(object)s is at risk: its server %(host)s is not answering"), _("Lease at risk")
    ),
    "lease.out_of_risk": Verb(
        _("%(object)s is no longer at risk: its server %(host)s answers again"),
        _("Lease out of risk"),
    ),
    "lease.ssh_keys_chosen": Verb(
        _("%(actor)s chose the SSH keys of %(object)s: %(keys)s"), _("SSH keys chosen")
    ),
    # Instances
    "instance.launched": Verb(
        _("%(actor)s launched %(object)s in %(zone)s"), _("Instance launched")
    ),
    "instance.running": Verb(_("%(object)s is running at %(address)s"), _("Instance running")),
    "instance.failed": Verb(_("%(object)s failed: %(message)s"), _("Instance failed")),
    "instance.terminated": Verb(
        _("%(actor)s terminated %(object)s (%(reason)s)"), _("Instance terminated")
    ),
    "instance.replaced": Verb(
        _("%(actor)s replaced %(object)s: %(was_reason)s"), _("Instance replaced")
    ),
    "instance.unhealthy": Verb(
        _("%(actor)s found %(object)s unhealthy: %(reason)s"), _("Instance unhealthy")
    ),
    "instance.idle_warned": Verb(
        _("%(actor)s warned that %(object)s is idle (%(idle_samples)s)"), _("Idle warning")
    ),
    "instance.idle_alerted": Verb(
        _("%(actor)s told the managers that %(object)s is idle (%(idle_samples)s)"),
        _("Idle production lease"),
    ),
    "instance.idle_reset": Verb(_("%(object)s is in use again"), _("Instance in use again")),
    "orphan.terminated": Verb(
        _("%(actor)s terminated %(object)s, which no lease stands for"),
        _("Orphan terminated"),
    ),
    "orphan.adopted": Verb(
        _("%(actor)s adopted the orphan instance %(external_id)s into %(object)s"),
        _("Orphan adopted"),
    ),
    # Pools, quotas, offerings
    "pool.created": Verb(_("%(actor)s created %(object)s"), _("Pool created")),
    "pool.capacity": Verb(
        _("%(actor)s set the capacity of %(object)s to %(capacity)s (was %(was_capacity)s)"),
        _("Pool capacity set"),
    ),
    "pool.changed": Verb(_("%(actor)s changed the settings of %(object)s"), _("Pool changed")),
    "pool.state": Verb(_("%(object)s is now %(state)s"), _("Pool state")),
    "pool.marked_degraded": Verb(
        _("%(actor)s marked %(object)s degraded: %(degraded_reason)s"), _("Pool marked degraded")
    ),
    "pool.degraded_cleared": Verb(
        _("%(actor)s cleared the degraded mark of %(object)s"), _("Pool mark cleared")
    ),
    "offering.changed": Verb(
        _("%(actor)s changed the prices or availability of %(object)s"), _("Offering changed")
    ),
    "quota.set": Verb(
        _(
            "%(actor)s set the quota of %(object)s: guarantee %(guaranteed)s "
            "(was %(was_guaranteed)s), ceiling %(ceiling)s (was %(was_ceiling)s)"
        ),
        _("Quota set"),
        _("%(actor)s set the quota of %(object)s: guarantee %(guaranteed)s, ceiling %(ceiling)s"),
    ),
    "quota.auto_approve_set": Verb(
        _("%(actor)s set the auto-approve limits of %(object)s"), _("Auto-approve limits set")
    ),
    "quota.auto_approve_caps_set": Verb(
        _("%(actor)s set the admin's caps on the auto-approve limits of %(object)s"),
        _("Auto-approve caps set"),
    ),
    "quota_request.created": Verb(_("%(actor)s sent %(object)s"), _("Quota change asked")),
    "quota_request.approved": Verb(_("%(actor)s approved %(object)s"), _("Quota change approved")),
    "quota_request.rejected": Verb(_("%(actor)s rejected %(object)s"), _("Quota change rejected")),
    "watch.deleted": Verb(_("%(actor)s stopped %(object)s"), _("Availability watch removed")),
    # The catalog, accounts, keys, images, volumes
    "provider_account.created": Verb(_("%(actor)s added %(object)s"), _("Provider account added")),
    "provider_account.changed": Verb(
        _("%(actor)s changed %(object)s"), _("Provider account changed")
    ),
    "provider_account.credentials_set": Verb(
        _("%(actor)s set new credentials for %(object)s (key %(access_key_id)s)"),
        _("Credentials set"),
    ),
    "provider_account.credentials_rotated": Verb(
        _("%(actor)s encrypted the credentials of %(object)s with the current key"),
        _("Credentials re-encrypted"),
    ),
    "provider_account.validated": Verb(
        _("%(actor)s checked the credentials of %(object)s: %(status)s"),
        _("Credentials checked"),
    ),
    "own_host.saved": Verb(_("%(actor)s saved %(object)s"), _("Own server saved")),
    "own_host.deleted": Verb(
        _("%(actor)s removed the own GPU server “%(was_name)s”"), _("Own server removed")
    ),
    "own_host.state": Verb(_("%(object)s is now %(state)s"), _("Own server state")),
    "exchange_rate.added": Verb(_("%(actor)s recorded %(object)s"), _("Exchange rate added")),
    "ssh_key.added": Verb(_("%(actor)s added %(object)s"), _("SSH key added")),
    "ssh_key.deleted": Verb(
        _("%(actor)s deleted the SSH key “%(was_name)s”"), _("SSH key deleted")
    ),
    "image.requested": Verb(
        _("%(actor)s asked to save %(lease)s as %(object)s"), _("Image asked for")
    ),
    "image.available": Verb(_("%(object)s is ready (%(image_id)s)"), _("Image ready")),
    "image.failed": Verb(_("%(object)s could not be saved"), _("Image failed")),
    "volume.created": Verb(_("%(actor)s created %(object)s"), _("Volume created")),
    "volume.available": Verb(_("%(object)s is ready"), _("Volume ready")),
    "volume.failed": Verb(_("%(object)s could not be created: %(message)s"), _("Volume failed")),
    "volume.attached": Verb(_("%(actor)s attached %(object)s"), _("Volume attached")),
    "volume.attach_failed": Verb(
        _("%(object)s could not be attached: %(message)s"), _("Volume attach failed")
    ),
    "volume.detached": Verb(_("%(actor)s detached %(object)s"), _("Volume detached")),
    "volume.deleted": Verb(_("%(actor)s deleted %(object)s"), _("Volume deleted")),
    "volume.gone": Verb(_("%(object)s is gone from the cloud"), _("Volume gone")),
}

KINDS = {
    "rental.reservation": Kind(_("lease"), _leases),
    "rental.instance": Kind(_("instance"), _instances),
    "rental.pool": Kind(_("pool"), _pools),
    "rental.quota": Kind(_("quota"), _quotas),
    "rental.quotarequest": Kind(_("quota request"), _quota_requests),
    "rental.offering": Kind(_("offering"), _offerings),
    "rental.provideraccount": Kind(_("provider account"), _accounts),
    "rental.exchangerate": Kind(_("exchange rate"), _rates),
    "rental.sshkey": Kind(_("SSH key"), _keys),
    "rental.image": Kind(_("image"), _images),
    "rental.datavolume": Kind(_("data volume"), _volumes),
    "rental.availabilitywatch": Kind(_("availability watch"), _watches),
    "rental.orphan": Kind(_("orphan instance"), _orphans),
    "rental.ownhost": Kind(_("own GPU server"), _own_hosts),
}

VALUES = {
    "status": Value(_("Status"), STATUS),
    "rental.provideraccount:status": Value(_("Status"), choice(ProviderAccount.Status)),
    "state": Value(_("State")),
    "host": Value(_("Server")),
    "rental.pool:state": Value(_("State"), choice(Pool.State)),
    "rental.ownhost:state": Value(_("State"), choice(OwnHost.State)),
    "rental.instance:state": Value(_("State"), choice(Instance.State)),
    "rental.image:state": Value(_("State"), choice(Image.State)),
    "rental.datavolume:state": Value(_("State"), choice(DataVolume.State)),
    "tier": Value(_("Tier"), choice(Tier)),
    "gpus": Value(_("GPUs"), GPUS),
    "code": Value(_("Why"), labelled(REASONS)),
    "reason": Value(_("Reason"), REASON),
    "comment": Value(_("Comment")),
    "self_approved": Value(_("Approved their own request")),
    "start": Value(_("Start")),
    "end": Value(_("End")),
    "starts_at": Value(_("Starts")),
    "ends_at": Value(_("Ends")),
    "submitted_at": Value(_("Asked at")),
    "interruption_at": Value(_("Interrupted at")),
    "needs_approval": Value(_("Needs a manager's approval")),
    "over_ceiling": Value(_("Over the ceiling")),
    "need": Value(_("GPUs it needs")),
    "free": Value(_("GPUs free in the pool")),
    "guarantee_short": Value(_("GPUs short of its guarantee")),
    "ceiling_short": Value(_("GPUs over its ceiling")),
    "victims": Value(_("Leases preempted for it"), _lease_refs),
    "needed_by": Value(_("For"), _lease_ref),
    "from": Value(_("Time left of"), _lease_ref),
    "lease": Value(_("Lease"), _lease_ref),
    "reservation": Value(_("Booked ahead")),
    "after_reclaim": Value(_("After taking GPUs back")),
    "keys": Value(_("SSH keys")),
    "external_id": Value(_("Cloud id")),
    "zone": Value(_("Zone")),
    "address": Value(_("Address")),
    "message": Value(_("Message")),
    "idle_samples": Value(
        _("Idle samples"), counted(ngettext_lazy("%(n)s minute", "%(n)s minutes", "n"))
    ),
    "instance": Value(_("Instance")),
    "capacity": Value(_("Capacity"), GPUS),
    "committed_gpus": Value(_("Committed GPUs"), GPUS),
    "committed_monthly_cost": Value(_("Committed monthly cost"), money),
    "apportionment": Value(_("Cost sharing"), choice(Pool.Apportionment)),
    "residual": Value(_("Unassigned commitment"), choice(Pool.Residual)),
    "placement_order": Value(_("Placement order"), choice(Pool.PlacementOrder)),
    "placement_accounts": Value(_("Provider accounts tried first")),
    "degraded_reason": Value(_("Why degraded")),
    "guaranteed": Value(_("Guarantee"), GPUS),
    "rental.pool:guaranteed": Value(_("Guaranteed in all"), GPUS),
    "ceiling": Value(_("Ceiling"), GPUS),
    "weight": Value(_("Weight"), amount),
    "max_gpus": Value(_("Auto-approve: most GPUs"), GPUS),
    "max_hours": Value(_("Auto-approve: most hours"), HOURS),
    "gpus_cap": Value(_("Cap on the auto-approve GPUs"), GPUS),
    "hours_cap": Value(_("Cap on the auto-approve hours"), HOURS),
    "count": Value(_("GPUs"), GPUS),
    "gpu_model": Value(_("GPU model")),
    "on_demand_price_per_hour": Value(_("On-demand price per hour"), amount),
    "spot_price_per_hour": Value(_("Spot price per hour"), amount),
    "is_available": Value(_("Sold")),
    "access_key_id": Value(_("Access key")),
    "driver": Value(_("Driver")),
    "regions": Value(_("Regions")),
    "endpoint_url": Value(_("Endpoint URL")),
    "is_active": Value(_("Active")),
    "currency": Value(_("Currency")),
    "units_per_billing_unit": Value(_("Units per billing unit"), amount),
    "valid_from": Value(_("Valid from")),
    "source": Value(_("Source")),
    "size_gb": Value(_("Size"), counted(ngettext_lazy("%(n)s GB", "%(n)s GB", "n"))),
    "volume_id": Value(_("Cloud id")),
    "image_id": Value(_("Image id")),
}
