"""The demo's server room (``seed_demo --own-servers``): two own servers beside the demo
cloud in the L4 pool, placed first; seeded once however often it runs. Its servers are
local processes running the real host program (devcloud/own_servers.py): the demo's
own-server lease really launches there, and the next lease bursts to the demo cloud."""

import json
import pwd
from datetime import timedelta
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import OutputWrapper
from django.utils import timezone

from devcloud import own_servers
from rental.catalog.own_room import in_placement_order, own_room
from rental.demo import DEMO_LIVE_LEASES, start_live_leases
from rental.demo.own_servers import OWN_GPU_MODEL, SERVER_ROOM, server_gpus
from rental.fleet import instances
from rental.fleet.cloud import LaunchRetry
from rental.fleet.sync import sync_instances
from rental.fleet.termination import terminate_instance
from rental.loans import ending
from rental.management.commands.seed_demo import DEMO_ACCOUNT
from rental.models import GpuModel, Instance, Offering, OwnHost, Pool, Reservation
from rental.selectors import fitting, offerings_of
from tests import factories


def seed() -> None:
    call_command("load_catalog", "--account", DEMO_ACCOUNT, stdout=StringIO())
    call_command("seed_demo", "--own-servers", stdout=StringIO(), stderr=StringIO())


def test_it_puts_two_own_servers_first_in_the_l4_pool_once(db):
    factories.account(name=DEMO_ACCOUNT)
    seed()
    seed()

    hosts = OwnHost.objects.filter(account__name=SERVER_ROOM).order_by("name")
    assert [(h.name, h.account.driver) for h in hosts] == [
        ("gpu-box-1", "ssh"),
        ("gpu-box-2", "ssh"),
    ]
    model = GpuModel.objects.get(name=OWN_GPU_MODEL)
    assert Pool.objects.get(gpu_model=model).placement_order == "own_first"
    own = Offering.objects.get(account__name=SERVER_ROOM, gpus_per_instance=2)
    assert own.zones == ["gpu-box-1", "gpu-box-2"] and own.is_available
    assert own_room(model.pk).hosts(own.account_id) == {"gpu-box-1": 2, "gpu-box-2": 2}
    first = in_placement_order(
        fitting(offerings_of(model), gpu_count=1, market="on_demand"), gpu_count=1
    )
    assert first[0].account.name == SERVER_ROOM  # own servers first, the cloud after
    assert any(offering.account.name == DEMO_ACCOUNT for offering in first)


def allocations(root: Path, host: str) -> dict:
    state = root / host / "state" / "allocations.json"
    return json.loads(state.read_text()) if state.exists() else {}


def launch(instance: Instance) -> None:
    """The worker's launch task, in this process, until it settles."""
    now = timezone.now()
    for _ in range(12):
        try:
            instances.provision_instance(instance_id=instance.pk, now=now)
        except LaunchRetry:
            now += timedelta(seconds=1)
            continue
        return
    raise AssertionError("the launch never settled")


def test_the_demo_lease_lands_on_an_own_server_and_the_next_bursts_to_the_cloud(
    db, cloud, settings, monkeypatch, tmp_path
):
    # As manage.py demo sets it up: the servers are local processes of this user.
    monkeypatch.setenv(own_servers.ROOT_VARIABLE, str(tmp_path))
    settings.PORTAL_SSH_TRANSPORT = "devcloud.own_servers.run"
    own_servers.prepare(server_gpus())
    factories.account(name=DEMO_ACCOUNT, endpoint_url=cloud.url)
    seed()

    assert start_live_leases(OutputWrapper(StringIO())) == len(DEMO_LIVE_LEASES)
    live = {spec.username: spec.purpose for spec in DEMO_LIVE_LEASES}
    amira = Reservation.objects.get(requester__username="amira", purpose=live["amira"])
    erik = Reservation.objects.get(requester__username="erik", purpose=live["erik"])
    assert amira.pk < erik.pk  # asked first
    for lease in (amira, erik):
        for instance in lease.instances.order_by("pk"):
            launch(instance)
    sync_instances()  # the sync finds them running (beat's, every 10 s in the demo)

    placed = Instance.objects.filter(reservation=amira).select_related("account")
    assert {(i.account.name, i.zone, i.state) for i in placed} == {
        (SERVER_ROOM, "gpu-box-1", Instance.State.RUNNING),
        (SERVER_ROOM, "gpu-box-2", Instance.State.RUNNING),
    }
    # The host program's state on each demo server holds the lease's GPUs; no Unix account
    # was made for it on this machine.
    for instance in placed:
        [held] = allocations(tmp_path, instance.zone).values()
        assert (held["gpus"], held["state"]) == ([0, 1], "running")
        assert instance.external_id == f"{instance.zone}/{held['account']}"
        with pytest.raises(KeyError):
            pwd.getpwnam(held["account"])
    [burst] = Instance.objects.filter(reservation=erik).select_related("account")
    assert (burst.account.name, burst.state) == (DEMO_ACCOUNT, Instance.State.RUNNING)

    # Ending the lease frees the servers' GPUs, and kills nothing here.
    ending.end_reservation(actor=amira.requester, reservation=amira)
    for instance in placed:
        terminate_instance(instance_id=instance.pk)
        assert [a["state"] for a in allocations(tmp_path, instance.zone).values()] == ["terminated"]
