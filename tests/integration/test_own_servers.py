"""The company's own GPU servers end to end, through a real Celery worker and beat on
Redis, against real OpenSSH servers in network namespaces (tests/own_hosts.py) with a
fake nvidia-smi: the hosts are discovered, an engineer's 2-GPU lease is launched on one,
the engineer logs in with their key and sees CUDA_VISIBLE_DEVICES of two GPUs, idle
reaping ends it (its account and processes gone, the GPUs free), a host that stops
answering puts a lease at risk and degrades the pool (people told, and told again when it
answers), a wrong key is reported, and a GPU that disappears takes its offerings along."""

import json
import pwd
import time
from collections.abc import Callable
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from django.test import Client
from django.utils import timezone

from portal.models import Membership
from rental.loans import admission
from rental.models import (
    GpuModel,
    Image,
    Instance,
    Offering,
    OwnHost,
    Pool,
    ProviderAccount,
    Quota,
    Reservation,
    SshKey,
)
from tests import factories, own_hosts
from tests.notices import told
from tests.own_hosts import RTX_4090

pytestmark = [
    pytest.mark.integration,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(bool(own_hosts.unavailable()), reason=own_hosts.unavailable() or "-"),
]
Status = Reservation.Status


def wait_for(check: Callable[[], object], *, timeout: float = 60, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def fast_checks(monkeypatch):
    """The worker's beat looks at the servers every second, and calls one that has not
    answered for 3 seconds not answering; the sync takes an instance missing for 2 seconds
    for gone once a look by id confirms it (set before the worker starts)."""
    monkeypatch.setenv("PORTAL_OWN_HOST_CHECK_INTERVAL", "1")
    monkeypatch.setenv("PORTAL_OWN_HOST_GRACE_SECONDS", "3")
    monkeypatch.setenv("PORTAL_SYNC_GRACE_SECONDS", "2")


@pytest.fixture
def site():
    with own_hosts.site({"box-a": 4 * [RTX_4090], "box-b": 2 * [RTX_4090]}) as made:
        yield made


def register(site) -> ProviderAccount:
    """What an admin registers: an ssh account and its two servers, with the admin key."""
    account = ProviderAccount.objects.create(name="Basement", driver="ssh", regions=["dc-1"])
    for test_host in site.hosts.values():
        host = OwnHost(
            account=account,
            name=test_host.name,
            address=test_host.address,
            username="root",
            power_price_per_gpu_hour=Decimal("0.25"),
        )
        host.set_private_key(site.admin_key.private)
        host.save()
    # The servers' own system: what a lease there runs on (the driver installs nothing).
    Image.objects.create(
        name="Server system", account=account, region="dc-1", image_id="host", os="Ubuntu"
    )
    return account


def people(site):
    model = GpuModel.objects.create(
        name="RTX 4090 24GB",
        vendor="nvidia",
        memory_gb=24,
        memory_bandwidth_gbps=1008,
        bf16_tflops=Decimal("165"),
        fp16_tflops=Decimal("165"),
        interconnect="pcie",
    )
    pool = Pool.objects.create(gpu_model=model, capacity=6)
    alpha = factories.project("alpha")
    Quota.objects.create(project=alpha, gpu_model=model, guaranteed=4, ceiling=6)
    alice, manager = factories.user("alice"), factories.user("alma")
    factories.member(alice, alpha)
    factories.member(manager, alpha, Membership.Role.MANAGER)
    SshKey.objects.create(user=alice, name="laptop", public_key=site.engineer_key.public)
    return model, pool, alpha, alice, manager


def host(name: str) -> OwnHost:
    return OwnHost.objects.get(name=name)


def running(lease: Reservation) -> Instance:
    wait_for(
        lambda: Reservation.objects.get(pk=lease.pk).status == Status.ACTIVE,
        timeout=90,
        what="the lease to run",
    )
    return Instance.objects.get(reservation=lease, state=Instance.State.RUNNING)


def request(alice, alpha, model) -> Reservation:
    return admission.submit_reservation(
        actor=alice,
        project=alpha,
        gpu_model=model,
        gpu_count=2,
        duration_hours=4,
        priority="learning",
        market="on_demand",
        source="web",
    )


def test_own_servers_from_discovery_to_the_end_of_a_lease(fast_checks, site, worker, settings):
    model, pool, alpha, alice, manager = people(site)
    account = register(site)

    # Discovered by beat: GPUs kept, host keys pinned, offerings made.
    wait_for(
        lambda: all(h.state == OwnHost.State.OK for h in OwnHost.objects.all()),
        what="both servers to be checked",
    )
    box_a = host("box-a")
    assert [gpu["index"] for gpu in box_a.gpus] == [0, 1, 2, 3]
    assert {gpu["gpu_model"] for gpu in box_a.gpus} == {model.pk}
    assert box_a.host_key.split()[1:] == site.hosts["box-a"].host_key.split()[1:]
    two = Offering.objects.get(account=account, instance_type="own-2x-rtx-4090-24gb")
    assert (two.zones, two.on_demand_price_per_hour) == (["box-a", "box-b"], Decimal("0.5"))

    # An engineer's 2-GPU lease runs on one server; she logs in with her own key.
    lease = request(alice, alpha, model)
    instance = running(lease)
    server = site.hosts[instance.zone]
    user = instance.external_id.partition("/")[2]
    answer = server.ssh(user, site.engineer_key, "echo $CUDA_VISIBLE_DEVICES")
    assert answer.returncode == 0, answer.stderr
    visible = answer.stdout.strip().split(",")
    assert len(visible) == 2 and all(index.isdigit() for index in visible)
    assert server.ssh(user, site.admin_key, "true").returncode != 0  # her account, her keys
    wait_for(
        lambda: (
            {g["index"] for g in host(server.name).gpus if g["lease"]}
            == {int(index) for index in visible}
        ),
        what="the pool's view of the server to show the leased GPUs",
    )

    # The agent's heartbeats say every GPU is idle: the learning lease is reaped.
    settings.PORTAL_IDLE_POLICY = {
        **settings.PORTAL_IDLE_POLICY,
        "learning": {"warn": 1, "reap": 2},
    }
    config = json.loads(
        (Path(pwd.getpwnam(user).pw_dir) / ".gpu-portal" / "agent.json").read_text()
    )
    start = timezone.now().replace(microsecond=0) - timedelta(minutes=3)
    samples = [
        {
            "at": (start + timedelta(minutes=n)).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "gpus": [{"index": i, "utilization": 0.0, "memory_used_mb": 0.0} for i in range(2)],
        }
        for n in range(3)
    ]
    Client().post(
        "/api/v1/agent/heartbeat",
        data=json.dumps({"samples": samples}),
        content_type="application/json",
        headers={"Authorization": f"Bearer {config['token']}"},
    )
    wait_for(
        lambda: Instance.objects.get(pk=instance.pk).state == Instance.State.TERMINATED,
        timeout=90,
        what="the reaped lease's instance to end",
    )
    assert Reservation.objects.get(pk=lease.pk).end_reason == "idle"
    # Its account, its processes and its hold on the GPUs are gone.
    with pytest.raises(KeyError):
        pwd.getpwnam(user)
    assert server.run(["pgrep", "-u", user]).returncode != 0
    wait_for(
        lambda: not any(g["lease"] for g in host(server.name).gpus),
        what="the server's GPUs to be free again",
    )

    # A lease on a server that stops answering is at risk and the pool degraded.
    lease = request(alice, alpha, model)
    instance = running(lease)
    server = site.hosts[instance.zone]
    server.stop()
    wait_for(
        lambda: host(server.name).state == OwnHost.State.UNREACHABLE,
        what="the server to be not answering",
    )
    assert Pool.objects.get(pk=pool.pk).state == Pool.State.DEGRADED
    for person in (alice, manager):
        assert len(told(person, starts="At risk")) == 1
    assert Instance.objects.get(pk=instance.pk).state == Instance.State.RUNNING  # not ended
    server.start()
    wait_for(lambda: host(server.name).state == OwnHost.State.OK, what="the server back")
    assert Pool.objects.get(pk=pool.pk).state == Pool.State.OK
    wait_for(lambda: told(alice, starts=f"Server {server.name} answers again"), what="news")
    assert len(told(alice, starts="At risk")) == 1

    # Its allocation vanishes from the server (say, the server was reinstalled): the sync
    # ends it as it ends a cloud instance that vanished.
    user = instance.external_id.partition("/")[2]
    state = server.state_dir / "allocations.json"
    allocations = json.loads(state.read_text())
    del allocations[instance.idempotency_key]
    state.write_text(json.dumps(allocations))
    try:
        wait_for(
            lambda: Instance.objects.get(pk=instance.pk).state == Instance.State.TERMINATED,
            timeout=60,
            what="the vanished instance to be ended by the sync",
        )
        assert Reservation.objects.get(pk=lease.pk).status != Status.ACTIVE
    finally:  # the host program no longer knows the account: remove it here
        server.run(["pkill", "-KILL", "-u", user])
        server.run(["userdel", "-r", user])

    # A GPU that disappears: the server's GPUs and the offerings follow.
    site.hosts["box-b"].set_gpus(1 * [RTX_4090])
    wait_for(lambda: len(host("box-b").gpus) == 1, what="box-b's GPU list to follow")
    wait_for(
        lambda: Offering.objects.get(pk=two.pk).zones == ["box-a"],
        what="the 2-GPU offering to leave box-b",
    )

    # A server registered with the wrong key answers nothing, and says why.
    wrong = OwnHost(account=account, name="box-wrong", address=site.hosts["box-b"].address)
    wrong.set_private_key(site.engineer_key.private)
    wrong.save()
    wait_for(
        lambda: host("box-wrong").state == OwnHost.State.UNREACHABLE,
        what="the wrong key to be reported",
    )
    assert host("box-wrong").state_message
    assert site.engineer_key.private.splitlines()[1] not in host("box-wrong").state_message
