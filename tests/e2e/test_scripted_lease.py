"""The README's scripted lease (docs/api/scripted-lease.sh), run as it is written with
bash and curl against a live server, a real Celery worker and the local EC2 endpoint:
make a token with a password, ask for a GPU, wait until it runs, print the SSH command,
end the lease."""

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from django.db import connections

from portal.models import ApiToken
from rental.models import Instance, Reservation
from tests import factories

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "docs" / "api" / "scripted-lease.sh"


def test_the_readme_shows_the_script_as_it_is():
    body = SCRIPT.read_text().split("set -euo pipefail\n", 1)[1]
    assert body in (ROOT / "README.md").read_text()


def test_the_scripted_lease_runs_against_a_live_portal(live_server, cloud, worker):
    assert shutil.which("curl"), "the scripted lease needs curl"
    f0 = factories.fixture_f0(endpoint_url=cloud.url)
    env = {
        **os.environ,
        "PORTAL": live_server.url,
        "PORTAL_USER": "alice",
        "PORTAL_PASSWORD": factories.PASSWORD,
        "PROJECT": "alpha",
        "MODEL": f0.model.name,
    }
    run = subprocess.run(
        ["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=150
    )
    assert run.returncode == 0, run.stdout + run.stderr
    lease = Reservation.objects.get()
    instance = Instance.objects.get(reservation=lease)
    lines = run.stdout.splitlines()
    assert lines[0] == f"lease {lease.pk} requested"
    assert re.fullmatch(rf"ssh .*ubuntu@{re.escape(instance.public_address)}.*", lines[1])
    assert lines[2] in ("ending", "ended")
    assert (lease.requester, lease.project, lease.gpu_count) == (f0.alice, f0.alpha, 1)
    assert ApiToken.objects.get(user=f0.alice).name.startswith("pipeline-")
    lease.refresh_from_db()
    assert lease.status in (Reservation.Status.ENDING, Reservation.Status.ENDED)
    connections.close_all()
