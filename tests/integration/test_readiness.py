"""/readyz of a served portal (gunicorn, as in production) turns unready when each thing it
depends on stops, and ready again when it is back:

- the database and the broker: a gate in front of each (a TCP port that forwards to the
  test's PostgreSQL or Redis) is shut, refusing new connections and cutting open ones as a
  stopped server does, then opened again;
- beat and the workers: a real worker with embedded beat is stopped, so its heartbeat and
  the sync go late, then started again.

Every wait is bounded by the settings given to the processes (periods of 1 s).
"""

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection

from portal.health import MISSED_PERIODS
from tests.gates import Gate
from tests.integration.test_chaos import Worker, wait_for
from tests.servers import free_port

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]
ROOT = Path(__file__).resolve().parents[2]
PERIOD = 1  # beat's heartbeat and the sync, in seconds
CLAIM = 5  # PORTAL_SYNC_CLAIM_SECONDS of the worker (tests.integration.test_chaos.Worker)
BROKER_TIMEOUT = 1
CONNECT_TIMEOUT = 2


class Web:
    """gunicorn serving the portal, reaching the database and the broker through gates."""

    def __init__(self, log: Path, *, database: Gate, broker: Gate) -> None:
        db = connection.settings_dict
        redis_db = settings.CELERY_BROKER_URL.rsplit("/", 1)[1]
        self.port = free_port()
        self.env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "portal.settings",
            "DATABASE_URL": f"postgres://{db['USER']}@127.0.0.1:{database.port}/{db['NAME']}",
            "DATABASE_CONNECT_TIMEOUT": str(CONNECT_TIMEOUT),
            # A shut gate refuses at once, as a restarting server does: waited for this long.
            "DATABASE_RESTART_WAIT_SECONDS": str(CONNECT_TIMEOUT),
            "CELERY_BROKER_URL": f"redis://127.0.0.1:{broker.port}/{redis_db}",
            "SECRET_KEY": settings.SECRET_KEY,
            "PORTAL_ENCRYPTION_KEYS": ",".join(settings.PORTAL_ENCRYPTION_KEYS),
            "PORTAL_INSTALLATION_ID": settings.PORTAL_INSTALLATION_ID,
            "PORTAL_BEAT_HEARTBEAT_SECONDS": str(PERIOD),
            "PORTAL_SYNC_INTERVAL": str(PERIOD),
            "PORTAL_SYNC_CLAIM_SECONDS": str(CLAIM),
            "PORTAL_READY_BROKER_TIMEOUT": str(BROKER_TIMEOUT),
        }
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gunicorn",
                "portal.wsgi",
                "--bind",
                f"127.0.0.1:{self.port}",
                "--workers",
                "1",
                "--threads",
                "4",
            ],
            cwd=ROOT,
            env=self.env,
            stdout=log.open("w"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def readyz(self) -> tuple[int, dict]:
        """The status and body of /readyz (0 and {} while gunicorn is not listening)."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/readyz", timeout=15) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as answer:
            return answer.code, json.loads(answer.read())
        except (urllib.error.URLError, OSError):  # not listening yet, or no answer in time
            return 0, {}

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()


@pytest.fixture
def served(tmp_path, cloud_account):
    """The worker (embedded beat) and the web server, with the gates open."""
    db_port = int(connection.settings_dict["PORT"])
    redis_port = int(settings.CELERY_BROKER_URL.split(":")[2].split("/")[0])
    database, broker = Gate(db_port), Gate(redis_port)
    database.open()
    broker.open()
    worker = Worker(tmp_path / "worker.log")
    worker.env["PORTAL_BEAT_HEARTBEAT_SECONDS"] = str(PERIOD)
    assert worker.env["PORTAL_SYNC_CLAIM_SECONDS"] == str(CLAIM)
    worker.start()
    web = Web(tmp_path / "web.log", database=database, broker=broker)
    try:
        yield web, database, broker, worker
    finally:
        web.stop()
        worker.stop()
        for gate in (database, broker):
            if gate.listener is not None:
                gate.shut()
        for name in ("web.log", "worker.log"):
            print(name, (tmp_path / name).read_text()[-3000:])  # noqa: T201 (on failure)


def test_it_turns_unready_when_each_dependency_stops_and_ready_again_after(served):
    web, database, broker, worker = served
    seen: dict = {}

    def answers(status: int, failed: set[str] | None = None):
        def check() -> bool:
            code, body = web.readyz()
            seen.update(code=code, body=body)
            return code == status and (failed is None or set(body.get("failed", ())) == failed)

        return check

    def last() -> str:
        return f"/readyz answering {seen}"

    # Ready once the worker has run beat's heartbeat and synced the region.
    wait_for(answers(200), timeout=90, what=last)
    assert seen["body"]["checks"]["sync"]["ok"] and seen["body"]["checks"]["beat"]["ok"]

    # The database stops: named, and the checks that read it are not asked.
    database.shut()
    wait_for(answers(503, {"database", "beat", "sync"}), timeout=CONNECT_TIMEOUT * 4, what=last)
    assert seen["body"]["checks"]["broker"]["ok"]
    assert "did not answer" in seen["body"]["checks"]["database"]["detail"]
    database.open()
    wait_for(answers(200), timeout=CONNECT_TIMEOUT * 4, what=last)

    # The broker stops: named, and answered within the ping's bound.
    broker.shut()
    started = time.monotonic()
    status, body = web.readyz()
    assert time.monotonic() - started < 2 * BROKER_TIMEOUT + 1
    assert (status, body["failed"]) == (503, ["broker"])
    assert "127.0.0.1" not in json.dumps(body) and str(broker.port) not in json.dumps(body)
    broker.open()
    wait_for(answers(200), timeout=2 * BROKER_TIMEOUT + 3, what=last)

    # Beat and the workers stop: the heartbeat, then the sync, go late.
    worker.stop()
    late = MISSED_PERIODS * PERIOD + CLAIM + 5
    wait_for(answers(503, {"beat", "sync"}), timeout=late, what=last)
    worker.start()
    wait_for(answers(200), timeout=90, what=last)
