"""Pages about what runs on an instance: connection commands, utilization, idle warnings,
health, and the engineer's SSH keys."""

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from portal import access
from portal.errors import DomainError
from rental.agent import idle
from rental.catalog import keys
from rental.fleet import replace, stop
from rental.fleet.agent_install import JUPYTER_PORT, TENSORBOARD_PORT, image_has, lease_token
from rental.models import Instance, Reservation, SshKey, UtilizationSample

CHART_HOURS = 12


@dataclass
class InstanceView:
    ssh: str = ""
    jupyter_tunnel: str = ""
    jupyter_url: str = ""
    tensorboard_tunnel: str = ""
    tensorboard_url: str = ""
    idle_warning: bool = False
    chart_id: str = ""
    chart: dict[str, Any] = field(default_factory=dict)


def utilization_series(instance: Instance, *, hours: int = CHART_HOURS) -> dict[str, Any]:
    """Per-GPU utilization and memory over the last hours, as columns for the chart."""
    since = (instance.agent_last_sample_at or timezone.now()) - timedelta(hours=hours)
    rows = UtilizationSample.objects.filter(instance=instance, at__gte=since).values_list(
        "at", "gpu_utilization", "memory_used_mb"
    )
    times, utilization, memory = [], [], []
    for at, util, mem in rows.order_by("at"):
        times.append(int(at.timestamp()))
        utilization.append(util)
        memory.append(mem)
    gpus = max((len(u) for u in utilization), default=0)

    def column(values: list[list[float]], i: int) -> list[float | None]:
        return [v[i] if i < len(v) else None for v in values]

    return {
        "t": times,
        "utilization": [column(utilization, i) for i in range(gpus)],
        "memory_gb": [
            [None if v is None else round(v / 1024, 2) for v in column(memory, i)]
            for i in range(gpus)
        ],
    }


def may_stop(user: Any, lease: Reservation) -> bool:
    return access.can_act_on_lease(user, lease)


def connection_commands(lease: Reservation, instance: Instance) -> dict[str, str]:
    """How to reach a running instance: the SSH command and, when the image has them, the
    JupyterLab and TensorBoard tunnels. Empty until it runs with an address. Only for who
    may connect (``access.can_see_connection``): the callers decide."""
    host = instance.public_address
    if not host or instance.state != Instance.State.RUNNING:
        return {}
    user = instance.ssh_user or (lease.image.ssh_user if lease.image else "ubuntu")
    target = f"{user}@{host}"
    commands = {"ssh": f"ssh {target}"}
    if image_has(lease, "jupyter"):
        commands["jupyter_tunnel"] = f"ssh -N -L {JUPYTER_PORT}:localhost:{JUPYTER_PORT} {target}"
        commands["jupyter_url"] = f"http://localhost:{JUPYTER_PORT}/lab?token={lease_token(lease)}"
    if image_has(lease, "tensorboard"):
        commands["tensorboard_tunnel"] = (
            f"ssh -N -L {TENSORBOARD_PORT}:localhost:{TENSORBOARD_PORT} {target}"
        )
        commands["tensorboard_url"] = f"http://localhost:{TENSORBOARD_PORT}/"
    return commands


def idle_warning(lease: Reservation, instance: Instance) -> bool:
    """An idle warning the requester has not answered yet (``I'm still using it``)."""
    return bool(
        lease.status == Reservation.Status.ACTIVE
        and instance.idle_warned_at
        and not (instance.idle_reset_at and instance.idle_reset_at >= instance.idle_warned_at)
    )


def instance_views(lease: Reservation, instances: list[Instance], *, connection: bool) -> None:
    """Attach to each instance what the lease page shows about it (``instance.agent``);
    the commands to connect only for those who may connect (``access.can_see_connection``)."""
    for instance in instances:
        view = InstanceView(chart_id=f"utilization-data-{instance.pk}")
        if connection:
            for name, command in connection_commands(lease, instance).items():
                setattr(view, name, command)
        view.idle_warning = idle_warning(lease, instance)
        if instance.agent_last_sample_at:
            view.chart = utilization_series(instance)
        instance.agent = view  # type: ignore[attr-defined]


@login_required
@require_POST
def still_using(request: HttpRequest, pk: int, instance_pk: int) -> HttpResponse:
    lease = access.get_lease_to_act_on_or_404(Reservation.objects.all(), request.user, pk=pk)
    instance = get_object_or_404(Instance, pk=instance_pk, reservation=lease)
    try:
        idle.still_using(actor=request.user, instance=instance)
    except DomainError as error:
        messages.error(request, error.message)
    else:
        messages.success(request, _("Noted: the idle count starts again from now."))
    return redirect("rental:lease", pk=pk)


@login_required
@require_POST
def replace_instance(request: HttpRequest, pk: int, instance_pk: int) -> HttpResponse:
    lease = access.get_lease_to_act_on_or_404(Reservation.objects.all(), request.user, pk=pk)
    instance = get_object_or_404(Instance, pk=instance_pk, reservation=lease)
    try:
        new = replace.replace_instance(actor=request.user, instance=instance)
    except DomainError as error:
        messages.error(request, error.message)
    else:
        messages.success(
            request,
            _("A new instance is starting (#%(new)s); the unhealthy one is being terminated.")
            % {"new": new.pk},
        )
    return redirect("rental:lease", pk=pk)


def _lease_action(request: HttpRequest, pk: int, action, done: str) -> HttpResponse:
    lease = access.get_lease_to_act_on_or_404(Reservation.objects.all(), request.user, pk=pk)
    try:
        action(actor=request.user, reservation=lease)
    except DomainError as error:
        messages.error(request, error.message)
    else:
        messages.success(request, done)
    return redirect("rental:lease", pk=pk)


@login_required
@require_POST
def lease_stop(request: HttpRequest, pk: int) -> HttpResponse:
    return _lease_action(
        request, pk, stop.stop_lease, _("Stopped. GPU billing has stopped; the disk is kept.")
    )


@login_required
@require_POST
def lease_resume(request: HttpRequest, pk: int) -> HttpResponse:
    return _lease_action(request, pk, stop.resume_lease, _("Resuming on the kept disk."))


@login_required
@require_POST
def lease_end_stopped(request: HttpRequest, pk: int) -> HttpResponse:
    return _lease_action(
        request, pk, stop.end_stopped_lease, _("Ending; the instance and its disk are deleted.")
    )


@login_required
def ssh_keys(request: HttpRequest) -> HttpResponse:
    values = {"name": "", "public_key": ""}
    errors: dict[str, str] = {}
    if request.method == "POST":
        values = {k: request.POST.get(k, "") for k in values}
        try:
            key = keys.add_ssh_key(actor=request.user, **values)
        except DomainError as error:
            errors[error.field or "public_key"] = error.message
        else:
            messages.success(
                request,
                _("Key %(name)s added (%(fingerprint)s).")
                % {"name": key.name, "fingerprint": key.fingerprint},
            )
            return redirect("rental:ssh_keys")
    rows = list(SshKey.objects.filter(user=request.user))
    for key in rows:
        key.kind, key.bits = keys.check_public_key(key.public_key)  # type: ignore[attr-defined]
    return render(
        request, "rental/agent/ssh_keys.html", {"keys": rows, "values": values, "errors": errors}
    )


@login_required
@require_POST
def ssh_key_delete(request: HttpRequest, pk: int) -> HttpResponse:
    key = SshKey.objects.filter(pk=pk, user=request.user).first()
    if key is None:
        raise Http404
    keys.delete_ssh_key(actor=request.user, key=key)
    messages.success(request, _("Key %(name)s removed.") % {"name": key.name})
    return redirect("rental:ssh_keys")
