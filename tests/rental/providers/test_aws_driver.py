"""The real AWS driver against the local EC2-compatible endpoint (no mocks of our code)."""

from __future__ import annotations

import socket
import time
from datetime import UTC
from decimal import Decimal

import pytest

from devcloud.server import LocalCloud
from rental.providers.aws import AwsProvider
from rental.providers.base import (
    TAG_IDEMPOTENCY_KEY,
    TAG_INSTALLATION,
    TAG_PROJECT,
    TAG_REQUESTER,
    TAG_RESERVATION,
    AccountConfig,
    CloudState,
    Credentials,
    LaunchSpec,
    ProviderError,
    ProviderErrorKind,
)
from rental.providers.registry import DRIVER_CHOICES, get_provider

REGION = "us-east-1"
GOOD_KEY = "AKIDGOOD"
SECRET = "s3cr3t-never-shown-anywhere"
INSTALLATION = "portal-test"


def make_provider(cloud_url: str, *, key: str = GOOD_KEY, page_size: int = 500) -> AwsProvider:
    config = AccountConfig(
        driver="aws",
        credentials=Credentials(access_key_id=key, secret_access_key=SECRET),
        endpoint_url=cloud_url,
        default_region=REGION,
    )
    return AwsProvider(config, page_size=page_size)


def make_spec(
    *,
    installation: str = INSTALLATION,
    market: str = "on_demand",
    instance_type: str = "p5e.48xlarge",
    zone: str = "",
    spot_max_price: Decimal | None = None,
) -> LaunchSpec:
    return LaunchSpec(
        region=REGION,
        instance_type=instance_type,
        image_id="ami-0a1b2c3d4e5f60001",
        market=market,
        tags=(
            (TAG_INSTALLATION, installation),
            (TAG_PROJECT, "vision"),
            (TAG_RESERVATION, "42"),
            (TAG_REQUESTER, "alice"),
        ),
        zone=zone,
        user_data="#!/bin/sh\necho hello\n",
        spot_max_price=spot_max_price,
        name="lease-42",
    )


def unused_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_it_launches_one_instance_for_a_repeated_idempotency_key(cloud: LocalCloud) -> None:
    provider = make_provider(cloud.url)

    first = provider.launch(make_spec(), idempotency_key="lease-42-0")
    second = provider.launch(make_spec(), idempotency_key="lease-42-0")

    assert second.external_id == first.external_id
    described = provider.describe(region=REGION, tag_filter={TAG_INSTALLATION: INSTALLATION})
    assert [instance.external_id for instance in described] == [first.external_id]
    assert cloud.count("RunInstances") == 1


def test_it_launches_separate_instances_for_different_keys(cloud: LocalCloud) -> None:
    provider = make_provider(cloud.url)

    first = provider.launch(make_spec(), idempotency_key="lease-42-0")
    second = provider.launch(make_spec(), idempotency_key="lease-42-1")

    assert first.external_id != second.external_id
    assert (first.idempotency_key, second.idempotency_key) == ("lease-42-0", "lease-42-1")


def test_it_launches_anew_when_the_keyed_instance_was_terminated(cloud: LocalCloud) -> None:
    provider = make_provider(cloud.url)
    first = provider.launch(make_spec(), idempotency_key="lease-42-0")
    provider.terminate([first.external_id], region=REGION)

    # As on EC2, the same ClientToken would answer with the terminated instance: the
    # portal's next attempt carries a token of its own (rental.fleet.failover).
    second = provider.launch(make_spec(), idempotency_key="lease-42-0", client_token="attempt-1")

    assert second.external_id != first.external_id


def test_it_answers_a_reused_client_token_with_the_first_instance(cloud: LocalCloud) -> None:
    provider = make_provider(cloud.url)
    cloud.hide_new_instances(60)  # the look-up by tag does not see it: only the token helps
    first = provider.launch(make_spec(), idempotency_key="lease-42-0", client_token="t-0")
    again = provider.launch(make_spec(), idempotency_key="lease-42-0", client_token="t-0")

    assert again.external_id == first.external_id
    assert cloud.count("RunInstances") == 2
    cloud.clear_faults()
    assert len(provider.describe(region=REGION, tag_filter={})) == 1


def test_it_refuses_a_client_token_reused_with_other_parameters(cloud: LocalCloud) -> None:
    provider = make_provider(cloud.url)
    cloud.hide_new_instances(60)  # the look-up by tag does not see the first instance
    provider.launch(make_spec(zone="us-east-1a"), idempotency_key="lease-42-0", client_token="t")

    with pytest.raises(ProviderError) as error:
        provider.launch(
            make_spec(zone="us-east-1b"), idempotency_key="lease-42-0", client_token="t"
        )

    assert error.value.kind == ProviderErrorKind.INVALID
    assert "IdempotentParameterMismatch" in error.value.message


def test_it_records_the_portal_tags_on_the_instance(cloud: LocalCloud) -> None:
    provider = make_provider(cloud.url)

    launched = provider.launch(make_spec(zone="us-east-1b"), idempotency_key="lease-42-0")

    [described] = provider.describe(region=REGION, tag_filter={TAG_RESERVATION: "42"})
    for instance in (launched, described):
        assert instance.tag(TAG_INSTALLATION) == INSTALLATION
        assert instance.tag(TAG_PROJECT) == "vision"
        assert instance.tag(TAG_RESERVATION) == "42"
        assert instance.tag(TAG_REQUESTER) == "alice"
        assert instance.tag(TAG_IDEMPOTENCY_KEY) == "lease-42-0"
        assert instance.idempotency_key == "lease-42-0"
        assert instance.tag("Name") == "lease-42"
        assert instance.tag("no-such-tag") == ""
    assert described.instance_type == "p5e.48xlarge"
    assert described.zone == "us-east-1b"
    assert described.region == REGION
    assert described.market == "on_demand"
    assert described.state in (CloudState.PENDING, CloudState.RUNNING)
    assert described.private_address
    assert described.launched_at is not None
    assert described.launched_at.tzinfo == UTC


def test_it_accepts_every_gpu_instance_family(cloud: LocalCloud) -> None:
    provider = make_provider(cloud.url)
    types = ["g4dn.xlarge", "g5.2xlarge", "g6.xlarge", "g6e.xlarge", "p4d.24xlarge"]
    types += ["p4de.24xlarge", "p5.48xlarge", "p5e.48xlarge"]

    for index, instance_type in enumerate(types):
        spec = make_spec(instance_type=instance_type)
        provider.launch(spec, idempotency_key=f"key-{index}")

    described = provider.describe(region=REGION, tag_filter={TAG_INSTALLATION: INSTALLATION})
    assert sorted(instance.instance_type for instance in described) == sorted(types)


def test_it_describes_only_this_installations_instances_across_pages(cloud: LocalCloud) -> None:
    provider = make_provider(cloud.url, page_size=5)
    ours = {
        provider.launch(make_spec(), idempotency_key=f"ours-{index}").external_id
        for index in range(12)
    }
    theirs = provider.launch(make_spec(installation="other"), idempotency_key="theirs-0")
    requests_before = cloud.count("DescribeInstances")

    described = provider.describe(region=REGION, tag_filter={TAG_INSTALLATION: INSTALLATION})

    assert {instance.external_id for instance in described} == ours
    assert len(described) == 12
    assert theirs.external_id not in {instance.external_id for instance in described}
    assert cloud.count("DescribeInstances") - requests_before == 3  # 5 + 5 + 2


def test_it_terminates_and_then_reports_terminated(cloud: LocalCloud) -> None:
    provider = make_provider(cloud.url)
    launched = provider.launch(make_spec(), idempotency_key="lease-42-0")

    provider.terminate([launched.external_id], region=REGION)

    [described] = provider.describe(region=REGION, tag_filter={TAG_INSTALLATION: INSTALLATION})
    assert described.external_id == launched.external_id
    assert described.state == CloudState.TERMINATED
    assert described.state_reason
    assert described.state_changed_at is not None
    assert described.state_changed_at.tzinfo == UTC


def test_it_terminates_twice_harmlessly(cloud: LocalCloud) -> None:
    provider = make_provider(cloud.url)
    launched = provider.launch(make_spec(), idempotency_key="lease-42-0")

    provider.terminate([launched.external_id], region=REGION)
    provider.terminate([launched.external_id], region=REGION)

    [described] = provider.describe(region=REGION, tag_filter={})
    assert described.state == CloudState.TERMINATED


def test_it_ignores_unknown_ids_when_terminating(cloud: LocalCloud) -> None:
    provider = make_provider(cloud.url)
    launched = provider.launch(make_spec(), idempotency_key="lease-42-0")

    provider.terminate(["i-0123456789abcdef0"], region=REGION)
    assert provider.describe(region=REGION, tag_filter={})[0].state == CloudState.RUNNING

    provider.terminate(["i-0123456789abcdef0", launched.external_id], region=REGION)
    assert provider.describe(region=REGION, tag_filter={})[0].state == CloudState.TERMINATED


def test_it_makes_no_call_to_terminate_nothing(cloud: LocalCloud) -> None:
    provider = make_provider(cloud.url)

    provider.terminate([], region=REGION)

    assert cloud.count("TerminateInstances") == 0


def test_it_launches_on_the_spot_market(cloud: LocalCloud) -> None:
    provider = make_provider(cloud.url)

    launched = provider.launch(
        make_spec(market="spot", spot_max_price=Decimal("12.500000")),
        idempotency_key="lease-42-0",
    )

    [described] = provider.describe(region=REGION, tag_filter={TAG_INSTALLATION: INSTALLATION})
    assert launched.market == "spot"
    assert described.market == "spot"


def test_it_refuses_bad_credentials_as_auth(cloud: LocalCloud) -> None:
    cloud.require_access_keys({GOOD_KEY})
    provider = make_provider(cloud.url, key="AKIDBAD1")

    with pytest.raises(ProviderError) as caught:
        provider.launch(make_spec(), idempotency_key="lease-42-0")

    assert caught.value.kind == "auth"
    assert caught.value.retryable is False
    assert SECRET not in str(caught.value)
    assert SECRET not in repr(caught.value)
    assert cloud.count("RunInstances") == 0


def test_it_validates_good_credentials(cloud: LocalCloud) -> None:
    cloud.require_access_keys({GOOD_KEY})

    make_provider(cloud.url).validate()

    assert [request.access_key_id for request in cloud.requests()] == [GOOD_KEY]


def test_it_fails_validation_with_bad_credentials(cloud: LocalCloud) -> None:
    cloud.require_access_keys({GOOD_KEY})

    with pytest.raises(ProviderError) as caught:
        make_provider(cloud.url, key="AKIDBAD1").validate()

    assert caught.value.kind == "auth"
    assert caught.value.retryable is False


@pytest.mark.parametrize(
    ("code", "kind", "retryable"),
    [
        ("InsufficientInstanceCapacity", "capacity", True),
        ("RequestLimitExceeded", "throttled", True),
        ("InstanceLimitExceeded", "quota", True),
        ("VcpuLimitExceeded", "quota", True),
        ("InvalidParameterValue", "invalid", False),
        ("InvalidAMIID.NotFound", "invalid", False),
        ("Unavailable", "transient", True),
    ],
)
def test_it_maps_launch_errors_to_kinds(
    cloud: LocalCloud, code: str, kind: str, retryable: bool
) -> None:
    cloud.inject(action="RunInstances", code=code, message=f"Simulated {code}.")
    provider = make_provider(cloud.url)

    with pytest.raises(ProviderError) as caught:
        provider.launch(make_spec(), idempotency_key="lease-42-0")

    assert caught.value.kind == kind
    assert caught.value.retryable is retryable
    assert code in str(caught.value)
    assert provider.describe(region=REGION, tag_filter={}) == []


def test_it_launches_once_the_injected_faults_are_used_up(cloud: LocalCloud) -> None:
    cloud.inject(action="RunInstances", code="InsufficientInstanceCapacity", times=2)
    provider = make_provider(cloud.url)

    for _ in range(2):
        with pytest.raises(ProviderError):
            provider.launch(make_spec(), idempotency_key="lease-42-0")
    launched = provider.launch(make_spec(), idempotency_key="lease-42-0")

    assert launched.idempotency_key == "lease-42-0"
    assert cloud.count("RunInstances") == 3


def test_it_maps_an_unreachable_endpoint_to_transient_quickly() -> None:
    provider = make_provider(f"http://127.0.0.1:{unused_port()}")
    started = time.monotonic()

    with pytest.raises(ProviderError) as caught:
        provider.describe(region=REGION, tag_filter={})

    assert caught.value.kind == "transient"
    assert caught.value.retryable is True
    assert time.monotonic() - started < 5


def test_it_builds_the_aws_driver_from_the_registry(cloud: LocalCloud) -> None:
    config = AccountConfig(
        driver="aws",
        credentials=Credentials(access_key_id=GOOD_KEY, secret_access_key=SECRET),
        endpoint_url=cloud.url,
    )

    provider = get_provider(config)

    assert isinstance(provider, AwsProvider)
    provider.validate()
    assert "aws" in dict(DRIVER_CHOICES)


def test_it_refuses_an_unknown_driver() -> None:
    config = AccountConfig(driver="gcp", credentials=Credentials("AKID", SECRET))

    with pytest.raises(ProviderError) as caught:
        get_provider(config)

    assert caught.value.kind == "invalid"
    assert caught.value.retryable is False


def test_it_keeps_secrets_out_of_reprs() -> None:
    credentials = Credentials("AKIDGOOD", SECRET, session_token="token-value-123")
    config = AccountConfig(driver="aws", credentials=credentials)

    for text in (repr(credentials), repr(config), repr(AwsProvider(config))):
        assert SECRET not in text
        assert "token-value-123" not in text
