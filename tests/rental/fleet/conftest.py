"""Fixtures for the launch-safety tests: F0 on the local EC2 endpoint, and a way to run
one step in a thread while another waits for the cloud."""

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
from django.db import connection

from rental.fleet.cloud import provider_for
from rental.models import Instance
from rental.providers.base import TAG_INSTALLATION, CloudState
from tests import factories


@pytest.fixture
def f0c(cloud):
    """F0 whose provider account points at the local EC2 endpoint."""
    return factories.fixture_f0(endpoint_url=cloud.url)


def cloud_instances(account, region: str = "us-east-1"):
    return provider_for(Instance(account=account)).describe(
        region=region, tag_filter={TAG_INSTALLATION: "test"}
    )


def leaked(account, region: str = "us-east-1") -> list[str]:
    """Cloud instances still running (or starting) that no live row stands for: a GPU
    billing in the cloud that the portal believes ended or never knew."""
    alive = [
        item.external_id
        for item in cloud_instances(account, region)
        if item.state not in (CloudState.TERMINATED, CloudState.SHUTTING_DOWN)
    ]
    known = set(
        Instance.objects.filter(external_id__in=alive, state__in=Instance.LIVE).values_list(
            "external_id", flat=True
        )
    )
    return [external_id for external_id in alive if external_id not in known]


@contextmanager
def in_thread(step: Callable[[], object]) -> Iterator[list[BaseException]]:
    """Run ``step`` in a thread with its own database connection; joined on exit. The
    yielded list receives the exception it raised, if any."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            step()
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield errors
    finally:
        thread.join(timeout=60)
        assert not thread.is_alive(), "the step in the thread never finished"
