#!/usr/bin/python3
"""A stand-in for ``nvidia-smi`` on the own-server test hosts (tests/own_hosts.py).

Standard library only: it runs under the system's python3 as root or as a lease's account.
What it reports is ``gpus.json`` beside it, which the test changes at will:

    {"driver": "550.54.15", "cuda": "12.4",
     "gpus": [{"index": 0, "name": "NVIDIA GeForce RTX 4090", "memory_mib": 24564,
               "uuid": "GPU-...", "utilization": 0, "memory_used_mib": 0}, ...],
     "processes": [{"gpu_uuid": "GPU-...", "pid": 1234}, ...]}

It answers what the portal's driver and agent ask: ``--query-gpu=...`` and
``--query-compute-apps=...`` with ``--format=csv,noheader,nounits``, ``-i``/``--id`` to
pick GPUs by index, and the banner (no arguments) with the CUDA version.
"""

import json
import sys
from pathlib import Path

DATA = Path(__file__).resolve().parent / "gpus.json"


def gpu_field(gpu: dict, field: str, data: dict) -> str:
    values = {
        "index": gpu["index"],
        "name": gpu["name"],
        "uuid": gpu["uuid"],
        "memory.total": gpu["memory_mib"],
        "memory.used": gpu.get("memory_used_mib", 0),
        "utilization.gpu": gpu.get("utilization", 0),
        "temperature.gpu": 40,
        "power.draw": 60.5,
        "ecc.errors.uncorrected.volatile.total": 0,
        "clocks_throttle_reasons.active": "0x0000000000000000",
        "clocks_event_reasons.active": "0x0000000000000000",
        "driver_version": data.get("driver", "550.54.15"),
        "pci.bus_id": f"00000000:{gpu['index'] + 1:02X}:00.0",
    }
    return str(values.get(field, "[N/A]"))


def main(argv: list[str]) -> int:
    data = json.loads(DATA.read_text())
    gpus = data.get("gpus", [])
    options: dict[str, str] = {}
    args = list(argv)
    while args:
        arg = args.pop(0)
        if arg in ("-i", "--id"):
            options["id"] = args.pop(0)
        elif arg.startswith("--") and "=" in arg:
            name, value = arg[2:].split("=", 1)
            options[name] = value
        else:
            sys.stderr.write(f"fake nvidia-smi: unknown argument {arg}\n")
            return 2
    if "id" in options:
        wanted = {int(index) for index in options["id"].split(",")}
        unknown = wanted - {gpu["index"] for gpu in gpus}
        if unknown:
            sys.stdout.write(f"No devices were found with id {sorted(unknown)[0]}\n")
            return 6
        gpus = [gpu for gpu in gpus if gpu["index"] in wanted]
    if "query-gpu" in options:
        fields = options["query-gpu"].split(",")
        for gpu in gpus:
            sys.stdout.write(", ".join(gpu_field(gpu, field, data) for field in fields) + "\n")
        return 0
    if "query-compute-apps" in options:
        fields = options["query-compute-apps"].split(",")
        uuids = {gpu["uuid"] for gpu in gpus}
        for process in data.get("processes", []):
            if process["gpu_uuid"] in uuids:
                row = {"gpu_uuid": process["gpu_uuid"], "pid": process["pid"]}
                sys.stdout.write(", ".join(str(row.get(f, "[N/A]")) for f in fields) + "\n")
        return 0
    if not gpus:
        sys.stdout.write("No devices were found\n")
        return 6
    sys.stdout.write(
        f"| NVIDIA-SMI {data.get('driver', '550.54.15')}    "
        f"Driver Version: {data.get('driver', '550.54.15')}    "
        f"CUDA Version: {data.get('cuda', '12.4')}     |\n"
    )
    for gpu in gpus:
        sys.stdout.write(f"|   {gpu['index']}  {gpu['name']}  {gpu['memory_mib']}MiB |\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
