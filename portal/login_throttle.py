"""Failed logins, counted per account and per address separately (DESIGN.md §5).

An account is locked after ``LOGIN_THROTTLE_ATTEMPTS`` failures in
``LOGIN_THROTTLE_WINDOW`` seconds; an address only after the much higher
``LOGIN_THROTTLE_ADDRESS_ATTEMPTS``, so one person's typos never lock out the others
behind the same proxy address. The check sits in the authentication backend, so every
password login is covered: the portal's page and ``/admin/login/`` alike. The counters
live in the cache, which production requires to be shared (``REDIS_URL``; settings refuse
to start without it).
"""

from typing import Any

from django.conf import settings
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.signals import user_logged_in, user_login_failed
from django.core.cache import cache
from django.core.exceptions import PermissionDenied
from django.dispatch import receiver
from django.http import HttpRequest


def _keys(request: HttpRequest | None, username: str) -> list[tuple[str, int]]:
    keys = [
        (f"login-fail:user:{(username or '').strip().lower()}", settings.LOGIN_THROTTLE_ATTEMPTS)
    ]
    if request is not None:
        address = request.META.get("REMOTE_ADDR", "")
        keys.append((f"login-fail:addr:{address}", settings.LOGIN_THROTTLE_ADDRESS_ATTEMPTS))
    return keys


def blocked(request: HttpRequest | None, username: str) -> bool:
    return any(cache.get(key, 0) >= limit for key, limit in _keys(request, username))


def record_failure(request: HttpRequest | None, username: str) -> None:
    for key, _limit in _keys(request, username):
        cache.add(key, 0, settings.LOGIN_THROTTLE_WINDOW)
        try:
            cache.incr(key)
        except ValueError:  # expired between add and incr
            cache.set(key, 1, settings.LOGIN_THROTTLE_WINDOW)


class ThrottledModelBackend(ModelBackend):
    """Django's backend, refusing any password (even the right one) for a locked account
    or address."""

    def authenticate(self, request: HttpRequest | None, username: Any = None, **kwargs: Any):
        name = username if username is not None else kwargs.get("username", "")
        if blocked(request, str(name or "")):
            raise PermissionDenied
        return super().authenticate(request, username=username, **kwargs)


@receiver(user_login_failed)
def _count_failure(sender: Any, credentials: dict, request: HttpRequest | None = None, **_: Any):
    record_failure(request, str(credentials.get("username", "")))


@receiver(user_logged_in)
def _forget_account_failures(sender: Any, request: HttpRequest, user: Any, **_: Any) -> None:
    cache.delete(f"login-fail:user:{user.get_username().strip().lower()}")
