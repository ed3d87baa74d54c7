"""A local Alibaba Cloud ECS endpoint for the tests: the subset of the ECS RPC API the
Alibaba driver uses (devcloud.alibaba_ecs), over HTTP on 127.0.0.1.

It speaks the protocol as ECS does: parameters in the query string or a form body,
``Action`` and ``Version`` 2014-05-26 (or the ``x-acs-action``/``x-acs-version`` headers of
the V3 signature), every request's signature recomputed with its access key's secret
(devcloud.alibaba_sign), JSON answers carrying ``RequestId``, and errors as
``{"RequestId", "HostId", "Code", "Message"}`` with ECS's HTTP statuses. Faults are
injected as on the local EC2 endpoint (devcloud.server):

    cloud = start(secrets={"LTAIgood": "secret"})   # cloud.url == "http://127.0.0.1:<port>"
    cloud.inject("RunInstances", "OperationDenied.NoStock", where={"ZoneId": "cn-hangzhou-h"})
    cloud.inject("DescribeInstances", "Throttling.User", times=2)
    cloud.delay("RunInstances", 3)              # hold the next RunInstances 3 s
    cloud.lose_answer("RunInstances")           # do it, then answer 500 (a lost answer)
    cloud.hide_new_instances(True)              # new instances missing from describes
    cloud.count("RunInstances"); cloud.reset(); cloud.stop()
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qsl

from werkzeug.serving import BaseWSGIServer, WSGIRequestHandler, make_server

from devcloud.alibaba_ecs import EcsError, EcsState, SecurityGroup, VSwitch
from devcloud.alibaba_sign import SignedRequest, access_key_of, verify

Environ = dict[str, Any]
StartResponse = Callable[..., Any]

HOST = "127.0.0.1"
API_VERSION = "2014-05-26"
# HTTP statuses ECS answers these codes with; anything else defaults to 400.
STATUS_BY_CODE: dict[str, int] = {
    "OperationDenied.NoStock": 403,
    "Zone.NotOnSale": 403,
    "InvalidInstanceType.NotSupported": 403,
    "InvalidResourceType.NotSupported": 403,
    "QuotaExceeded.Instance": 403,
    "QuotaExceeded.PostPaidGpuCores": 403,
    "Forbidden.RAM": 403,
    "InvalidAccessKeyId.NotFound": 404,
    "Throttling": 400,
    "Throttling.User": 400,
    "InternalError": 500,
    "ServiceUnavailable": 503,
}
_MESSAGES = {
    "MissingAccessKeyId": "AccessKeyId is mandatory for this action.",
    "InvalidAccessKeyId.NotFound": "Specified access key is not found.",
    "SignatureDoesNotMatch": "Specified signature is not matched with our calculation.",
}


@dataclass(frozen=True)
class RecordedRequest:
    """One request the endpoint answered: its action, key, HTTP status, whether an
    injected fault answered it, and its parameters (the signature's own left out)."""

    action: str
    access_key_id: str
    status: int
    faulted: bool
    params: tuple[tuple[str, str], ...]

    def param(self, name: str) -> str:
        return dict(self.params).get(name, "")


@dataclass
class _Fault:
    action: str | None
    code: str
    message: str
    status: int
    remaining: int
    match: tuple[tuple[str, str], ...]
    after: bool = False  # do the action, then answer the error (a lost answer)


@dataclass
class _Delay:
    action: str | None
    seconds: float
    remaining: int


class EcsEndpoint:
    """The WSGI application: signature check, injected faults and delays, the request
    log, then the ECS action. Thread-safe."""

    def __init__(self, secrets: dict[str, str], state: EcsState) -> None:
        self.secrets = dict(secrets)
        self.state = state
        self.hide_new = False
        self.hidden: set[str] = set()
        self._lock = threading.Lock()
        self._faults: list[_Fault] = []
        self._delays: list[_Delay] = []
        self._log: list[RecordedRequest] = []

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        request = _signed_request(environ)
        params = dict([*request.query, *request.form])
        action = params.get("Action") or request.headers.get("x-acs-action", "")
        params["Action"] = action
        key_id = access_key_of(request)
        delay = self._take(self._delays, action, params)
        if delay is not None:
            time.sleep(delay.seconds)
        version = params.get("Version") or request.headers.get("x-acs-version", "")
        verdict = verify(request, self.secrets)
        fault: _Fault | None = None
        if verdict.problem:
            code = verdict.problem
            fault = _Fault(action, code, _MESSAGES[code], STATUS_BY_CODE.get(code, 400), 1, ())
        elif version != API_VERSION:
            fault = _Fault(
                action, "InvalidVersion", "Specified parameter Version is not valid.", 400, 1, ()
            )
        else:
            fault = self._take(self._faults, action, params)
        if fault is not None and not fault.after:
            return self._error(start_response, action, key_id, params, fault, faulted=True)
        try:
            answer = self.state.answer(action, params, key_id)
        except EcsError as error:
            refusal = _Fault(action, error.code, error.message, error.status, 1, ())
            return self._error(start_response, action, key_id, params, refusal, faulted=False)
        answer = self._hide(action, answer)
        if fault is not None:  # done, but the answer is lost
            return self._error(start_response, action, key_id, params, fault, faulted=True)
        body = json.dumps({"RequestId": str(uuid.uuid4()).upper(), **answer}).encode()
        self._record(action, key_id, 200, False, params)
        start_response("200 OK", _headers(body))
        return [body]

    def _hide(self, action: str, answer: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            if action == "RunInstances" and self.hide_new:
                self.hidden.update(answer["InstanceIdSets"]["InstanceIdSet"])
            if action != "DescribeInstances" or not self.hidden:
                return answer
            shown = [
                row
                for row in answer["Instances"]["Instance"]
                if row["InstanceId"] not in self.hidden
            ]
        return {**answer, "Instances": {"Instance": shown}, "TotalCount": len(shown)}

    def _error(self, start_response, action, key_id, params, fault: _Fault, *, faulted: bool):
        body = json.dumps(
            {
                "RequestId": str(uuid.uuid4()).upper(),
                "HostId": "ecs.local",
                "Code": fault.code,
                "Message": fault.message,
            }
        ).encode()
        self._record(action, key_id, fault.status, faulted, params)
        phrase = (
            HTTPStatus(fault.status).phrase
            if fault.status in HTTPStatus._value2member_map_
            else "Error"
        )
        start_response(f"{fault.status} {phrase}", _headers(body))
        return [body]

    def _take(self, entries: list[Any], action: str, params: dict[str, str]) -> Any:
        with self._lock:
            for entry in entries:
                if (
                    entry.remaining > 0
                    and entry.action in (None, action)
                    and all(params.get(k, "") == v for k, v in getattr(entry, "match", ()))
                ):
                    entry.remaining -= 1
                    return entry
        return None

    def _record(self, action, key_id, status, faulted, params: dict[str, str]) -> None:
        kept = tuple(sorted((k, v) for k, v in params.items() if k != "Signature"))
        with self._lock:
            self._log.append(RecordedRequest(action, key_id, status, faulted, kept))

    def add_fault(self, fault: _Fault) -> None:
        with self._lock:
            self._faults.append(fault)

    def add_delay(self, delay: _Delay) -> None:
        with self._lock:
            self._delays.append(delay)

    def requests(self, action: str | None) -> list[RecordedRequest]:
        with self._lock:
            return [r for r in self._log if action is None or r.action == action]

    def clear(self) -> None:
        with self._lock:
            self._faults.clear()
            self._delays.clear()
            self._log.clear()
            self.hide_new = False
            self.hidden.clear()


def _headers(body: bytes) -> list[tuple[str, str]]:
    return [("Content-Type", "application/json;charset=utf-8"), ("Content-Length", str(len(body)))]


def _signed_request(environ: Environ) -> SignedRequest:
    length = int(environ.get("CONTENT_LENGTH") or 0)
    body = environ["wsgi.input"].read(length) if length > 0 else b""
    headers = {
        key[5:].replace("_", "-").lower(): value
        for key, value in environ.items()
        if key.startswith("HTTP_")
    }
    if environ.get("CONTENT_TYPE"):
        headers["content-type"] = environ["CONTENT_TYPE"]
    form: list[tuple[str, str]] = []
    if "x-www-form-urlencoded" in headers.get("content-type", ""):
        form = parse_qsl(body.decode("utf-8", errors="replace"), keep_blank_values=True)
    return SignedRequest(
        method=environ.get("REQUEST_METHOD", "GET"),
        path=environ.get("PATH_INFO", "/"),
        query=parse_qsl(environ.get("QUERY_STRING", ""), keep_blank_values=True),
        form=form,
        headers=headers,
        body=body,
    )


class _QuietHandler(WSGIRequestHandler):
    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        pass


class LocalEcs:
    """A running local ECS endpoint. Create it with ``start()``."""

    def __init__(self, server: BaseWSGIServer, endpoint: EcsEndpoint) -> None:
        self._server = server
        self._endpoint = endpoint
        self._thread = threading.Thread(target=server.serve_forever, name="localecs", daemon=True)
        self._thread.start()
        self.host: str = server.server_address[0]
        self.port: int = server.server_port
        self.url: str = f"http://{self.host}:{self.port}"

    def __repr__(self) -> str:
        return f"LocalEcs(url={self.url!r})"

    @property
    def state(self) -> EcsState:
        """The cloud's instances, for a test to look at directly."""
        return self._endpoint.state

    def set_secrets(self, secrets: dict[str, str]) -> None:
        """The access keys the endpoint accepts, each with its secret."""
        self._endpoint.secrets = dict(secrets)

    def set_network(
        self,
        *,
        security_groups: list[SecurityGroup],
        vswitches: list[VSwitch],
        vpc_only: bool = True,
    ) -> None:
        """The security groups and vSwitches the cloud knows, and whether every launch
        must name one of each (``vpc_only``, ECS's rule for accounts of today)."""
        self._endpoint.state.set_network(
            security_groups=security_groups, vswitches=vswitches, vpc_only=vpc_only
        )

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
        """Answer the next ``times`` requests for ``action`` (``None``: any) with error
        ``code``; ``status`` defaults to ECS's for that code (403 for no stock and quota,
        500/503 for server errors, else 400). ``where`` limits the fault to requests
        carrying these parameters, e.g. ``{"ZoneId": "cn-hangzhou-h"}``."""
        self._endpoint.add_fault(
            _Fault(
                action,
                code,
                message or f"Injected {code} by the local ECS endpoint.",
                status if status is not None else STATUS_BY_CODE.get(code, 400),
                times,
                tuple(sorted((where or {}).items())),
            )
        )

    def lose_answer(self, action: str, *, times: int = 1) -> None:
        """Carry out the next ``times`` requests for ``action``, then answer each with a
        500 InternalError, as if the answer was lost on its way back."""
        self._endpoint.add_fault(
            _Fault(action, "InternalError", "The answer was lost.", 500, times, (), after=True)
        )

    def delay(self, action: str | None, seconds: float, *, times: int = 1) -> None:
        """Hold the next ``times`` requests for ``action`` ``seconds`` before answering."""
        self._endpoint.add_delay(_Delay(action, seconds, times))

    def hide_new_instances(self, on: bool = True) -> None:
        """Eventual consistency: instances launched while on are missing from every
        DescribeInstances answer until ``reset()`` or ``hide_new_instances(False)``."""
        self._endpoint.hide_new = on
        if not on:
            self._endpoint.hidden.clear()

    def requests(self, action: str | None = None) -> list[RecordedRequest]:
        """The requests answered so far (all, or those for one action), oldest first."""
        return self._endpoint.requests(action)

    def count(self, action: str) -> int:
        """How many requests for ``action`` were answered (faulted ones included)."""
        return len(self.requests(action))

    def reset(self) -> None:
        """No instances, ClientTokens, faults, delays or log."""
        self._endpoint.clear()
        self._endpoint.state.reset()

    def stop(self) -> None:
        """Stop serving and release the port. Idempotent."""
        if self._thread.is_alive():
            self._server.shutdown()
            self._thread.join(timeout=10)
        self._server.server_close()


def start(
    secrets: dict[str, str], *, port: int = 0, boot_s: float = 0.5, stop_s: float = 0.5
) -> LocalEcs:
    """Start a local ECS endpoint on 127.0.0.1 (``port`` 0: a free one) accepting the
    access keys of ``secrets``; instances take ``boot_s`` to run and ``stop_s`` to stop."""
    endpoint = EcsEndpoint(secrets, EcsState(boot_s=boot_s, stop_s=stop_s))
    server = make_server(HOST, port, endpoint, threaded=True, request_handler=_QuietHandler)
    return LocalEcs(server, endpoint)
