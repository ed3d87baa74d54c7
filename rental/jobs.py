"""The one door from services to Celery: work is sent by task name.

Services call these functions and never import ``rental.tasks``; tasks import
services. Functions named ``*_on_commit`` send only if the surrounding
transaction commits, so a rolled-back change starts no cloud work.
"""

from collections.abc import Iterable
from datetime import datetime

from django.db import transaction

from portal.celery import app


def _send(name: str, *args: object, countdown: float | None = None, eta: datetime | None = None):
    app.send_task(f"rental.tasks.{name}", args=list(args), countdown=countdown, eta=eta)


def provision_on_commit(instance_ids: Iterable[int]) -> None:
    ids = list(instance_ids)
    transaction.on_commit(lambda: [_send("provision_instance_task", pk) for pk in ids])


def provision_now(instance_id: int) -> None:
    """Outside a transaction: send a launch again (a lost task; a duplicate claims nothing)."""
    _send("provision_instance_task", instance_id)


def terminate_on_commit(instance_id: int, *, eta: datetime | None = None) -> None:
    """``eta``: not before then (a spot instance keeps its two minutes' notice)."""
    transaction.on_commit(lambda: _send("terminate_instance_task", instance_id, eta=eta))


def stop_on_commit(instance_ids: Iterable[int]) -> None:
    ids = list(instance_ids)
    transaction.on_commit(lambda: _send("stop_instances_task", ids))


def start_on_commit(instance_ids: Iterable[int]) -> None:
    ids = list(instance_ids)
    transaction.on_commit(lambda: _send("start_instances_task", ids))


def terminate_now(instance_id: int) -> None:
    """Outside a transaction: send a termination (a duplicate finds nothing to stop)."""
    _send("terminate_instance_task", instance_id)


def save_image_on_commit(image_id: int) -> None:
    """Save a lease's instance as an image (CreateImage, then poll until it settles)."""
    transaction.on_commit(lambda: _send("save_image_task", image_id))


def sync_soon(account_id: int | None = None, region: str = "") -> None:
    """A sync shortly: of one account and region when named, else the whole fan-out."""
    if account_id is not None and region:
        _send("sync_region_task", account_id, region, countdown=2)
    else:
        _send("sync_instances_task", countdown=2)


def sync_region(account_id: int, region: str) -> None:
    """One account and region's sync, a task of its own (the periodic sync fans out)."""
    _send("sync_region_task", account_id, region)


def sweep_launches_now() -> None:
    _send("sweep_launches_task")


def admit_queued_on_commit(gpu_model_id: int) -> None:
    transaction.on_commit(lambda: _send("admit_queued_task", gpu_model_id))


def process_due_at(due: datetime) -> None:
    """A nudge at a due time (a notice ending, a reservation starting). The due times are
    rows; the periodic sweep finds them even if this message is lost or a worker restarts."""
    transaction.on_commit(lambda: _send("process_due_task", eta=due))


# -- data volumes (rental.fleet.volume_cloud) ----------------------------------------


def create_volume_on_commit(volume_id: int) -> None:
    transaction.on_commit(lambda: _send("create_volume_task", volume_id))


def attach_volume_on_commit(volume_id: int) -> None:
    transaction.on_commit(lambda: _send("attach_volume_task", volume_id))


def delete_volume_on_commit(volume_id: int) -> None:
    transaction.on_commit(lambda: _send("delete_volume_task", volume_id))
