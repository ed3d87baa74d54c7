"""Which driver serves a provider account."""

from __future__ import annotations

from rental.providers.base import AccountConfig, Provider, ProviderError, ProviderErrorKind

DRIVER_CHOICES: list[tuple[str, str]] = [
    ("aws", "AWS EC2 (or any EC2-compatible endpoint)"),
]


def get_provider(config: AccountConfig) -> Provider:
    """A new driver for ``config``; raises ``ProviderError`` (kind ``invalid``) for a
    driver name this portal does not know. Makes no network call."""
    if config.driver == "aws":
        from rental.providers.aws import AwsProvider  # boto3 is loaded only when needed

        return AwsProvider(config)
    raise ProviderError(ProviderErrorKind.INVALID, f"Unknown provider driver {config.driver!r}.")
