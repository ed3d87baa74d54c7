"""A Kubernetes pool's offerings follow its nodes: one per (GPU model, k) with the nodes
that fit as zones, the admin's price kept, an offering a lease refers to kept, a cluster
that does not answer recorded as the account's sync error with the offerings untouched.
The real driver runs against the local Kubernetes API server (tests.fixtures_kubernetes)."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.contrib.auth.models import User

from devcloud.kubernetes import LocalKubernetes
from devcloud.kubernetes_cluster import NodeSpec
from rental import tasks
from rental.catalog.offerings import set_offering_terms
from rental.fleet import node_offerings
from rental.models import Offering, ProviderAccount, Reservation
from tests import factories
from tests.fixtures_kubernetes import KUBE_NODES, KUBE_TOKEN

pytestmark = pytest.mark.django_db
T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
REGION = "pool-1"
ONE, TWO = "k8s-1x-a100-80gb", "k8s-2x-a100-80gb"


def pool_account(url: str, *, name: str = "GPU pool") -> ProviderAccount:
    account = ProviderAccount(name=name, driver="kubernetes", regions=[REGION], endpoint_url=url)
    account.set_credentials(access_key_id="gpu-portal", secret_access_key=KUBE_TOKEN)
    account.save()
    return account


def rows(account: ProviderAccount) -> dict[str, tuple]:
    """instance type → (k, zones, available, price, vCPUs, memory) of the pool's offerings."""
    return {
        offering.instance_type: (
            offering.gpus_per_instance,
            offering.zones,
            offering.is_available,
            offering.on_demand_price_per_hour,
            offering.vcpus,
            offering.memory_gib,
        )
        for offering in Offering.objects.filter(account=account).order_by("instance_type")
    }


def price(account: ProviderAccount, instance_type: str, amount: str) -> None:
    offering = Offering.objects.get(account=account, instance_type=instance_type)
    admin = User.objects.filter(username="root").first() or factories.user("root", staff=True)
    set_offering_terms(
        actor=admin,
        offering=offering,
        now=T0,
        on_demand_price_per_hour=amount,
    )


@pytest.fixture
def pool(kube: LocalKubernetes):
    factories.gpu_model("A100 80GB")
    return pool_account(kube.url)


def test_it_offers_every_count_of_the_nodes_gpus_on_every_node_that_has_them(pool):
    result = node_offerings.check_account(account_id=pool.pk, now=T0)
    assert result == node_offerings.NodeCheck(answered=True, offerings_changed=2)
    # New offerings wait for the admin's price: unavailable at 0. A node of 2 GPUs, 32
    # CPUs and 256 GiB gives one GPU half of them.
    assert rows(pool) == {
        ONE: (1, ["gpu-a", "gpu-b"], False, Decimal("0"), 16, 128),
        TWO: (2, ["gpu-a", "gpu-b"], False, Decimal("0"), 32, 256),
    }
    offering = Offering.objects.get(account=pool, instance_type=ONE)
    assert (offering.region, offering.gpu_model.name) == (REGION, "A100 80GB")


def test_an_admins_price_is_kept_and_makes_it_available(pool):
    node_offerings.check_account(account_id=pool.pk, now=T0)
    price(pool, ONE, "3.25")
    later = T0 + timedelta(minutes=1)
    assert node_offerings.check_account(account_id=pool.pk, now=later).offerings_changed == 1
    assert rows(pool)[ONE][2:4] == (True, Decimal("3.25"))
    assert rows(pool)[TWO][2:4] == (False, Decimal("0"))
    assert Offering.objects.get(account=pool, instance_type=ONE).price_updated_at == T0.date()


def test_zones_and_availability_follow_the_nodes(pool, kube):
    node_offerings.check_account(account_id=pool.pk, now=T0)
    price(pool, ONE, "3.25")
    price(pool, TWO, "6.50")
    # gpu-b is gone and gpu-a has one GPU left: no node fits two any more.
    kube.set_nodes([NodeSpec("gpu-a", 1, address="10.0.0.1")])
    node_offerings.check_account(account_id=pool.pk, now=T0 + timedelta(minutes=1))
    assert rows(pool) == {ONE: (1, ["gpu-a"], True, Decimal("3.25"), 32, 256)}
    # A node not ready offers nothing: the offering stays, unavailable, with its price.
    kube.set_nodes([NodeSpec("gpu-a", 1, ready=False), NodeSpec("gpu-b", 2, ready=False)])
    node_offerings.check_account(account_id=pool.pk, now=T0 + timedelta(minutes=2))
    assert rows(pool)[ONE][:4] == (1, [], False, Decimal("3.25"))
    assert rows(pool)[TWO][:4] == (2, [], False, Decimal("0"))
    # Back: the price the admin set for one GPU is still there.
    kube.set_nodes(KUBE_NODES)
    node_offerings.check_account(account_id=pool.pk, now=T0 + timedelta(minutes=3))
    assert rows(pool)[ONE][1:4] == (["gpu-a", "gpu-b"], True, Decimal("3.25"))


def test_an_offering_a_lease_refers_to_is_kept(pool, kube):
    node_offerings.check_account(account_id=pool.pk, now=T0)
    two = Offering.objects.get(account=pool, instance_type=TWO)
    Reservation.objects.create(
        project=factories.project("alpha"),
        requester=factories.user("alice"),
        gpu_model=two.gpu_model,
        gpu_count=2,
        offering=two,
        start=T0,
        end=T0 + timedelta(hours=1),
        status=Reservation.Status.ENDED,
    )
    kube.set_nodes([NodeSpec("gpu-a", 1)])
    node_offerings.check_account(account_id=pool.pk, now=T0 + timedelta(minutes=1))
    assert rows(pool)[TWO][:3] == (2, [], False)
    assert set(rows(pool)) == {ONE, TWO}
    # With no lease on it, an offering no node can give is deleted.
    kube.set_nodes([NodeSpec("gpu-a", 1, product="NVIDIA-H100-80GB-HBM3")])
    node_offerings.check_account(account_id=pool.pk, now=T0 + timedelta(minutes=2))
    assert set(rows(pool)) == {TWO}


def test_a_cluster_that_fails_records_the_error_and_leaves_the_offerings(pool, kube):
    node_offerings.check_account(account_id=pool.pk, now=T0)
    price(pool, ONE, "3.25")
    node_offerings.check_account(account_id=pool.pk, now=T0)
    before = rows(pool)
    kube.set_nodes([])
    kube.inject(status=503, resource="nodes", message="etcd leader changed")
    later = T0 + timedelta(minutes=1)
    assert not node_offerings.check_account(account_id=pool.pk, now=later).answered
    pool.refresh_from_db()
    assert pool.sync_failed_at == later
    assert pool.sync_error == "nodes: transient: Kubernetes API answered 503: etcd leader changed"
    assert KUBE_TOKEN not in pool.sync_error
    assert rows(pool) == before
    # It answers again: its error is cleared, another part's error would not be.
    kube.set_nodes(KUBE_NODES)
    node_offerings.check_account(account_id=pool.pk, now=later + timedelta(minutes=1))
    pool.refresh_from_db()
    assert (pool.sync_error, pool.sync_failed_at) == ("", later)
    ProviderAccount.objects.filter(pk=pool.pk).update(sync_error="pool-1: transient: x")
    node_offerings.check_account(account_id=pool.pk, now=later + timedelta(minutes=2))
    assert ProviderAccount.objects.get(pk=pool.pk).sync_error == "pool-1: transient: x"


def test_a_cluster_that_does_not_answer_never_stops_the_others(pool):
    dead = pool_account("http://127.0.0.1:9", name="Gone pool")
    results = node_offerings.check_all(now=T0)
    assert results[dead.pk] == node_offerings.NodeCheck(answered=False, offerings_changed=0)
    assert results[pool.pk].answered
    dead.refresh_from_db()
    assert dead.sync_error.startswith("nodes: transient: Kubernetes API did not answer")
    assert not Offering.objects.filter(account=dead).exists()
    assert set(rows(pool)) == {ONE, TWO}


def test_a_second_look_changes_nothing(pool):
    node_offerings.check_account(account_id=pool.pk, now=T0)
    price(pool, TWO, "6.50")
    node_offerings.check_account(account_id=pool.pk, now=T0)
    before = list(Offering.objects.filter(account=pool).order_by("pk").values())
    again = node_offerings.check_account(account_id=pool.pk, now=T0 + timedelta(hours=1))
    assert again.offerings_changed == 0
    assert list(Offering.objects.filter(account=pool).order_by("pk").values()) == before


def test_the_beat_task_keeps_the_pools_and_leaves_other_offerings_alone(pool):
    model = factories.gpu_model("A100 80GB")
    by_hand = Offering.objects.create(
        account=pool,
        region=REGION,
        instance_type="a100-special",
        gpu_model=model,
        gpus_per_instance=1,
        vcpus=8,
        memory_gib=64,
        on_demand_price_per_hour=Decimal("1.10"),
    )
    inactive = pool_account("http://127.0.0.1:9", name="Old pool")
    ProviderAccount.objects.filter(pk=inactive.pk).update(is_active=False)
    tasks.check_own_hosts_task()
    assert set(rows(pool)) == {"a100-special", ONE, TWO}
    assert Offering.objects.get(pk=by_hand.pk).is_available
    assert ProviderAccount.objects.get(pk=inactive.pk).sync_error == ""
