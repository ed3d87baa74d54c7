"""The driver's faster reading of EC2's answers gives what botocore's own reading gives."""

from __future__ import annotations

from typing import Any

import pytest
from botocore import parsers
from botocore.utils import parse_timestamp

from devcloud.server import LocalCloud
from rental.providers import aws, aws_parsing
from rental.providers.base import TAG_INSTALLATION
from tests.rental.providers.test_aws_driver import REGION, make_provider, make_spec


@pytest.mark.parametrize(
    "text",
    [
        "2026-12-05T02:14:18.000Z",
        "2026-12-05T02:14:18Z",
        "2026-12-05T02:14:18.123456+02:00",
        "2026-12-05T02:14:18",
        "1733366058",
        "20261205",
        "Sat, 05 Dec 2026 02:14:18 GMT",
    ],
)
def test_it_reads_a_timestamp_as_botocore_does(text: str) -> None:
    assert aws_parsing.parse_iso_first(text) == parse_timestamp(text)


def answer_bodies(cloud: LocalCloud) -> list[bytes]:
    """The raw DescribeInstances answers of one describe through the driver."""
    bodies: list[bytes] = []

    def keep(response_dict: dict[str, Any] | None = None, **kwargs: Any) -> None:
        bodies.append(response_dict["body"] if response_dict else b"")

    with aws._SESSION_LOCK:
        events = aws._shared_session().events
    events.register("before-parse.ec2.DescribeInstances", keep)
    try:
        make_provider(cloud.url, page_size=5).describe(
            region=REGION, tag_filter={TAG_INSTALLATION: "portal-test"}
        )
    finally:
        events.unregister("before-parse.ec2.DescribeInstances", keep)
    return bodies


def test_it_parses_a_describe_answer_as_botocore_does(cloud: LocalCloud) -> None:
    provider = make_provider(cloud.url)
    for n in range(3):
        provider.launch(
            make_spec(market="spot" if n == 2 else "on_demand"), idempotency_key=f"key-{n}"
        )
    with aws._SESSION_LOCK:
        client = aws._shared_session().client(
            "ec2", region_name=REGION, aws_access_key_id="x", aws_secret_access_key="y"
        )
    shape = client.meta.service_model.operation_model("DescribeInstances").output_shape
    bodies = answer_bodies(cloud)
    assert bodies
    fast = aws_parsing.ResponseParsers().create_parser("ec2")
    assert isinstance(fast, aws_parsing.EC2Parser)
    for body in bodies:
        response = {"body": body, "headers": {}, "status_code": 200}
        assert fast.parse(response, shape) == parsers.EC2QueryParser().parse(response, shape)
        assert fast.parse(response, shape)["Reservations"]


def test_it_parses_an_error_as_botocore_does() -> None:
    body = (
        b"<?xml version='1.0'?><Response><Errors><Error><Code>InvalidInstanceID.NotFound"
        b"</Code><Message>gone</Message></Error></Errors><RequestID>r1</RequestID></Response>"
    )
    with aws._SESSION_LOCK:
        client = aws._shared_session().client(
            "ec2", region_name=REGION, aws_access_key_id="x", aws_secret_access_key="y"
        )
    shape = client.meta.service_model.operation_model("DescribeInstances").output_shape
    response = {"body": body, "headers": {}, "status_code": 400}
    fast = aws_parsing.ResponseParsers().create_parser("ec2")
    assert fast.parse(response, shape) == parsers.EC2QueryParser().parse(response, shape)
