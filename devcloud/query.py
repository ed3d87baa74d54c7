"""The EC2 Query parameters of a request, for the WSGI middlewares of the local cloud."""

import io
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
