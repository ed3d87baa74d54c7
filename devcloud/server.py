"""A local EC2-compatible endpoint for the demo and the tests.

moto's server runs in a background thread on 127.0.0.1, wrapped in a small WSGI middleware
that can answer EC2 Query actions with injected errors (in EC2's own XML error format, so
boto3 raises exactly the ``ClientError`` it would raise against AWS), can refuse requests
signed with unknown access keys, and records every request it sees. A RunInstances
ClientToken is honoured as EC2 does (devcloud.tokens).

    cloud = start()                       # cloud.url == "http://127.0.0.1:<port>"
    cloud.inject(action="RunInstances", code="InsufficientInstanceCapacity", times=2)
    cloud.require_access_keys({"AKIDGOOD"})
    cloud.count("DescribeInstances")
    cloud.delay("RunInstances", 3)        # hold the next RunInstances 3 s before moto sees it
    cloud.delay("DescribeInstances", 3, when="after")  # answer computed now, sent 3 s later
    cloud.wait_until_held("RunInstances") # a test's step runs while that request is held
    cloud.hide_new_instances(40, clock=c) # eventual consistency: new instances missing from
                                          # describe for 40 s of ``clock`` after their launch
    cloud.reset()                         # no faults, any key, empty log, empty cloud
    cloud.stop()

Run in the foreground with ``python -m devcloud.server --port 5005``.

moto keeps its state in process-wide backends, so every LocalCloud in one process shares
the same cloud, and ``reset()`` empties it for all of them.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http import HTTPStatus
from typing import TYPE_CHECKING, Any
from xml.sax.saxutils import escape

from moto import settings as moto_settings
from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from werkzeug.serving import BaseWSGIServer, make_server

from devcloud.describe import fast_describe_instances, without_instances
from devcloud.query import access_key_id, signed_region
from devcloud.query import origin as request_origin
from devcloud.query import query_params as _params
from devcloud.tokens import MISMATCH_CODE, MISMATCH_MESSAGE, ClientTokens, TokenMismatch

if TYPE_CHECKING:
    from devcloud.machines import Machines

Environ = dict[str, Any]
StartResponse = Callable[..., Any]
WsgiApp = Callable[[Environ, StartResponse], Iterable[bytes]]

HOST = "127.0.0.1"
MOTO_API_PREFIX = "/moto-api/"

# HTTP statuses EC2 answers these codes with; anything else defaults to 400.
_STATUS_BY_CODE: dict[str, int] = {
    "AuthFailure": 401,
    "UnauthorizedOperation": 403,
    "OptInRequired": 403,
    "Blocked": 403,
    "InsufficientInstanceCapacity": 500,
    "InsufficientCapacity": 500,
    "InsufficientHostCapacity": 500,
    "InsufficientReservedInstanceCapacity": 500,
    "InternalError": 500,
    "RequestLimitExceeded": 503,
    "Unavailable": 503,
    "ServiceUnavailable": 503,
}
_AUTH_FAILURE_MESSAGE = "AWS was not able to validate the provided access credentials"


@dataclass(frozen=True)
class RecordedRequest:
    """One request the local cloud answered (moto-api calls are not recorded): besides
    the action and its answer, the address it came from and the names of its
    ``Filter.N.Name`` parameters, so a test with several client hosts can tell who
    described what (a sync's describe by the installation tag from a launch's look-up by
    its key)."""

    action: str
    access_key_id: str
    status: int
    faulted: bool
    client: str = ""
    filters: tuple[str, ...] = ()


@dataclass
class _Fault:
    action: str | None
    code: str
    message: str
    status: int
    remaining: int
    match: tuple[tuple[str, str], ...] = ()


@dataclass
class _Delay:
    action: str | None
    seconds: float
    when: str  # "before": moto sees the request late; "after": its answer is sent late
    remaining: int


@dataclass
class _Hiding:
    seconds: float
    clock: Callable[[], datetime]
    launched: dict[str, datetime] = field(default_factory=dict)
    # Instances the cloud has forgotten: id → describe answers left to miss it (-1: all).
    forgotten: dict[str, int] = field(default_factory=dict)


_INSTANCE_ID = re.compile(rb"<instanceId>(i-[0-9a-f]+)</instanceId>")


def _utcnow() -> datetime:
    return datetime.now(UTC)


def ec2_error_body(code: str, message: str) -> bytes:
    """An error answer in EC2's XML format."""
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Response><Errors><Error><Code>{escape(code)}</Code>"
        f"<Message>{escape(message)}</Message></Error></Errors>"
        f"<RequestID>{uuid.uuid4()}</RequestID></Response>"
    ).encode()


def _action(environ: Environ) -> str:
    """The EC2 Query ``Action`` of the request."""
    return _params(environ).get("Action", "")


class FaultInjector:
    """WSGI middleware in front of moto: access-key checks, injected faults, a request log.

    Thread-safe: the server thread answers requests while the test thread changes faults.
    """

    def __init__(self, app: WsgiApp) -> None:
        self._app = app
        self._lock = threading.Lock()
        self._faults: list[_Fault] = []
        self._allowed_keys: frozenset[str] | None = None
        self._log: list[RecordedRequest] = []
        self._delays: list[_Delay] = []
        self._held: dict[str, int] = {}
        self._held_changed = threading.Condition(self._lock)
        self._hiding: _Hiding | None = None
        self._fast_describe = False
        self._tokens = ClientTokens()

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        if environ.get("PATH_INFO", "").startswith(MOTO_API_PREFIX):
            return self._app(environ, start_response)
        params = _params(environ)
        action = params.get("Action", "")
        key_id = access_key_id(environ)
        origin = request_origin(environ, params)
        params["X-Region"] = signed_region(environ)
        delay = self._take_delay(action)
        if delay is not None and delay.when == "before":
            self._hold(action, delay.seconds)  # an injected error is answered late too
        tokened = action == "RunInstances" and bool(params.get("ClientToken"))
        with self._lock:
            if self._allowed_keys is not None and key_id not in self._allowed_keys:
                fault: _Fault | None = _Fault(action, "AuthFailure", _AUTH_FAILURE_MESSAGE, 401, 1)
            else:
                fault = self._take_fault(action, params)
        if (
            fault
            and tokened
            and fault.code != "AuthFailure"
            and self._tokens.refused(key_id, params)
        ):
            fault = _Fault(action, MISMATCH_CODE, MISMATCH_MESSAGE, 400, 1)
        if fault is not None:
            return self._error(
                action, key_id, fault.status, fault.code, fault.message, start_response, origin
            )

        statuses: list[int] = []
        answer: list[tuple[str, list[tuple[str, str]]]] = []

        def recording_start_response(status: str, headers: Any, *args: Any) -> Any:
            statuses.append(int(status.split(" ", 1)[0]))
            answer.append((status, list(headers)))
            return lambda data: None  # moto returns its body; it never writes

        fast = self._fast_describe and action == "DescribeInstances"
        if tokened:

            def launch() -> tuple[bytes, bool]:
                launched = b"".join(self._app(environ, recording_start_response))
                return launched, bool(statuses) and statuses[0] == 200

            try:
                body = self._tokens.run(key_id, params, launch)
            except TokenMismatch:
                return self._error(
                    action, key_id, 400, MISMATCH_CODE, MISMATCH_MESSAGE, start_response, origin
                )
            if not statuses:  # the first answer again, nothing launched
                statuses.append(200)
                answer.append(("200 OK", [("Content-Type", "text/xml;charset=UTF-8")]))
        else:
            body = (
                fast_describe_instances(params)
                if fast
                else b"".join(self._app(environ, recording_start_response))
            )
        if fast:
            statuses.append(200)
            answer.append(("200 OK", [("Content-Type", "text/xml;charset=UTF-8")]))
        if delay is not None and delay.when == "after":
            self._hold(action, delay.seconds)  # moto has answered: its snapshot is taken
        if self._hiding is not None and action in ("RunInstances", "DescribeInstances"):
            body = self._apply_hiding(action, body, statuses)
        status, headers = answer[0] if answer else ("500 Internal Server Error", [])
        headers = [(k, v) for k, v in headers if k.lower() != "content-length"]
        start_response(status, [*headers, ("Content-Length", str(len(body)))])
        self._record(action, key_id, statuses[0] if statuses else 0, faulted=False, origin=origin)
        return [body]

    def _error(self, action, key_id, status, code, message, start_response, origin) -> list[bytes]:
        self._record(action, key_id, status, faulted=True, origin=origin)
        body = ec2_error_body(code, message)
        reason = HTTPStatus(status).phrase if status in HTTPStatus._value2member_map_ else "Error"
        headers = [("Content-Type", "text/xml;charset=UTF-8"), ("Content-Length", str(len(body)))]
        start_response(f"{status} {reason}", headers)
        return [body]

    def _take_delay(self, action: str) -> _Delay | None:
        with self._lock:
            for delay in self._delays:
                if delay.remaining > 0 and delay.action in (None, action):
                    delay.remaining -= 1
                    return delay
        return None

    def _hold(self, action: str, seconds: float) -> None:
        with self._lock:
            self._held[action] = self._held.get(action, 0) + 1
            self._held_changed.notify_all()
        try:
            time.sleep(seconds)
        finally:
            with self._lock:
                self._held[action] -= 1
                self._held_changed.notify_all()

    def wait_until_held(self, action: str, timeout: float, count: int = 1) -> bool:
        with self._held_changed:
            return self._held_changed.wait_for(lambda: self._held.get(action, 0) >= count, timeout)

    def _apply_hiding(self, action: str, body: bytes, statuses: list[int]) -> bytes:
        hiding = self._hiding
        if hiding is None or not statuses or statuses[0] != 200:
            return body
        now = hiding.clock()
        if action == "RunInstances":
            with self._lock:
                for match in _INSTANCE_ID.finditer(body):
                    hiding.launched.setdefault(match.group(1).decode(), now)
            return body
        with self._lock:
            hidden = {
                instance_id
                for instance_id, at in hiding.launched.items()
                if (now - at).total_seconds() < hiding.seconds
            }
            for instance_id, left in list(hiding.forgotten.items()):
                if left != 0:
                    hidden.add(instance_id)
                    hiding.forgotten[instance_id] = left - 1 if left > 0 else left
        if not hidden:
            return body
        return without_instances(body, hidden)

    def _take_fault(self, action: str, params: dict[str, str]) -> _Fault | None:
        for fault in self._faults:
            if (
                fault.remaining > 0
                and fault.action in (None, action)
                and all(params.get(key, "") == value for key, value in fault.match)
            ):
                fault.remaining -= 1
                return fault
        return None

    def _record(
        self,
        action: str,
        key_id: str,
        status: int,
        *,
        faulted: bool,
        origin: tuple[str, tuple[str, ...]],
    ) -> None:
        client, filters = origin
        with self._lock:
            self._log.append(RecordedRequest(action, key_id, status, faulted, client, filters))

    def inject(self, fault: _Fault) -> None:
        with self._lock:
            self._faults.append(fault)

    def require_access_keys(self, keys: Iterable[str] | None) -> None:
        with self._lock:
            self._allowed_keys = None if keys is None else frozenset(keys)

    def delay(self, delay: _Delay) -> None:
        with self._lock:
            self._delays.append(delay)

    def set_fast_describe(self, on: bool) -> None:
        with self._lock:
            self._fast_describe = on

    def hide_new_instances(self, hiding: _Hiding | None) -> None:
        with self._lock:
            self._hiding = hiding

    def forget(self, external_ids: Iterable[str], times: int) -> None:
        with self._lock:
            if self._hiding is None:
                self._hiding = _Hiding(0, _utcnow)
            for external_id in external_ids:
                self._hiding.forgotten[external_id] = times

    def clear_faults(self) -> None:
        with self._lock:
            self._faults.clear()
            self._delays.clear()
            self._allowed_keys = None
            self._hiding = None

    def requests(self, action: str | None) -> list[RecordedRequest]:
        with self._lock:
            return [r for r in self._log if action is None or r.action == action]

    def clear_requests(self) -> None:
        with self._lock:
            self._log.clear()

    def forget_client_tokens(self) -> None:
        self._tokens.clear()


class _QuietRequestHandler(MotoRequestHandler):
    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        pass


class LocalCloud:
    """A running local EC2-compatible endpoint. Create it with ``start()``."""

    def __init__(self, server: BaseWSGIServer, injector: FaultInjector) -> None:
        self._server = server
        self._injector = injector
        self._thread = threading.Thread(target=server.serve_forever, name="localcloud", daemon=True)
        self._thread.start()
        self.host: str = server.server_address[0]
        self.port: int = server.server_port
        self.url: str = f"http://{self.host}:{self.port}"

    def __repr__(self) -> str:
        return f"LocalCloud(url={self.url!r})"

    def __enter__(self) -> LocalCloud:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def inject(
        self,
        action: str | None,
        code: str,
        message: str = "",
        *,
        times: int = 1,
        status: int | None = None,
        where: dict[str, str] | None = None,
    ) -> None:
        """Answer the next ``times`` requests for EC2 ``action`` (``None``: any action)
        with error ``code``. ``status`` defaults to the HTTP status EC2 uses for that code
        (500 for capacity errors, 503 for throttling, 401 for AuthFailure, else 400).
        ``where`` limits the fault to requests carrying these Query parameters, e.g.
        ``{"InstanceType": "p4de.24xlarge", "Placement.AvailabilityZone": "us-east-1a"}``
        for no capacity of one type in one zone (``"X-Region"`` names the signed region).
        Faults are used in the order they were injected."""
        self._injector.inject(
            _Fault(
                action=action,
                code=code,
                message=message or f"Injected {code} by the local cloud.",
                status=status if status is not None else _STATUS_BY_CODE.get(code, 400),
                remaining=times,
                match=tuple(sorted((where or {}).items())),
            )
        )

    def delay(
        self, action: str | None, seconds: float, *, times: int = 1, when: str = "before"
    ) -> None:
        """Hold the next ``times`` requests for ``action`` (``None``: any) ``seconds``.

        ``when="before"``: moto sees the request only after the wait (a RunInstances held
        so creates its instance late); ``"after"``: moto answers at once (a describe's
        snapshot is taken then) and the answer is sent after the wait."""
        if when not in ("before", "after"):
            raise ValueError("when is 'before' or 'after'")
        self._injector.delay(_Delay(action, seconds, when, times))

    def wait_until_held(self, action: str, timeout: float = 10, *, count: int = 1) -> bool:
        """Block until ``count`` requests for ``action`` are being held by ``delay`` at
        once; False on timeout. Lets a test run a step while the others wait for the
        cloud (``count``: every one of several workers' requests)."""
        return self._injector.wait_until_held(action, timeout, count)

    def hide_new_instances(
        self, seconds: float, *, clock: Callable[[], datetime] | None = None
    ) -> None:
        """Eventual consistency: an instance launched from now on is missing from every
        DescribeInstances answer until ``seconds`` have passed on ``clock`` (aware UTC
        datetimes; the wall clock by default) since its RunInstances was answered."""
        self._injector.hide_new_instances(_Hiding(seconds, clock or _utcnow))

    def forget(self, external_ids: Iterable[str], *, times: int | None = None) -> None:
        """Leave these instances out of the next ``times`` DescribeInstances answers
        (``None``: all of them), whatever their state: as EC2 does some time after a
        termination, or for a while after a launch."""
        self._injector.forget(external_ids, -1 if times is None else times)

    def fast_describe(self, on: bool = True) -> None:
        """Answer DescribeInstances from moto's state directly (``fast_describe_instances``)
        rather than through moto's much slower full answer."""
        self._injector.set_fast_describe(on)

    def require_access_keys(self, keys: Iterable[str] | None) -> None:
        """Answer 401 AuthFailure to requests signed with any access key id not in
        ``keys``; ``None`` accepts every key (the default)."""
        self._injector.require_access_keys(keys)

    def clear_faults(self) -> None:
        """Drop every injected fault, delay and hiding, and accept every access key."""
        self._injector.clear_faults()

    def requests(self, action: str | None = None) -> list[RecordedRequest]:
        """The requests answered so far (all, or those for one EC2 action), oldest first."""
        return self._injector.requests(action)

    def count(self, action: str) -> int:
        """How many requests for EC2 ``action`` were answered (faulted ones included)."""
        return len(self._injector.requests(action))

    def clear_requests(self) -> None:
        """Empty the request log."""
        self._injector.clear_requests()

    def reset(self) -> None:
        """Clear faults, access-key checks and the request log, and empty moto's state
        (every instance, volume, tag, … is gone)."""
        self.clear_faults()
        self._injector.forget_client_tokens()
        request = urllib.request.Request(f"{self.url}{MOTO_API_PREFIX}reset", method="POST")
        with urllib.request.urlopen(request, timeout=30) as response:
            response.read()
        self.clear_requests()

    def stop(self) -> None:
        """Stop serving and release the port. Idempotent."""
        if self._thread.is_alive():
            self._server.shutdown()
            self._thread.join(timeout=10)
        self._server.server_close()


def _accept_any_instance_type_and_image() -> None:
    # moto can refuse instance types and AMIs it does not know (p5e, g6e, made-up AMI ids);
    # the local cloud must accept whatever the portal's offerings and images name.
    moto_settings.EC2_ENABLE_INSTANCE_TYPE_VALIDATION = False
    moto_settings.ENABLE_AMI_VALIDATION = False
    moto_settings.ENABLE_KEYPAIR_VALIDATION = False
    # moto's ~1 s load of its public AMI catalogue on every reset is not needed: the portal
    # names its own AMI ids. An explicit setting in the environment wins.
    os.environ.setdefault("MOTO_EC2_LOAD_DEFAULT_AMIS", "false")


def start(
    port: int | None = None,
    *,
    verbose: bool = False,
    machines: Machines | None = None,
    host: str = HOST,
) -> LocalCloud:
    """Start a local cloud on 127.0.0.1 and return once it accepts connections.

    ``port`` None or 0 picks a free port. ``verbose`` logs every request to stderr.
    ``machines`` (the demo's): run the agent of every instance launched (devcloud.machines).
    ``host``: another address to listen on (a test's bridge to network namespaces, which
    cannot reach 127.0.0.1). Every local cloud of one process shares moto's state."""
    _accept_any_instance_type_and_image()
    injector = FaultInjector(DomainDispatcherApplication(create_backend_app))
    server = make_server(
        host,
        port or 0,
        machines.middleware(injector) if machines else injector,
        threaded=True,
        request_handler=MotoRequestHandler if verbose else _QuietRequestHandler,
    )
    return LocalCloud(server, injector)


@dataclass(frozen=True)
class _Args:
    port: int
    verbose: bool
    fast_describe: bool = False


def _parse_args(argv: list[str] | None) -> _Args:
    parser = argparse.ArgumentParser(
        prog="python -m devcloud.server", description="A local EC2-compatible endpoint."
    )
    parser.add_argument("--port", type=int, default=5005, help="0 picks a free port")
    parser.add_argument("--verbose", action="store_true", help="log every request")
    parser.add_argument(
        "--fast-describe", action="store_true", help="answer DescribeInstances from moto's state"
    )
    args = parser.parse_args(argv)
    return _Args(port=args.port, verbose=args.verbose, fast_describe=args.fast_describe)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    """Serve in the foreground until Ctrl-C."""
    args = _parse_args(argv)
    # Stop cleanly on Ctrl-C and on SIGTERM, even when started with SIGINT ignored.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _interrupt)
    cloud = start(args.port, verbose=args.verbose)
    cloud.fast_describe(args.fast_describe)
    print(cloud.url, flush=True)  # noqa: T201 - the command's output is the URL
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        cloud.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
