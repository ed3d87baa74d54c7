"""The local ECS endpoint (devcloud.alibaba) speaks the ECS RPC protocol: requests signed
as Alibaba Cloud's own SDK signs them, with the secret checked for real; errors in ECS's
JSON shape and HTTP statuses; ClientToken idempotency; paging; the lifecycle."""

from __future__ import annotations

import json
import time
import uuid
from datetime import UTC, datetime
from urllib.parse import urlencode

import pytest
import requests
from alibabacloud_tea_openapi.utils import Utils

from tests.fixtures_alibaba import (
    ALIBABA_KEY,
    ALIBABA_SECRET,
    OTHER_VPC_GROUP,
    SECURITY_GROUPS,
    VSWITCHES,
)

REGION = "cn-hangzhou"
GPU_TYPE = "ecs.gn7i-c8g1.2xlarge"


def call(
    cloud,
    action: str,
    secret: str = ALIBABA_SECRET,
    key: str = ALIBABA_KEY,
    network: bool = True,
    **params,
):
    """One RPC request (HMAC-SHA1 signature over the sorted parameters), sent as a GET.
    A RunInstances names the region's security group and its zone's vSwitch unless
    ``network`` is False or the test names its own."""
    if action == "RunInstances" and network:
        zone = params.get("ZoneId") or "cn-hangzhou-h"
        params = {
            "SecurityGroupId": SECURITY_GROUPS[REGION],
            "VSwitchId": VSWITCHES[zone],
            **params,
        }
    query = {
        "Action": action,
        "Version": "2014-05-26",
        "Format": "JSON",
        "AccessKeyId": key,
        "SignatureMethod": "HMAC-SHA1",
        "SignatureVersion": "1.0",
        "SignatureNonce": uuid.uuid4().hex,
        "Timestamp": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "RegionId": REGION,
        **{k: str(v) for k, v in params.items()},
    }
    query["Signature"] = Utils.get_rpcsignature(query, "GET", secret)
    return requests.get(f"{cloud.url}/?{urlencode(query)}", timeout=10)


def test_a_good_signature_is_answered_with_a_request_id(ecs_cloud) -> None:
    answer = call(ecs_cloud, "DescribeRegions")

    assert answer.status_code == 200
    assert answer.json()["RequestId"]
    assert REGION in [r["RegionId"] for r in answer.json()["Regions"]["Region"]]


def test_a_wrong_secret_is_refused_in_the_ecs_error_shape(ecs_cloud) -> None:
    answer = call(ecs_cloud, "DescribeRegions", secret="not-the-secret")

    assert answer.status_code == 400
    body = answer.json()
    assert set(body) == {"RequestId", "HostId", "Code", "Message"}
    assert body["Code"] == "SignatureDoesNotMatch"


def test_a_tampered_parameter_breaks_the_signature(ecs_cloud) -> None:
    query = {
        "Action": "DescribeInstances",
        "Version": "2014-05-26",
        "AccessKeyId": ALIBABA_KEY,
        "SignatureNonce": "n1",
        "RegionId": REGION,
    }
    query["Signature"] = Utils.get_rpcsignature(query, "GET", ALIBABA_SECRET)
    query["RegionId"] = "cn-beijing"

    answer = requests.get(f"{ecs_cloud.url}/?{urlencode(query)}", timeout=10)

    assert answer.json()["Code"] == "SignatureDoesNotMatch"


def test_an_unknown_access_key_is_not_found(ecs_cloud) -> None:
    answer = call(ecs_cloud, "DescribeRegions", key="LTAInobody")

    assert answer.status_code == 404
    assert answer.json()["Code"] == "InvalidAccessKeyId.NotFound"


def test_a_wrong_version_and_an_unknown_action_are_refused(ecs_cloud) -> None:
    assert call(ecs_cloud, "DescribeRegions", Version="2016-01-01").json()["Code"] == (
        "InvalidVersion"
    )
    unknown = call(ecs_cloud, "DescribeEverything")
    assert (unknown.status_code, unknown.json()["Code"]) == (404, "InvalidAction.NotFound")


def test_injected_faults_come_with_ecs_statuses_and_only_where_asked(ecs_cloud) -> None:
    ecs_cloud.inject("RunInstances", "OperationDenied.NoStock", where={"ZoneId": "cn-hangzhou-h"})
    ecs_cloud.inject("DescribeRegions", "ServiceUnavailable")

    elsewhere = call(
        ecs_cloud, "RunInstances", InstanceType=GPU_TYPE, ImageId="img", ZoneId="cn-hangzhou-i"
    )
    no_stock = call(
        ecs_cloud, "RunInstances", InstanceType=GPU_TYPE, ImageId="img", ZoneId="cn-hangzhou-h"
    )
    unavailable = call(ecs_cloud, "DescribeRegions")

    assert elsewhere.status_code == 200
    assert (no_stock.status_code, no_stock.json()["Code"]) == (403, "OperationDenied.NoStock")
    assert unavailable.status_code == 503
    assert [r.faulted for r in ecs_cloud.requests("RunInstances")] == [False, True]


def test_a_client_token_answers_the_same_instance_and_refuses_other_parameters(
    ecs_cloud,
) -> None:
    params = {"InstanceType": GPU_TYPE, "ImageId": "img", "ClientToken": "tok-1"}

    first = call(ecs_cloud, "RunInstances", **params).json()
    again = call(ecs_cloud, "RunInstances", **params).json()
    other = call(ecs_cloud, "RunInstances", **{**params, "ZoneId": "cn-hangzhou-j"})

    assert again["InstanceIdSets"] == first["InstanceIdSets"]
    assert len(ecs_cloud.state.instances) == 1
    assert (other.status_code, other.json()["Code"]) == (400, "IdempotenceParamNotMatch")


def test_a_vpc_launch_needs_a_known_security_group_and_vswitch_of_one_vpc(ecs_cloud) -> None:
    run = {"InstanceType": GPU_TYPE, "ImageId": "img"}
    here = {"SecurityGroupId": SECURITY_GROUPS[REGION], "VSwitchId": VSWITCHES["cn-hangzhou-i"]}

    no_group = call(ecs_cloud, "RunInstances", network=False, **run)
    no_switch = call(
        ecs_cloud, "RunInstances", network=False, SecurityGroupId=here["SecurityGroupId"], **run
    )
    unknown_group = call(ecs_cloud, "RunInstances", **run, **{**here, "SecurityGroupId": "sg-x1"})
    other_region = call(
        ecs_cloud,
        "RunInstances",
        **run,
        **{**here, "SecurityGroupId": SECURITY_GROUPS["cn-beijing"]},
    )
    unknown_switch = call(ecs_cloud, "RunInstances", **run, **{**here, "VSwitchId": "vsw-x1"})
    other_zone = call(ecs_cloud, "RunInstances", ZoneId="cn-hangzhou-h", **run, **here)
    other_vpc = call(
        ecs_cloud, "RunInstances", **run, **{**here, "SecurityGroupId": OTHER_VPC_GROUP}
    )
    good = call(ecs_cloud, "RunInstances", **run, **here)

    answers = [no_group, no_switch, unknown_group, other_region, unknown_switch, other_zone]
    assert [(a.status_code, a.json()["Code"]) for a in [*answers, other_vpc]] == [
        (400, "MissingSecurityGroupId"),
        (400, "MissingVSwitchId"),
        (404, "InvalidSecurityGroupId.NotFound"),
        (404, "InvalidSecurityGroupId.NotFound"),
        (404, "InvalidVSwitchId.NotFound"),
        (400, "InvalidParameter.Mismatch"),
        (400, "InvalidSecurityGroup.VpcMismatch"),
    ]
    [made] = ecs_cloud.state.instances.values()
    assert good.status_code == 200
    assert (made.zone, made.vswitch_id) == ("cn-hangzhou-i", VSWITCHES["cn-hangzhou-i"])


def test_a_classic_account_launches_without_a_network(ecs_cloud) -> None:
    ecs_cloud.set_network(security_groups=[], vswitches=[], vpc_only=False)

    launched = call(ecs_cloud, "RunInstances", network=False, InstanceType=GPU_TYPE, ImageId="i")

    assert launched.status_code == 200
    assert len(ecs_cloud.state.instances) == 1


def test_it_pages_and_filters_by_tag_and_by_ids(ecs_cloud) -> None:
    ids = []
    for n in range(5):
        launched = call(
            ecs_cloud,
            "RunInstances",
            InstanceType=GPU_TYPE,
            ImageId="img",
            **{"Tag.1.Key": "team", "Tag.1.Value": "a" if n < 4 else "b"},
        ).json()
        ids.append(launched["InstanceIdSets"]["InstanceIdSet"][0])

    pages = [
        call(
            ecs_cloud,
            "DescribeInstances",
            PageSize=3,
            PageNumber=page,
            **{"Tag.1.Key": "team", "Tag.1.Value": "a"},
        ).json()
        for page in (1, 2)
    ]
    by_ids = call(ecs_cloud, "DescribeInstances", InstanceIds=json.dumps([ids[4], "i-none"]))
    too_big = call(ecs_cloud, "DescribeInstances", PageSize=101)

    assert [p["TotalCount"] for p in pages] == [4, 4]
    seen = [i["InstanceId"] for p in pages for i in p["Instances"]["Instance"]]
    assert seen == ids[:4]
    assert [i["InstanceId"] for i in by_ids.json()["Instances"]["Instance"]] == [ids[4]]
    assert too_big.json()["Code"] == "InvalidParameter.PageSize"


def test_an_instance_runs_stops_starts_and_is_released(ecs_cloud) -> None:
    launched = call(ecs_cloud, "RunInstances", InstanceType=GPU_TYPE, ImageId="img").json()
    [instance_id] = launched["InstanceIdSets"]["InstanceIdSet"]

    def status() -> str:
        found = call(ecs_cloud, "DescribeInstances", InstanceIds=json.dumps([instance_id]))
        rows = found.json()["Instances"]["Instance"]
        return rows[0]["Status"] if rows else "gone"

    assert status() == "Pending"
    not_yet = call(ecs_cloud, "StopInstances", **{"InstanceId.1": instance_id})
    time.sleep(0.4)
    assert status() == "Running"
    unforced = call(ecs_cloud, "DeleteInstances", **{"InstanceId.1": instance_id})
    call(ecs_cloud, "StopInstances", **{"InstanceId.1": instance_id})
    time.sleep(0.4)
    assert status() == "Stopped"
    forced = call(ecs_cloud, "DeleteInstances", Force="true", **{"InstanceId.1": instance_id})
    again = call(ecs_cloud, "DeleteInstances", Force="true", **{"InstanceId.1": instance_id})

    assert (not_yet.status_code, not_yet.json()["Code"]) == (403, "IncorrectInstanceStatus")
    assert unforced.json()["Code"] == "IncorrectInstanceStatus"
    assert forced.status_code == 200
    assert status() == "gone"
    assert (again.status_code, again.json()["Code"]) == (404, "InvalidInstanceId.NotFound")


@pytest.mark.parametrize("strategy", ["SpotAsPriceGo", "SpotWithPriceLimit"])
def test_spot_instances_carry_their_strategy(ecs_cloud, strategy) -> None:
    extra = {"SpotPriceLimit": "3.5"} if strategy == "SpotWithPriceLimit" else {}
    launched = call(
        ecs_cloud,
        "RunInstances",
        InstanceType=GPU_TYPE,
        ImageId="img",
        SpotStrategy=strategy,
        **extra,
    ).json()
    [instance_id] = launched["InstanceIdSets"]["InstanceIdSet"]

    assert ecs_cloud.state.instances[instance_id].spot_strategy == strategy
    unpriced = call(
        ecs_cloud,
        "RunInstances",
        InstanceType=GPU_TYPE,
        ImageId="img",
        SpotStrategy="SpotWithPriceLimit",
    )
    assert unpriced.json()["Code"] == "InvalidParameter.SpotPriceLimit"
