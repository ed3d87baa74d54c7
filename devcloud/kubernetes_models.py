"""Bodies held to the official Kubernetes client's models (``kubernetes.client.models``).

``check(data, "V1Pod")`` walks a JSON body against the model's declared fields and types,
strictly (a field the model does not have is an error, as ``kubectl --validate=strict``
makes it), then lets the official client deserialise it, which also enforces the fields
its models require. The local API server (devcloud/kubernetes.py) checks every request
body so, and its tests check every response body the same way.
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from typing import Any

from kubernetes import client
from kubernetes.client import ApiClient

_LIST = re.compile(r"list\[(.+)\]")
# "dict(str, str)" in clients before 36, "dict[str, str]" since.
_DICT = re.compile(r"dict[(\[]([^,]+), (.+)[)\]]")
_API = ApiClient()


class InvalidBody(ValueError):
    """A body that is not the model it claims to be; ``field`` is the path at fault."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field or 'body'}: {message}")
        self.field = field


class _Raw:
    """What ``ApiClient.deserialize`` reads: an HTTP answer's ``data``."""

    def __init__(self, data: str) -> None:
        self.data = data


def check(data: Any, type_name: str) -> Any:
    """The official client's model for ``data`` (e.g. a ``V1Pod``); raises ``InvalidBody``
    naming the field for an unknown field, a value of the wrong type or a missing
    required one."""
    _walk(data, type_name, "")
    try:
        return _API.deserialize(_Raw(json.dumps(data)), type_name)
    except (ValueError, TypeError) as error:
        raise InvalidBody("", str(error)) from None


def _walk(value: Any, type_name: str, path: str) -> None:
    if value is None:
        return
    listed = _LIST.fullmatch(type_name)
    if listed:
        if not isinstance(value, list):
            raise InvalidBody(path, "expected a list")
        for index, item in enumerate(value):
            _walk(item, listed.group(1), f"{path}[{index}]")
        return
    mapped = _DICT.fullmatch(type_name)
    if mapped:
        if not isinstance(value, dict):
            raise InvalidBody(path, "expected an object")
        for key, item in value.items():
            _walk(item, mapped.group(2), f"{path}.{key}")
        return
    if type_name == "object":
        return
    if type_name == "str":
        _expect(isinstance(value, str), path, "expected a string")
    elif type_name == "int":
        _expect(isinstance(value, int) and not isinstance(value, bool), path, "expected an integer")
    elif type_name == "float":
        _expect(
            isinstance(value, int | float) and not isinstance(value, bool),
            path,
            "expected a number",
        )
    elif type_name == "bool":
        _expect(isinstance(value, bool), path, "expected true or false")
    elif type_name in ("datetime", "date"):
        _expect(isinstance(value, str) and _is_time(value), path, "expected an RFC 3339 time")
    else:
        _walk_model(value, type_name, path)


def _walk_model(value: Any, type_name: str, path: str) -> None:
    model = getattr(client.models, type_name, None)
    if model is None:
        raise InvalidBody(path, f"no model {type_name}")
    if not isinstance(value, dict):
        raise InvalidBody(path, f"expected a {type_name} object")
    fields = {json_name: attr for attr, json_name in model.attribute_map.items()}
    for key, item in value.items():
        attr = fields.get(key)
        if attr is None:
            raise InvalidBody(f"{path}.{key}".lstrip("."), f"unknown field of {type_name}")
        _walk(item, model.openapi_types[attr], f"{path}.{key}".lstrip("."))


def _expect(ok: bool, path: str, message: str) -> None:
    if not ok:
        raise InvalidBody(path, message)


def _is_time(text: str) -> bool:
    try:
        datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return False
    return True
