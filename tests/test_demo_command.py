"""``manage.py demo`` as a person runs it: it starts, its instances' agents report, and a
terminal's Ctrl-C (SIGINT to the whole foreground process group) stops every process it
started, quietly: no traceback from Celery beat, one line to say it stopped."""

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[1]
# The tests' own servers, which the demo must not use: it runs on SQLite and its own broker.
NOT_THE_DEMOS = ("DATABASE_URL", "CELERY_BROKER_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Demo:
    """``manage.py demo`` in a process group of its own, as a terminal would run it."""

    def __init__(self, var_dir: Path) -> None:
        self.port, self.cloud_port = free_port(), free_port()
        env = {k: v for k, v in os.environ.items() if k not in NOT_THE_DEMOS}
        # As `make run` starts it on a fresh machine: Python buffers what it writes into a
        # pipe unless told otherwise, and the demo must say each step when it starts it.
        env.pop("PYTHONUNBUFFERED", None)
        env["PORTAL_VAR_DIR"] = str(var_dir)
        self.var_dir = var_dir
        self.process = subprocess.Popen(
            [
                *(sys.executable, "manage.py", "demo"),
                *("--port", str(self.port), "--cloud-port", str(self.cloud_port)),
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line)

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def wait_for(self, text: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.output:
            assert self.process.poll() is None, f"the demo exited:\n{self.output[-3000:]}"
            assert time.monotonic() < deadline, f"no {text!r} in:\n{self.output[-3000:]}"
            time.sleep(0.2)

    def ctrl_c(self) -> int:
        os.killpg(self.process.pid, signal.SIGINT)
        code = self.process.wait(timeout=90)
        self.reader.join(timeout=10)
        return code

    def leftovers(self) -> list[str]:
        """Processes still running that this demo started (found by their arguments)."""
        marks = (str(self.var_dir), f"127.0.0.1:{self.port}")
        found = []
        for proc in Path("/proc").iterdir():
            try:
                args = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if any(mark in args for mark in marks) and proc.name != str(os.getpid()):
                found.append(args)
        return found

    def kill(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


def held_gpus(var_dir: Path, host: str) -> list[list[int]]:
    """The GPUs each live lease holds on a demo own server, from the host program's state."""
    state = var_dir / "own-servers" / host / "state" / "allocations.json"
    try:
        held = json.loads(state.read_text())
    except (OSError, ValueError):  # not written yet
        return []
    return [a["gpus"] for a in held.values() if a["state"] == "running"]


def wait_until(condition, demo: Demo, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"not so in time:\n{demo.output[-3000:]}"
        time.sleep(0.5)


def test_ctrl_c_stops_the_running_demo_and_its_agents_quietly(tmp_path):
    demo = Demo(tmp_path / "var")
    try:
        demo.wait_for("GPU Portal demo:", timeout=240)
        # The leases the demo starts with launch, and their agents report.
        demo.wait_for('"POST /api/v1/agent/heartbeat HTTP/1.1" 200', timeout=120)
        # The server room's own servers (local processes): amira's lease holds both.
        for host in ("gpu-box-1", "gpu-box-2"):
            wait_until(lambda host=host: held_gpus(demo.var_dir, host) == [[0, 1]], demo)
        code = demo.ctrl_c()
    finally:
        demo.kill()
    output = demo.output
    assert code == 0, output[-3000:]
    assert "Traceback" not in output and "Exception ignored" not in output, output[-3000:]
    assert output.rstrip().endswith("Demo stopped."), output[-1000:]
    assert demo.leftovers() == []


def test_ctrl_c_while_setting_up_stops_at_once_quietly(tmp_path):
    demo = Demo(tmp_path / "var")
    try:
        demo.wait_for("Migrating the database", timeout=60)
        code = demo.ctrl_c()
    finally:
        demo.kill()
    assert code == 0, demo.output
    assert "Traceback" not in demo.output
    assert demo.output.rstrip().endswith("Demo stopped.")
    assert "Starting the worker" not in demo.output
    assert demo.leftovers() == []
