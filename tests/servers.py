"""A throwaway PostgreSQL and Redis that belong to this test run.

``tests/settings.py`` calls ``ensure()`` when pytest-django imports it, so before anything
reads a setting: unless ``DATABASE_URL`` / ``CELERY_BROKER_URL`` are
already set, it starts ``postgres`` (after ``initdb``, trust auth) and ``redis-server`` in
a temporary folder, each on a free port of 127.0.0.1, and exports their URLs, so the
Django settings, the live server and every worker subprocess use them. Nothing depends on
how a system-wide PostgreSQL or Redis is configured, nothing needs a password or a
service, and two runs on one machine never share a server. Both stop, and the folder is
removed, when the run ends.

PostgreSQL refuses to run as root, so under root the cluster belongs to the ``postgres``
system user when there is one (``nobody`` otherwise).
"""

from __future__ import annotations

import atexit
import contextlib
import glob
import grp
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

START_TIMEOUT_S = 60
INITDB = ("--no-locale", "--no-sync")
REDIS = ("--save", "", "--appendonly", "no")


class ServiceError(RuntimeError):
    pass


@dataclass
class Throwaway:
    """The servers this run started, stopped in reverse order."""

    root: Path
    processes: list[subprocess.Popen] = field(default_factory=list)

    def stop(self) -> None:
        while self.processes:
            fast_stop(self.processes.pop())
        shutil.rmtree(self.root, ignore_errors=True)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def postgres_bindir() -> Path:
    """The folder holding ``initdb`` and ``postgres``: pg_config's, Debian's newest, or PATH."""
    candidates: list[Path] = []
    pg_config = shutil.which("pg_config")
    if pg_config:
        out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, check=False)
        candidates.append(Path(out.stdout.strip()))
    versions = glob.glob("/usr/lib/postgresql/*/bin")
    candidates += sorted(
        (Path(p) for p in versions), key=lambda p: int(p.parent.name), reverse=True
    )
    initdb = shutil.which("initdb")
    if initdb:
        candidates.append(Path(initdb).parent)
    for folder in candidates:
        if (folder / "initdb").exists() and (folder / "postgres").exists():
            return folder
    raise ServiceError(
        "PostgreSQL's server programs (initdb, postgres) are missing: "
        "install the Debian package 'postgresql', or set DATABASE_URL."
    )


def run_as() -> tuple[str, str] | None:
    """The (user, group) to run PostgreSQL as when we are root, else None."""
    if os.geteuid() != 0:
        return None
    for user in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            entry = pwd.getpwnam(user)
            return user, grp.getgrgid(entry.pw_gid).gr_name
    raise ServiceError("running as root and neither a 'postgres' nor a 'nobody' user exists")


def wait_for(check, process: subprocess.Popen, log: Path, name: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise ServiceError(f"{name} exited at start:\n{log.read_text()[-2000:]}")
        if check():
            return
        time.sleep(0.1)
    raise ServiceError(f"{name} did not answer in {START_TIMEOUT_S} s:\n{log.read_text()[-2000:]}")


def init_postgres(folder: Path) -> Path:
    """A new cluster in ``folder``/pg (trust auth, superuser ``postgres``); returns its data
    folder. Under root it belongs to ``run_as()``'s user."""
    data = folder / "pg"
    data.mkdir()
    kwargs = _as_owner()
    if kwargs:
        shutil.chown(data, kwargs["user"], kwargs["group"])
    initdb = subprocess.run(
        [
            postgres_bindir() / "initdb",
            "-D",
            data,
            "-U",
            "postgres",
            "-A",
            "trust",
            "-E",
            "UTF8",
            *INITDB,
        ],
        capture_output=True,
        text=True,
        check=False,
        **kwargs,
    )
    if initdb.returncode != 0:
        raise ServiceError(f"initdb failed:\n{initdb.stdout[-1500:]}{initdb.stderr[-1500:]}")
    return data


def _as_owner() -> dict:
    """subprocess arguments that run a program as the cluster's owner (empty unless root)."""
    owner = run_as()
    if not owner:
        return {}
    user, group = owner
    return {"user": user, "group": group, "extra_groups": []}


def postgres_server(data: Path, port: int) -> subprocess.Popen:
    """``postgres`` on the cluster in ``data``, on ``port`` of 127.0.0.1, once it accepts
    connections. Its log is ``postgres.log`` beside ``data``; started again on the same
    folder and port, it is the same server restarted."""
    settings = {
        "listen_addresses": "127.0.0.1",
        "port": str(port),
        "unix_socket_directories": str(data),
        # A throwaway cluster: durability buys nothing here, speed does.
        "fsync": "off",
        "synchronous_commit": "off",
        "full_page_writes": "off",
        "max_connections": "200",
    }
    args = [str(postgres_bindir() / "postgres"), "-D", str(data)]
    for key, value in settings.items():
        args += ["-c", f"{key}={value}"]
    log = data.parent / "postgres.log"
    process = subprocess.Popen(
        args,
        stdout=log.open("a"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
        **_as_owner(),
    )

    def ready() -> bool:
        import psycopg  # only a run that starts a server needs it

        try:
            psycopg.connect(f"host=127.0.0.1 port={port} user=postgres dbname=postgres").close()
        except psycopg.OperationalError:
            return False
        return True

    try:
        wait_for(ready, process, log, "PostgreSQL")
    except ServiceError:
        process.kill()
        raise
    return process


def fast_stop(process: subprocess.Popen) -> None:
    """Stop a server and wait until it has exited. SIGINT is PostgreSQL's "fast shutdown"
    (open sessions are ended, in-flight transactions rolled back); Redis exits on it too."""
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGINT)
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def start_postgres(run: Throwaway) -> str:
    port = free_port()
    run.processes.append(postgres_server(init_postgres(run.root), port))
    return f"postgres://postgres@127.0.0.1:{port}/gpu_portal"


def redis_server(folder: Path, port: int) -> subprocess.Popen:
    """A ``redis-server`` on ``port`` of 127.0.0.1 keeping nothing on disk, once it answers
    PING. Its log is ``redis.log`` in ``folder``."""
    server = shutil.which("redis-server")
    if not server:
        raise ServiceError(
            "redis-server is missing: install the Debian package 'redis-server', "
            "or set CELERY_BROKER_URL."
        )
    log = folder / "redis.log"
    process = subprocess.Popen(
        [server, "--bind", "127.0.0.1", "--port", str(port), *REDIS, "--dir", str(folder)],
        stdout=log.open("a"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )

    def ready() -> bool:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    try:
        wait_for(ready, process, log, "Redis")
    except ServiceError:
        process.kill()
        raise
    return process


def start_redis(run: Throwaway) -> str:
    port = free_port()
    run.processes.append(redis_server(run.root, port))
    return f"redis://127.0.0.1:{port}/0"


_run: Throwaway | None = None


def ensure() -> None:
    """Start what the environment does not name and export its URL; idempotent."""
    global _run
    needed = [name for name in ("DATABASE_URL", "CELERY_BROKER_URL") if not os.environ.get(name)]
    if not needed:
        return
    root = Path(tempfile.mkdtemp(prefix="gpu-portal-test-"))
    root.chmod(0o755)  # PostgreSQL's own user must reach its data folder
    _run = Throwaway(root)
    atexit.register(stop)
    try:
        if "DATABASE_URL" in needed:
            os.environ["DATABASE_URL"] = start_postgres(_run)
        if "CELERY_BROKER_URL" in needed:
            os.environ["CELERY_BROKER_URL"] = start_redis(_run)
    except BaseException:
        stop()
        raise


def stop() -> None:
    if _run is not None:
        _run.stop()
