"""Which driver serves a provider account, and what each driver can do.

``DRIVERS`` is the one table of drivers. Each entry names the module and class of its
driver, the Python module of its SDK and the pip extra that brings it (or a program it
needs on the system), and its capabilities, declared here statically so that the web
learns what a driver can do without importing an SDK. A driver's module is imported only
when ``get_provider`` builds one. A driver whose SDK or program is missing is hidden:
not offered for a new account, and an account of that driver says what to install.

The registry decides what a driver *can* do; who gets GPUs is the loan model's decision
alone (``rental.loans``), for every pool and every driver.
"""

from __future__ import annotations

import importlib
import importlib.util
import shutil
from dataclasses import dataclass

from django.conf import settings
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from rental.providers.account_options import (
    AccountOption,
    OptionKind,
    check_options,
)
from rental.providers.base import (
    AccountConfig,
    Capability,
    Provider,
    ProviderError,
    ProviderErrorKind,
)


@dataclass(frozen=True)
class DriverEntry:
    """One driver: ``sdk`` is the Python module its driver imports ("" for none) and
    ``extra`` the pip extra of gpu-portal that installs it; ``program`` a command it runs
    that must be on PATH ("" for none); ``options`` the driver's keyword arguments, each
    read from the setting named beside it; ``place`` what a lease runs on, in the words
    of a refusal ("This lease runs on own GPU servers, which …"); ``account_options``
    the options an account of the driver may (or must) set, in ``ProviderAccount.options``
    (checked by ``clean_account_options``, given to the driver in ``AccountConfig``)."""

    name: str
    label: str
    place: str
    module: str
    class_name: str
    capabilities: frozenset[Capability]
    sdk: str = ""
    extra: str = ""
    program: str = ""
    options: tuple[tuple[str, str], ...] = ()
    account_options: tuple[AccountOption, ...] = ()
    # False: a lease runs the host's own system, whatever its image (own servers); the
    # launch carries no image id and any image is accepted there.
    boots_images: bool = True

    def missing(self) -> str:
        """Why this driver cannot run in this installation, in words; "" when it can.
        Cheap: finds the SDK's module without importing it."""
        if self.sdk and importlib.util.find_spec(self.sdk) is None:
            return _(
                "The %(driver)s driver needs the Python package %(package)s: "
                "install gpu-portal[%(extra)s]."
            ) % {"driver": self.name, "package": self.sdk, "extra": self.extra}
        if self.program and shutil.which(self.program) is None:
            return _(
                "The %(driver)s driver needs the program “%(program)s” on the PATH of "
                "the portal's processes."
            ) % {"driver": self.name, "program": self.program}
        return ""

    @property
    def available(self) -> bool:
        return not self.missing()

    def driver_class(self) -> type:
        """The driver's class; imports its module (and with it the SDK) now."""
        return getattr(importlib.import_module(self.module), self.class_name)


ZONE_NAME = r"[a-z0-9]+(?:-[a-z0-9]+)*"
ALIBABA_OPTIONS = (
    AccountOption(
        name="security_group_id",
        kind=OptionKind.TEXT,
        pattern=r"sg-[a-z0-9]+",
        required=True,
        example='"sg-bp1abc2def3ghi4jkl5m"',
        help=gettext_lazy(
            "The security group every instance joins (ECS launches need one); it must "
            "belong to the VPC of the vSwitches."
        ),
    ),
    AccountOption(
        name="vswitch_ids",
        kind=OptionKind.MAP,
        key_pattern=ZONE_NAME,
        pattern=r"vsw-[a-z0-9]+",
        example='{"cn-hangzhou-h": "vsw-bp1abc", "cn-hangzhou-i": "vsw-bp1def"}',
        help=gettext_lazy(
            "The vSwitch of each zone instances may launch in, zone → vSwitch ID. A launch "
            "into a zone of a region that has vSwitches here uses that zone's; a launch "
            "that names no zone goes to the first zone (by name) of its region here."
        ),
    ),
)

DRIVERS: dict[str, DriverEntry] = {
    entry.name: entry
    for entry in (
        DriverEntry(
            name="aws",
            label=gettext_lazy("AWS EC2 (or any EC2-compatible endpoint)"),
            place=gettext_lazy("an EC2 cloud"),
            module="rental.providers.aws",
            class_name="AwsProvider",
            capabilities=frozenset(
                {Capability.STOP_START, Capability.VOLUMES, Capability.IMAGES, Capability.SPOT}
            ),
            sdk="boto3",
            extra="aws",
            # Bounded calls: what PORTAL_LAUNCH_STALE_SECONDS is sized from (the settings).
            options=(
                ("connect_timeout", "PORTAL_CLOUD_CONNECT_TIMEOUT"),
                ("read_timeout", "PORTAL_CLOUD_READ_TIMEOUT"),
                ("max_attempts", "PORTAL_CLOUD_MAX_ATTEMPTS"),
            ),
        ),
        DriverEntry(
            name="alibaba",
            label=gettext_lazy("Alibaba Cloud ECS"),
            place=gettext_lazy("Alibaba Cloud"),
            module="rental.providers.alibaba",
            class_name="AlibabaProvider",
            # Priced offers come from the cloud; images and volumes are not built yet.
            capabilities=frozenset({Capability.STOP_START, Capability.SPOT}),
            sdk="alibabacloud_ecs20140526",
            extra="alibaba",
            options=(
                ("connect_timeout", "PORTAL_CLOUD_CONNECT_TIMEOUT"),
                ("read_timeout", "PORTAL_CLOUD_READ_TIMEOUT"),
            ),
            # ECS launches into a VPC: a security group and the vSwitch of the zone.
            account_options=ALIBABA_OPTIONS,
        ),
        DriverEntry(
            name="ssh",
            label=gettext_lazy("Own GPU servers (SSH)"),
            place=gettext_lazy("own GPU servers"),
            module="rental.providers.ssh",
            class_name="SshProvider",
            # A server is not stopped, imaged or given volumes, and has no spot market.
            capabilities=frozenset(),
            program="ssh",  # the system's OpenSSH client
            options=(("transport", "PORTAL_SSH_TRANSPORT"),),  # the demo's: local servers
            boots_images=False,  # a server runs its own system
        ),
        DriverEntry(
            name="kubernetes",
            label=gettext_lazy("Kubernetes GPU pool"),
            place=gettext_lazy("a Kubernetes GPU pool"),
            module="rental.providers.kubernetes",
            class_name="KubernetesProvider",
            # A pod is not stopped, imaged or given volumes, and has no spot market.
            capabilities=frozenset(),
            sdk="kubernetes",
            extra="kubernetes",
            options=(
                ("connect_timeout", "PORTAL_CLOUD_CONNECT_TIMEOUT"),
                ("read_timeout", "PORTAL_CLOUD_READ_TIMEOUT"),
            ),
        ),
    )
}

# Every driver the portal knows, installed or not: the model field's choices (an account
# of a driver whose SDK is missing stays readable and says what to install).
DRIVER_CHOICES: list[tuple[str, str]] = [(entry.name, entry.label) for entry in DRIVERS.values()]


def driver(name: str) -> DriverEntry:
    """The entry of driver ``name``; raises ``ProviderError`` (kind ``invalid``) for a
    name this portal does not know."""
    try:
        return DRIVERS[name]
    except KeyError:
        raise ProviderError(
            ProviderErrorKind.INVALID, f"Unknown provider driver {name!r}."
        ) from None


def clean_account_options(name: str, value: object) -> dict:
    """``value`` checked against driver ``name``'s declared account options and cleaned;
    raises ``OptionProblem`` naming the bad option's path (``options.vswitch_ids.…``).
    A driver the portal does not know takes no options."""
    entry = DRIVERS.get(name)
    return check_options(entry.account_options if entry else (), value)


def available_choices() -> list[tuple[str, str]]:
    """The drivers that can run here, for choosing one for a new account."""
    return [(entry.name, entry.label) for entry in DRIVERS.values() if entry.available]


def boots_images(name: str) -> bool:
    """Whether a lease on driver ``name`` boots its image (an unknown name: yes)."""
    entry = DRIVERS.get(name)
    return entry.boots_images if entry else True


def capabilities(name: str) -> frozenset[Capability]:
    """What driver ``name`` can do beyond the core contract (nothing for an unknown name)."""
    entry = DRIVERS.get(name)
    return entry.capabilities if entry else frozenset()


def get_provider(config: AccountConfig) -> Provider:
    """A new driver for ``config``; raises ``ProviderError`` (kind ``invalid``) for a
    driver this portal does not know or cannot run here (its SDK or program missing).
    Imports the driver's module on first use: boto3 (with botocore, ~0.3 s) is loaded
    only by a process that calls a cloud. Makes no network call."""
    entry = driver(config.driver)
    problem = entry.missing()
    if problem:
        raise ProviderError(ProviderErrorKind.INVALID, problem)
    options = {name: getattr(settings, setting) for name, setting in entry.options}
    return entry.driver_class()(config, **options)
