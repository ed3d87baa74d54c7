"""L2: capacity errors retried with backoff across zones, instance types, then regions
and accounts; bad requests and bad credentials fail at once; the attempts are rows the
lease page shows; a message a person can act on. Pure decisions first, then the same
through the local EC2 endpoint."""

import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.urls import reverse

from portal.phrases import render
from rental.fleet import instances
from rental.fleet.cloud import LaunchRetry
from rental.fleet.failover import (
    Attempt,
    GiveUp,
    OfferingView,
    Policy,
    TryAt,
    next_try,
    places_in_order,
)
from rental.loans import admission
from rental.models import Image, Instance, LaunchAttempt, Offering, Pool, Reservation
from rental.providers.base import ProviderErrorKind as Kind
from tests import factories

State = Instance.State
Status = Reservation.Status
T0 = datetime(2026, 4, 6, 10, 0, tzinfo=UTC)
POLICY = Policy(max_attempts=8, timeout_seconds=600)

CHOSEN = OfferingView(1, 10, "us-east-1", "p4de", ("a", "b", "c"), Decimal("4.0"))
CHEAPER_TYPE = OfferingView(2, 10, "us-east-1", "p5", ("a",), Decimal("3.0"))
DEARER_TYPE = OfferingView(3, 10, "us-east-1", "g6", ("a",), Decimal("9.0"))
OTHER_REGION = OfferingView(4, 10, "us-west-2", "p4de", ("w",), Decimal("1.0"))
OTHER_ACCOUNT_TYPE = OfferingView(5, 20, "us-east-1", "p5", ("x",), Decimal("1.0"))


def places(allow_other_types=True):
    return places_in_order(
        chosen=CHOSEN,
        others=[OTHER_ACCOUNT_TYPE, DEARER_TYPE, OTHER_REGION, CHEAPER_TYPE],
        allow_other_types=allow_other_types,
    )


def test_it_orders_zones_then_types_then_other_regions_and_accounts():
    order = [(p.instance_type, p.region, p.zone) for p in places()]
    assert order == [
        ("p4de", "us-east-1", "a"),
        ("p4de", "us-east-1", "b"),
        ("p4de", "us-east-1", "c"),
        ("p5", "us-east-1", "a"),  # same account and region, cheapest other type first
        ("g6", "us-east-1", "a"),
        ("p4de", "us-west-2", "w"),  # the same type elsewhere before other types there
        ("p5", "us-east-1", "x"),
    ]
    assert [p.instance_type for p in places(allow_other_types=False)] == ["p4de"] * 4


def decide(attempts, *, now=None, jitter=0.0):
    return next_try(
        places=places(),
        attempts=attempts,
        policy=POLICY,
        started_at=T0,
        now=now or T0 + timedelta(seconds=len(attempts)),
        jitter=jitter,
    )


def failed(indexes_kinds):
    ordered = places()
    return [
        Attempt(ordered[index], kind, T0 + timedelta(seconds=n))
        for n, (index, kind) in enumerate(indexes_kinds)
    ]


def test_it_moves_on_at_capacity_and_backs_off_after_a_full_round():
    ordered = places()
    assert decide([]) == TryAt(ordered[0], 0)
    assert decide(failed([(0, Kind.CAPACITY)])) == TryAt(ordered[1], 0)
    round_one = failed([(i, Kind.CAPACITY) for i in range(7)])
    assert decide(round_one) == TryAt(ordered[0], 2)  # 5 s spread over [2.5, 5)
    assert decide(round_one, jitter=0.99).wait == 4


def test_it_skips_the_rest_of_an_account_and_region_at_its_quota():
    ordered = places()
    assert decide(failed([(0, Kind.QUOTA)])) == TryAt(ordered[5], 0)  # us-west-2


def test_it_retries_the_same_place_after_throttling_with_a_growing_backoff():
    ordered = places()
    once = decide(failed([(0, Kind.CAPACITY), (1, Kind.THROTTLED)]), jitter=0.0)
    twice = decide(failed([(0, Kind.CAPACITY), (1, Kind.THROTTLED), (1, Kind.TRANSIENT)]))
    assert once == TryAt(ordered[1], 2)
    assert twice == TryAt(ordered[1], 7)  # 15 s spread over [7.5, 15)


@pytest.mark.parametrize("kind", [Kind.AUTH, Kind.INVALID, Kind.NOT_FOUND])
def test_it_gives_up_at_once_on_a_bad_request_or_bad_credentials(kind):
    assert decide(failed([(0, kind)])) == GiveUp("permanent")


def test_it_gives_up_after_the_last_attempt_or_the_timeout():
    eight = failed([(i % 7, Kind.CAPACITY) for i in range(8)])
    assert decide(eight) == GiveUp("exhausted")
    assert decide(failed([(0, Kind.CAPACITY)]), now=T0 + timedelta(minutes=10)) == GiveUp("timeout")


# Through the local endpoint ----------------------------------------------------------


@pytest.fixture
def fleet(db, f0c):
    """F0 with three zones for its A100 type, a second type in the same region, and the
    first type in us-west-2 (with the image there), plus an L40S pool with room."""
    f0c.offering.zones = ["us-east-1a", "us-east-1b", "us-east-1c"]
    f0c.offering.save()
    second = factories.offering(f0c.account, f0c.model, instance_type="test.a100x1b")
    second.on_demand_price_per_hour = Decimal("2.75")
    second.zones = ["us-east-1a"]
    second.save()
    west = Offering.objects.get(pk=f0c.offering.pk)
    west.pk, west.region, west.zones = None, "us-west-2", ["us-west-2a"]
    west.on_demand_price_per_hour = Decimal("3.00")
    west.save()
    Image.objects.create(
        name=f0c.image.name,
        account=f0c.account,
        region="us-west-2",
        image_id="ami-0a1b2c3d4e5f60002",
        os="Ubuntu 22.04",
    )
    Pool.objects.create(gpu_model=factories.gpu_model("L40S 48GB"), capacity=4)
    return f0c


def submit(f0c, *, allow_other_types=True, market="on_demand"):
    return admission.submit_reservation(
        actor=f0c.alice,
        project=f0c.alpha,
        gpu_model=f0c.model,
        gpu_count=1,
        duration_hours=2,
        priority="experiment",
        market=market,
        allow_other_instance_types=allow_other_types,
        now=T0,
    )


def drive(instance, *, every=timedelta(seconds=90), start=T0):
    """Deliver the launch task until it stops asking for a retry, ``every`` apart."""
    now = start
    for _ in range(20):
        try:
            instances.provision_instance(instance_id=instance.pk, now=now)
        except LaunchRetry:
            now += every
            continue
        return now
    raise AssertionError("the launch never settled")


def tried(instance):
    return [
        (a.instance_type, a.zone, a.kind)
        for a in LaunchAttempt.objects.filter(instance=instance).order_by("at", "pk")
    ]


def test_it_fails_over_zone_by_zone_then_to_another_type(fleet, cloud):
    for zone in ("us-east-1a", "us-east-1b", "us-east-1c"):
        cloud.inject(
            "RunInstances",
            "InsufficientInstanceCapacity",
            times=99,
            where={"InstanceType": "test.a100x1", "Placement.AvailabilityZone": zone},
        )
    instance = submit(fleet).instances.get()
    drive(instance)

    assert tried(instance) == [
        ("test.a100x1", "us-east-1a", "capacity"),
        ("test.a100x1", "us-east-1b", "capacity"),
        ("test.a100x1", "us-east-1c", "capacity"),
        ("test.a100x1b", "us-east-1a", ""),
    ]
    instance.refresh_from_db()
    assert instance.state == State.LAUNCHING and instance.external_id
    assert instance.offering.instance_type == "test.a100x1b"
    assert instance.rate_per_hour == Decimal("2.750000")  # captured from what launched


def test_it_keeps_the_type_and_goes_to_another_region_when_asked(fleet, cloud):
    cloud.inject(
        "RunInstances",
        "InsufficientInstanceCapacity",
        times=99,
        where={"X-Region": "us-east-1"},
    )
    instance = submit(fleet, allow_other_types=False).instances.get()
    drive(instance)

    assert [t[:2] for t in tried(instance)] == [
        ("test.a100x1", "us-east-1a"),
        ("test.a100x1", "us-east-1b"),
        ("test.a100x1", "us-east-1c"),
        ("test.a100x1", "us-west-2a"),
    ]
    instance.refresh_from_db()
    assert (instance.region, instance.zone) == ("us-west-2", "us-west-2a")
    assert instance.external_id


def test_it_jumps_past_a_region_whose_quota_is_reached(fleet, cloud):
    cloud.inject("RunInstances", "VcpuLimitExceeded", times=99, where={"X-Region": "us-east-1"})
    instance = submit(fleet).instances.get()
    drive(instance)
    assert tried(instance) == [
        ("test.a100x1", "us-east-1a", "quota"),
        ("test.a100x1", "us-west-2a", ""),
    ]


def test_it_retries_throttling_and_5xx_in_place(fleet, cloud):
    cloud.inject("RunInstances", "RequestLimitExceeded")
    cloud.inject("RunInstances", "InternalError")
    instance = submit(fleet).instances.get()
    drive(instance)
    assert tried(instance) == [
        ("test.a100x1", "us-east-1a", "throttled"),
        ("test.a100x1", "us-east-1a", "transient"),
        ("test.a100x1", "us-east-1a", ""),
    ]


@pytest.mark.parametrize("code", ["AuthFailure", "InvalidParameterValue"])
def test_it_fails_at_once_on_bad_credentials_or_a_bad_request(fleet, cloud, code):
    cloud.inject("RunInstances", code, "refused by the test")
    lease = submit(fleet)
    drive(lease.instances.get())
    lease.refresh_from_db()
    assert lease.status == Status.FAILED
    assert cloud.count("RunInstances") == 1
    assert "refused by the test" in str(lease.status_message)


def test_it_says_what_was_tried_and_what_to_try_instead(fleet, cloud, client):
    cloud.inject("RunInstances", "InsufficientInstanceCapacity", times=99)
    lease = submit(fleet)
    instance = lease.instances.get()
    drive(instance, every=timedelta(seconds=75))

    lease.refresh_from_db()
    assert lease.status == Status.FAILED
    assert lease.status_code == "launch_failed"
    assert str(lease.status_message) == (
        "No A100 80GB capacity in 4 zones and 2 instance types after 8 tries over 9 minutes; "
        "try spot or L40S 48GB, which have room, or fewer GPUs."
    )
    assert cloud.count("RunInstances") == 8

    client.force_login(fleet.alice)
    page = client.get(reverse("rental:lease", kwargs={"pk": lease.pk})).content.decode()
    assert "8 launch attempts" in page
    assert page.count("<code>capacity</code>") == 8


def test_it_says_how_long_the_tries_took_in_words_that_fit_the_numbers(fleet, cloud):
    cloud.inject("RunInstances", "InsufficientInstanceCapacity", times=99)
    lease = submit(fleet)
    drive(lease.instances.get(), every=timedelta(seconds=2))  # 8 tries in 14 seconds
    lease.refresh_from_db()
    assert lease.status == Status.FAILED
    said = str(lease.status_message)
    assert said.startswith(
        "No A100 80GB capacity in 4 zones and 2 instance types after 8 tries over 14 seconds;"
    )
    assert "14 秒" in render(lease.status_message, "zh-hans")


def test_it_stops_at_the_provisioning_timeout(fleet, cloud, settings):
    settings.PORTAL_PROVISIONING_TIMEOUT_SECONDS = 300
    cloud.inject("RunInstances", "InsufficientInstanceCapacity", times=99)
    lease = submit(fleet)
    drive(lease.instances.get(), every=timedelta(seconds=120))
    lease.refresh_from_db()
    assert lease.status == Status.FAILED
    assert str(lease.status_message).startswith("Not running within the provisioning timeout.")
    assert cloud.count("RunInstances") == 3  # at 0, 2 and 4 minutes; the 6th minute is over


def test_it_reads_a_cloud_that_does_not_answer_in_time_as_transient(fleet, cloud):
    from rental.fleet.cloud import provider_for
    from rental.fleet.instances import launch_spec
    from rental.providers.aws import AwsProvider
    from rental.providers.base import TAG_IDEMPOTENCY_KEY, ProviderError

    instance = submit(fleet).instances.get()
    impatient = AwsProvider(fleet.account.config(), read_timeout=1)
    # The call that must time out is the RunInstances held here. On a busy machine the
    # launch's look-up by tag can time out first (then no RunInstances was sent): try again.
    cloud.fast_describe()
    for _try in range(10):
        cloud.delay("RunInstances", 3)
        with pytest.raises(ProviderError) as caught:
            impatient.launch(launch_spec(instance), idempotency_key=instance.idempotency_key)
        assert (caught.value.kind, caught.value.retryable) == (Kind.TRANSIENT, True)
        if cloud.wait_until_held("RunInstances", timeout=0.01):
            break
        cloud.clear_faults()
    else:
        pytest.fail("the look-up before the RunInstances timed out ten times")
    # The held request still reaches the cloud, once its hold is over ...
    deadline = time.monotonic() + 60
    while not cloud.requests("RunInstances"):
        assert time.monotonic() < deadline, f"no RunInstances answered: {cloud.requests()}"
        time.sleep(0.05)
    patient = provider_for(instance)
    created = patient.describe(
        region="us-east-1", tag_filter={TAG_IDEMPOTENCY_KEY: instance.idempotency_key}
    )
    assert len(created) == 1
    # ... and the next try finds that instance by its key: no second launch.
    again = patient.launch(launch_spec(instance), idempotency_key=instance.idempotency_key)
    assert cloud.count("RunInstances") == 1
    assert again.external_id == created[0].external_id
