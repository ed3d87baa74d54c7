"""The errors every operation can answer, added to the OpenAPI schema in one place.

A postprocessing hook (drf-spectacular) adds the ``Error`` and ``ValidationError``
shapes of ``portal.api.errors`` and, to each operation, the answers it can give:
400/401/403/404/429/503 always, 409 and 415 for writes.
"""

from typing import Any

ERROR = {
    "type": "object",
    "required": ["code", "detail"],
    "properties": {
        "code": {
            "type": "string",
            "description": "A stable reason code: over_ceiling, no_capacity, budget_cap, …",
        },
        "detail": {"type": "string", "description": "What happened, for a person."},
        "field": {"type": "string", "description": "The input that caused a refusal."},
        "figures": {
            "type": "object",
            "additionalProperties": True,
            "description": "The numbers behind a refusal (asked, free, ceiling …).",
        },
    },
}
VALIDATION_ERROR = {
    "type": "object",
    "required": ["code", "detail", "errors"],
    "properties": {
        "code": {
            "type": "string",
            "description": "invalid (fields), parse_error (a body that is not JSON, or YAML "
            "where asked), too_deep (a body nested more than 32 levels), or the rule a "
            "configured value breaks (guarantees_over_capacity …).",
        },
        "detail": {"type": "string"},
        "errors": {
            "type": "object",
            "additionalProperties": True,
            "description": "Field name → list of messages (nested for nested fields).",
        },
    },
}
DESCRIPTIONS = {
    "400": "Invalid input: the fields named in errors.",
    "401": "No valid credentials.",
    "403": "Not permitted.",
    "404": "Not found, or not visible to you (an object in the path or the body, a page "
    "past the end of a list).",
    "409": "Refused by a rule; code names it and figures carry the numbers.",
    "415": "The body is not in a format this operation reads (JSON unless it says).",
    "429": "Too many requests; retry after the Retry-After header's seconds.",
    "503": "A service the portal needs (its database) cannot answer right now; code is "
    "unavailable. Retry after the Retry-After header's seconds.",
}
WRITES = {"post", "put", "patch", "delete"}


def _ref(name: str) -> dict[str, Any]:
    return {"content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{name}"}}}}


def add_error_responses(result: dict[str, Any], generator, request, public) -> dict[str, Any]:
    schemas = result.setdefault("components", {}).setdefault("schemas", {})
    schemas.setdefault("Error", ERROR)
    schemas.setdefault("ValidationError", VALIDATION_ERROR)
    for operations in result.get("paths", {}).values():
        for method, operation in operations.items():
            if method not in WRITES | {"get"}:
                continue
            # Any operation may refuse its query (a bad filter value, a NUL byte): 400; and
            # any may answer 404: an object in the path or the body the caller cannot see,
            # a page past the end of a list, a resource only admins may know of.
            # And any may meet the database restarting: 503 (portal.api.errors).
            codes = ["400", "401", "403", "404", "429", "503"]
            if method in WRITES:
                codes += ["409", "415"]
            responses = operation.setdefault("responses", {})
            for code in codes:
                shape = "ValidationError" if code == "400" else "Error"
                responses.setdefault(code, {"description": DESCRIPTIONS[code], **_ref(shape)})
    return result
