"""The EC2 Query parameters of a request, for the WSGI middlewares of the local cloud."""

import io
import re
from typing import Any
from urllib.parse import parse_qs


def query_params(environ: dict[str, Any]) -> dict[str, str]:
    """The EC2 Query parameters of the request (``Action``, ``InstanceType``,
    ``Placement.AvailabilityZone``, …); a form body is buffered and put back."""
    query = {key: values[0] for key, values in parse_qs(environ.get("QUERY_STRING", "")).items()}
    if "Action" in query:
        return query
    content_type = environ.get("CONTENT_TYPE", "")
    if environ.get("REQUEST_METHOD") != "POST" or "x-www-form-urlencoded" not in content_type:
        return query
    try:
        length = int(environ.get("CONTENT_LENGTH") or 0)
    except ValueError:
        length = 0
    stream = environ["wsgi.input"]
    if length > 0:
        body = stream.read(length)
    elif environ.get("wsgi.input_terminated"):
        body = stream.read()
    else:
        body = b""
    environ["wsgi.input"] = io.BytesIO(body)
    environ["CONTENT_LENGTH"] = str(len(body))
    form = parse_qs(body.decode("utf-8", errors="replace"))
    return {key: values[0] for key, values in form.items()}


_CREDENTIAL = re.compile(r"Credential=([^/,\s]+)/")


def access_key_id(environ: dict[str, Any]) -> str:
    for source in (environ.get("HTTP_AUTHORIZATION", ""), environ.get("QUERY_STRING", "")):
        match = _CREDENTIAL.search(source.replace("X-Amz-Credential=", "Credential="))
        if match:
            return match.group(1)
    return ""


_SCOPE_REGION = re.compile(r"Credential=[^/,\s]+/\d{8}/([a-z0-9-]+)/")


def signed_region(environ: dict[str, Any]) -> str:
    """The region a SigV4-signed request is for (a fault may be limited to one)."""
    match = _SCOPE_REGION.search(environ.get("HTTP_AUTHORIZATION", ""))
    return match.group(1) if match else ""


_FILTER_NAME = re.compile(r"Filter\.\d+\.Name")


def origin(environ: dict[str, Any], params: dict[str, str]) -> tuple[str, tuple[str, ...]]:
    """Who sent a request (the client's address) and the filter names it carries."""
    names = sorted(value for key, value in params.items() if _FILTER_NAME.fullmatch(key))
    return environ.get("REMOTE_ADDR", ""), tuple(names)
