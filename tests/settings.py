"""Test settings: the demo's settings on PostgreSQL with Redis as the broker.

The environment may override both (``make test`` passes them through)."""

import os

os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/gpu_portal")
os.environ.setdefault("CELERY_BROKER_URL", "redis://127.0.0.1:6379/15")

from portal.settings import *  # noqa: F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # fast logins in tests
