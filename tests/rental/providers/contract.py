"""The provider contract, as tests every driver runs (rental/providers/base.py says it in
words; these tests hold each driver to it).

How a driver runs them: a module ``tests/rental/providers/test_contract_<driver>.py``

1. imports the test class: ``from tests.rental.providers.contract import ProviderContract``
   and binds it to a name pytest collects: ``class TestAwsContract(ProviderContract): pass``;
2. defines a fixture ``contract_target`` that returns a ``ContractTarget`` (below) for a
   driver reaching a real place to launch (the local EC2 endpoint for ``aws``; a local
   OpenSSH server for ``ssh``), fresh for each test.

``ContractTarget`` fields:

- ``driver``: the registry's name of the driver (``"aws"``, ``"ssh"``); its static
  capabilities in ``rental.providers.registry`` must equal the driver class's.
- ``provider``: the driver object under test, reaching the target with good credentials.
- ``region``: the region (or site) every call names.
- ``make_spec(tags=..., market=...)``: a ``LaunchSpec`` for an offering that exists at the
  target, in ``region``, carrying exactly ``tags`` (the contract adds its own installation
  tag, unique per test, so a describe by tag sees only that test's instances). ``market``
  is ``"on_demand"``, or ``"spot"`` when the driver declares ``Capability.SPOT``.
- ``unknown_id``: an external id in the driver's own shape that names no instance.
- ``refusing``: the same driver set up so that its calls fail (bad credentials, or an
  address that does not answer): ``validate()`` and ``launch()`` must raise
  ``ProviderError`` with a kind, never another exception.
- ``cleanup()``: called after each test, even a failed one, to remove what it launched
  (a no-op is fine when the fixture's own teardown does it).
- ``timeout_s``: how long the contract waits for a state change to show (stop, start).

Tests for a capability the driver does not declare are skipped; a declared one is
exercised for real (stop and start it, save an image, create and attach a volume, launch
on the spot market).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol

import pytest

from rental.providers import registry
from rental.providers.base import (
    CAPABILITY_PROTOCOLS,
    MARKET_ON_DEMAND,
    MARKET_SPOT,
    TAG_IDEMPOTENCY_KEY,
    TAG_INSTALLATION,
    Capability,
    CloudInstance,
    CloudState,
    LaunchSpec,
    Provider,
    ProviderError,
    ProviderErrorKind,
    VolumeSpec,
)

Tags = tuple[tuple[str, str], ...]


class SpecMaker(Protocol):
    def __call__(self, *, tags: Tags, market: str = MARKET_ON_DEMAND) -> LaunchSpec: ...


@dataclass
class ContractTarget:
    """One driver reaching one place to launch; see the module's docstring."""

    driver: str
    provider: Provider
    region: str
    make_spec: SpecMaker
    unknown_id: str
    refusing: Provider
    cleanup: Callable[[], None] = lambda: None
    timeout_s: float = 20.0


def wait_for_state(
    target: ContractTarget, external_id: str, states: set[CloudState]
) -> CloudInstance:
    """The instance once ``describe_ids`` reports it in one of ``states``."""
    deadline = time.monotonic() + target.timeout_s
    while True:
        [instance] = target.provider.describe_ids([external_id], region=target.region)
        if instance.state in states or time.monotonic() > deadline:
            assert instance.state in states, f"{external_id} stayed {instance.state}"
            return instance
        time.sleep(0.2)


class ProviderContract:
    """The contract's tests; a driver's module subclasses this as ``Test<Driver>Contract``."""

    @pytest.fixture(autouse=True)
    def _cleaned(self, contract_target: ContractTarget) -> Iterator[None]:
        yield
        contract_target.cleanup()

    @pytest.fixture
    def installation(self) -> str:
        return f"contract-{uuid.uuid4().hex[:12]}"

    @staticmethod
    def launch(
        target: ContractTarget, installation: str, key: str, *, market: str = MARKET_ON_DEMAND
    ) -> CloudInstance:
        spec = target.make_spec(tags=((TAG_INSTALLATION, installation),), market=market)
        return target.provider.launch(spec, idempotency_key=key)

    @staticmethod
    def declares(target: ContractTarget, capability: Capability) -> bool:
        if capability not in type(target.provider).capabilities:
            pytest.skip(f"the {target.driver} driver does not declare {capability}")
        return True

    # -- the core ----------------------------------------------------------------------

    def test_it_declares_what_the_registry_says(self, contract_target: ContractTarget) -> None:
        entry = registry.driver(contract_target.driver)
        assert isinstance(contract_target.provider, entry.driver_class())
        assert type(contract_target.provider).capabilities == entry.capabilities
        assert isinstance(contract_target.provider, Provider)

    def test_it_implements_every_capability_it_declares(
        self, contract_target: ContractTarget
    ) -> None:
        for capability in type(contract_target.provider).capabilities:
            protocol = CAPABILITY_PROTOCOLS[capability]
            if protocol is not None:
                assert isinstance(contract_target.provider, protocol), capability

    def test_it_launches_an_instance_carrying_its_key(
        self, contract_target: ContractTarget, installation: str
    ) -> None:
        instance = self.launch(contract_target, installation, f"{installation}-0")

        assert instance.external_id
        assert instance.idempotency_key == f"{installation}-0"
        assert instance.tag(TAG_IDEMPOTENCY_KEY) == f"{installation}-0"
        assert instance.tag(TAG_INSTALLATION) == installation
        assert instance.state in {CloudState.PENDING, CloudState.RUNNING}
        assert instance.market == MARKET_ON_DEMAND

    def test_it_launches_one_instance_for_a_key_given_twice(
        self, contract_target: ContractTarget, installation: str
    ) -> None:
        first = self.launch(contract_target, installation, f"{installation}-0")
        again = self.launch(contract_target, installation, f"{installation}-0")

        assert again.external_id == first.external_id
        found = contract_target.provider.describe(
            region=contract_target.region, tag_filter={TAG_INSTALLATION: installation}
        )
        assert [instance.external_id for instance in found] == [first.external_id]

    def test_it_launches_one_instance_per_key(
        self, contract_target: ContractTarget, installation: str
    ) -> None:
        first = self.launch(contract_target, installation, f"{installation}-0")
        second = self.launch(contract_target, installation, f"{installation}-1")

        assert first.external_id != second.external_id
        found = contract_target.provider.describe(
            region=contract_target.region, tag_filter={TAG_INSTALLATION: installation}
        )
        assert {i.idempotency_key for i in found} == {f"{installation}-0", f"{installation}-1"}

    def test_it_describes_by_tag_only_what_carries_every_tag(
        self, contract_target: ContractTarget, installation: str
    ) -> None:
        launched = self.launch(contract_target, installation, f"{installation}-0")
        provider, region = contract_target.provider, contract_target.region

        by_key = provider.describe(
            region=region,
            tag_filter={TAG_INSTALLATION: installation, TAG_IDEMPOTENCY_KEY: f"{installation}-0"},
        )
        other = provider.describe(region=region, tag_filter={TAG_INSTALLATION: "nobody"})

        assert [instance.external_id for instance in by_key] == [launched.external_id]
        assert other == []

    def test_it_describes_ids_it_knows_and_ignores_the_rest(
        self, contract_target: ContractTarget, installation: str
    ) -> None:
        launched = self.launch(contract_target, installation, f"{installation}-0")
        provider, region = contract_target.provider, contract_target.region

        known = provider.describe_ids(
            [launched.external_id, contract_target.unknown_id], region=region
        )

        assert [instance.external_id for instance in known] == [launched.external_id]
        assert provider.describe_ids([contract_target.unknown_id], region=region) == []
        assert provider.describe_ids([], region=region) == []

    def test_it_terminates_idempotently(
        self, contract_target: ContractTarget, installation: str
    ) -> None:
        launched = self.launch(contract_target, installation, f"{installation}-0")
        provider, region = contract_target.provider, contract_target.region

        provider.terminate([launched.external_id], region=region)
        provider.terminate([launched.external_id], region=region)

        gone = {CloudState.SHUTTING_DOWN, CloudState.TERMINATED}
        seen = provider.describe_ids([launched.external_id], region=region)
        assert all(instance.state in gone for instance in seen)

    def test_it_terminates_unknown_ids_harmlessly(self, contract_target: ContractTarget) -> None:
        provider, region = contract_target.provider, contract_target.region

        provider.terminate([contract_target.unknown_id], region=region)
        provider.terminate([], region=region)

    def test_it_fails_with_a_provider_error_that_has_a_kind(
        self, contract_target: ContractTarget, installation: str
    ) -> None:
        refusing = contract_target.refusing
        spec = contract_target.make_spec(tags=((TAG_INSTALLATION, installation),))

        with pytest.raises(ProviderError) as validating:
            refusing.validate()
        with pytest.raises(ProviderError) as launching:
            refusing.launch(spec, idempotency_key=f"{installation}-0")

        for error in (validating.value, launching.value):
            assert isinstance(error.kind, ProviderErrorKind)
            assert type(error) is ProviderError  # never an SDK's exception, nor a subclass
            assert str(error)

    # -- the capabilities it declares --------------------------------------------------

    def test_it_stops_and_starts_when_it_declares_stop_start(
        self, contract_target: ContractTarget, installation: str
    ) -> None:
        self.declares(contract_target, Capability.STOP_START)
        provider, region = contract_target.provider, contract_target.region
        launched = self.launch(contract_target, installation, f"{installation}-0")
        wait_for_state(contract_target, launched.external_id, {CloudState.RUNNING})

        provider.stop([launched.external_id], region=region)
        provider.stop([launched.external_id], region=region)  # harmless again
        wait_for_state(contract_target, launched.external_id, {CloudState.STOPPED})
        provider.start([launched.external_id], region=region)
        provider.start([launched.external_id], region=region)

        wait_for_state(contract_target, launched.external_id, {CloudState.RUNNING})

    def test_it_saves_images_once_per_key_when_it_declares_images(
        self, contract_target: ContractTarget, installation: str
    ) -> None:
        self.declares(contract_target, Capability.IMAGES)
        provider, region = contract_target.provider, contract_target.region
        launched = self.launch(contract_target, installation, f"{installation}-0")
        wait_for_state(contract_target, launched.external_id, {CloudState.RUNNING})

        first = provider.create_image(
            launched.external_id, region=region, name=installation, idempotency_key=installation
        )
        again = provider.create_image(
            launched.external_id, region=region, name=installation, idempotency_key=installation
        )

        assert again.image_id == first.image_id
        described = provider.describe_images(
            [first.image_id, "ami-00000000000000000"], region=region
        )
        assert [image.image_id for image in described] == [first.image_id]

    def test_it_keeps_volumes_apart_from_instances_when_it_declares_volumes(
        self, contract_target: ContractTarget, installation: str
    ) -> None:
        self.declares(contract_target, Capability.VOLUMES)
        provider, region = contract_target.provider, contract_target.region
        launched = self.launch(contract_target, installation, f"{installation}-0")
        running = wait_for_state(contract_target, launched.external_id, {CloudState.RUNNING})
        spec = VolumeSpec(
            region=region,
            zone=running.zone,
            size_gb=10,
            tags=((TAG_INSTALLATION, installation),),
        )

        volume = provider.create_volume(spec, idempotency_key=installation)
        again = provider.create_volume(spec, idempotency_key=installation)
        assert again.volume_id == volume.volume_id
        attached = provider.attach_volume(
            volume.volume_id, instance_id=launched.external_id, device="/dev/sdf", region=region
        )
        assert attached.volume_id == volume.volume_id
        provider.detach_volume(volume.volume_id, instance_id=launched.external_id, region=region)
        provider.detach_volume(volume.volume_id, instance_id=launched.external_id, region=region)
        provider.delete_volume(volume.volume_id, region=region)
        provider.delete_volume(volume.volume_id, region=region)

        left = provider.describe_volumes([volume.volume_id], region=region)
        assert all(v.state in {"deleting", "deleted"} for v in left)

    def test_it_launches_on_the_spot_market_when_it_declares_spot(
        self, contract_target: ContractTarget, installation: str
    ) -> None:
        self.declares(contract_target, Capability.SPOT)

        instance = self.launch(
            contract_target, installation, f"{installation}-0", market=MARKET_SPOT
        )

        assert instance.market == MARKET_SPOT
        assert instance.idempotency_key == f"{installation}-0"
