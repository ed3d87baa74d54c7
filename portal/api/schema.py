"""The errors every operation can answer, added to the OpenAPI schema in one place.

A postprocessing hook (drf-spectacular) adds the ``Error`` and ``ValidationError``
shapes of ``portal.api.errors`` and, to each operation, the answers it can give:
401/403/429 always, 404 where the path names an object, 400 and 409 for writes.
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
        "code": {"type": "string", "enum": ["invalid"]},
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
    "404": "Not found, or not visible to you.",
    "409": "Refused by a rule; code names it and figures carry the numbers.",
    "429": "Too many requests; retry after the Retry-After header's seconds.",
}
WRITES = {"post", "put", "patch", "delete"}


def _ref(name: str) -> dict[str, Any]:
    return {"content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{name}"}}}}


def add_error_responses(result: dict[str, Any], generator, request, public) -> dict[str, Any]:
    schemas = result.setdefault("components", {}).setdefault("schemas", {})
    schemas.setdefault("Error", ERROR)
    schemas.setdefault("ValidationError", VALIDATION_ERROR)
    for path, operations in result.get("paths", {}).items():
        for method, operation in operations.items():
            if method not in WRITES | {"get"}:
                continue
            codes = ["401", "403", "429"]
            if "{" in path:
                codes.append("404")
            if method in WRITES:
                codes += ["400", "409"]
            responses = operation.setdefault("responses", {})
            for code in codes:
                shape = "ValidationError" if code == "400" else "Error"
                responses.setdefault(code, {"description": DESCRIPTIONS[code], **_ref(shape)})
    return result
