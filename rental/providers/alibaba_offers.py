"""Priced GPU offers of one Alibaba Cloud region, for an admin to import as offerings:
every GPU instance type (DescribeInstanceTypes, GPUAmount > 0), the zones that have it in
stock for pay-as-you-go (DescribeAvailableResource), and its on-demand and spot prices per
hour (DescribePrice with PriceUnit Hour; spot with SpotAsPriceGo, the market price now).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from alibabacloud_ecs20140526 import models as ecs

from rental.providers.base import ProviderError, ProviderErrorKind

Call = Callable[[str, Any], Any]  # (SDK method name, request) → response

PRICE_PLACES = Decimal("0.000001")


@dataclass(frozen=True)
class PricedOffer:
    """One GPU instance type in one zone with its prices per hour; ``spot_price`` is
    ``None`` where the type has no spot market."""

    region: str
    zone: str
    instance_type: str
    gpu_spec: str
    gpus: int
    vcpus: int
    memory_gib: Decimal
    price: Decimal
    spot_price: Decimal | None
    currency: str


def priced_gpu_offers(call: Call, region: str) -> list[PricedOffer]:
    """The GPU offers of ``region``, one per (zone with stock, instance type), ordered by
    type and zone. Makes 2 requests plus 2 DescribePrice per GPU type. Read-only. Raises
    ``ProviderError``."""
    types = _gpu_types(call)
    zones = _zones_with_stock(call, region, set(types))
    offers: list[PricedOffer] = []
    for name in sorted(types):
        if not zones.get(name):
            continue
        row = types[name]
        price, currency = _price(call, region, name, "NoSpot")
        try:
            spot_price: Decimal | None = _price(call, region, name, "SpotAsPriceGo")[0]
        except ProviderError as error:
            if error.kind != ProviderErrorKind.INVALID:
                raise
            spot_price = None  # no spot market for this type here
        for zone in sorted(zones[name]):
            offers.append(
                PricedOffer(
                    region=region,
                    zone=zone,
                    instance_type=name,
                    gpu_spec=str(row.gpuspec or ""),
                    gpus=int(row.gpuamount or 0),
                    vcpus=int(row.cpu_core_count or 0),
                    memory_gib=_decimal(row.memory_size),
                    price=price,
                    spot_price=spot_price,
                    currency=currency,
                )
            )
    return offers


def _gpu_types(call: Call) -> dict[str, Any]:
    found: dict[str, Any] = {}
    token = ""
    while True:
        request = ecs.DescribeInstanceTypesRequest(minimum_gpuamount=1, max_results=100)
        if token:
            request.next_token = token
        body = call("describe_instance_types", request).body
        rows = body.instance_types.instance_type or [] if body.instance_types else []
        for row in rows:
            if int(row.gpuamount or 0) > 0:
                found[str(row.instance_type_id)] = row
        token = str(getattr(body, "next_token", "") or "")
        if not token or not rows:
            return found


def _zones_with_stock(call: Call, region: str, types: set[str]) -> dict[str, set[str]]:
    request = ecs.DescribeAvailableResourceRequest(
        region_id=region,
        destination_resource="InstanceType",
        instance_charge_type="PostPaid",
    )
    body = call("describe_available_resource", request).body
    zones: dict[str, set[str]] = {}
    for zone in body.available_zones.available_zone or [] if body.available_zones else []:
        if zone.status != "Available":
            continue
        resources = (
            zone.available_resources.available_resource or [] if zone.available_resources else []
        )
        for resource in resources:
            supported = resource.supported_resources
            for item in supported.supported_resource or [] if supported else []:
                if item.value in types and item.status_category == "WithStock":
                    zones.setdefault(item.value, set()).add(str(zone.zone_id))
    return zones


def _price(call: Call, region: str, instance_type: str, spot: str) -> tuple[Decimal, str]:
    request = ecs.DescribePriceRequest(
        region_id=region,
        resource_type="instance",
        instance_type=instance_type,
        price_unit="Hour",
        spot_strategy=spot,
    )
    body = call("describe_price", request).body
    price = body.price_info.price if body.price_info else None
    if price is None or price.trade_price is None:
        raise ProviderError(ProviderErrorKind.TRANSIENT, "DescribePrice answered without a price.")
    return _decimal(price.trade_price), str(price.currency or "CNY")


def _decimal(value: Any) -> Decimal:
    # The SDK hands prices over as floats: read back through their shortest text form.
    return Decimal(str(value or 0)).quantize(PRICE_PLACES)
