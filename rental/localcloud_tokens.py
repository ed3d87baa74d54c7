"""EC2's ClientToken idempotency for the local endpoint (moto keeps the token but does
not act on it).

A RunInstances that carries a ClientToken already used in the same account and region
gets the first request's answer again (the same instance, nothing launched) when its
parameters are the same, and ``IdempotentParameterMismatch`` when they differ: what EC2
does, and why a failover to another place needs a token of its own.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

# Request parameters that are not part of what the token stands for.
_NOT_COMPARED = frozenset({"Action", "Version", "ClientToken"})
MISMATCH_CODE = "IdempotentParameterMismatch"
MISMATCH_MESSAGE = (
    "The client token you have provided is associated with a request whose parameters "
    "differ from this one's."
)


class TokenMismatch(Exception):
    """The token was first used with other parameters."""


def fingerprint(params: dict[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, v) for k, v in params.items() if k not in _NOT_COMPARED))


@dataclass
class ClientTokens:
    """Answered RunInstances by (access key, region, token). ``lock`` is held by the
    caller from ``lookup`` to ``remember`` so two requests with one token launch once."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    _answers: dict[tuple[str, str, str], tuple[tuple, bytes]] = field(default_factory=dict)

    def lookup(self, key_id: str, params: dict[str, str]) -> bytes | None:
        """The first answer to replay, or None (a new token); raises TokenMismatch."""
        scope = (key_id, params.get("X-Region", ""), params["ClientToken"])
        seen = self._answers.get(scope)
        if seen is None:
            return None
        if seen[0] != fingerprint(params):
            raise TokenMismatch
        return seen[1]

    def remember(self, key_id: str, params: dict[str, str], body: bytes) -> None:
        scope = (key_id, params.get("X-Region", ""), params["ClientToken"])
        self._answers[scope] = (fingerprint(params), body)

    def clear(self) -> None:
        with self.lock:
            self._answers.clear()
