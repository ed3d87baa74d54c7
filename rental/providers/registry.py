"""Which driver serves a provider account."""

from __future__ import annotations

from django.conf import settings

from rental.providers.base import AccountConfig, Provider, ProviderError, ProviderErrorKind

DRIVER_CHOICES: list[tuple[str, str]] = [
    ("aws", "AWS EC2 (or any EC2-compatible endpoint)"),
    ("ssh", "Own GPU servers (SSH)"),
]


def get_provider(config: AccountConfig) -> Provider:
    """A new driver for ``config``; raises ``ProviderError`` (kind ``invalid``) for a
    driver name this portal does not know. Makes no network call."""
    if config.driver == "aws":
        # Late on purpose: boto3 (with botocore, ~0.3 s) is loaded only by a process that
        # calls a cloud, never by the web's pages or a management command that does not.
        from rental.providers.aws import AwsProvider  # noqa: PLC0415

        # Bounded calls: what PORTAL_LAUNCH_STALE_SECONDS is sized from (see the settings).
        return AwsProvider(
            config,
            connect_timeout=settings.PORTAL_CLOUD_CONNECT_TIMEOUT,
            read_timeout=settings.PORTAL_CLOUD_READ_TIMEOUT,
            max_attempts=settings.PORTAL_CLOUD_MAX_ATTEMPTS,
        )
    raise ProviderError(ProviderErrorKind.INVALID, f"Unknown provider driver {config.driver!r}.")
