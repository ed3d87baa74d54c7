"""The compute side's data: catalog, accounts, pools and quotas, leases and usage."""

from rental.models.agent import UtilizationRollup
from rental.models.capacity import AvailabilityWatch, Pool, Quota, QuotaRequest
from rental.models.catalog import GpuModel, Image, Offering, ProviderAccount
from rental.models.currency import ExchangeRate
from rental.models.launch import LaunchAttempt, Orphan, RegionSync
from rental.models.leases import (
    Instance,
    Market,
    Priority,
    Reservation,
    SshKey,
    TerminationReason,
    Tier,
    UsageRecord,
    UtilizationSample,
)
from rental.models.outbox import OutboxMessage
from rental.models.own_hosts import OwnHost
from rental.models.storage import StorageInterval
from rental.models.unbilled import UnbilledCloudTime
from rental.models.volumes import DataVolume

__all__ = [
    "AvailabilityWatch",
    "DataVolume",
    "ExchangeRate",
    "GpuModel",
    "Image",
    "Instance",
    "LaunchAttempt",
    "Market",
    "Offering",
    "Orphan",
    "OutboxMessage",
    "OwnHost",
    "Pool",
    "Priority",
    "ProviderAccount",
    "Quota",
    "QuotaRequest",
    "RegionSync",
    "Reservation",
    "SshKey",
    "StorageInterval",
    "TerminationReason",
    "Tier",
    "UnbilledCloudTime",
    "UsageRecord",
    "UtilizationRollup",
    "UtilizationSample",
]
