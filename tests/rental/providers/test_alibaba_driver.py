"""The Alibaba Cloud ECS driver against the local ECS endpoint: each fault the endpoint
injects comes back as a ProviderError of the right kind, no stock in one zone moves the
launch to the next place (L2), and the same key or ClientToken never gives a second
instance."""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from decimal import Decimal

import pytest

from devcloud.alibaba import LocalEcs
from rental.fleet.failover import Attempt, OfferingView, Policy, TryAt, next_try, places_in_order
from rental.providers.account_options import frozen
from rental.providers.alibaba import AlibabaProvider
from rental.providers.base import (
    MARKET_ON_DEMAND,
    MARKET_SPOT,
    TAG_INSTALLATION,
    AccountConfig,
    CloudState,
    Credentials,
    LaunchSpec,
    ProviderError,
    ProviderErrorKind,
)
from tests.fixtures_alibaba import (
    ALIBABA_KEY,
    ALIBABA_SECRET,
    NETWORK_OPTIONS,
    OTHER_VPC_GROUP,
    SECURITY_GROUPS,
    VSWITCHES,
)

REGION = "cn-hangzhou"
GPU_TYPE = "ecs.gn7i-c8g1.2xlarge"


def driver(
    cloud: LocalEcs, *, read_timeout: float = 30.0, options: dict | None = None
) -> AlibabaProvider:
    config = AccountConfig(
        driver="alibaba",
        credentials=Credentials(access_key_id=ALIBABA_KEY, secret_access_key=ALIBABA_SECRET),
        endpoint_url=cloud.url,
        default_region=REGION,
        options=frozen(NETWORK_OPTIONS if options is None else options),
    )
    return AlibabaProvider(config, connect_timeout=2, read_timeout=read_timeout)


def spec(zone: str = "", market: str = MARKET_ON_DEMAND, **more) -> LaunchSpec:
    return LaunchSpec(
        region=REGION,
        instance_type=GPU_TYPE,
        image_id="ubuntu_22_04_x64",
        market=market,
        tags=((TAG_INSTALLATION, "driver-test"),),
        zone=zone,
        **more,
    )


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        ("OperationDenied.NoStock", ProviderErrorKind.CAPACITY),
        ("Zone.NotOnSale", ProviderErrorKind.CAPACITY),
        ("InvalidInstanceType.NotSupported", ProviderErrorKind.CAPACITY),
        ("InvalidResourceType.NotSupported", ProviderErrorKind.CAPACITY),
        ("QuotaExceeded.PostPaidGpuCores", ProviderErrorKind.QUOTA),
        ("Throttling.User", ProviderErrorKind.THROTTLED),
        ("Forbidden.RAM", ProviderErrorKind.AUTH),
        ("InvalidParameter.ImageId", ProviderErrorKind.INVALID),
        ("InternalError", ProviderErrorKind.TRANSIENT),
        ("ServiceUnavailable", ProviderErrorKind.TRANSIENT),
    ],
)
def test_it_maps_each_injected_fault_to_its_kind(ecs_cloud, code, kind) -> None:
    ecs_cloud.inject("RunInstances", code)

    with pytest.raises(ProviderError) as raised:
        driver(ecs_cloud).launch(spec(), idempotency_key="k-fault")

    assert raised.value.kind == kind
    assert raised.value.message.startswith(code)
    assert ALIBABA_SECRET not in raised.value.message
    assert ecs_cloud.state.instances == {}


def test_it_reads_wrong_keys_and_secrets_as_auth(ecs_cloud) -> None:
    ecs_cloud.set_secrets({ALIBABA_KEY: "another-secret"})
    with pytest.raises(ProviderError) as wrong_secret:
        driver(ecs_cloud).validate()
    ecs_cloud.set_secrets({"LTAIsomeoneelse": ALIBABA_SECRET})
    with pytest.raises(ProviderError) as unknown_key:
        driver(ecs_cloud).validate()

    assert wrong_secret.value.kind == ProviderErrorKind.AUTH
    assert wrong_secret.value.message.startswith("SignatureDoesNotMatch")
    assert unknown_key.value.kind == ProviderErrorKind.AUTH
    assert unknown_key.value.message.startswith("InvalidAccessKeyId.NotFound")


def test_a_timeout_and_a_closed_port_are_transient(ecs_cloud) -> None:
    ecs_cloud.delay("DescribeRegions", 2.5)
    with pytest.raises(ProviderError) as slow:
        driver(ecs_cloud, read_timeout=1).validate()
    closed = AlibabaProvider(
        AccountConfig(
            driver="alibaba",
            credentials=Credentials(access_key_id=ALIBABA_KEY, secret_access_key=ALIBABA_SECRET),
            endpoint_url="http://127.0.0.1:9",
        ),
        connect_timeout=1,
    )
    with pytest.raises(ProviderError) as refused:
        closed.validate()

    assert slow.value.kind == ProviderErrorKind.TRANSIENT
    assert refused.value.kind == ProviderErrorKind.TRANSIENT


def test_no_stock_in_one_zone_moves_the_launch_to_the_next_zone(ecs_cloud) -> None:
    ecs_cloud.inject(
        "RunInstances",
        "OperationDenied.NoStock",
        times=5,
        where={"ZoneId": "cn-hangzhou-h", "InstanceType": GPU_TYPE},
    )
    view = OfferingView(1, 1, REGION, GPU_TYPE, ("cn-hangzhou-h", "cn-hangzhou-i"), Decimal(1))
    places = places_in_order(chosen=view, others=[], allow_other_types=False)
    provider = driver(ecs_cloud)
    now = datetime(2026, 12, 5, 10, tzinfo=UTC)

    with pytest.raises(ProviderError) as no_stock:
        provider.launch(spec(zone=places[0].zone), idempotency_key="k-l2", client_token="k-l2-1")
    decision = next_try(
        places=places,
        attempts=[Attempt(places[0], no_stock.value.kind, now)],
        policy=Policy(max_attempts=5, timeout_seconds=600),
        started_at=now,
        now=now,
        jitter=0.5,
    )
    assert isinstance(decision, TryAt)
    assert decision.wait == 0
    launched = provider.launch(
        spec(zone=decision.place.zone), idempotency_key="k-l2", client_token="k-l2-2"
    )

    assert no_stock.value.kind == ProviderErrorKind.CAPACITY
    assert decision.place.zone == "cn-hangzhou-i"
    assert launched.zone == "cn-hangzhou-i"
    assert len(ecs_cloud.state.instances) == 1


def test_the_same_key_twice_launches_one_instance(ecs_cloud) -> None:
    provider = driver(ecs_cloud)

    first = provider.launch(spec(), idempotency_key="k-same")
    again = provider.launch(spec(), idempotency_key="k-same", client_token="other-token")

    assert again.external_id == first.external_id
    assert ecs_cloud.count("RunInstances") == 1
    assert list(ecs_cloud.state.instances) == [first.external_id]


def test_a_client_token_retried_after_a_lost_answer_names_the_same_instance(ecs_cloud) -> None:
    provider = driver(ecs_cloud)
    ecs_cloud.lose_answer("RunInstances")
    ecs_cloud.hide_new_instances()  # the describe by key cannot find it yet either

    with pytest.raises(ProviderError) as lost:
        provider.launch(spec(), idempotency_key="k-lost")
    again = provider.launch(spec(), idempotency_key="k-lost")

    assert lost.value.kind == ProviderErrorKind.TRANSIENT
    assert ecs_cloud.count("RunInstances") == 2
    assert list(ecs_cloud.state.instances) == [again.external_id]
    assert again.state == CloudState.PENDING
    assert again.idempotency_key == "k-lost"


def test_the_same_client_token_with_other_parameters_is_refused(ecs_cloud) -> None:
    provider = driver(ecs_cloud)
    provider.launch(spec(zone="cn-hangzhou-h"), idempotency_key="k-a", client_token="tok")

    with pytest.raises(ProviderError) as mismatch:
        provider.launch(spec(zone="cn-hangzhou-i"), idempotency_key="k-b", client_token="tok")

    assert mismatch.value.kind == ProviderErrorKind.INVALID
    assert mismatch.value.message.startswith("IdempotenceParamNotMatch")
    assert len(ecs_cloud.state.instances) == 1


def test_it_launches_spot_with_the_strategy_asked_and_sends_what_ecs_needs(ecs_cloud) -> None:
    provider = driver(ecs_cloud)

    market = provider.launch(
        spec(market=MARKET_SPOT, user_data="#!/bin/sh\n"), idempotency_key="s1"
    )
    capped = provider.launch(
        spec(market=MARKET_SPOT, spot_max_price=Decimal("4.25")), idempotency_key="s2"
    )
    on_demand = provider.launch(spec(zone="cn-hangzhou-j"), idempotency_key="s3")

    sent = ecs_cloud.requests("RunInstances")
    assert [r.param("SpotStrategy") for r in sent] == [
        "SpotAsPriceGo",
        "SpotWithPriceLimit",
        "NoSpot",
    ]
    assert Decimal(sent[1].param("SpotPriceLimit")) == Decimal("4.25")
    assert base64.b64decode(sent[0].param("UserData")) == b"#!/bin/sh\n"
    assert sent[0].param("ClientToken") == "s1"
    assert sent[0].param("Amount") == "1"
    assert sent[2].param("ZoneId") == "cn-hangzhou-j"
    assert (market.market, capped.market, on_demand.market) == (
        MARKET_SPOT,
        MARKET_SPOT,
        MARKET_ON_DEMAND,
    )


def test_it_stops_keeping_charging_and_starts_again(ecs_cloud) -> None:
    provider = driver(ecs_cloud)
    launched = provider.launch(spec(), idempotency_key="k-stop")
    wait_for(provider, launched.external_id, CloudState.RUNNING)

    provider.stop([launched.external_id], region=REGION)
    stopped = wait_for(provider, launched.external_id, CloudState.STOPPED)
    provider.stop([launched.external_id], region=REGION)  # harmless: refused, then read
    provider.start([launched.external_id], region=REGION)
    provider.start([launched.external_id], region=REGION)

    assert stopped.state == CloudState.STOPPED
    stops = ecs_cloud.requests("StopInstances")
    assert [r.param("StoppedMode") for r in stops] == ["KeepCharging", "KeepCharging"]
    assert [r.status for r in stops] == [200, 403]  # ECS refuses a stopped one
    assert wait_for(provider, launched.external_id, CloudState.RUNNING).private_address


def test_stopping_a_pending_instance_is_refused(ecs_cloud) -> None:
    provider = driver(ecs_cloud)
    launched = provider.launch(spec(), idempotency_key="k-pending")

    with pytest.raises(ProviderError) as refused:
        provider.stop([launched.external_id], region=REGION)

    assert refused.value.kind == ProviderErrorKind.INVALID
    assert refused.value.message.startswith("IncorrectInstanceStatus")


def test_it_releases_an_instance_a_describe_does_not_show_yet(ecs_cloud) -> None:
    provider = driver(ecs_cloud)
    ecs_cloud.hide_new_instances()
    launched = provider.launch(spec(), idempotency_key="k-hidden")

    provider.terminate([launched.external_id, "i-00000000000000000000"], region=REGION)

    assert ecs_cloud.state.instances == {}


def test_it_follows_every_page_of_a_describe(ecs_cloud) -> None:
    provider = driver(ecs_cloud)
    for n in range(3):
        provider.launch(spec(), idempotency_key=f"k-page-{n}")
    ecs_cloud.requests()  # the log so far is not what is checked

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("rental.providers.alibaba.PAGE_SIZE", 2)
        before = ecs_cloud.count("DescribeInstances")
        found = provider.describe(region=REGION, tag_filter={TAG_INSTALLATION: "driver-test"})

    assert len(found) == 3
    assert ecs_cloud.count("DescribeInstances") - before == 2


def test_throttled_describes_are_throttled_errors(ecs_cloud) -> None:
    ecs_cloud.inject("DescribeInstances", "Throttling.User")

    with pytest.raises(ProviderError) as raised:
        driver(ecs_cloud).describe(region=REGION, tag_filter={TAG_INSTALLATION: "x"})

    assert raised.value.kind == ProviderErrorKind.THROTTLED
    assert raised.value.retryable


def test_it_lists_priced_gpu_offers_per_zone(ecs_cloud) -> None:
    offers = driver(ecs_cloud).priced_offers(REGION)

    a10 = [o for o in offers if o.instance_type == GPU_TYPE]
    assert [o.zone for o in a10] == ["cn-hangzhou-h", "cn-hangzhou-i", "cn-hangzhou-j"]
    assert a10[0].price == Decimal("16.840000")
    assert a10[0].spot_price == Decimal("3.368000")
    assert (a10[0].gpus, a10[0].gpu_spec, a10[0].currency) == (1, "NVIDIA A10", "CNY")
    assert all(o.gpus > 0 for o in offers)  # the CPU-only type is left out


def wait_for(provider: AlibabaProvider, external_id: str, state: CloudState):
    import time  # only this helper waits

    deadline = time.monotonic() + 10
    while True:
        [instance] = provider.describe_ids([external_id], region=REGION)
        if instance.state == state or time.monotonic() > deadline:
            assert instance.state == state
            return instance
        time.sleep(0.1)


# -- the account's network options ----------------------------------------------------


def test_a_launch_without_a_security_group_is_refused_naming_the_option(ecs_cloud) -> None:
    provider = driver(ecs_cloud, options={"vswitch_ids": NETWORK_OPTIONS["vswitch_ids"]})

    with pytest.raises(ProviderError) as raised:
        provider.launch(spec(zone="cn-hangzhou-i"), idempotency_key="k-no-sg")

    assert raised.value.kind == ProviderErrorKind.INVALID
    assert "security_group_id" in raised.value.message
    assert ecs_cloud.count("RunInstances") == 0
    assert ecs_cloud.state.instances == {}


def test_a_launch_uses_the_vswitch_of_its_zone_and_the_security_group(ecs_cloud) -> None:
    launched = driver(ecs_cloud).launch(spec(zone="cn-hangzhou-i"), idempotency_key="k-vsw")

    sent = ecs_cloud.requests("RunInstances")[-1]
    assert (sent.param("ZoneId"), sent.param("VSwitchId"), sent.param("SecurityGroupId")) == (
        "cn-hangzhou-i",
        VSWITCHES["cn-hangzhou-i"],
        SECURITY_GROUPS["cn-hangzhou"],
    )
    made = ecs_cloud.state.instances[launched.external_id]
    assert (made.zone, made.vswitch_id) == ("cn-hangzhou-i", VSWITCHES["cn-hangzhou-i"])
    assert launched.zone == "cn-hangzhou-i"


def test_a_launch_without_a_zone_goes_to_the_first_zone_with_a_vswitch(ecs_cloud) -> None:
    options = {
        **NETWORK_OPTIONS,
        "vswitch_ids": {
            "cn-hangzhou-j": VSWITCHES["cn-hangzhou-j"],
            "cn-hangzhou-i": VSWITCHES["cn-hangzhou-i"],
            "cn-beijing-g": VSWITCHES["cn-beijing-g"],  # another region's: not chosen
        },
    }

    launched = driver(ecs_cloud, options=options).launch(spec(), idempotency_key="k-first")

    sent = ecs_cloud.requests("RunInstances")[-1]
    assert (sent.param("ZoneId"), sent.param("VSwitchId")) == (
        "cn-hangzhou-i",
        VSWITCHES["cn-hangzhou-i"],
    )
    assert ecs_cloud.state.instances[launched.external_id].zone == "cn-hangzhou-i"


def test_a_zone_without_a_vswitch_is_refused_naming_the_option(ecs_cloud) -> None:
    options = {**NETWORK_OPTIONS, "vswitch_ids": {"cn-hangzhou-h": VSWITCHES["cn-hangzhou-h"]}}

    with pytest.raises(ProviderError) as raised:
        driver(ecs_cloud, options=options).launch(
            spec(zone="cn-hangzhou-j"), idempotency_key="k-no-vsw"
        )

    assert raised.value.kind == ProviderErrorKind.INVALID
    assert "vswitch_ids" in raised.value.message and "cn-hangzhou-j" in raised.value.message
    assert ecs_cloud.count("RunInstances") == 0


@pytest.mark.parametrize(
    ("options", "code", "option"),
    [
        (
            {**NETWORK_OPTIONS, "vswitch_ids": {"cn-hangzhou-h": "vsw-nosuchswitch"}},
            "InvalidVSwitchId.NotFound",
            "vswitch_ids",
        ),
        (
            {**NETWORK_OPTIONS, "security_group_id": "sg-nosuchgroup"},
            "InvalidSecurityGroupId.NotFound",
            "security_group_id",
        ),
        (
            {**NETWORK_OPTIONS, "security_group_id": OTHER_VPC_GROUP},
            "InvalidSecurityGroup.VpcMismatch",
            "security_group_id",
        ),
        (
            {**NETWORK_OPTIONS, "vswitch_ids": {"cn-hangzhou-h": VSWITCHES["cn-hangzhou-i"]}},
            "InvalidParameter.Mismatch",
            "vswitch_ids",
        ),
    ],
)
def test_a_network_the_cloud_refuses_is_invalid_naming_the_option(
    ecs_cloud, options, code, option
) -> None:
    with pytest.raises(ProviderError) as raised:
        driver(ecs_cloud, options=options).launch(
            spec(zone="cn-hangzhou-h"), idempotency_key="k-bad-net"
        )

    assert raised.value.kind == ProviderErrorKind.INVALID
    assert raised.value.message.startswith(code)
    assert option in raised.value.message
    assert not raised.value.retryable
    assert ecs_cloud.state.instances == {}
