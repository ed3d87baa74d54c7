"""The page bench's two ends: the portal served by gunicorn under the production
settings (``production_env``, ``start_gunicorn``, ``stop``) and a person's browser on a
site (``Browser``: logs in through the form, keeps its cookies, times each fetch)."""

import os
import re
import signal
import socket
import subprocess
import sys
import time
from http.client import HTTPConnection, HTTPSConnection
from http.cookies import SimpleCookie
from pathlib import Path
from urllib.parse import urlencode, urlsplit

ROOT = Path(__file__).resolve().parent.parent
PORTS = range(8700, 8800)
# Not a secret: a fixed key so that a kept database can be served again (--reuse).
BENCH_FERNET_KEY = "Z3AtcGFnZXMtYmVuY2gta2V5LW5vdC1zZWNyZXQtMDA="


class Browser:
    """One person's cookies on one site, a new connection a request (gunicorn's sync
    workers close each one anyway); answers (status, body, ms)."""

    def __init__(self, base: str) -> None:
        parts = urlsplit(base)
        self.https = parts.scheme == "https"
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or (443 if self.https else 80)
        self.base = base.rstrip("/")
        self.cookies: dict[str, str] = {}

    def request(
        self,
        method: str,
        path: str,
        *,
        form: dict[str, str] | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, str, float]:
        sent = {"Accept": "text/html", **(headers or {})}
        if self.cookies:
            sent["Cookie"] = "; ".join(f"{key}={value}" for key, value in self.cookies.items())
        body = None
        if form is not None:
            body = urlencode(form, doseq=True).encode()
            sent["Content-Type"] = "application/x-www-form-urlencoded"
        kind = HTTPSConnection if self.https else HTTPConnection
        connection = kind(self.host, self.port, timeout=120)
        try:
            began = time.perf_counter()
            connection.request(method, path, body=body, headers=sent)
            answer = connection.getresponse()
            data = answer.read()
            ms = (time.perf_counter() - began) * 1000
            for line in answer.headers.get_all("Set-Cookie") or []:
                cookie = SimpleCookie()
                cookie.load(line)
                for key, morsel in cookie.items():
                    if morsel.value and morsel["max-age"] != "0":
                        self.cookies[key] = morsel.value
                    else:
                        self.cookies.pop(key, None)
        finally:
            connection.close()
        return answer.status, data.decode(errors="replace"), ms

    def csrf_token(self, path: str) -> str:
        status, html, _ = self.request("GET", path)
        match = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', html)
        if status != 200 or not match:
            raise SystemExit(f"{self.base}{path}: no form with a CSRF token (HTTP {status})")
        return match.group(1)

    def log_in(self, path: str, username: str, password: str) -> None:
        """A Django login form: the token from the form, the answer a redirect."""
        token = self.csrf_token(path)
        status, html, _ = self.request(
            "POST",
            path,
            form={"username": username, "password": password, "csrfmiddlewaretoken": token},
            headers={"Referer": self.base + path},
        )
        if status != 302:
            said = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))
            raise SystemExit(
                f"{self.base}{path}: logging in as {username} gave HTTP {status}: {said[:600]}"
            )


# --- The site under test ------------------------------------------------------------


def production_env(*, database: str, redis: str, static: Path) -> dict[str, str]:
    """The settings the portal is served with (and counted with, in this process); the
    static files are collected into ``static`` first (``collect_static``)."""
    return {
        "DJANGO_SETTINGS_MODULE": "portal.settings",
        "STATIC_ROOT": str(static),
        "DATABASE_URL": database,
        "PORTAL_ENV": "production",
        "DEBUG": "false",
        "SECRET_KEY": "gp-pages-bench-secret-key-not-secret-" + "x" * 20,
        "PORTAL_ENCRYPTION_KEYS": BENCH_FERNET_KEY,
        "PORTAL_INSTALLATION_ID": "bench",
        "ALLOWED_HOSTS": "127.0.0.1,testserver",
        "SECURE_SSL_REDIRECT": "false",
        "REDIS_URL": redis,
        "CELERY_BROKER_URL": redis,
    }


def collect_static(env: dict[str, str]) -> None:
    """What the image's build does: production pages name the collected, hashed files."""
    command = [sys.executable, "manage.py", "collectstatic", "--noinput", "--verbosity", "0"]
    subprocess.run(command, cwd=ROOT, env={**os.environ, **env}, check=True)


def free_port(taken: set[int]) -> int:
    for port in PORTS:
        if port in taken:
            continue
        try:
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", port))
        except OSError:
            continue
        taken.add(port)
        return port
    raise SystemExit(f"no free port in {PORTS.start}–{PORTS.stop - 1}")


def start_gunicorn(port: int, env: dict[str, str], log: Path) -> subprocess.Popen:
    command = [
        sys.executable,
        "-m",
        "gunicorn",
        "portal.wsgi",
        "--bind",
        f"127.0.0.1:{port}",
        "--workers",
        "2",
        "--worker-class",
        "sync",
        "--log-level",
        "warning",
    ]
    process = subprocess.Popen(
        command,
        cwd=ROOT,
        env={**os.environ, **env},
        stdout=log.open("a"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"gunicorn stopped at once; see {log}")
        try:
            status, _, _ = Browser(f"http://127.0.0.1:{port}").request("GET", "/healthz")
            if status == 200:
                return process
        except OSError:
            pass
        time.sleep(0.3)
    stop(process)
    raise SystemExit(f"gunicorn did not answer /healthz within 60 s; see {log}")


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
