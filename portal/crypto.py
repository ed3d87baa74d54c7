"""Secrets at rest (provider credentials, chat channels' addresses): MultiFernet over the
keys in PORTAL_ENCRYPTION_KEYS.

The first key encrypts; every key decrypts, so a new key can be put first and old values
re-encrypted with ``rotate`` (``manage.py rotate_credentials``).
"""

import json

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured


def _fernet() -> MultiFernet:
    return MultiFernet([Fernet(key) for key in settings.PORTAL_ENCRYPTION_KEYS])


def encrypt(values: dict[str, str]) -> str:
    return _fernet().encrypt(json.dumps(values, sort_keys=True).encode()).decode()


def decrypt(token: str) -> dict[str, str]:
    try:
        return json.loads(_fernet().decrypt(token.encode()))
    except InvalidToken:
        raise ImproperlyConfigured(
            "Stored secrets (provider credentials, the OIDC client secret, chat channels) "
            "cannot be decrypted with PORTAL_ENCRYPTION_KEYS."
        ) from None


def rotate(token: str) -> str:
    return _fernet().rotate(token.encode()).decode()
