"""EC2's ClientToken idempotency for the local endpoint (moto keeps the token but does
not act on it).

A RunInstances that carries a ClientToken already used in the same account and region
with other parameters is refused with ``IdempotentParameterMismatch``, even when the
first request was itself refused (no capacity there): what EC2 does, and why a failover
to another place needs a token of its own. With the same parameters, a token whose first
request launched an instance gets that answer again (the same instance, nothing new).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
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
    _answers: dict[tuple[str, str, str], tuple[tuple, bytes | None]] = field(default_factory=dict)

    def lookup(self, key_id: str, params: dict[str, str]) -> bytes | None:
        """The first answer to replay, or None (a new token); raises TokenMismatch."""
        scope = (key_id, params.get("X-Region", ""), params["ClientToken"])
        seen = self._answers.get(scope)
        if seen is None:
            return None
        if seen[0] != fingerprint(params):
            raise TokenMismatch
        return seen[1]

    def remember(self, key_id: str, params: dict[str, str], body: bytes | None) -> None:
        """The token's parameters, and its answer when it launched (``body``)."""
        scope = (key_id, params.get("X-Region", ""), params["ClientToken"])
        seen = self._answers.get(scope)
        self._answers[scope] = (fingerprint(params), body or (seen[1] if seen else None))

    def refused(self, key_id: str, params: dict[str, str]) -> bool:
        """A request about to be refused (a fault): True when its token mismatches (EC2
        checks the token first); else its parameters are noted against the token."""
        with self.lock:
            try:
                self.lookup(key_id, params)
            except TokenMismatch:
                return True
            self.remember(key_id, params, None)
            return False

    def run(
        self, key_id: str, params: dict[str, str], launch: Callable[[], tuple[bytes, bool]]
    ) -> bytes:
        """The answer to a RunInstances with a token: the first answer again, or
        ``launch()``'s (its body, and whether it launched); raises TokenMismatch."""
        with self.lock:  # one token launches once, as on EC2
            body = self.lookup(key_id, params)
            if body is not None:
                return body
            body, ok = launch()
            self.remember(key_id, params, body if ok else None)
            return body

    def clear(self) -> None:
        with self.lock:
            self._answers.clear()
