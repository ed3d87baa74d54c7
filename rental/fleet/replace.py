"""Replacing an unhealthy instance (L8): a new instance for the same lease, in one click.

The old instance's usage closes now as a platform failure (no minimum, B1) and it is
terminated; the new one is launched at the rate captured when the lease began. The lease
keeps its GPUs in the pool throughout, so no admission is needed.
"""

from datetime import datetime

from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from portal import access, audit
from portal.errors import InvalidTransition, NotPermitted
from portal.phrases import Phrase
from rental import jobs
from rental.loans.usage import stop_billing_and_terminate
from rental.models import Instance, Reservation, TerminationReason


@transaction.atomic
def replace_instance(
    *, actor, instance: Instance, now: datetime | None = None, source: str = "web"
) -> Instance:

    now = now or timezone.now()
    lease = Reservation.objects.select_for_update().get(pk=instance.reservation_id)
    if not access.can_act_on_lease(actor, lease):
        raise NotPermitted(_("Only the requester or a manager can replace this instance."))
    old = Instance.objects.select_for_update().get(pk=instance.pk)
    if lease.status != Reservation.Status.ACTIVE or old.state != Instance.State.RUNNING:
        raise InvalidTransition(_("Only a running instance of an active lease can be replaced."))
    if old.health != Instance.Health.UNHEALTHY:
        raise InvalidTransition(_("This instance is healthy; end the lease instead."))
    stop_billing_and_terminate(old, reason=TerminationReason.FAILED, at=now)
    new = Instance.objects.create(
        reservation=lease,
        account=old.account,
        offering=old.offering,
        region=old.region,
        market=old.market,
        gpu_count=old.gpu_count,
        rate_per_hour=old.rate_per_hour,
        ssh_user=old.ssh_user,
        provisioning_since=now,
    )
    lease.status = Reservation.Status.PROVISIONING
    lease.status_message = Phrase(
        gettext_noop("Replacing an unhealthy instance: %(reason)s"), reason=old.health_message
    )
    lease.save()
    audit.record(
        actor=actor,
        verb="instance.replaced",
        obj=old,
        project=lease.project_id,
        source=source,
        at=now,
        before={"instance": old.pk, "reason": old.health_message},
        after={"instance": new.pk},
    )
    jobs.provision_on_commit([new.pk])
    return new
