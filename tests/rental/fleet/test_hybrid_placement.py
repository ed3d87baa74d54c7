"""Hybrid placement: a pool that sells RTX 4090s from the company's own servers and from a
cloud places leases on its own servers first, then bursts to the cheapest cloud offering,
and fails over across drivers as across zones, each attempt's answer on the lease page.

The own servers are a fake driver at the provider seam (the SSH driver is tested on its
own against real OpenSSH servers); the cloud is the local EC2 endpoint.

The pool: own offering own-2x-rtx-4090 on gpu-box-1 and gpu-box-2 (2 GPUs each, power
0.10 per GPU-hour, so 0.20 an hour for the 2-GPU instance); cloud offerings of 2 GPUs at
1.20 and 0.90 per GPU-hour (2.40 and 1.80 an hour).
"""

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.urls import reverse

from portal.errors import InvalidInput
from portal.models import AuditEvent
from rental.catalog.placement_rules import CHEAPEST, OWN_FIRST, PlacementOrder
from rental.fleet import cloud as fleet_cloud
from rental.fleet import instances
from rental.fleet.cloud import LaunchRetry
from rental.fleet.failover import OfferingView, places_in_order
from rental.loans import admission, lease_request, pools
from rental.models import (
    Image,
    Instance,
    LaunchAttempt,
    Offering,
    OwnHost,
    Pool,
    ProviderAccount,
    Quota,
    Reservation,
)
from rental.providers.base import (
    CloudInstance,
    CloudState,
    ProviderError,
    ProviderErrorKind,
)
from tests import factories

T0 = datetime(2026, 4, 6, 10, 0, tzinfo=UTC)
OWN_TYPE = "own-2x-rtx-4090"
CHEAP_CLOUD = "test.4090x2a"  # 0.90 per GPU-hour
DEAR_CLOUD = "test.4090x2b"  # 1.20 per GPU-hour


class OwnServers:
    """A fake own-server driver: hosts with GPUs free, a launch takes them or answers
    ``capacity`` in the SSH driver's words."""

    capabilities = frozenset()

    def __init__(self, free: dict[str, int]) -> None:
        self.free = dict(free)
        self.launched: list[tuple[str, str]] = []
        self.image_ids: list[str] = []

    def launch(self, spec, *, idempotency_key: str, client_token: str = "") -> CloudInstance:
        gpus = int(spec.instance_type.split("-")[1].rstrip("x"))
        if self.free.get(spec.zone, 0) < gpus:
            raise ProviderError(ProviderErrorKind.CAPACITY, f"no {gpus} free GPUs on {spec.zone}")
        self.free[spec.zone] -= gpus
        self.launched.append((spec.zone, idempotency_key))
        self.image_ids.append(spec.image_id)
        return CloudInstance(
            external_id=f"{spec.zone}:{idempotency_key[:12]}",
            state=CloudState.PENDING,
            market=spec.market,
            region=spec.region,
            zone=spec.zone,
            instance_type=spec.instance_type,
            public_address="",
            private_address="10.0.0.5",
            launched_at=None,
            state_reason="",
            state_changed_at=None,
            tags=spec.tags,
        )

    def describe(self, *, region: str, tag_filter: dict[str, str]) -> list[CloudInstance]:
        return []


@pytest.fixture
def hybrid(db, cloud, monkeypatch):
    model = factories.gpu_model("RTX 4090 24GB")
    pool = Pool.objects.create(gpu_model=model, capacity=12)
    clouds = factories.account(endpoint_url=cloud.url)
    factories.image(clouds)
    cheap = factories.offering(clouds, model, instance_type=CHEAP_CLOUD, gpus=2, on_demand="0.90")
    dear = factories.offering(clouds, model, instance_type=DEAR_CLOUD, gpus=2, on_demand="1.20")
    for offering in (cheap, dear):
        offering.zones = ["us-east-1a"]
        offering.save()
    site = ProviderAccount.objects.create(name="Server room", driver="ssh", regions=["room-1"])
    for name in ("gpu-box-1", "gpu-box-2"):
        OwnHost.objects.create(
            account=site,
            name=name,
            address=f"{name}.example",
            purchase_price=Decimal("24000.00"),
            amortisation_months=24,
            power_price_per_gpu_hour=Decimal("0.10"),
            gpus=[
                {"index": i, "name": "NVIDIA GeForce RTX 4090", "gpu_model": model.pk}
                for i in (0, 1)
            ],
            state=OwnHost.State.OK,
        )
    own = Offering.objects.create(
        account=site,
        region="room-1",
        instance_type=OWN_TYPE,
        gpu_model=model,
        gpus_per_instance=2,
        vcpus=32,
        memory_gib=128,
        on_demand_price_per_hour=Decimal("0.20"),  # power: 0.10 × 2 GPUs
        spot_price_per_hour=None,
        zones=["gpu-box-1", "gpu-box-2"],
    )
    # No image on the own servers: they run their hosts' own system, whatever the image.
    alpha = factories.project("alpha")
    Quota.objects.create(project=alpha, gpu_model=model, guaranteed=4, ceiling=8)
    alice = factories.user("alice")
    factories.member(alice, alpha)
    servers = OwnServers({"gpu-box-1": 2, "gpu-box-2": 2})
    real = fleet_cloud.get_provider
    monkeypatch.setattr(
        fleet_cloud,
        "get_provider",
        lambda config: servers if config.driver == "ssh" else real(config),
    )
    return {
        "model": model,
        "pool": pool,
        "own": own,
        "cheap": cheap,
        "dear": dear,
        "alpha": alpha,
        "alice": alice,
        "servers": servers,
        "admin": factories.user("root", staff=True),
    }


def submit(h, *, at):
    return admission.submit_reservation(
        actor=h["alice"],
        project=h["alpha"],
        gpu_model=h["model"],
        gpu_count=2,
        duration_hours=8,
        priority="experiment",
        market="on_demand",
        now=at,
    )


def drive(instance, *, at):
    now = at
    for _ in range(12):
        try:
            instances.provision_instance(instance_id=instance.pk, now=now)
        except LaunchRetry:
            now += timedelta(seconds=1)
            continue
        return
    raise AssertionError("the launch never settled")


def tried(instance):
    return [
        (a.instance_type, a.zone, a.kind)
        for a in LaunchAttempt.objects.filter(instance=instance).order_by("at", "pk")
    ]


def test_it_fills_the_own_servers_then_bursts_to_the_cheapest_cloud_then_the_next(
    hybrid, cloud, client
):
    cloud.inject(
        "RunInstances",
        "InsufficientInstanceCapacity",
        times=99,
        where={"InstanceType": CHEAP_CLOUD},
    )
    first = submit(hybrid, at=T0)
    assert first.offering == hybrid["own"]  # own servers first: they have room
    drive(first.instances.get(), at=T0)
    second = submit(hybrid, at=T0 + timedelta(minutes=1))
    assert second.offering == hybrid["own"]  # gpu-box-2 still has 2 free
    drive(second.instances.get(), at=T0 + timedelta(minutes=1))
    third = submit(hybrid, at=T0 + timedelta(minutes=2))
    assert third.offering == hybrid["cheap"]  # own servers full: the cheapest cloud
    drive(third.instances.get(), at=T0 + timedelta(minutes=2))

    assert tried(first.instances.get()) == [(OWN_TYPE, "gpu-box-1", "")]
    assert tried(second.instances.get()) == [(OWN_TYPE, "gpu-box-2", "")]
    assert tried(third.instances.get()) == [
        (CHEAP_CLOUD, "us-east-1a", "capacity"),
        (DEAR_CLOUD, "us-east-1a", ""),
    ]
    rates = {lease.pk: lease.instances.get().rate_per_hour for lease in (first, second, third)}
    assert rates == {
        first.pk: Decimal("0.200000"),  # power 0.10 × 2 GPUs
        second.pk: Decimal("0.200000"),
        third.pk: Decimal("2.400000"),  # 1.20 × 2 GPUs, where it launched
    }
    landed = Instance.objects.get(reservation=third)
    assert (landed.offering, landed.zone) == (hybrid["dear"], "us-east-1a")
    assert [zone for zone, _key in hybrid["servers"].launched] == ["gpu-box-1", "gpu-box-2"]
    # Placement chose where, never who: the loan model's tiers stand.
    tiers = [Reservation.objects.get(pk=lease.pk).tier for lease in (first, second, third)]
    assert tiers == ["guaranteed", "guaranteed", "burst"]

    client.force_login(hybrid["alice"])
    page = client.get(reverse("rental:lease", args=[third.pk])).content.decode()
    assert f"attempts-{landed.pk}" in page and "<code>capacity</code>" in page


def test_an_own_server_without_room_hands_over_to_the_cloud_at_once(hybrid, cloud, client):
    hybrid["servers"].free["gpu-box-1"] = 0  # busy outside the portal: the count is behind
    hybrid["servers"].free["gpu-box-2"] = 0
    lease = submit(hybrid, at=T0)
    assert lease.offering == hybrid["own"]
    instance = lease.instances.get()
    drive(instance, at=T0)

    assert tried(instance) == [
        (OWN_TYPE, "gpu-box-1", "capacity"),
        (OWN_TYPE, "gpu-box-2", "capacity"),
        (CHEAP_CLOUD, "us-east-1a", ""),
    ]
    instance.refresh_from_db()
    assert instance.rate_per_hour == Decimal("1.800000")  # 0.90 × 2 GPUs
    attempts = list(LaunchAttempt.objects.filter(instance=instance).order_by("at", "pk"))
    assert attempts[1].at - attempts[0].at == timedelta(seconds=1)  # at once, like zones

    client.force_login(hybrid["alice"])
    page = client.get(reverse("rental:lease", args=[lease.pk])).content.decode()
    assert "own server gpu-box-1: no 2 free GPUs" in page
    assert "own server gpu-box-2: no 2 free GPUs" in page


def test_the_pool_can_put_the_cheapest_first_or_an_account_first(hybrid):
    pools.configure_pool(actor=hybrid["admin"], gpu_model=hybrid["model"], placement_order=CHEAPEST)
    event = AuditEvent.objects.get(verb="pool.changed")
    assert (event.before, event.after) == (
        {"placement_order": "own_first"},
        {"placement_order": "cheapest"},
    )
    hybrid["own"].on_demand_price_per_hour = Decimal("2.00")  # 1.00 per GPU-hour of power
    hybrid["own"].save()
    assert submit(hybrid, at=T0).offering == hybrid["cheap"]

    pools.configure_pool(
        actor=hybrid["admin"],
        gpu_model=hybrid["model"],
        placement_order=OWN_FIRST,
        placement_accounts=[hybrid["dear"].account_id],
    )
    assert submit(hybrid, at=T0).offering == hybrid["cheap"]  # same account: by price


def test_a_pool_refuses_an_unknown_order_or_account_naming_the_field(hybrid):
    with pytest.raises(InvalidInput) as refused:
        pools.configure_pool(
            actor=hybrid["admin"], gpu_model=hybrid["model"], placement_order="random"
        )
    assert refused.value.field == "placement_order"
    with pytest.raises(InvalidInput) as refused:
        pools.configure_pool(
            actor=hybrid["admin"], gpu_model=hybrid["model"], placement_accounts="3, x"
        )
    assert refused.value.field == "placement_accounts"
    with pytest.raises(InvalidInput) as refused:
        pools.configure_pool(
            actor=hybrid["admin"], gpu_model=hybrid["model"], placement_accounts=[999999]
        )
    assert refused.value.field == "placement_accounts"


# The decision itself, pure ---------------------------------------------------------

OWN = OfferingView(1, 7, "room-1", OWN_TYPE, ("box-1", "box-2", "box-3"), Decimal("0.10"), True)
CHEAP = OfferingView(2, 8, "us-east-1", CHEAP_CLOUD, ("a",), Decimal("0.90"))
DEAR = OfferingView(3, 9, "us-east-1", DEAR_CLOUD, ("a",), Decimal("1.20"))


def order(chosen, free, *, placement=None, own_rate=Decimal("0.10")):
    views = {1: replace(OWN, free=free, rate=own_rate), 2: CHEAP, 3: DEAR}
    return [
        (place.offering_id, place.zone)
        for place in places_in_order(
            chosen=views[chosen],
            others=[view for key, view in views.items() if key != chosen],
            allow_other_types=True,
            order=placement or PlacementOrder(),
            gpus=2,
        )
    ]


def test_own_hosts_with_room_go_first_the_fullest_that_fits_first():
    assert order(1, (4, 2, 0)) == [(1, "box-2"), (1, "box-1"), (2, "a"), (3, "a"), (1, "box-3")]


def test_full_own_hosts_go_after_every_cloud_place():
    assert order(2, (0, 1, 0)) == [(2, "a"), (3, "a"), (1, "box-1"), (1, "box-2"), (1, "box-3")]


def test_own_first_puts_own_servers_with_room_before_a_cheaper_chosen_clouds_others():
    # The chosen offering stays first (the engineer's pick); then own before other clouds.
    assert order(3, (2, 0, 0))[:3] == [(3, "a"), (1, "box-1"), (2, "a")]


def test_cheapest_ignores_the_driver_and_listed_accounts_come_first():
    # Own servers whose power costs more per GPU-hour than the 0.90 cloud go after it.
    cheapest = PlacementOrder(order=CHEAPEST)
    assert order(3, (2, 0, 0), placement=cheapest, own_rate=Decimal("1.00"))[:3] == [
        (3, "a"),
        (2, "a"),
        (1, "box-1"),
    ]
    assert order(3, (2, 0, 0), placement=cheapest)[:2] == [(3, "a"), (1, "box-1")]
    listed = PlacementOrder(order=OWN_FIRST, accounts=(8,))
    assert order(3, (2, 0, 0), placement=listed)[:3] == [(3, "a"), (2, "a"), (1, "box-1")]


def test_a_lease_with_a_cloud_image_lands_on_an_own_server_that_boots_no_image(hybrid, client):
    cloud_image = Image.objects.get(account=hybrid["cheap"].account)
    assert not Image.objects.filter(account=hybrid["own"].account).exists()
    lease = admission.submit_reservation(
        actor=hybrid["alice"],
        project=hybrid["alpha"],
        gpu_model=hybrid["model"],
        gpu_count=2,
        duration_hours=8,
        priority="experiment",
        market="on_demand",
        image=cloud_image,
        now=T0,
    )
    assert (lease.offering, lease.image) == (hybrid["own"], cloud_image)
    drive(lease.instances.get(), at=T0)

    assert tried(lease.instances.get()) == [(OWN_TYPE, "gpu-box-1", "")]
    assert hybrid["servers"].image_ids == [""]  # the launch carries no image id
    client.force_login(hybrid["alice"])
    page = client.get(reverse("rental:lease", args=[lease.pk])).content.decode()
    assert 'id="lease-own-system"' in page
    assert f"{cloud_image.name} is used only if the lease moves to a cloud" in page
    # A lease asking for no image takes the first cloud's default, for a failover.
    assert submit(hybrid, at=T0).image == cloud_image


def test_a_failover_from_own_servers_to_the_cloud_keeps_the_cloud_image(hybrid, client):
    cloud_image = Image.objects.get(account=hybrid["cheap"].account)
    hybrid["servers"].free.update({"gpu-box-1": 0, "gpu-box-2": 0})  # busy outside the portal
    lease = admission.submit_reservation(
        actor=hybrid["alice"],
        project=hybrid["alpha"],
        gpu_model=hybrid["model"],
        gpu_count=2,
        duration_hours=8,
        priority="experiment",
        market="on_demand",
        image=cloud_image,
        now=T0,
    )
    assert lease.offering == hybrid["own"]
    instance = lease.instances.get()
    drive(instance, at=T0)

    assert [kind for _type, _zone, kind in tried(instance)] == ["capacity", "capacity", ""]
    instance = Instance.objects.select_related("offering__account").get(pk=instance.pk)
    assert instance.offering == hybrid["cheap"]
    assert instances.launch_spec(instance).image_id == cloud_image.image_id
    client.force_login(hybrid["alice"])
    page = client.get(reverse("rental:lease", args=[lease.pk])).content.decode()
    assert 'id="lease-own-system"' not in page and cloud_image.image_id in page


def test_an_own_offering_still_refuses_an_image_its_driver_cannot_run(hybrid):
    cloud_image = Image.objects.get(account=hybrid["cheap"].account)
    cloud_image.cuda_version = "12.4"
    cloud_image.save()
    hybrid["own"].driver_version = "470.82"
    hybrid["own"].max_cuda_version = "11.4"
    hybrid["own"].save()

    with pytest.raises(InvalidInput) as refused:
        lease_request.submit_lease(
            actor=hybrid["alice"],
            project=hybrid["alpha"],
            gpu_model=hybrid["model"],
            gpu_count=2,
            offering=hybrid["own"],
            duration_hours=8,
            priority="experiment",
            market="on_demand",
            image=cloud_image,
            now=T0,
        )
    assert refused.value.field == "image"
