"""Run the whole portal on this machine with no external services (``make run``).

In order: migrate the SQLite database; start the local EC2-compatible cloud in this
process, which runs the real agent of each instance it launches on simulated GPUs
(devcloud.machines); point the demo provider account at it and validate it; load the
catalog and the demo data; ask for the leases the demo starts with (rental.demo.live);
then run a Celery worker, Celery beat and the development web server
as child processes until Ctrl-C, SIGTERM or SIGHUP, which stops every one of them,
once and in order, with one line to say so.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connections

from rental.catalog import accounts
from rental.demo import DEMO_ACCOUNT, DEMO_USERS, restore_volumes, start_live_leases
from rental.demo.own_servers import server_gpus
from rental.models import ProviderAccount

# The local cloud accepts any key; these only exercise the encrypted-credentials path.
DEMO_ACCESS_KEY_ID = "AKIADEMOLOCALCLOUD01"
DEMO_SECRET_ACCESS_KEY = "demo-only-secret-for-the-local-cloud"
DEMO_REGION = "us-east-1"
DEMO_SSH_TRANSPORT = "devcloud.own_servers.run"
STOP_TIMEOUT_S = 15
DEMO_HEARTBEAT_SECONDS = 10
ANSWER_TIMEOUT_S = 90


class Stopped(Exception):
    """Ctrl-C, SIGTERM or SIGHUP while the demo was being set up."""


@dataclass
class Child:
    name: str
    process: subprocess.Popen[bytes]


class Command(BaseCommand):
    help = "Start the demo: migrate, local cloud, demo data, Celery worker and beat, web server."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--port", type=int, default=8000, help="web server port")
        parser.add_argument(
            "--cloud-port", type=int, default=5055, help="local EC2-compatible endpoint port"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        port, cloud_port = options["port"], options["cloud_port"]
        if settings.PRODUCTION:
            raise CommandError("The demo does not run with PORTAL_ENV=production.")
        self.ensure_port_free(port, "--port")
        self.ensure_port_free(cloud_port, "--cloud-port")
        # The terminal's Ctrl-C (SIGINT to its whole foreground process group), SIGTERM
        # and a closed terminal (SIGHUP) only ask this process to stop: setting up stops
        # at its next step; once running, every child is stopped once, in order
        # (stop_children). The children run in process groups of their own, so Ctrl-C
        # does not reach them as well: a SIGTERM arriving in the middle of their own
        # Ctrl-C shutdown is what made Celery beat print a traceback.
        self.stopping = threading.Event()
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, lambda _signum, _frame: self.stopping.set())
        try:
            self.step("Migrating the database")
            call_command("migrate", interactive=False, verbosity=0)
            failed = self.run_demo(port, cloud_port)
        except Stopped:
            failed = None
        if failed is not None:
            name, code = failed
            raise CommandError(
                f"The {name} process exited unexpectedly (exit code {code}); "
                "stopped the whole demo. Its log is above."
            )
        self.stdout.write(self.style.SUCCESS("Demo stopped."))

    def run_demo(self, port: int, cloud_port: int) -> tuple[str, int] | None:
        """Start the local cloud and the children, and supervise them until a stop signal;
        the child that died first, if one did. Everything is stopped on the way out."""
        self.step(f"Starting the local cloud on 127.0.0.1:{cloud_port}")
        # Late: the local cloud (moto) is a demo extra, absent from a production install,
        # where this command refuses to run above.
        from devcloud import own_servers
        from devcloud import server as localcloud
        from devcloud.machines import Machines

        # The server room's own servers: local processes (devcloud.own_servers), empty at
        # every run like the local cloud, for this process and the children alike.
        os.environ[own_servers.ROOT_VARIABLE] = str(settings.VAR_DIR / "own-servers")
        os.environ["PORTAL_SSH_TRANSPORT"] = DEMO_SSH_TRANSPORT
        settings.PORTAL_SSH_TRANSPORT = DEMO_SSH_TRANSPORT
        own_servers.prepare(server_gpus())

        # Every instance the local cloud launches runs its agent here (devcloud.machines).
        machines = Machines(settings.VAR_DIR / "machines")
        try:
            cloud = localcloud.start(port=cloud_port, machines=machines)
        except OSError as exc:
            raise CommandError(
                f"The local cloud cannot listen on 127.0.0.1:{cloud_port} ({exc.strerror}). "
                "Is another demo running? Choose a free port with --cloud-port."
            ) from None
        children: list[Child] = []
        try:
            self.prepare(cloud.url)
            self.step("Asking for the leases the demo starts with")
            start_live_leases(self.stdout)
            connections.close_all()  # the children open their own connections
            self.step("Starting the worker, beat and the web server")
            children = self.start_children(port)
            return self.supervise(children, port=port, cloud_url=cloud.url)
        finally:
            machines.halt_all()  # first: an agent whose portal is gone would complain
            self.stop_children(children)
            cloud.stop()

    # Setting up ------------------------------------------------------------------------

    def step(self, message: str) -> None:
        """Say what comes next; raises ``Stopped`` instead when a stop was asked for."""
        if self.stopping.is_set():
            raise Stopped
        self.stdout.write(self.style.MIGRATE_HEADING(f"» {message}"))
        # At once, also into a pipe (`make run | tee`, a supervisor, the tests), where
        # Python buffers whole blocks: the step said is the step being done.
        self.stdout.flush()

    def ensure_port_free(self, port: int, option: str) -> None:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(("127.0.0.1", port))
            except OSError as exc:
                raise CommandError(
                    f"127.0.0.1:{port} is in use ({exc.strerror}). Is another demo running? "
                    f"Choose a free port with {option}."
                ) from None

    def prepare(self, cloud_url: str) -> None:
        self.step(f'Connecting the provider account "{DEMO_ACCOUNT}"')
        account = self.ensure_account(cloud_url)
        self.step("Loading the GPU catalog and the demo cloud's offerings")
        call_command("load_catalog", "--account", account.name)
        self.step("Loading demo users, projects, quotas and history")
        call_command(
            "seed_demo",
            "--account",
            account.name,
            "--sample-seconds",
            self.heartbeat_seconds(),
            "--own-servers",
        )
        call_command("seed_demo_billing")
        restored = restore_volumes(account)
        if restored:
            self.stdout.write(f"  {restored} data volumes of the last run put back in the cloud")

    def ensure_account(self, cloud_url: str) -> ProviderAccount:
        """The demo account, pointed at this run's local cloud, with working credentials."""
        account, created = ProviderAccount.objects.get_or_create(
            name=DEMO_ACCOUNT,
            defaults={"driver": "aws", "regions": [DEMO_REGION], "endpoint_url": cloud_url},
        )
        if not created:
            account.driver = "aws"
            account.regions = account.regions or [DEMO_REGION]
            account.endpoint_url = cloud_url
            account.is_active = True
            account.save(update_fields=["driver", "regions", "endpoint_url", "is_active"])
        if not self.credentials_readable(account):
            accounts.set_credentials(
                actor=None,
                account=account,
                access_key_id=DEMO_ACCESS_KEY_ID,
                secret_access_key=DEMO_SECRET_ACCESS_KEY,
                source="command",
            )
        account = accounts.validate_account(actor=None, account=account, source="command")
        if account.status != ProviderAccount.Status.OK:
            raise CommandError(
                f"The local cloud refused the demo account: {account.status_message}"
            )
        return account

    @staticmethod
    def credentials_readable(account: ProviderAccount) -> bool:
        if not account.has_credentials:
            return False
        try:
            account.config()
        except ImproperlyConfigured:  # var/demo-secrets.json was replaced since
            return False
        return True

    # Running ---------------------------------------------------------------------------

    def start_children(self, port: int) -> list[Child]:
        env = os.environ.copy()
        env.setdefault("PORTAL_SYNC_INTERVAL", "10")
        # The server room's GPUs as leased show on the pool page within seconds.
        env.setdefault("PORTAL_OWN_HOST_CHECK_INTERVAL", "10")
        # The agents of the demo's instances report to this web server, every 10 s rather
        # than every minute so that charts fill and idle warnings come while one watches.
        env["PORTAL_AGENT_URL"] = f"http://127.0.0.1:{port}"
        env["PORTAL_AGENT_HEARTBEAT_SECONDS"] = str(self.heartbeat_seconds())
        env.setdefault("PORTAL_AGENT_MIN_INTERVAL_SECONDS", "5")
        env.setdefault("PYTHONUNBUFFERED", "1")
        env.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
        base_dir = str(settings.BASE_DIR)
        celery = [sys.executable, "-m", "celery", "-A", "portal"]
        commands = {
            # Threads, not prefork: one process to stop, and kombu's filesystem transport
            # has no broadcast for gossip, mingle or heartbeats.
            "worker": [
                *celery,
                "worker",
                "--loglevel=INFO",
                "--concurrency=2",
                "--pool=threads",
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
                "--hostname=demo@%h",
            ],
            "beat": [
                *celery,
                "beat",
                "--loglevel=INFO",
                f"--schedule={settings.VAR_DIR / 'celerybeat-schedule'}",
            ],
            "web": [
                sys.executable,
                os.path.join(base_dir, "manage.py"),
                "runserver",
                f"127.0.0.1:{port}",
                "--noreload",
            ],
        }
        return [
            Child(name, subprocess.Popen(command, cwd=base_dir, env=env, process_group=0))
            for name, command in commands.items()
        ]

    def supervise(
        self, children: list[Child], *, port: int, cloud_url: str
    ) -> tuple[str, int] | None:
        """Wait for a stop signal; returns the child that died first, if one did."""
        url = f"http://127.0.0.1:{port}/"
        started = time.monotonic()
        announced = False
        while not self.stopping.wait(0.5):
            for child in children:
                code = child.process.poll()
                if code is None:
                    continue
                return child.name, code
            if not announced and (
                self.answers(f"{url}login/") or time.monotonic() - started > ANSWER_TIMEOUT_S
            ):
                self.announce(url, cloud_url)
                announced = True
        return None

    @staticmethod
    def answers(url: str) -> bool:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return True
        except urllib.error.HTTPError:
            return True  # it answered, if not happily
        except OSError:
            return False

    @staticmethod
    def heartbeat_seconds() -> int:
        """The agents' interval in the demo: PORTAL_AGENT_HEARTBEAT_SECONDS when set, else
        DEMO_HEARTBEAT_SECONDS."""
        if os.environ.get("PORTAL_AGENT_HEARTBEAT_SECONDS", "").strip():
            return settings.PORTAL_AGENT_HEARTBEAT_SECONDS
        return DEMO_HEARTBEAT_SECONDS

    def announce(self, url: str, cloud_url: str) -> None:
        width = max(len(user.username) for user in DEMO_USERS)
        pwidth = max(len(user.password) for user in DEMO_USERS)
        lines = [
            "",
            "=" * 72,
            f"  GPU Portal demo: {url}",
            "",
            "  Log in as (demo-only passwords):",
            *(
                f"    {user.username:<{width}}  {user.password:<{pwidth}}  {user.what}"
                for user in DEMO_USERS
            ),
            "",
            f"  Demo cloud (local EC2 endpoint): {cloud_url}; each of its instances",
            "  runs the real agent on simulated GPUs. chen's training run is busy; erik's",
            "  notebook goes idle after 2 minutes and is warned about 3 minutes later.",
            "  Server room: two own L4 servers (local processes, no SSH). amira's lease",
            "  fills them; erik's, asked next, bursts to the demo cloud (Pools → L4).",
            "  Ctrl-C stops the web server, the worker, beat, the agents and the cloud.",
            "=" * 72,
            "",
        ]
        self.stdout.write(self.style.SUCCESS("\n".join(lines)))
        self.stdout.flush()

    def stop_children(self, children: list[Child]) -> None:
        """Terminate every child, newest first; kill what is still there after a timeout."""
        live = [child for child in children if child.process.poll() is None]
        if not live:
            return
        names = ", ".join(child.name for child in reversed(live))
        self.stdout.write(self.style.MIGRATE_HEADING(f"» Stopping {names}"))
        for child in reversed(live):
            with contextlib.suppress(ProcessLookupError):
                child.process.terminate()
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for child in live:
            try:
                child.process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.stderr.write(f"  the {child.name} did not stop in time; killing it")
                child.process.kill()
                child.process.wait()
