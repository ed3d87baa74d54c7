"""The agent's heartbeat in the OpenAPI schema.

``POST /api/v1/agent/heartbeat`` is a plain Django view (rental.api.heartbeat), kept off DRF
so that a heartbeat costs a parse and a few queries. drf-spectacular does not see it, so
this postprocessing hook (``SPECTACULAR_SETTINGS["POSTPROCESSING_HOOKS"]``) writes its
operation from the same limits the view checks; it runs only when the schema is built,
never on the heartbeat's path. tests/rental/agent/test_heartbeat_schema.py holds the two
together: the example is accepted by the view's parser, each bound matches its check.
"""

from typing import Any

from django.conf import settings

from rental.api.heartbeat import MAX_BODY_BYTES, MAX_GPUS

PATH = "/api/v1/agent/heartbeat"


def _number(low: float, high: float, description: str, *, integer: bool = False) -> dict:
    return {
        "type": "integer" if integer else "number",
        "minimum": low,
        "maximum": high,
        "description": description,
    }


def _nullable(schema: dict) -> dict:
    return {**schema, "nullable": True}


def _text(max_length: int, description: str) -> dict:
    return {"type": "string", "maxLength": max_length, "description": description}


def _ref(name: str) -> dict:
    return {"$ref": f"#/components/schemas/{name}"}


def components() -> dict[str, dict]:
    return {
        "AgentGpuReading": {
            "type": "object",
            "required": ["index", "utilization", "memory_used_mb"],
            "properties": {
                "index": _number(0, 63, "The GPU's index as nvidia-smi numbers it.", integer=True),
                "utilization": _number(0, 100, "GPU utilization, percent."),
                "memory_used_mb": _number(0, 10_000_000, "Memory used, MiB."),
                "memory_total_mb": _nullable(_number(0, 10_000_000, "Memory, MiB.")),
                "temperature_c": _nullable(_number(-50, 200, "Temperature, °C.")),
                "power_w": _nullable(_number(0, 5000, "Power draw, W.")),
                "ecc_errors": _nullable(
                    _number(0, 1e12, "Uncorrected ECC errors (volatile).", integer=True)
                ),
                "throttle_reasons": _nullable(
                    _text(40, "nvidia-smi's clocks_throttle_reasons.active bit mask.")
                ),
            },
        },
        "AgentSample": {
            "type": "object",
            "required": ["at"],
            "properties": {
                "at": {
                    "type": "string",
                    "format": "date-time",
                    "maxLength": 40,
                    "description": (
                        "When it was read, with a time zone; at most 5 minutes ahead of the "
                        "portal's clock and 7 days behind it. Strictly increasing within a "
                        "heartbeat; a sample not newer than the last one stored is a duplicate."
                    ),
                },
                "gpus": {
                    "type": "array",
                    "maxItems": MAX_GPUS,
                    "items": _ref("AgentGpuReading"),
                    "description": "One reading per GPU; empty when nvidia-smi failed.",
                },
                "ssh_sessions": _nullable(
                    _number(0, 10_000, "SSH sessions open on the instance.", integer=True)
                ),
                "error": _nullable(
                    _text(300, "Why the GPUs could not be read, if they could not.")
                ),
            },
        },
        "AgentHealth": {
            "type": "object",
            "description": "Sent with the first heartbeat (L8): what the instance really has.",
            "properties": {
                "gpus": {
                    "type": "array",
                    "maxItems": MAX_GPUS,
                    "items": {
                        "type": "object",
                        "required": ["index", "name"],
                        "properties": {
                            "index": _number(0, 63, "GPU index.", integer=True),
                            "name": _text(120, "The model nvidia-smi names."),
                            "memory_total_mb": _nullable(_number(0, 10_000_000, "MiB.")),
                        },
                    },
                },
                "driver_version": _nullable(_text(40, "NVIDIA driver version.")),
                "cuda_version": _nullable(_text(20, "Highest CUDA the driver supports.")),
                "frameworks": {
                    "type": "object",
                    "description": "torch and paddle only: whether installed and whether "
                    "they see the GPU.",
                    "additionalProperties": False,
                    "properties": {
                        name: {
                            "type": "object",
                            "properties": {
                                "installed": {"type": "boolean"},
                                "cuda": {"type": "boolean"},
                                "version": _nullable(_text(40, "Version.")),
                            },
                        }
                        for name in ("torch", "paddle")
                    },
                },
            },
        },
        "AgentBurn": {
            "type": "object",
            "description": "The acceptance burn's result: achieved TFLOPS per GPU.",
            "properties": {
                "tflops": {
                    "type": "array",
                    "maxItems": MAX_GPUS,
                    "items": _number(0, 100_000, "TFLOPS achieved by one GPU."),
                },
                "seconds": _nullable(_number(0, 3600, "How long it ran.")),
                "dtype": _nullable(_text(10, "e.g. bf16.")),
                "skipped": _nullable(_text(200, "Why no burn ran (no PyTorch, …).")),
            },
        },
        "AgentSpotNotice": {
            "type": "object",
            "required": ["action"],
            "description": "The instance metadata's spot interruption notice (L7).",
            "properties": {
                "action": {"type": "string", "enum": ["terminate", "stop", "hibernate"]},
                "time": {"type": "string", "format": "date-time", "nullable": True},
            },
        },
        "AgentHeartbeat": {
            "type": "object",
            "description": (
                f"At most {MAX_BODY_BYTES // 1024} KiB. Unknown keys are ignored; every "
                "known one is checked, and the first bad one is named in the 400's field."
            ),
            "properties": {
                "samples": {
                    "type": "array",
                    "maxItems": settings.PORTAL_AGENT_MAX_SAMPLES,
                    "items": _ref("AgentSample"),
                    "description": "In order; a buffered backlog is sent oldest first.",
                },
                "health": {"allOf": [_ref("AgentHealth")], "nullable": True},
                "burn": {"allOf": [_ref("AgentBurn")], "nullable": True},
                "spot_notice": {"allOf": [_ref("AgentSpotNotice")], "nullable": True},
            },
            "example": EXAMPLE,
        },
        "AgentHeartbeatAccepted": {
            "type": "object",
            "required": ["accepted", "duplicates"],
            "properties": {
                "accepted": {"type": "integer", "description": "Samples stored."},
                "duplicates": {"type": "integer", "description": "Samples already stored."},
            },
        },
    }


EXAMPLE = {
    "samples": [
        {
            "at": "2026-04-06T10:00:00Z",
            "ssh_sessions": 1,
            "gpus": [
                {
                    "index": 0,
                    "utilization": 87.0,
                    "memory_used_mb": 40960,
                    "memory_total_mb": 81920,
                    "temperature_c": 61,
                    "power_w": 312.5,
                    "ecc_errors": 0,
                    "throttle_reasons": "0x0000000000000000",
                }
            ],
        }
    ]
}


def _error(description: str, codes: list[str], **extra: Any) -> dict:
    return {
        "description": f"{description} code: {', '.join(codes)}.",
        "content": {"application/json": {"schema": _ref("Error")}},
        **extra,
    }


def operation() -> dict:
    return {
        "post": {
            "operationId": "agent_heartbeat",
            "summary": "An instance's agent reports its samples (once a minute).",
            "description": (
                "Sent by the agent on each rented instance with that instance's own token. "
                "Samples are stored in one insert; idle counting (L6), health on first "
                "contact (L8) and the spot notice (L7) follow from what is sent."
            ),
            "tags": ["agent"],
            "security": [{"agentToken": []}],
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": _ref("AgentHeartbeat")}},
            },
            "responses": {
                "200": {
                    "description": "Stored; duplicates were already stored and are ignored.",
                    "content": {"application/json": {"schema": _ref("AgentHeartbeatAccepted")}},
                },
                "400": _error(
                    "The body is not JSON, too large, or a field is bad;",
                    ["invalid (with field)", "too_large"],
                ),
                "401": _error("No token, or not a live instance's token;", ["bad_token"]),
                "409": _error(
                    "The instance has ended (the agent stops), or every sample was a duplicate;",
                    ["not_live", "replay"],
                ),
                "429": _error(
                    "Sooner than the minimum interval for this instance; retry after "
                    "Retry-After seconds;",
                    ["throttled"],
                    headers={"Retry-After": {"schema": {"type": "integer"}}},
                ),
                "503": _error(
                    "The portal's database cannot answer right now (the agent keeps its "
                    "samples and sends them again); retry after Retry-After seconds;",
                    ["unavailable"],
                    headers={"Retry-After": {"schema": {"type": "integer"}}},
                ),
            },
        }
    }


def add_agent_heartbeat(result: dict[str, Any], generator, request, public) -> dict[str, Any]:
    """drf-spectacular postprocessing hook: the heartbeat's operation, its body's shapes
    and the per-instance token's security scheme."""
    result.setdefault("paths", {})[PATH] = operation()
    found = result.setdefault("components", {})
    found.setdefault("schemas", {}).update(components())
    found.setdefault("securitySchemes", {})["agentToken"] = {
        "type": "http",
        "scheme": "bearer",
        "description": (
            "The instance's own token (<instance id>.<secret>), written into its user-data "
            "at launch, stored hashed and revoked when the instance ends. It is good for "
            "this endpoint only."
        ),
    }
    return result
