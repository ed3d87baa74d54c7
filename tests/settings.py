"""Test settings: the demo's settings on PostgreSQL with Redis as the broker.

Unless ``DATABASE_URL`` / ``CELERY_BROKER_URL`` name existing servers, a throwaway
PostgreSQL and Redis are started for this test run (``tests/servers.py``) before the
portal's settings read them."""

from tests import servers

servers.ensure()

from portal.settings import *  # noqa: E402, F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # fast logins in tests
