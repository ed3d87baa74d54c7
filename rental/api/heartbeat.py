"""The agent's heartbeat endpoint: ``POST /api/v1/agent/heartbeat``.

Authenticated by the instance's own token (``Authorization: Bearer <token>``). Every
field is checked here and a bad one is a 400 naming it; nothing the agent sends can
make a 500. Answers: 200 ``{"accepted": n, "duplicates": m}``; 401 unknown token;
409 ``not_live`` (the instance has ended: the agent stops) or ``replay``; 429 throttled.
"""

import json
import math
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.http import HttpRequest, JsonResponse
from django.urls import path
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from portal.text import text_problem
from rental.agent import ingest
from rental.agent.heartbeat import (
    Heartbeat,
    NotLive,
    Replay,
    Throttled,
    instance_for_token,
)

MAX_BODY_BYTES = 512 * 1024
MAX_GPUS = 16
MAX_SKEW = timedelta(minutes=5)
MAX_AGE = timedelta(days=7)


class Invalid(Exception):
    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


def _number(
    value: Any,
    field: str,
    *,
    low: float,
    high: float,
    optional: bool = False,
    integer: bool = False,
):
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise Invalid(field, "must be a number")
    if integer and not (isinstance(value, int) or value.is_integer()):
        raise Invalid(field, "must be a whole number")
    # Compare before any float conversion: a 400-digit integer would overflow it.
    if (isinstance(value, float) and not math.isfinite(value)) or not low <= value <= high:
        raise Invalid(field, f"must be between {low:g} and {high:g}")
    return int(value) if integer else float(value)


def _text(value: Any, field: str, *, max_length: int = 120, optional: bool = True) -> str:
    if value is None and optional:
        return ""
    if not isinstance(value, str) or len(value) > max_length:
        raise Invalid(field, f"must be a string of at most {max_length} characters")
    if text_problem(value):  # shown on the lease's page: portal.text's rule, as typed text
        raise Invalid(field, "must hold no NUL, control or bidirectional control character")
    return value


def _object(value: Any, field: str) -> dict:
    if not isinstance(value, dict):
        raise Invalid(field, "must be an object")
    return value


def _list(value: Any, field: str, *, max_items: int) -> list:
    if not isinstance(value, list):
        raise Invalid(field, "must be a list")
    if len(value) > max_items:
        raise Invalid(field, f"must hold at most {max_items} items")
    return value


def _instant(value: Any, field: str, *, now: datetime) -> datetime:
    if not isinstance(value, str) or len(value) > 40:
        raise Invalid(field, "must be an ISO 8601 time")
    try:
        at = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise Invalid(field, "must be an ISO 8601 time") from None
    if at.tzinfo is None:
        raise Invalid(field, "must carry a time zone")
    at = at.astimezone(UTC).replace(microsecond=0)
    if not now - MAX_AGE <= at <= now + MAX_SKEW:
        raise Invalid(field, "is too far from the portal's clock")
    return at


def _gpu(value: Any, field: str) -> dict:
    gpu = _object(value, field)
    return {
        "index": _number(gpu.get("index"), f"{field}.index", low=0, high=63, integer=True),
        "utilization": _number(gpu.get("utilization"), f"{field}.utilization", low=0, high=100),
        "memory_used_mb": _number(
            gpu.get("memory_used_mb"), f"{field}.memory_used_mb", low=0, high=10_000_000
        ),
        "memory_total_mb": _number(
            gpu.get("memory_total_mb"),
            f"{field}.memory_total_mb",
            low=0,
            high=10_000_000,
            optional=True,
        ),
        "temperature_c": _number(
            gpu.get("temperature_c"), f"{field}.temperature_c", low=-50, high=200, optional=True
        ),
        "power_w": _number(gpu.get("power_w"), f"{field}.power_w", low=0, high=5000, optional=True),
        "ecc_errors": _number(
            gpu.get("ecc_errors"),
            f"{field}.ecc_errors",
            low=0,
            high=1e12,
            optional=True,
            integer=True,
        ),
        "throttle_reasons": _text(
            gpu.get("throttle_reasons"), f"{field}.throttle_reasons", max_length=40
        ),
    }


def _samples(value: Any, *, now: datetime) -> list[dict]:
    samples = []
    for i, raw in enumerate(_list(value, "samples", max_items=settings.PORTAL_AGENT_MAX_SAMPLES)):
        field = f"samples[{i}]"
        sample = _object(raw, field)
        at = _instant(sample.get("at"), f"{field}.at", now=now)
        if samples and at <= samples[-1]["at"]:
            raise Invalid(f"{field}.at", "samples must be in order, one per instant")
        gpus = [
            _gpu(g, f"{field}.gpus[{j}]")
            for j, g in enumerate(
                _list(sample.get("gpus", []), f"{field}.gpus", max_items=MAX_GPUS)
            )
        ]
        sessions = _number(
            sample.get("ssh_sessions"),
            f"{field}.ssh_sessions",
            low=0,
            high=10_000,
            optional=True,
            integer=True,
        )
        samples.append(
            {
                "at": at,
                "gpus": gpus,
                "ssh_sessions": None if sessions is None else int(sessions),
                "error": _text(sample.get("error"), f"{field}.error", max_length=300),
            }
        )
    return samples


def _health(value: Any) -> dict | None:
    if value is None:
        return None
    health = _object(value, "health")
    gpus = []
    for j, raw in enumerate(_list(health.get("gpus", []), "health.gpus", max_items=MAX_GPUS)):
        gpu = _object(raw, f"health.gpus[{j}]")
        gpus.append(
            {
                "index": _number(
                    gpu.get("index"), f"health.gpus[{j}].index", low=0, high=63, integer=True
                ),
                "name": _text(gpu.get("name"), f"health.gpus[{j}].name", optional=False),
                "memory_total_mb": _number(
                    gpu.get("memory_total_mb"),
                    f"health.gpus[{j}].memory_total_mb",
                    low=0,
                    high=10_000_000,
                    optional=True,
                ),
            }
        )
    frameworks = {}
    for name, raw in _object(health.get("frameworks") or {}, "health.frameworks").items():
        if name not in ("torch", "paddle"):
            raise Invalid("health.frameworks", f"unknown framework {name[:20]!r}")
        seen = _object(raw, f"health.frameworks.{name}")
        frameworks[name] = {
            "installed": bool(seen.get("installed")),
            "cuda": bool(seen.get("cuda")),
            "version": _text(
                seen.get("version"), f"health.frameworks.{name}.version", max_length=40
            ),
        }
    return {
        "gpus": gpus,
        "driver_version": _text(
            health.get("driver_version"), "health.driver_version", max_length=40
        ),
        "cuda_version": _text(health.get("cuda_version"), "health.cuda_version", max_length=20),
        "frameworks": frameworks,
    }


def _burn(value: Any) -> dict | None:
    if value is None:
        return None
    burn = _object(value, "burn")
    tflops = [
        _number(t, f"burn.tflops[{j}]", low=0, high=100_000)
        for j, t in enumerate(_list(burn.get("tflops", []), "burn.tflops", max_items=MAX_GPUS))
    ]
    return {
        "tflops": tflops,
        "seconds": _number(burn.get("seconds"), "burn.seconds", low=0, high=3600, optional=True),
        "dtype": _text(burn.get("dtype"), "burn.dtype", max_length=10),
        "skipped": _text(burn.get("skipped"), "burn.skipped", max_length=200),
    }


def _spot_notice(value: Any, *, now: datetime) -> dict | None:
    if value is None:
        return None
    notice = _object(value, "spot_notice")
    action = _text(notice.get("action"), "spot_notice.action", max_length=20, optional=False)
    if action not in ("terminate", "stop", "hibernate"):
        raise Invalid("spot_notice.action", "must be terminate, stop or hibernate")
    time = notice.get("time")
    return {
        "action": action,
        "time": None if time is None else _instant(time, "spot_notice.time", now=now),
    }


def parse_heartbeat(data: Any, *, now: datetime) -> Heartbeat:
    """A validated heartbeat from the decoded JSON body, or Invalid naming the field."""
    body = _object(data, "body")
    return Heartbeat(
        samples=_samples(body.get("samples", []), now=now),
        health=_health(body.get("health")),
        burn=_burn(body.get("burn")),
        spot_notice=_spot_notice(body.get("spot_notice"), now=now),
    )


def _error(status: int, code: str, detail: str, **extra: str) -> JsonResponse:
    return JsonResponse({"code": code, "detail": detail, **extra}, status=status)


def _unknown(token: str) -> bool:
    return instance_for_token(token) is None


@csrf_exempt
@require_POST
def heartbeat(request: HttpRequest) -> JsonResponse:
    """One heartbeat: the body is parsed and checked first (no query), then the token,
    the throttle and the samples go to ``ingest`` in a few queries; a refused body is
    told apart from an unknown token with one more query, on that path only."""
    now = timezone.now().replace(microsecond=0)
    scheme, _sep, token = request.headers.get("Authorization", "").partition(" ")
    token = token.strip()
    if scheme != "Bearer" or not token:
        return _error(401, "bad_token", "Unknown or revoked agent token.")
    try:
        if len(request.body) > MAX_BODY_BYTES:
            raise Invalid("body", "The heartbeat is too large.")
        try:
            data = json.loads(request.body)
        except (ValueError, UnicodeDecodeError, RecursionError):
            raise Invalid("body", "The body is not JSON.") from None
        parsed = parse_heartbeat(data, now=now)
    except Invalid as error:
        if _unknown(token):
            return _error(401, "bad_token", "Unknown or revoked agent token.")
        if error.message == "The heartbeat is too large.":
            return _error(400, "too_large", error.message)
        return _error(400, "invalid", error.message, field=error.field)
    try:
        result = ingest.ingest(token=token, heartbeat=parsed, now=now)
    except ingest.BadToken:
        return _error(401, "bad_token", "Unknown or revoked agent token.")
    except NotLive:
        return _error(409, "not_live", "The instance has ended; stop sending.")
    except Replay:
        return _error(409, "replay", "These samples were already recorded.")
    except Throttled:
        response = _error(429, "throttled", "Too many heartbeats for this instance.")
        response["Retry-After"] = str(settings.PORTAL_AGENT_MIN_INTERVAL_SECONDS)
        return response
    return JsonResponse({"accepted": result.accepted, "duplicates": result.duplicates})


urlpatterns = [path("api/v1/agent/heartbeat", heartbeat, name="agent_heartbeat")]
