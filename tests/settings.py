"""Test settings: the demo's settings on PostgreSQL with Redis as the broker.

Unless ``DATABASE_URL`` / ``CELERY_BROKER_URL`` name existing servers, a throwaway
PostgreSQL and Redis are started for this test run (``tests/servers.py``) before the
portal's settings read them."""

import os
import re

from tests import servers

servers.ensure()

# Under pytest-xdist every worker process has its own database (pytest-django names it
# after the worker) and its own Redis database, so one worker's Celery queue, or a test
# that empties the broker, never touches another's. gw0 uses database 1, gw1 database 2...
_worker = re.fullmatch(r"gw(\d+)", os.environ.get("PYTEST_XDIST_WORKER", ""))
_broker = re.fullmatch(r"(rediss?://[^/]+)(/\d*)?", os.environ.get("CELERY_BROKER_URL", ""))
if _worker and _broker:
    os.environ["CELERY_BROKER_URL"] = f"{_broker[1]}/{int(_worker[1]) + 1}"

from portal.settings import *  # noqa: E402, F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # fast logins in tests

# The forecasts' time allowance is for pages on a busy site; a test's small pools are
# played whole even on a loaded CI machine (the allowance itself is tested by setting it).
PORTAL_EXPECTED_START_SECONDS = 10
