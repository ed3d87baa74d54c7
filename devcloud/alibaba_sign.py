"""Checking the signature of an Alibaba Cloud API request, as the local ECS endpoint does.

Two schemes, both recomputed from the request as received with the secret of its access
key: the V3 signature the current SDK sends by default (``Authorization:
ACS3-HMAC-SHA256 Credential=…,SignedHeaders=…,Signature=…`` over a canonical request), and
the older RPC signature (``Signature`` parameter, HMAC-SHA1 over the sorted parameters).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from dataclasses import dataclass
from urllib.parse import quote

V3_ALGORITHM = "ACS3-HMAC-SHA256"


@dataclass(frozen=True)
class SignedRequest:
    """What a signature covers: ``query`` and ``form`` are the decoded parameters in the
    order received, ``headers`` lower-case names to values."""

    method: str
    path: str
    query: list[tuple[str, str]]
    form: list[tuple[str, str]]
    headers: dict[str, str]
    body: bytes


@dataclass(frozen=True)
class Verdict:
    """The access key the request names ("" when none) and whether its signature holds
    (``problem`` says why not, "" when it does)."""

    access_key_id: str
    problem: str


def access_key_of(request: SignedRequest) -> str:
    """The access key id the request is signed with, "" when it names none."""
    authorization = request.headers.get("authorization", "")
    if authorization.startswith(V3_ALGORITHM):
        return _v3_fields(authorization).get("Credential", "")
    return dict(request.query).get("AccessKeyId") or dict(request.form).get("AccessKeyId", "")


def verify(request: SignedRequest, secrets: dict[str, str]) -> Verdict:
    """Recompute the request's signature with the secret of its access key."""
    key_id = access_key_of(request)
    if not key_id:
        return Verdict("", "MissingAccessKeyId")
    secret = secrets.get(key_id)
    if secret is None:
        return Verdict(key_id, "InvalidAccessKeyId.NotFound")
    authorization = request.headers.get("authorization", "")
    if authorization.startswith(V3_ALGORITHM):
        expected = _v3_signature(request, _v3_fields(authorization), secret)
        given = _v3_fields(authorization).get("Signature", "")
    else:
        params = [*request.query, *request.form]
        given = dict(params).get("Signature", "")
        expected = _rpc_signature(request.method, params, secret)
    if not given or not hmac.compare_digest(given, expected):
        return Verdict(key_id, "SignatureDoesNotMatch")
    return Verdict(key_id, "")


def _v3_fields(authorization: str) -> dict[str, str]:
    fields: dict[str, str] = {}
    for part in authorization[len(V3_ALGORITHM) :].split(","):
        name, _, value = part.strip().partition("=")
        fields[name] = value
    return fields


def _v3_signature(request: SignedRequest, fields: dict[str, str], secret: str) -> str:
    signed_headers = [name for name in fields.get("SignedHeaders", "").split(";") if name]
    payload_hash = hashlib.sha256(request.body).hexdigest()
    if request.headers.get("x-acs-content-sha256", payload_hash) != payload_hash:
        return ""  # the body is not the one that was signed
    query = "&".join(
        f"{key}={quote(value, safe='~')}" for key, value in sorted(dict(request.query).items())
    )
    headers = "".join(
        f"{name}:{request.headers.get(name, '').strip()}\n" for name in sorted(signed_headers)
    )
    canonical = "\n".join(
        [
            request.method,
            request.path or "/",
            query,
            headers,
            ";".join(sorted(signed_headers)),
            payload_hash,
        ]
    )
    to_sign = f"{V3_ALGORITHM}\n{hashlib.sha256(canonical.encode()).hexdigest()}"
    return hmac.new(secret.encode(), to_sign.encode(), hashlib.sha256).hexdigest()


def _percent(value: str) -> str:
    return quote(value, safe="~")


def _rpc_signature(method: str, params: list[tuple[str, str]], secret: str) -> str:
    signed = sorted((k, v) for k, v in dict(params).items() if k != "Signature")
    canonical = "&".join(f"{_percent(k)}={_percent(v)}" for k, v in signed)
    to_sign = f"{method}&{_percent('/')}&{_percent(canonical)}"
    digest = hmac.new(f"{secret}&".encode(), to_sign.encode(), hashlib.sha1).digest()
    return base64.b64encode(digest).decode()
