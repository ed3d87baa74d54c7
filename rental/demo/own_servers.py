"""The demo's server room: two own GPU servers beside the demo cloud in the L4 pool, so
the pool shows hybrid placement (own servers first, then the cheapest cloud offering).

The rows: each server's GPUs as a discovery would have found them (``server_gpus``),
its purchase price and power. ``manage.py demo`` loads them (``seed_demo
--own-servers``) and makes the servers themselves from the same GPUs: local directories
where the real driver runs the real host program as a process of the developer's user,
making no Unix account and starting nothing (``devcloud/own_servers.py``, through
``PORTAL_SSH_TRANSPORT``). So a lease placed there really launches, and the next one
bursts to the demo cloud once they are full.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from typing import Any

from django.core.management.base import OutputWrapper

from portal import audit
from rental.fleet.own_hosts import sync_offerings
from rental.models import GpuModel, OwnHost, Pool, ProviderAccount

SERVER_ROOM = "Server room"
SERVER_ROOM_REGION = "server-room"
OWN_GPU_MODEL = "L4 24GB"


@dataclass(frozen=True)
class DemoServer:
    name: str
    address: str
    gpus: int
    purchase_price: Decimal
    in_service_since: date


DEMO_SERVERS: tuple[DemoServer, ...] = (
    DemoServer("gpu-box-1", "10.20.0.11", 2, Decimal("9600.00"), date(2026, 1, 1)),
    DemoServer("gpu-box-2", "10.20.0.12", 2, Decimal("9600.00"), date(2026, 1, 1)),
)
POWER_PER_GPU_HOUR = Decimal("0.08")
AMORTISATION_MONTHS = 24


def server_gpus() -> dict[str, list[dict]]:
    """Each demo server's GPUs as its ``nvidia-smi`` reports them, by server name."""
    return {
        server.name: [
            {
                "index": index,
                "name": "NVIDIA L4",
                "memory_mib": 23034,
                "uuid": f"GPU-{server.name}-{index}",
            }
            for index in range(server.gpus)
        ]
        for server in DEMO_SERVERS
    }


def seed_server_room(admin: Any, *, now: datetime, stdout: OutputWrapper) -> int:
    """The ``Server room`` account (driver ``ssh``), its two servers with two L4 GPUs each
    as found, their offerings (``sync_offerings``), and the L4 pool's order own servers
    first. Idempotent: existing rows are kept as they are. Returns the servers created."""
    model = GpuModel.objects.filter(name=OWN_GPU_MODEL).first()
    pool = Pool.objects.filter(gpu_model=model).first() if model else None
    if model is None or pool is None:
        stdout.write(f"  no {OWN_GPU_MODEL} pool: no server room")
        return 0
    account, _created = ProviderAccount.objects.get_or_create(
        name=SERVER_ROOM,
        defaults={"driver": "ssh", "regions": [SERVER_ROOM_REGION]},
    )
    created = 0
    for server in DEMO_SERVERS:
        if OwnHost.objects.filter(account=account, name=server.name).exists():
            continue
        host = OwnHost.objects.create(
            account=account,
            name=server.name,
            address=server.address,
            purchase_price=server.purchase_price,
            amortisation_months=AMORTISATION_MONTHS,
            in_service_since=server.in_service_since,
            power_price_per_gpu_hour=POWER_PER_GPU_HOUR,
            gpus=[{**gpu, "gpu_model": model.pk} for gpu in server_gpus()[server.name]],
            state=OwnHost.State.OK,
            checked_at=now,
        )
        audit.record(
            actor=admin, verb="own_host.saved", obj=host, source="command", after={"demo": True}
        )
        created += 1
    sync_offerings(account=account, now=now)
    if pool.placement_order != Pool.PlacementOrder.OWN_FIRST:
        stdout.write(f"  the {OWN_GPU_MODEL} pool's placement order is kept as it is")
    stdout.write(f"  server room: {created} own servers added to the {OWN_GPU_MODEL} pool")
    return created
