"""``nvidia-smi`` of a demo own server (devcloud/own_servers.py): reports the GPUs in the
server's ``gpus.json``, idle, with no process on any.

Standard library only, run as ``own_server_smi.py GPUS_JSON [nvidia-smi's arguments]`` by
the small ``nvidia-smi`` script each demo server has. It answers what the host program
(rental/providers/ssh_host.py) asks: ``--query-gpu=...`` and ``--query-compute-apps=...``
with ``--format=csv,noheader,nounits``, ``-i`` to pick GPUs by index, and the banner.
"""

from __future__ import annotations

import json
import sys

DRIVER = "550.127.05"
CUDA = "12.4"


def answer(gpus: list[dict], args: list[str]) -> int:
    picked = None
    for position, arg in enumerate(args):
        if arg in ("-i", "--id") and position + 1 < len(args):
            picked = {int(index) for index in args[position + 1].split(",")}
        elif arg.startswith("--id="):
            picked = {int(index) for index in arg.split("=", 1)[1].split(",")}
    shown = [gpu for gpu in gpus if picked is None or gpu["index"] in picked]
    for arg in args:
        if arg.startswith("--query-compute-apps="):
            return 0  # no process on any GPU
        if arg.startswith("--query-gpu="):
            fields = arg.split("=", 1)[1].split(",")
            for gpu in shown:
                values = {
                    "index": gpu["index"],
                    "name": gpu["name"],
                    "uuid": gpu["uuid"],
                    "memory.total": gpu["memory_mib"],
                    "memory.used": 0,
                    "utilization.gpu": 0,
                    "driver_version": DRIVER,
                }
                unknown = [field for field in fields if field not in values]
                if unknown:
                    sys.stdout.write(f'Field "{unknown[0]}" is not a valid field to query.\n')
                    return 2
                sys.stdout.write(", ".join(str(values[field]) for field in fields) + "\n")
            return 0
    sys.stdout.write(f"| NVIDIA-SMI {DRIVER}   Driver Version: {DRIVER}   CUDA Version: {CUDA} |\n")
    return 0


def main(argv: list[str]) -> int:
    with open(argv[0]) as source:
        gpus = json.load(source)
    return answer(gpus, argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
