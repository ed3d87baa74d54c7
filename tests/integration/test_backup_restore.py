"""Backups that restore (docs/operations.md, "Backups"): a populated portal (leases, usage,
a closed month's statements) is dumped with the real ``pg_dump -Fc``, restored with
``pg_restore`` into a new database, and a separate process served from that database
answers the same statement and lease pages, exports and API answers, byte for byte."""

import json
import os
import subprocess
import sys
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import psycopg
import pytest
from django.conf import settings
from django.db import connection

from billing import services
from billing.models import Statement
from rental.models import Pool, Reservation, UsageRecord
from tests.billing.helpers import at, lease, run
from tests.integration.pages import snapshot
from tests.servers import postgres_bindir

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]
ROOT = Path(__file__).resolve().parents[2]
APRIL, MAY = at(2026, 4, 1), at(2026, 5, 1)


def _server() -> dict[str, str]:
    db = connection.settings_dict
    return {"host": db["HOST"], "port": str(db["PORT"]), "user": db["USER"], "name": db["NAME"]}


def _run(*args: object) -> None:
    done = subprocess.run([str(arg) for arg in args], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.fixture
def restored_name():
    """A database name of its own, dropped at the end (with whatever connects to it)."""
    server = _server()
    name = f"{server['name']}_restored"
    admin = f"host={server['host']} port={server['port']} user={server['user']} dbname=postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    yield name
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_it_restores_a_dump_that_serves_the_same_statements_and_leases(f0, tmp_path, restored_name):
    Pool.objects.filter(pk=f0.pool.pk).update(
        committed_gpus=6, committed_monthly_cost=Decimal("5400.00")
    )
    alpha_lease = lease(f0, f0.alpha, tier="burst")
    run(alpha_lease, start=APRIL, hours=200)
    run(lease(f0, f0.beta, tier="guaranteed", gpus=4), start=APRIL, hours=500, gpus=4)
    running = lease(f0, f0.gamma, tier="burst", status="active")
    run(running, start=at(2026, 4, 30, 23, 0, 0))  # still running when April closes
    assert services.close_period(period=APRIL, now=MAY + timedelta(hours=48)) == 3
    april = Statement.objects.get(project=f0.alpha, period=APRIL.date())
    assert april.status == Statement.Status.CLOSED and april.total > 0
    pages = [
        (username, url)
        for username in ("alma", "root")
        for url in (
            "/billing/projects/alpha/statement/?period=2026-04",
            "/billing/projects/alpha/statement/?period=2026-04&format=csv",
            f"/leases/{alpha_lease.pk}/",
            f"/api/v1/statements/{april.pk}",
            f"/api/v1/statements/{april.pk}/export?format=csv",
            f"/api/v1/leases/{alpha_lease.pk}",
            "/api/v1/usage?project=alpha",
        )
    ] + [("root", "/api/v1/statements?period=2026-04")]
    before = snapshot(pages)
    assert all(answer.startswith("200 ") for answer in before.values()), before

    server, bindir, dump = _server(), postgres_bindir(), tmp_path / "portal.dump"
    where = ["-h", server["host"], "-p", server["port"], "-U", server["user"]]
    _run(bindir / "pg_dump", *where, "-Fc", "-f", dump, server["name"])
    _run(bindir / "pg_restore", *where, "--no-owner", "--exit-on-error", "-d", restored_name, dump)

    url = f"postgres://{server['user']}@{server['host']}:{server['port']}/{restored_name}"
    served = subprocess.run(
        [sys.executable, "-m", "tests.integration.pages", json.dumps(pages)],
        cwd=ROOT,
        env={
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "tests.settings",
            "DATABASE_URL": url,
            "DEBUG": "true" if settings.DEBUG else "false",
            "SECRET_KEY": settings.SECRET_KEY,
            "PORTAL_ENCRYPTION_KEYS": ",".join(settings.PORTAL_ENCRYPTION_KEYS),
            "PORTAL_INSTALLATION_ID": settings.PORTAL_INSTALLATION_ID,
        },
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert served.returncode == 0, served.stderr[-3000:]
    after = json.loads(served.stdout.splitlines()[-1])
    assert after.keys() == before.keys()
    for page, answer in before.items():
        assert after[page] == answer, page
    # The copy is the restored database, not this one: its rows are its own.
    with psycopg.connect(url.replace("postgres://", "postgresql://")) as restored:
        count = restored.execute("SELECT count(*) FROM rental_usagerecord").fetchone()[0]
        open_runs = restored.execute(
            'SELECT count(*) FROM rental_usagerecord WHERE "end" IS NULL'
        ).fetchone()[0]
    assert count == UsageRecord.objects.count() == 3
    assert open_runs == 1
    assert Reservation.objects.get(pk=running.pk).status == "active"
