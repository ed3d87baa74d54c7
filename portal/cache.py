"""Django's Redis cache, answering as an empty cache while Redis cannot be reached.

What the portal keeps in the cache are counters that protect it (failed logins, API
rates): while Redis is down they fail open, so requests are served unthrottled rather
than refused with a server error. A read is a miss, a write is dropped, ``add`` says it
stored, ``incr`` says the key is missing (as for an expired counter). One log line
when the outage begins (``portal.outages``); Redis is tried again every
``PORTAL_OUTAGE_RETRY_SECONDS``. Sessions are in the database, not here.
"""

from collections.abc import Callable
from typing import Any

from django.core.cache.backends.base import DEFAULT_TIMEOUT
from django.core.cache.backends.redis import RedisCache
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from portal.outages import Outage

UNREACHABLE = (RedisConnectionError, RedisTimeoutError)
CONSEQUENCE = "the cache answers as empty: login and API throttles let requests through"

outage = Outage("The cache (Redis)")


class FailOpenRedisCache(RedisCache):
    def _call(self, method: Callable[..., Any], fallback: Any, *args: Any) -> Any:
        if outage.skip():
            return fallback
        try:
            answer = method(*args)
        except UNREACHABLE as error:
            outage.failed(error, consequence=CONSEQUENCE)
            return fallback
        outage.answered()
        return answer

    def add(self, key: Any, value: Any, timeout: Any = DEFAULT_TIMEOUT, version: Any = None):
        return self._call(super().add, True, key, value, timeout, version)

    def get(self, key: Any, default: Any = None, version: Any = None) -> Any:
        return self._call(super().get, default, key, default, version)

    def set(self, key: Any, value: Any, timeout: Any = DEFAULT_TIMEOUT, version: Any = None):
        return self._call(super().set, None, key, value, timeout, version)

    def touch(self, key: Any, timeout: Any = DEFAULT_TIMEOUT, version: Any = None) -> bool:
        return self._call(super().touch, False, key, timeout, version)

    def delete(self, key: Any, version: Any = None) -> bool:
        return self._call(super().delete, False, key, version)

    def get_many(self, keys: Any, version: Any = None) -> dict:
        return self._call(super().get_many, {}, keys, version)

    def has_key(self, key: Any, version: Any = None) -> bool:
        return self._call(super().has_key, False, key, version)

    def incr(self, key: Any, delta: int = 1, version: Any = None) -> int:
        missing = object()
        answer = self._call(super().incr, missing, key, delta, version)
        if answer is missing:
            raise ValueError(f"Key {key!r} not found (the cache cannot be reached).")
        return answer

    def set_many(self, data: dict, timeout: Any = DEFAULT_TIMEOUT, version: Any = None) -> list:
        return self._call(super().set_many, list(data), data, timeout, version)

    def delete_many(self, keys: Any, version: Any = None) -> None:
        self._call(super().delete_many, None, keys, version)

    def clear(self) -> None:
        self._call(super().clear, None)
