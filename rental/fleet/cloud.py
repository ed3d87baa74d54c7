"""What launching and terminating share: the driver for an instance's account, this
installation's tag, and the exception a task retries on."""

from django.conf import settings

from rental.models import Instance
from rental.providers.base import TAG_INSTALLATION, Provider
from rental.providers.registry import get_provider


class LaunchRetry(Exception):
    """A cloud call failed in a way that may succeed later; the task retries with backoff
    after ``countdown`` seconds (None: the task's own schedule)."""

    def __init__(self, message: str, *, countdown: int | None = None) -> None:
        super().__init__(message)
        self.countdown = countdown


def provider_for(instance: Instance) -> Provider:
    return get_provider(instance.account.config())


def installation_tags() -> dict[str, str]:
    return {TAG_INSTALLATION: settings.PORTAL_INSTALLATION_ID}
