"""Admin for the compute side, one module per area; importing them registers the models.

Provider credentials are write-only (``catalog``); rows that the lifecycle engine owns
are read-only and a lease's lifecycle fields cannot be edited (``leases``); quotas are
saved through ``services.set_quota`` so rule Q1 holds (``capacity``).
"""

from rental.admin.capacity import (
    AvailabilityWatchAdmin,
    PoolAdmin,
    QuotaAdmin,
    QuotaAdminForm,
    QuotaRequestAdmin,
)
from rental.admin.catalog import (
    GpuModelAdmin,
    ImageAdmin,
    OfferingAdmin,
    ProviderAccountAdmin,
    ProviderAccountForm,
    RegionListField,
)
from rental.admin.currency import ExchangeRateAdmin
from rental.admin.launch import LaunchAttemptAdmin, OrphanAdmin
from rental.admin.leases import (
    DataVolumeAdmin,
    InstanceAdmin,
    InstanceInline,
    ReservationAdmin,
    SshKeyAdmin,
    UsageRecordAdmin,
)
from rental.admin.own_hosts import OwnHostAdmin, OwnHostForm, OwnHostInline

__all__ = [
    "AvailabilityWatchAdmin",
    "DataVolumeAdmin",
    "ExchangeRateAdmin",
    "GpuModelAdmin",
    "ImageAdmin",
    "InstanceAdmin",
    "InstanceInline",
    "LaunchAttemptAdmin",
    "OfferingAdmin",
    "OrphanAdmin",
    "OwnHostAdmin",
    "OwnHostForm",
    "OwnHostInline",
    "PoolAdmin",
    "ProviderAccountAdmin",
    "ProviderAccountForm",
    "QuotaAdmin",
    "QuotaAdminForm",
    "QuotaRequestAdmin",
    "RegionListField",
    "ReservationAdmin",
    "SshKeyAdmin",
    "UsageRecordAdmin",
]
