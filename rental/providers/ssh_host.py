"""The own-server side of the ``ssh`` driver: a program the driver sends over SSH.

Standard library only, and Python 3.8 or newer, so nothing is installed on a server: the
driver runs ``python3 -`` (as root, or through ``sudo -n``) and writes this file on its
standard input followed by one line calling ``serve()`` with the request. The answer is
one JSON object on standard output: ``{"ok": true, ...}`` or ``{"ok": false, "kind":
..., "message": ...}`` (``kind`` a ``ProviderErrorKind`` value). Nothing secret is ever
put on a command line, where ``ps`` would show it.

What it keeps on the server, in ``GPU_PORTAL_STATE_DIR`` (default ``/var/lib/gpu-portal``):

- ``allocations.json``: each lease on this server by its idempotency key: its Unix
  account, the GPU indexes it holds, its tags and state (``pending`` while being set up,
  ``running``, ``terminated`` for a day after its end);
- ``lock``: every action that changes the file holds an exclusive ``flock`` on it, so two
  launches at once never get the same GPU;
- ``agent/``: the portal's agent program; ``leases/<account>/bin/nvidia-smi``: a wrapper
  showing the lease's agent only its own GPUs.

``nvidia-smi`` is ``GPU_PORTAL_NVIDIA_SMI`` when set (the tests' fake), else the one on
PATH. The driver imports ``catalog_name`` and ``model_slug`` from here too, so the server
and the portal name GPUs alike.

``GPU_PORTAL_SIMULATE_ACCOUNTS=1`` is the demo's switch (``devcloud/own_servers.py`` runs
this program as a local process, as the developer's own user): allocations are kept and
released in the state as usual, but no Unix account is made or removed, no agent is
started and no process is killed, so nothing on the developer's machine is touched. A
real server never has it set.
"""

from __future__ import annotations

import base64
import contextlib
import csv
import datetime
import fcntl
import gzip
import hashlib
import io
import json
import os
import pwd
import re
import shutil
import signal
import subprocess
import sys
import time

DEFAULT_STATE_DIR = "/var/lib/gpu-portal"
ACCOUNT_PREFIX = "gp-"
KEEP_ENDED_SECONDS = 86400
AGENT_NAME = "gpu_portal_agent.py"

# --- Naming GPUs (pure; the driver imports these) ----------------------------------------

_VENDOR_WORDS = {"nvidia", "geforce", "tesla", "quadro"}
_FORM_WORDS = {"pcie", "nvl", "hbm2", "hbm2e", "hbm3", "hbm3e", "mig"}
# Memory sizes as cards are sold; nvidia-smi reports a little less (a 24 GB card: 24564 MiB).
_MARKETED_GB = (8, 10, 12, 16, 20, 24, 32, 40, 48, 64, 80, 94, 96, 141, 144, 180, 192)


def catalog_name(nvidia_smi_name: str, memory_mib: int = 0) -> str:
    """The catalog's name of a card nvidia-smi names, e.g. ``"NVIDIA GeForce RTX 4090"``
    with 24564 MiB → ``"RTX 4090 24GB"``, ``"NVIDIA A100-SXM4-80GB"`` → ``"A100 80GB"``,
    ``"Tesla T4"`` with 15360 MiB → ``"T4 16GB"``. The memory is the size in the name
    when there is one, else the marketed size nearest ``memory_mib``; without either, the
    model alone (``"RTX 4090"``)."""
    words = []
    size = 0
    for token in re.split(r"[\s_-]+", nvidia_smi_name.strip()):
        low = token.lower()
        if not low or low in _VENDOR_WORDS or low in _FORM_WORDS or low.startswith("sxm"):
            continue
        sized = re.fullmatch(r"(\d+)gb", low)
        if sized:
            size = int(sized.group(1))
            continue
        words.append(token)
    if not size and memory_mib > 0:
        size = min(_MARKETED_GB, key=lambda gb: abs(gb * 1024 - memory_mib))
    model = " ".join(words)
    return f"{model} {size}GB" if size else model


def model_slug(name: str) -> str:
    """``"RTX 4090 24GB"`` → ``"rtx-4090-24gb"``: how an instance type names a model."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def gpu_matches(nvidia_smi_name: str, memory_mib: int, wanted_slug: str) -> bool:
    """Is this card the model ``wanted_slug`` names? A slug without the memory size
    (``"rtx-4090"``) matches every size of that model."""
    slug = model_slug(catalog_name(nvidia_smi_name, memory_mib))
    return wanted_slug in (slug, re.sub(r"-\d+gb$", "", slug))


# --- Reading the server -----------------------------------------------------------------


class Refused(Exception):
    """An answer ``{"ok": false}`` of this kind (a ``ProviderErrorKind`` value)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


def nvidia_smi() -> str:
    """nvidia-smi's full path ("" when it is not installed)."""
    return os.environ.get("GPU_PORTAL_NVIDIA_SMI") or shutil.which("nvidia-smi") or ""


def _smi(args: list) -> list:
    try:
        done = subprocess.run(
            [nvidia_smi() or "nvidia-smi", *args],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except FileNotFoundError:
        raise Refused("invalid", "nvidia-smi is not installed") from None
    except subprocess.TimeoutExpired:
        raise Refused("transient", "nvidia-smi did not answer in 60 s") from None
    if done.returncode != 0:
        said = (done.stdout + done.stderr).strip()
        if "No devices were found" in said:
            return []
        raise Refused("transient", f"nvidia-smi failed: {said[:200]}")
    return [[cell.strip() for cell in row] for row in csv.reader(io.StringIO(done.stdout)) if row]


def read_gpus() -> list:
    """Every GPU nvidia-smi lists, with the processes using each."""
    rows = _smi(["--query-gpu=index,name,memory.total,uuid", "--format=csv,noheader,nounits"])
    busy: dict = {}
    for row in _smi(["--query-compute-apps=gpu_uuid,pid", "--format=csv,noheader,nounits"]):
        if len(row) >= 2 and row[1].isdigit():
            busy.setdefault(row[0], []).append(int(row[1]))
    gpus = []
    for row in rows:
        if len(row) < 4 or not row[0].isdigit():
            continue
        memory = int(float(row[2])) if re.fullmatch(r"[0-9.]+", row[2]) else 0
        gpus.append(
            {
                "index": int(row[0]),
                "name": row[1],
                "memory_mib": memory,
                "uuid": row[3],
                "busy_pids": sorted(busy.get(row[3], [])),
            }
        )
    return gpus


# --- The state ----------------------------------------------------------------------------


def state_dir() -> str:
    return os.environ.get("GPU_PORTAL_STATE_DIR") or DEFAULT_STATE_DIR


def _now() -> str:
    now = datetime.datetime.now(datetime.timezone.utc)  # noqa: UP017 (Python 3.8 on servers)
    return now.replace(microsecond=0).isoformat()


@contextlib.contextmanager
def locked():
    """The state, under the exclusive lock; written back (atomically) on leaving."""
    root = state_dir()
    os.makedirs(root, mode=0o755, exist_ok=True)
    with open(os.path.join(root, "lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        state = load()
        yield state
        _prune(state)
        _save_now(state)


def load() -> dict:
    try:
        with open(os.path.join(state_dir(), "allocations.json")) as source:
            return json.load(source)
    except FileNotFoundError:
        return {}


def _prune(state: dict) -> None:
    cut = time.time() - KEEP_ENDED_SECONDS
    for key in list(state):
        ended = state[key].get("ended_at")
        if ended and datetime.datetime.fromisoformat(ended).timestamp() < cut:
            del state[key]


def account_for(key: str) -> str:
    return ACCOUNT_PREFIX + hashlib.sha256(key.encode()).hexdigest()[:10]


def held(state: dict) -> set:
    return {
        index
        for allocation in state.values()
        if allocation["state"] != "terminated"
        for index in allocation["gpus"]
    }


# --- The lease's account ----------------------------------------------------------------


# useradd and userdel answer 10 when another program holds /etc/passwd's lock (another
# useradd, an admin's vipw): worth a few more tries before giving up.
PASSWD_LOCKED = 10
LOCK_TRIES = 50


def _run(args: list) -> None:
    for _ in range(LOCK_TRIES):
        done = subprocess.run(args, capture_output=True, text=True, check=False)
        if done.returncode != PASSWD_LOCKED:
            break
        time.sleep(0.1)
    if done.returncode != 0:
        raise Refused("transient", f"{args[0]} failed: {done.stderr.strip()[:200]}")


def _write(path: str, text: str, mode: int, owner: pwd.struct_passwd | None) -> None:
    with open(path, "w") as out:
        out.write(text)
    os.chmod(path, mode)
    if owner is not None:
        os.chown(path, owner.pw_uid, owner.pw_gid)


ENV_BEGIN = "# gpu-portal: this lease's GPUs (set by the portal)"


def _environment(allocation: dict) -> str:
    visible = ",".join(str(index) for index in allocation["gpus"])
    return f"{ENV_BEGIN}\nexport CUDA_VISIBLE_DEVICES={visible}\n"


def set_up_account(allocation: dict, keys: list) -> pwd.struct_passwd:
    """The lease's account with its home, the engineer's keys, and CUDA_VISIBLE_DEVICES for
    login shells and for commands run over SSH (bash reads ~/.bashrc for those, before
    the usual early return of non-interactive shells). Safe to run again."""
    user = allocation["account"]
    try:
        account = pwd.getpwnam(user)
    except KeyError:
        # "*": no password can log in, yet the account is not "locked" (sshd refuses those
        # even with a key where PAM is off).
        _run(["useradd", "--create-home", "--shell", "/bin/bash", "--password", "*",
              "--comment", "GPU Portal lease", user])  # fmt: skip
        account = pwd.getpwnam(user)
    home = account.pw_dir
    os.chmod(home, 0o750)
    ssh_dir = os.path.join(home, ".ssh")
    os.makedirs(ssh_dir, exist_ok=True)
    os.chmod(ssh_dir, 0o700)
    os.chown(ssh_dir, account.pw_uid, account.pw_gid)
    _write(
        os.path.join(ssh_dir, "authorized_keys"), "".join(k + "\n" for k in keys), 0o600, account
    )
    environment = _environment(allocation)
    for name, first in ((".bashrc", True), (".profile", False)):
        path = os.path.join(home, name)
        try:
            with open(path) as source:
                text = source.read()
        except FileNotFoundError:
            text = ""
        if ENV_BEGIN not in text:
            text = environment + text if first else text + "\n" + environment
            _write(path, text, 0o644, account)
    return account


def simulating() -> bool:
    """The demo's switch: keep allocations in the state only (see the module's words)."""
    return os.environ.get("GPU_PORTAL_SIMULATE_ACCOUNTS") == "1"


def _lease_dir(user: str) -> str:
    return os.path.join(state_dir(), "leases", user)


def start_agent(allocation: dict, account: pwd.struct_passwd, source: str, config: str) -> int:
    """The portal's agent as a process of the lease's account (so the end of the lease ends
    it), seeing only the lease's GPUs through a wrapper of nvidia-smi. Returns its pid."""
    agent_dir = os.path.join(state_dir(), "agent")
    os.makedirs(agent_dir, mode=0o755, exist_ok=True)
    os.chmod(state_dir(), 0o755)
    agent = os.path.join(agent_dir, AGENT_NAME)
    _write(agent, gzip.decompress(base64.b64decode(source)).decode(), 0o644, None)
    bin_dir = os.path.join(_lease_dir(account.pw_name), "bin")
    os.makedirs(bin_dir, mode=0o755, exist_ok=True)
    os.chmod(os.path.dirname(bin_dir), 0o755)
    os.chmod(os.path.dirname(os.path.dirname(bin_dir)), 0o755)
    visible = ",".join(str(index) for index in allocation["gpus"])
    if nvidia_smi():
        wrapper = f"#!/bin/sh\nexec '{nvidia_smi()}' -i {visible} \"$@\"\n"
        _write(os.path.join(bin_dir, "nvidia-smi"), wrapper, 0o755, None)
    portal_dir = os.path.join(account.pw_dir, ".gpu-portal")
    os.makedirs(portal_dir, exist_ok=True)
    os.chown(portal_dir, account.pw_uid, account.pw_gid)
    os.chmod(portal_dir, 0o700)
    config_path = os.path.join(portal_dir, "agent.json")
    _write(config_path, config, 0o600, account)
    log_path = os.path.join(portal_dir, "agent.log")
    environment = {
        "HOME": account.pw_dir,
        "USER": account.pw_name,
        "LOGNAME": account.pw_name,
        "SHELL": account.pw_shell,
        "PATH": f"{bin_dir}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "CUDA_VISIBLE_DEVICES": visible,
    }
    # The system's Python: the one running this program may sit where the account cannot
    # read (a root-only virtual environment).
    python = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else sys.executable
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: detach, become the account, start the agent
        try:
            os.close(read_end)
            os.setsid()
            grandchild = os.fork()
            if grandchild:
                os.write(write_end, str(grandchild).encode())
                os._exit(0)
            os.close(write_end)
            os.initgroups(account.pw_name, account.pw_gid)
            os.setgid(account.pw_gid)
            os.setuid(account.pw_uid)
            os.chdir(account.pw_dir)
            null = os.open(os.devnull, os.O_RDONLY)
            log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            os.dup2(null, 0)
            os.dup2(log, 1)
            os.dup2(log, 2)
            os.execve(python, [python, agent, "--config", config_path], environment)
        except BaseException as error:  # in the child: say why in the agent's log, if open
            with contextlib.suppress(OSError):
                os.write(2, f"gpu-portal: the agent did not start: {error!r}\n".encode())
        finally:
            os._exit(127)
    os.close(write_end)
    with os.fdopen(read_end) as answer:
        agent_pid = int(answer.read() or 0)
    os.waitpid(pid, 0)
    return agent_pid


def processes_of(uid: int) -> list:
    """The live processes of ``uid`` (zombies are dead already, left out), from /proc."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            if os.stat(f"/proc/{name}").st_uid != uid:
                continue
            with open(f"/proc/{name}/stat") as stat:
                if stat.read().rpartition(")")[2].split()[0] == "Z":
                    continue
        except (OSError, IndexError):
            continue  # ended meanwhile
        found.append(int(name))
    return found


def end_account(user: str) -> None:
    """Every process of the account killed (again and again while any forks), then the
    account and its home removed, and the lease's files in the state directory. Safe to
    run again."""
    try:
        account = pwd.getpwnam(user)
    except KeyError:
        shutil.rmtree(_lease_dir(user), ignore_errors=True)
        return
    deadline = time.monotonic() + 20
    while True:
        left = processes_of(account.pw_uid)
        if not left:
            break
        if time.monotonic() > deadline:
            raise Refused("transient", f"{len(left)} process(es) of {user} did not end")
        for pid in left:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)
    for _ in range(LOCK_TRIES):
        done = subprocess.run(["userdel", "-r", user], capture_output=True, text=True, check=False)
        if done.returncode != PASSWD_LOCKED:
            break
        time.sleep(0.1)
    if done.returncode not in (0, 12):  # 12: the home could not be removed
        _run(["userdel", "-r", "-f", user])
    shutil.rmtree(_lease_dir(user), ignore_errors=True)


# --- The actions ----------------------------------------------------------------------


def inspect(_request: dict) -> dict:
    """The GPUs and every allocation (ended ones for a day). nvidia-smi failing is said in
    ``smi_error``, not a refusal: the server still answers."""
    try:
        gpus, smi_error = read_gpus(), ""
    except Refused as problem:
        gpus, smi_error = [], problem.message
    return {"gpus": gpus, "smi_error": smi_error, "allocations": load()}


def allocate(request: dict) -> dict:
    """The allocation of ``key``: the existing one (any state), else ``count`` free GPUs
    of the model ``model`` (a slug) with an account and the agent. GPUs held by another
    allocation or busy with any process are not free. Refused ``capacity`` when too few."""
    key, count, model = request["key"], int(request["count"]), request["model"]
    with locked() as state:
        allocation = state.get(key)
        if allocation is None:
            gpus = read_gpus()
            taken = held(state)
            free = [
                gpu
                for gpu in gpus
                if gpu_matches(gpu["name"], gpu["memory_mib"], model)
                and gpu["index"] not in taken
                and not gpu["busy_pids"]
            ]
            if len(free) < count:
                raise Refused(
                    "capacity", f"{len(free)} free GPU(s) of model {model} here, {count} asked"
                )
            chosen = sorted(free, key=lambda gpu: gpu["index"])[:count]
            allocation = {
                "account": account_for(key),
                "gpus": [gpu["index"] for gpu in chosen],
                "uuids": [gpu["uuid"] for gpu in chosen],
                "instance_type": request.get("instance_type", ""),
                "tags": request.get("tags", []),
                "state": "pending",
                "created_at": _now(),
                "ended_at": None,
                "agent_pid": 0,
            }
            state[key] = allocation
            _save_now(state)
        if allocation["state"] == "pending" and simulating():
            allocation["state"] = "running"  # the demo: no account, no agent
        if allocation["state"] == "pending":
            account = set_up_account(allocation, request.get("keys", []))
            if request.get("agent_config") and not _alive(allocation["agent_pid"], account):
                allocation["agent_pid"] = start_agent(
                    allocation, account, request["agent_source"], request["agent_config"]
                )
            allocation["state"] = "running"
    return {"key": key, "allocation": allocation}


def _save_now(state: dict) -> None:
    """Write the state while still holding the lock: a failure while setting the account
    up leaves a ``pending`` allocation that the next try (or a release) finishes."""
    scratch = os.path.join(state_dir(), "allocations.json.new")
    with open(scratch, "w") as out:
        json.dump(state, out, indent=1, sort_keys=True)
    os.chmod(scratch, 0o600)
    os.replace(scratch, os.path.join(state_dir(), "allocations.json"))


def _alive(pid: int, account: pwd.struct_passwd) -> bool:
    try:
        return pid > 0 and os.stat(f"/proc/{pid}").st_uid == account.pw_uid
    except OSError:
        return False


def release(request: dict) -> dict:
    """End the allocations of the accounts named (unknown ones ignored): processes killed,
    account removed, GPUs free. Returns the keys ended now or before."""
    accounts = set(request.get("accounts", []))
    ended = []
    with locked() as state:
        for key, allocation in state.items():
            if allocation["account"] not in accounts:
                continue
            if allocation["state"] != "terminated":
                if not simulating():  # the demo made no account: nothing to end
                    end_account(allocation["account"])
                allocation["state"] = "terminated"
                allocation["ended_at"] = _now()
            ended.append(key)
    return {"ended": ended}


ACTIONS = {"inspect": inspect, "allocate": allocate, "release": release}


def serve(request: dict) -> int:
    """Do the request's ``action`` and write the JSON answer; the exit status is 0 even for
    a refusal (the answer says it), 1 only for a failure of this program itself."""
    try:
        answer = {"ok": True, **ACTIONS[request["action"]](request)}
    except Refused as refused:
        answer = {"ok": False, "kind": refused.kind, "message": refused.message}
    except OSError as error:
        answer = {"ok": False, "kind": "transient", "message": f"{type(error).__name__}: {error}"}
    sys.stdout.write(json.dumps(answer) + "\n")
    return 0
