"""A real Celery worker (with embedded beat) for integration and browser tests."""

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from django.conf import settings
from django.db import connection

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def worker(tmp_path, transactional_db) -> Iterator[subprocess.Popen]:
    """A Celery worker with embedded beat, on the test database and the Redis broker."""
    broker = settings.CELERY_BROKER_URL
    assert broker.startswith("redis://"), "integration tests need Redis as the broker"
    redis.Redis.from_url(broker).flushdb()
    db = connection.settings_dict
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "portal.settings",
        "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
        "CELERY_BROKER_URL": broker,
        "SECRET_KEY": settings.SECRET_KEY,
        "PORTAL_ENCRYPTION_KEYS": ",".join(settings.PORTAL_ENCRYPTION_KEYS),
        "PORTAL_INSTALLATION_ID": settings.PORTAL_INSTALLATION_ID,
        "PORTAL_SYNC_INTERVAL": "1",
        "PORTAL_LEASE_CHECK_INTERVAL": "1",
    }
    log = (tmp_path / "worker.log").open("w")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "portal",
            "worker",
            "-B",
            "--pool=threads",
            "--concurrency=4",
            "--loglevel=INFO",
            "--schedule",
            str(tmp_path / "beat-schedule"),
        ],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    yield process
    process.terminate()
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
    log.close()
    if process.returncode not in (0, -15, None):
        print((tmp_path / "worker.log").read_text()[-4000:])  # noqa: T201
