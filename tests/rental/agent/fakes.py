"""What the agent talks to in tests: a fake ``nvidia-smi`` and ``python`` on the PATH, a
fake instance-metadata service, and a gate in front of the portal that can be down."""

import json
import os
import stat
import sys
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

FAKE_SMI = r"""#!PYTHON
import json, os, sys
state = json.load(open(os.environ["FAKE_SMI_STATE"]))
if state.get("mode") == "fail":
    sys.stderr.write("NVIDIA-SMI has failed because it couldn't communicate with the driver\n")
    sys.exit(9)
query = [a for a in sys.argv[1:] if a.startswith("--query-gpu=")]
if query and state.get("event_reasons") and "clocks_throttle_reasons" in query[0]:
    print('Field "clocks_throttle_reasons.active" is not a valid field to query.')
    sys.exit(2)
if not query:
    print("| NVIDIA-SMI %s   Driver Version: %s   CUDA Version: %s |"
          % (state["driver"], state["driver"], state["cuda"]))
    sys.exit(0)
if state.get("mode") == "garbage":
    print("0, NVIDIA A100-SXM4-80GB, lots, 1024")
    sys.exit(0)
for i, gpu in enumerate(state["gpus"]):
    print(", ".join(str(v) for v in (
        i, gpu["name"], gpu.get("util", 0), gpu.get("mem", 1024), 81920, 41, "71.25",
        gpu.get("ecc", 0), "0x0000000000000000", state["driver"])))
"""

FAKE_PYTHON = r"""#!PYTHON
import json, os, sys
code = sys.argv[2] if len(sys.argv) > 2 else ""
if "import paddle" in code:
    print(os.environ.get("FAKE_PROBE", "{}"))
elif "torch.randn" in code:
    print(os.environ.get("FAKE_BURN", '{"skipped": "PyTorch is not installed"}'))
"""


class FakeMachine:
    """A bin directory with nvidia-smi and python whose answers a test sets."""

    def __init__(self, root: Path) -> None:
        self.bin = root / "bin"
        self.bin.mkdir()
        self.state_file = root / "smi.json"
        for name, text in (("nvidia-smi", FAKE_SMI), ("python", FAKE_PYTHON)):
            path = self.bin / name
            path.write_text(text.replace("PYTHON", sys.executable, 1))
            path.chmod(path.stat().st_mode | stat.S_IEXEC)
        self.probe: dict = {"torch": {"installed": True, "cuda": True, "version": "2.5.1"}}
        self.burn: dict | None = None
        self.set(gpus=[{"name": "NVIDIA A100-SXM4-80GB", "util": 0}])

    def set(
        self, *, gpus=None, mode="ok", driver="550.54.15", cuda="12.4", event_reasons=False
    ) -> None:
        state = {
            "mode": mode,
            "driver": driver,
            "cuda": cuda,
            "gpus": gpus or [],
            "event_reasons": event_reasons,
        }
        self.state_file.write_text(json.dumps(state))

    def env(self) -> dict:
        env = {
            **os.environ,
            "PATH": f"{self.bin}{os.pathsep}{os.environ['PATH']}",
            "FAKE_SMI_STATE": str(self.state_file),
            "FAKE_PROBE": json.dumps(self.probe),
        }
        if self.burn is not None:
            env["FAKE_BURN"] = json.dumps(self.burn)
        return env

    @property
    def python(self) -> str:
        return str(self.bin / "python")


class _Server:
    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.owner = self  # type: ignore[attr-defined]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}"

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class _Quiet(BaseHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


class _MetadataHandler(_Quiet):
    def do_PUT(self) -> None:
        self._answer(200, b"metadata-token")

    def do_GET(self) -> None:
        owner = self.server.owner
        if self.headers.get("X-aws-ec2-metadata-token") != "metadata-token":
            return self._answer(401, b"")
        if self.path == "/latest/meta-data/spot/instance-action" and owner.notice:
            return self._answer(200, json.dumps(owner.notice).encode())
        return self._answer(404, b"Not Found")

    def _answer(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class Metadata(_Server):
    """IMDSv2: PUT a token, then GET spot/instance-action (404 until there is a notice)."""

    def __init__(self) -> None:
        self.notice: dict | None = None
        super().__init__(_MetadataHandler)


class _GateHandler(_Quiet):
    def do_POST(self) -> None:
        owner = self.server.owner
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if owner.down:
            owner.refused += 1
            self.close_connection = True  # the portal is unreachable: no answer at all
            return
        owner.forwarded.append(len(json.loads(body).get("samples", [])))
        request = urllib.request.Request(
            owner.target, data=body, method="POST", headers=dict(self.headers)
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                status, data = answer.status, answer.read()
        except urllib.error.HTTPError as error:
            status, data = error.code, error.read()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class Gate(_Server):
    """In front of the portal: while ``down`` it drops every connection unanswered."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.down = False
        self.refused = 0
        self.forwarded: list[int] = []
        super().__init__(_GateHandler)
