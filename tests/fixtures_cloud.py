"""Pytest plugin: a local EC2-compatible cloud (moto behind a fault injector).

Enable it with ``pytest_plugins = ["tests.fixtures_cloud"]`` in tests/conftest.py.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from devcloud import server as localcloud
from devcloud.server import LocalCloud


@pytest.fixture(scope="session")
def local_cloud() -> Iterator[LocalCloud]:
    """One local cloud for the whole test session; prefer ``cloud``, which starts empty."""
    cloud = localcloud.start()
    try:
        yield cloud
    finally:
        cloud.stop()


@pytest.fixture
def cloud(local_cloud: LocalCloud) -> Iterator[LocalCloud]:
    """The session's local cloud, reset: no instances, no faults, any key, empty log."""
    local_cloud.reset()
    yield local_cloud
    local_cloud.clear_faults()
