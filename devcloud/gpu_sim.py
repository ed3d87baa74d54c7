"""The simulated GPUs of a demo machine (devcloud.machines): answers as ``nvidia-smi`` and as
the image's ``python`` would, for the real agent program.

Standard library only, and run as a script (``gpu_sim.py nvidia-smi --query-gpu=…`` or
``gpu_sim.py python -c CODE …``) once per reading, so it starts fast. What the machine has
(GPU name, count, memory, rated TFLOPS), what it runs (``training`` or ``notebook``) and
when it booted are in the JSON file named by ``DEVCLOUD_MACHINE``. Readings are a pure
function of the time since boot and the machine's id, so they rise and fall smoothly:

- ``training``: warms up over a minute, then 40–98 % in slow waves, with a short dip every
  ten minutes (an evaluation pass); never idle.
- ``notebook``: cells run for the first two minutes, then the kernel sits idle (0–2 %,
  its memory still held) until the lease ends: the idle warning and reaping of L6.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sys
import time

DRIVER = "550.127.05"
CUDA = "12.4"
NOTEBOOK_BUSY_SECONDS = 120


def say(line: str) -> None:
    """One line of output, as the real program prints it."""
    sys.stdout.write(line + "\n")


def noise(seed: str, gpu: int, step: int) -> float:
    """A stable pseudo-random number in [-1, 1) for this machine, GPU and 10-s step."""
    digest = hashlib.sha256(f"{seed}:{gpu}:{step}".encode()).digest()
    return int.from_bytes(digest[:4], "big") / 2**31 - 1


def utilization(machine: dict, gpu: int, seconds: float) -> float:
    """Percent busy of one GPU ``seconds`` after boot."""
    jitter = noise(machine["id"], gpu, int(seconds // 10))
    if machine["workload"] == "notebook":
        if seconds < NOTEBOOK_BUSY_SECONDS:
            return round(max(0.0, min(100.0, 60 + 25 * jitter)), 1)
        return round(1 + jitter, 1)  # 0–2 %: under any idle threshold
    wave = 69 + 24 * math.sin(2 * math.pi * seconds / 420 + gpu * 0.8)
    if seconds % 600 > 540:  # the evaluation pass at the end of every ten minutes
        wave = 42
    value = wave + 5 * jitter
    if seconds < 60:  # warming up: data loading, the first steps
        value = 10 + value * seconds / 60
    return round(max(0.0, min(99.0, value)), 1)


def reading(machine: dict, gpu: int, seconds: float) -> dict:
    """One GPU as ``nvidia-smi --query-gpu`` reports it."""
    busy = utilization(machine, gpu, seconds)
    total = machine["memory_mb"]
    if machine["workload"] == "notebook":
        used = total * (0.45 if seconds < NOTEBOOK_BUSY_SECONDS else 0.31)
    else:
        used = total * min(0.86, 0.08 + 0.78 * seconds / 60) if seconds < 60 else total * 0.86
    return {
        "index": gpu,
        "name": machine["gpu_name"],
        "utilization.gpu": busy,
        "memory.used": round(used),
        "memory.total": total,
        "temperature.gpu": round(33 + busy * 0.47),
        "power.draw": round(machine["idle_watts"] + busy * machine["watts_per_percent"], 2),
        "ecc.errors.uncorrected.volatile.total": 0,
        "clocks_throttle_reasons.active": "0x0000000000000000",
        "clocks_event_reasons.active": "0x0000000000000000",
        "driver_version": DRIVER,
    }


def nvidia_smi(machine: dict, args: list[str], now: float) -> int:
    query = next((a.split("=", 1)[1] for a in args if a.startswith("--query-gpu=")), None)
    if query is None:
        say(f"| NVIDIA-SMI {DRIVER}   Driver Version: {DRIVER}   CUDA Version: {CUDA} |")
        return 0
    fields = query.split(",")
    seconds = max(0.0, now - machine["booted_at"])
    for gpu in range(machine["gpus"]):
        values = reading(machine, gpu, seconds)
        unknown = [f for f in fields if f not in values]
        if unknown:
            say(f'Field "{unknown[0]}" is not a valid field to query.')
            return 2
        say(", ".join(str(values[f]) for f in fields))
    return 0


def python(machine: dict, args: list[str]) -> int:
    """The image's Python as the agent uses it: the framework probe sees none (the
    simulated image runs no real framework), the acceptance burn reports 80-85 % of the
    rated bf16 TFLOPS at once."""
    code = args[1] if len(args) > 1 and args[0] == "-c" else ""
    if "torch.randn" in code:
        seconds = float(args[2]) if len(args) > 2 else 60.0
        rated = machine["rated_tflops"]
        tflops = [
            round(rated * (0.825 + 0.025 * noise(machine["id"], gpu, 0)), 1)
            for gpu in range(machine["gpus"])
        ]
        say(json.dumps({"tflops": tflops, "dtype": "bfloat16", "seconds": seconds}))
    else:
        say("{}")
    return 0


def main(argv: list[str]) -> int:
    with open(os.environ["DEVCLOUD_MACHINE"]) as handle:
        machine = json.load(handle)
    role, args = argv[0], argv[1:]
    if role == "nvidia-smi":
        return nvidia_smi(machine, args, time.time())
    return python(machine, args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
