"""tools/schema-check: schemathesis (every check) against a production-configured portal.

The demo fills a PostgreSQL with its people, projects, pools and history and runs its
worker, beat and local cloud; a second web server, gunicorn with the production
settings (DEBUG off, JSON 404s, the shared Redis cache), serves the same database, and
schemathesis runs against it as ``admin`` and as ``erik`` (an engineer), with a fresh
token each. The token operations run last, apart, since a generated request may revoke
the very token the run uses. The API's throttles are raised for the run: a generator
sends far more requests a minute than a person, and 429s would hide the answers.
"""

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from base64 import b64encode
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests import servers  # noqa: E402 (the repository's root is on the path first)


def say(text: str) -> None:
    print(text, flush=True)  # noqa: T201 (a command's own output)


PYTHON = sys.executable
ROLES = {"admin": "demo-admin", "erik": "demo-erik"}
DEMO = [PYTHON, "manage.py", "demo"]
GUNICORN = [PYTHON, "-m", "gunicorn", "portal.wsgi", "--workers", "2", "--threads", "4"]
TOKENS = "^/api/v1/tokens/"


def wait_until(url: str, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=5):
                return
        except (urllib.error.URLError, OSError):
            time.sleep(1)
    raise SystemExit(f"{url} did not answer within {seconds:.0f} s")


def new_token(base: str, user: str, password: str) -> str:
    body = json.dumps(
        {
            "name": f"schema-check {time.time_ns()}",
            "expires_at": (datetime.now(UTC) + timedelta(days=1)).isoformat(),
        }
    ).encode()
    request = urllib.request.Request(f"{base}/api/v1/tokens", data=body, method="POST")
    request.add_header("Content-Type", "application/json")
    request.add_header(
        "Authorization", "Basic " + b64encode(f"{user}:{password}".encode()).decode()
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.loads(answer.read())["token"]


def schemathesis(base: str, token: str, examples: str, seed: str, *paths: str) -> int:
    command = [
        str(Path(PYTHON).with_name("schemathesis")),
        "run",
        f"{base}/api/schema/",
        "--checks",
        "all",
        "-H",
        f"Authorization: Bearer {token}",
        "-n",
        examples,
        "--seed",
        seed,
        "--workers",
        "1",
        "--suppress-health-check",
        "all",
        *paths,
    ]
    return subprocess.run(command, cwd=ROOT, check=False).returncode


def main() -> int:
    examples = sys.argv[1] if len(sys.argv) > 1 else "25"
    seed = sys.argv[2] if len(sys.argv) > 2 else "1"
    for name in ("DATABASE_URL", "CELERY_BROKER_URL"):
        os.environ.pop(name, None)  # always throwaway servers: the run writes freely
    servers.ensure()
    database = os.environ["DATABASE_URL"]
    with psycopg.connect(database.rsplit("/", 1)[0] + "/postgres", autocommit=True) as admin:
        admin.execute("CREATE DATABASE gpu_portal")
    var = Path(tempfile.mkdtemp(prefix="gpu-portal-schema-check-"))
    demo_port, cloud_port, web_port = (servers.free_port() for _ in range(3))
    env = {**os.environ, "PORTAL_VAR_DIR": str(var)}
    children = []
    try:
        children.append(
            subprocess.Popen(
                [*DEMO, "--port", str(demo_port), "--cloud-port", str(cloud_port)],
                cwd=ROOT,
                env=env,
                stdout=(var / "demo.log").open("w"),
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )
        wait_until(f"http://127.0.0.1:{demo_port}/healthz", 600)
        secrets = json.loads((var / "demo-secrets.json").read_text())
        broker = os.environ["CELERY_BROKER_URL"]
        production = {
            **env,
            "PORTAL_ENV": "production",
            "SECRET_KEY": secrets["secret_key"],
            "PORTAL_ENCRYPTION_KEYS": secrets["encryption_key"],
            "PORTAL_INSTALLATION_ID": "demo",
            "ALLOWED_HOSTS": "127.0.0.1",
            "SECURE_SSL_REDIRECT": "false",
            "REDIS_URL": broker.rsplit("/", 1)[0] + "/1",
            "API_THROTTLE_TOKEN": "1000000/min",
            "API_THROTTLE_USER": "1000000/min",
            "API_THROTTLE_ANON": "1000000/min",
        }
        children.append(
            subprocess.Popen(
                [*GUNICORN, "--bind", f"127.0.0.1:{web_port}"],
                cwd=ROOT,
                env=production,
                stdout=(var / "gunicorn.log").open("w"),
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )
        base = f"http://127.0.0.1:{web_port}"
        wait_until(f"{base}/healthz", 60)
        failed = 0
        for user, password in ROLES.items():
            say(f"\n=== {user}: every operation but the token ones ===")
            token = new_token(base, user, password)
            failed |= schemathesis(base, token, examples, seed, "--exclude-path-regex", TOKENS)
        say("\n=== admin: the token operations ===")
        token = new_token(base, "admin", ROLES["admin"])
        failed |= schemathesis(base, token, examples, seed, "--include-path-regex", TOKENS)
        say(f"\nLogs: {var}")
        return 1 if failed else 0
    finally:
        for child in reversed(children):
            if child.poll() is None:
                os.killpg(child.pid, signal.SIGINT)
                try:
                    child.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    os.killpg(child.pid, signal.SIGKILL)
        servers.stop()


if __name__ == "__main__":
    sys.exit(main())
