#!/usr/bin/env python3
"""GPU Portal agent: tells the portal what this instance's GPUs are doing.

Standard library only (it runs on whatever image the engineer picked). Every
interval it reads ``nvidia-smi`` and the SSH sessions and sends a heartbeat; while
the portal cannot be reached it keeps a bounded buffer of samples and sends them
later, oldest first. On its first heartbeat it reports what the machine is (GPU
count and model, driver, highest CUDA the driver supports, whether PyTorch or
Paddle sees the GPU), then runs a short acceptance burn with the image's PyTorch
when there is one. It watches the instance metadata for a spot interruption notice.

Try it by hand:  python3 gpu_portal_agent.py --once --dry-run
"""

from __future__ import annotations

import argparse
import collections
import csv
import datetime as dt
import io
import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request

VERSION = "1"
QUERY_FIELDS = (
    "index",
    "name",
    "utilization.gpu",
    "memory.used",
    "memory.total",
    "temperature.gpu",
    "power.draw",
    "ecc.errors.uncorrected.volatile.total",
    "clocks_throttle_reasons.active",
    "driver_version",
)
MISSING = {"", "n/a", "[n/a]", "[not supported]", "not supported", "[unknown error]"}

PROBE = r"""
import json
out = {}
try:
    import torch
    out["torch"] = {"installed": True, "cuda": bool(torch.cuda.is_available()),
                    "version": str(torch.__version__)[:40]}
except ImportError:
    pass
except Exception:
    out["torch"] = {"installed": True, "cuda": False, "version": "broken"}
try:
    import paddle
    cuda = bool(paddle.device.is_compiled_with_cuda()) and paddle.device.cuda.device_count() > 0
    out["paddle"] = {"installed": True, "cuda": cuda, "version": str(paddle.__version__)[:40]}
except ImportError:
    pass
except Exception:
    out["paddle"] = {"installed": True, "cuda": False, "version": "broken"}
print(json.dumps(out))
"""

BURN = r"""
import json, sys, threading, time
try:
    import torch
except ImportError:
    print(json.dumps({"skipped": "PyTorch is not installed"})); sys.exit(0)
if not torch.cuda.is_available():
    print(json.dumps({"skipped": "PyTorch does not see a GPU"})); sys.exit(0)
seconds = float(sys.argv[1])
size = int(sys.argv[2]) if len(sys.argv) > 2 else 8192
count = torch.cuda.device_count()
dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
results = [0.0] * count
def burn(i):
    with torch.cuda.device(i):
        a = torch.randn(size, size, device="cuda", dtype=dtype)
        b = torch.randn(size, size, device="cuda", dtype=dtype)
        for _ in range(3):
            a @ b
        torch.cuda.synchronize()
        done, start = 0, time.perf_counter()
        while True:
            for _ in range(10):
                a @ b
            torch.cuda.synchronize()
            done += 10
            elapsed = time.perf_counter() - start
            if elapsed >= seconds:
                break
        results[i] = round(2 * size ** 3 * done / elapsed / 1e12, 1)
threads = [threading.Thread(target=burn, args=(i,)) for i in range(count)]
for t in threads: t.start()
for t in threads: t.join()
print(json.dumps({"tflops": results, "dtype": str(dtype)[6:], "seconds": seconds}))
"""


class ReadError(Exception):
    """nvidia-smi could not be read or said something we do not understand."""


def utc_now() -> str:
    now = dt.datetime.now(dt.timezone.utc)  # noqa: UP017 (images may have Python 3.8)
    return now.replace(microsecond=0).isoformat().replace("+00:00", "Z")


def log(message: str) -> None:
    sys.stderr.write(f"{utc_now()} gpu-portal-agent: {message}\n")
    sys.stderr.flush()


# --- Reading the machine ------------------------------------------------------------------


def _value(text: str, kind: type, field: str) -> object:
    text = text.strip()
    if text.lower() in MISSING:
        return None
    try:
        return kind(float(text)) if kind is int else kind(text)
    except ValueError:
        raise ReadError(f"{field}: {text[:40]!r} is not a number") from None


def run_smi(args: list[str], timeout: float = 20) -> str:
    try:
        done = subprocess.run(
            ["nvidia-smi", *args], capture_output=True, text=True, timeout=timeout, check=False
        )
    except FileNotFoundError:
        raise ReadError("nvidia-smi is not installed") from None
    except subprocess.TimeoutExpired:
        raise ReadError("nvidia-smi did not answer in time") from None
    if done.returncode != 0:
        raise ReadError(f"nvidia-smi failed: {(done.stderr or done.stdout).strip()[:200]}")
    return done.stdout


def parse_query(output: str) -> list[dict]:
    """One dict per GPU from ``--format=csv,noheader,nounits`` output; ReadError when a
    line does not have every field or a number is not a number."""
    gpus = []
    for row in csv.reader(io.StringIO(output.strip())):
        if not row:
            continue
        if len(row) != len(QUERY_FIELDS):
            raise ReadError(f"expected {len(QUERY_FIELDS)} fields, got {len(row)}")
        raw = dict(zip(QUERY_FIELDS, row))  # noqa: B905 (length checked; Python 3.8)
        utilization = _value(raw["utilization.gpu"], float, "utilization")
        used = _value(raw["memory.used"], float, "memory.used")
        if utilization is None or used is None:
            raise ReadError("utilization or memory is not reported")
        gpus.append(
            {
                "index": _value(raw["index"], int, "index"),
                "name": raw["name"].strip()[:120],
                "utilization": utilization,
                "memory_used_mb": used,
                "memory_total_mb": _value(raw["memory.total"], float, "memory.total"),
                "temperature_c": _value(raw["temperature.gpu"], float, "temperature"),
                "power_w": _value(raw["power.draw"], float, "power"),
                "ecc_errors": _value(raw["ecc.errors.uncorrected.volatile.total"], int, "ecc"),
                "throttle_reasons": raw["clocks_throttle_reasons.active"].strip()[:40],
                "driver_version": raw["driver_version"].strip()[:40],
            }
        )
    if not gpus:
        raise ReadError("nvidia-smi listed no GPU")
    return gpus


# Newer drivers call the throttle reasons "clocks_event_reasons"; older ones only know
# the first name. The one that works is remembered.
THROTTLE_FIELDS = ["clocks_throttle_reasons.active", "clocks_event_reasons.active"]


def read_gpus() -> list[dict]:
    for attempt, throttle in enumerate(list(THROTTLE_FIELDS)):
        fields = [throttle if f == "clocks_throttle_reasons.active" else f for f in QUERY_FIELDS]
        try:
            output = run_smi(["--query-gpu=" + ",".join(fields), "--format=csv,noheader,nounits"])
        except ReadError as error:
            if "valid field" in str(error) and attempt + 1 < len(THROTTLE_FIELDS):
                continue
            raise
        if attempt:
            THROTTLE_FIELDS.insert(0, THROTTLE_FIELDS.pop(attempt))
        return parse_query(output)
    raise ReadError("nvidia-smi knows none of the throttle-reason fields")


def max_cuda_version() -> str:
    """The highest CUDA version the driver supports, from nvidia-smi's banner."""
    try:
        match = re.search(r"CUDA Version:\s*([0-9.]+)", run_smi([]))
    except ReadError:
        return ""
    return match.group(1) if match else ""


def ssh_sessions() -> int | None:
    """Established TCP connections to local port 22, from /proc (no tools needed)."""
    count, seen = 0, False
    for path in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(path) as table:
                next(table, None)
                seen = True
                for line in table:
                    fields = line.split()
                    if len(fields) > 3 and fields[3] == "01" and fields[1].endswith(":0016"):
                        count += 1
        except OSError:
            continue
    return count if seen else None


def frameworks(python: str) -> dict:
    try:
        done = subprocess.run(
            [python, "-c", PROBE], capture_output=True, text=True, timeout=180, check=False
        )
        return json.loads(done.stdout.strip().splitlines()[-1]) if done.stdout.strip() else {}
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
        return {}


def burn(python: str, seconds: float, size: int = 8192) -> dict:
    """The acceptance burn: a bf16 (or fp16) matrix-multiply loop on every GPU at once with
    the image's PyTorch; TFLOPS per GPU. Skipped, with the reason, without PyTorch."""
    try:
        done = subprocess.run(
            ["nice", "-n", "10", python, "-c", BURN, str(seconds), str(size)],
            capture_output=True,
            text=True,
            timeout=seconds + 300,
            check=False,
        )
        result = json.loads(done.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
        return {"skipped": "the burn did not finish", "seconds": seconds}
    if not isinstance(result, dict):
        return {"skipped": "the burn said something unexpected", "seconds": seconds}
    result.setdefault("seconds", seconds)
    return result


def health_report(python: str) -> dict:
    try:
        gpus = read_gpus()
    except ReadError as error:
        return {"gpus": [], "error": str(error)[:300]}
    return {
        "gpus": [
            {"index": g["index"], "name": g["name"], "memory_total_mb": g["memory_total_mb"]}
            for g in gpus
        ],
        "driver_version": gpus[0]["driver_version"],
        "cuda_version": max_cuda_version(),
        "frameworks": frameworks(python),
    }


def take_sample() -> dict:
    sample = {"at": utc_now(), "ssh_sessions": ssh_sessions()}
    try:
        gpus = read_gpus()
    except ReadError as error:
        # A missing sample: the portal counts it neither idle nor active.
        sample["gpus"] = []
        sample["error"] = str(error)[:300]
        return sample
    sample["gpus"] = [
        {key: g[key] for key in g if key not in ("name", "driver_version")} for g in gpus
    ]
    return sample


# --- Spot interruption notice (instance metadata, IMDSv2) ---------------------------------


def spot_notice(metadata_url: str) -> dict | None:
    base = metadata_url.rstrip("/")
    try:
        request = urllib.request.Request(
            f"{base}/latest/api/token",
            method="PUT",
            headers={"X-aws-ec2-metadata-token-ttl-seconds": "300"},
        )
        with urllib.request.urlopen(request, timeout=2) as answer:
            token = answer.read().decode()
        request = urllib.request.Request(
            f"{base}/latest/meta-data/spot/instance-action",
            headers={"X-aws-ec2-metadata-token": token},
        )
        with urllib.request.urlopen(request, timeout=2) as answer:
            notice = json.loads(answer.read().decode())
    except (urllib.error.URLError, OSError, ValueError):
        return None  # 404 (no notice), no metadata service, or nonsense: nothing to say
    if not isinstance(notice, dict) or "action" not in notice:
        return None
    return {"action": str(notice["action"])[:20], "time": notice.get("time")}


# --- Talking to the portal ----------------------------------------------------------------


class Agent:
    def __init__(self, options: argparse.Namespace) -> None:
        self.options = options
        self.buffer: collections.deque[dict] = collections.deque(maxlen=options.buffer)
        self.health: dict | None = None
        self.burn: dict | None = None
        self.notice: dict | None = None
        self.notice_sent = False
        self.stopped = False
        self.last_at: str | None = None

    def post(self, body: dict) -> tuple[int, dict]:
        data = json.dumps(body).encode()
        request = urllib.request.Request(
            self.options.url,
            data=data,
            method="POST",
            headers={
                "Content-Type": "application/json",
                "Authorization": f"Bearer {self.options.token}",
                "User-Agent": f"gpu-portal-agent/{VERSION}",
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=self.options.timeout) as answer:
                return answer.status, json.loads(answer.read() or b"{}")
        except urllib.error.HTTPError as error:
            try:
                return error.code, json.loads(error.read() or b"{}")
            except ValueError:
                return error.code, {}

    def flush(self) -> bool:
        """Send what is buffered, oldest first. False when the portal could not be reached
        (everything stays buffered for the next try)."""
        while True:
            batch = list(self.buffer)[: self.options.batch]
            body: dict = {"agent_version": VERSION, "samples": batch}
            for key, value in (("health", self.health), ("burn", self.burn)):
                if value is not None:
                    body[key] = value
            if self.notice is not None and not self.notice_sent:
                body["spot_notice"] = self.notice
            if not batch and len(body) == 2:
                return True
            if self.options.dry_run:
                sys.stdout.write(json.dumps(body, indent=2) + "\n")
                sys.stdout.flush()
                status, answer = 200, {"dry_run": True}
            else:
                try:
                    status, answer = self.post(body)
                except (urllib.error.URLError, OSError, ValueError) as error:
                    log(f"portal unreachable ({error}); {len(self.buffer)} samples buffered")
                    return False
            code = answer.get("code", "") if isinstance(answer, dict) else ""
            if status == 200 or (status == 409 and code == "replay"):
                for _ in batch:
                    self.buffer.popleft()
                self.health = self.burn = None
                if "spot_notice" in body:
                    self.notice_sent = True
            elif status in (401, 403) or (status == 409 and code == "not_live"):
                log(f"the portal refuses this instance ({status} {code}); stopping")
                self.stopped = True
                return True
            elif status == 400:
                # The portal will never take this batch; keep the rest moving.
                log(f"the portal rejected a heartbeat: {answer}")
                for _ in batch:
                    self.buffer.popleft()
                self.health = self.burn = None
            else:
                log(f"the portal answered {status}; {len(self.buffer)} samples buffered")
                return False
            if not self.buffer:
                return True

    def sample(self) -> None:
        """Buffer a sample; never two for the same second (the portal wants them in order)."""
        sample = take_sample()
        if self.last_at is not None and sample["at"] <= self.last_at:
            return
        self.last_at = sample["at"]
        self.buffer.append(sample)

    def check_spot(self) -> None:
        if self.notice is None and self.options.metadata_url:
            self.notice = spot_notice(self.options.metadata_url)
            if self.notice is not None:
                log(f"spot interruption notice: {self.notice}")

    def run(self) -> int:
        options = self.options
        self.health = health_report(options.python)
        self.sample()
        self.check_spot()
        self.flush()
        if options.burn_seconds > 0 and not self.stopped:
            self.burn = burn(options.python, options.burn_seconds, options.burn_size)
            if options.once:
                self.flush()
        if options.once or self.stopped:
            return 0
        next_sample = time.monotonic() + options.interval
        while not self.stopped:
            self.check_spot()
            if self.notice is not None and not self.notice_sent:
                self.flush()
            now = time.monotonic()
            if now >= next_sample:
                self.sample()
                next_sample = now + options.interval
                self.flush()
            time.sleep(max(0.0, min(options.spot_interval, next_sample - time.monotonic())))
        return 0


def options_from(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="GPU Portal agent")
    parser.add_argument("--config", help="JSON file with url, token, interval, burn_seconds")
    parser.add_argument("--url", help="the portal's heartbeat URL")
    parser.add_argument("--token", help="this instance's agent token")
    parser.add_argument("--interval", type=float, help="seconds between samples (default 60)")
    parser.add_argument("--burn-seconds", type=float, help="acceptance burn length, 0 for none")
    parser.add_argument("--burn-size", type=int, default=8192, help="matrix size for the burn")
    parser.add_argument("--buffer", type=int, default=1440, help="samples kept while offline")
    parser.add_argument("--batch", type=int, default=100, help="samples per heartbeat")
    parser.add_argument("--timeout", type=float, default=10, help="HTTP timeout in seconds")
    parser.add_argument("--python", help="the image's Python, for frameworks (python3)")
    parser.add_argument("--metadata-url", default="http://169.254.169.254")
    parser.add_argument("--spot-interval", type=float, default=5)
    parser.add_argument("--once", action="store_true", help="one sample (and burn), then exit")
    parser.add_argument("--dry-run", action="store_true", help="print, do not send")
    options = parser.parse_args(argv)
    config: dict = {}
    if options.config:
        with open(options.config) as handle:
            config = json.load(handle)
    options.url = options.url or config.get("url") or os.environ.get("GPU_PORTAL_URL", "")
    options.token = options.token or config.get("token") or os.environ.get("GPU_PORTAL_TOKEN", "")
    options.python = options.python or config.get("python") or "python3"
    if options.interval is None:
        options.interval = float(config.get("interval", 60))
    if options.burn_seconds is None:
        options.burn_seconds = float(config.get("burn_seconds", 0 if options.dry_run else 60))
    if not options.dry_run and not (options.url and options.token):
        parser.error("--url and --token (or --config) are needed unless --dry-run")
    return options


def main(argv: list[str] | None = None) -> int:
    return Agent(options_from(argv)).run()


if __name__ == "__main__":
    sys.exit(main())
