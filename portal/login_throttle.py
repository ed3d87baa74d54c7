"""Failed logins: slowed per account and address, stopped per address, locked per account.

Three counts, each over ``LOGIN_THROTTLE_WINDOW`` seconds from its first failure, with
the address from ``portal.client_address`` (behind the trusted proxies, never from a
header a client can write):

- **One account from one address** (the pair): ``LOGIN_THROTTLE_ATTEMPTS`` failures are
  free; after that each further try must wait 1, 2, 4 … seconds (at most
  ``LOGIN_THROTTLE_DELAY_MAX``) after the one before. A try too early is refused (429
  with ``Retry-After``) and not counted. Only that pair slows down: the same account
  from another address, and other accounts from this address, are not affected.
- **One address, any accounts**: ``LOGIN_THROTTLE_ADDRESS_ATTEMPTS`` failures stop every
  login from the address for the rest of the window (many accounts guessed from one place).
- **One account, any addresses**: ``LOGIN_THROTTLE_ACCOUNT_ATTEMPTS`` failures (far more
  than a person makes) lock the account: a ``LoginLock`` row, refused whatever the
  password for one window, which an admin sees and can lift (``lift_lock``, audited).

A right password clears its pair's count. The check sits in the authentication backend,
so every password login is covered (the portal's page, ``/admin/login/`` and the API's
``POST /api/v1/tokens``), and the pages ask first (``check``) to answer 429 with the
wait in the reader's language; a request is checked once, however many places ask. The
counts live in the cache (shared: production requires ``REDIS_URL``); the lock is a
database row, so it holds and is listed whatever happens to the cache.
"""

import hashlib
import math
import time
import unicodedata
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.signals import user_logged_in, user_login_failed
from django.core.cache import cache
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.dispatch import receiver
from django.http import HttpRequest
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from portal import access, audit, session_user
from portal.client_address import client_address
from portal.errors import InvalidTransition, NotPermitted
from portal.models import AuditEvent, LoginLock
from portal.service_tokens import is_service_account

# Where a request keeps what its check answered, so the page's check and the backend's
# are one (the first claims the pair's turn; a second claim would refuse it).
CHECKED = "_portal_login_checked"

# The clock the waits are measured on (seconds; tests move it instead of sleeping).
clock = time.time


@dataclass(frozen=True)
class Refusal:
    """Why a login is not tried now, and in how many seconds to try again (at least 1)."""

    reason: str  # "pair", "address" or "account"
    retry_after: int

    @property
    def message(self) -> str:
        """What the person reads, in the active language."""
        if self.reason == "pair":
            return ngettext(
                "Too many failed logins for this account from here. Try again in %(n)s second.",
                "Too many failed logins for this account from here. Try again in %(n)s seconds.",
                self.retry_after,
            ) % {"n": self.retry_after}
        minutes = max(1, math.ceil(self.retry_after / 60))
        if self.reason == "address":
            return ngettext(
                "Too many failed logins from your address. Try again in %(n)s minute.",
                "Too many failed logins from your address. Try again in %(n)s minutes.",
                minutes,
            ) % {"n": minutes}
        return ngettext(
            "This account is locked after too many failed logins. Try again in %(n)s "
            "minute, or ask an administrator to lift the lock.",
            "This account is locked after too many failed logins. Try again in %(n)s "
            "minutes, or ask an administrator to lift the lock.",
            minutes,
        ) % {"n": minutes}


def account_name(username: Any) -> str:
    """A username as the counts and locks know it: as Django's login form reads it
    (NFKC), without surrounding space, case folded, at most a username's length."""
    return unicodedata.normalize("NFKC", str(username or "")).strip().casefold()[:150]


def delay(failures: int) -> int:
    """Seconds a pair waits after its ``failures``-th failure: 0 while free, then 1, 2,
    4 … up to ``LOGIN_THROTTLE_DELAY_MAX``."""
    beyond = failures - settings.LOGIN_THROTTLE_ATTEMPTS
    if beyond < 0:
        return 0
    return min(2 ** min(beyond, 30), settings.LOGIN_THROTTLE_DELAY_MAX)


def _digest(*parts: str) -> str:
    # Cache keys of a fixed, safe shape, and no username or address in the cache in clear.
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:40]


@dataclass(frozen=True)
class _Keys:
    pair: str  # the pair's failures
    pair_until: str  # when the pair may try again
    pair_turn: str  # + ":<failures>": taken by the one try allowed after that many
    address: str
    address_since: str
    account: str


def _keys(request: HttpRequest | None, name: str) -> _Keys:
    address = client_address(request) if request is not None else ""
    # The account's generation: lifting a lock starts every pair of the account afresh.
    generation = str(cache.get(_generation_key(name), 0))
    pair = _digest(generation, name, address)
    return _Keys(
        pair=f"login:pair:{pair}",
        pair_until=f"login:pair-until:{pair}",
        pair_turn=f"login:pair-turn:{pair}",
        address=f"login:address:{_digest(address)}",
        address_since=f"login:address-since:{_digest(address)}",
        account=f"login:account:{_digest(name)}",
    )


def _generation_key(name: str) -> str:
    return f"login:generation:{_digest(name)}"


def _add_one(key: str) -> int:
    """Count one more in ``key`` (kept one window from its first count); the new count."""
    window = settings.LOGIN_THROTTLE_WINDOW
    if cache.add(key, 1, window):
        return 1
    try:
        return cache.incr(key)
    except ValueError:  # expired between add and incr
        cache.set(key, 1, window)
        return 1


def _seconds_until(moment: float, now: float) -> int:
    return max(1, math.ceil(moment - now))


def active_lock(name: str, now: datetime | None = None) -> LoginLock | None:
    """The lock in force on the account ``name`` (as ``account_name`` reads it), if any."""
    now = now or timezone.now()
    return (
        LoginLock.objects.filter(username=name, lifted_at__isnull=True, until__gt=now)
        .order_by("-until")
        .first()
    )


def check(request: HttpRequest | None, username: Any) -> Refusal | None:
    """Whether a login as ``username`` may be tried now: None, or why not.

    A pair past its free failures may try once per delay: the try allowed here takes the
    pair's turn, so tries sent at the same moment are refused but one. Asked again for
    the same request and name, the first answer is given again."""
    name = account_name(username)
    if request is not None:
        checked = getattr(request, CHECKED, None)
        if checked is not None and checked[0] == name:
            return checked[1]
    refusal = _check(request, name)
    if request is not None:
        setattr(request, CHECKED, (name, refusal))
    return refusal


def _check(request: HttpRequest | None, name: str) -> Refusal | None:
    now = timezone.now()
    lock = active_lock(name, now)
    if lock is not None:
        return Refusal("account", _seconds_until(lock.until.timestamp(), now.timestamp()))
    if request is None:
        return None
    keys = _keys(request, name)
    counts = cache.get_many([keys.address, keys.address_since, keys.pair, keys.pair_until])
    moment = clock()
    if counts.get(keys.address, 0) >= settings.LOGIN_THROTTLE_ADDRESS_ATTEMPTS:
        since = counts.get(keys.address_since, moment)
        return Refusal("address", _seconds_until(since + settings.LOGIN_THROTTLE_WINDOW, moment))
    failures = counts.get(keys.pair, 0)
    wait = delay(failures)
    if not wait:
        return None
    until = counts.get(keys.pair_until, 0)
    if moment < until:
        return Refusal("pair", _seconds_until(until, moment))
    # One try per wait: the first to take the turn; the others are told to come back
    # when its answer is in (its failure sets the next wait). The turn expires with the
    # wait, so a try that never reached the password gives it back.
    if not cache.add(f"{keys.pair_turn}:{failures}", 1, wait):
        return Refusal("pair", 1)
    return None


def refused(request: HttpRequest | None) -> bool:
    """Whether this request's login was refused by the check (and so never tried)."""
    checked = getattr(request, CHECKED, None) if request is not None else None
    return checked is not None and checked[1] is not None


def record_failure(request: HttpRequest | None, username: Any) -> None:
    """Count a wrong password: for the pair (and make it wait), the address and the
    account (and lock it at ``LOGIN_THROTTLE_ACCOUNT_ATTEMPTS``)."""
    name = account_name(username)
    keys = _keys(request, name)
    if request is not None:
        moment = clock()
        wait = delay(_add_one(keys.pair))
        if wait:
            cache.set(keys.pair_until, moment + wait, settings.LOGIN_THROTTLE_WINDOW)
        if _add_one(keys.address) == 1:
            cache.set(keys.address_since, moment, settings.LOGIN_THROTTLE_WINDOW)
    if _add_one(keys.account) == settings.LOGIN_THROTTLE_ACCOUNT_ATTEMPTS:
        _lock(name, request)


def _lock(name: str, request: HttpRequest | None) -> None:
    """Lock the account ``name``; counted in the cache, so only the failure that reached
    the limit gets here."""
    now = timezone.now()
    if active_lock(name, now) is not None:
        return
    source = AuditEvent.Source.WEB
    if request is not None and request.path_info.startswith("/api/"):
        source = AuditEvent.Source.API
    with transaction.atomic():
        lock = LoginLock.objects.create(
            username=name,
            failures=settings.LOGIN_THROTTLE_ACCOUNT_ATTEMPTS,
            locked_at=now,
            until=now + timedelta(seconds=settings.LOGIN_THROTTLE_WINDOW),
        )
        audit.record(
            actor=None,
            verb="login_lock.locked",
            obj=lock,
            source=source,
            after={"username": name, "failures": lock.failures, "until": lock.until},
            at=now,
        )


def forget_pair(request: HttpRequest | None, username: Any) -> None:
    """A right password: the pair starts again (the address and account counts stay, so
    a login to one's own account never hides guesses at others)."""
    if request is None:
        return
    keys = _keys(request, account_name(username))
    failures = cache.get(keys.pair, 0)
    cache.delete_many([keys.pair, keys.pair_until, f"{keys.pair_turn}:{failures}"])


@transaction.atomic
def lift_lock(
    *, actor: Any, lock: LoginLock, now: datetime | None = None, source: str = "admin"
) -> LoginLock:
    """An admin lifts a lock in force: the account can log in again at once, from every
    address, with its counts started afresh."""
    now = now or timezone.now()
    if not access.is_admin(actor):
        raise NotPermitted(_("Only an admin lifts a login lock."))
    locked = LoginLock.objects.select_for_update().get(pk=lock.pk)
    if not locked.in_force(now):
        raise InvalidTransition(
            _("The lock on “%(name)s” is no longer in force.") % {"name": locked.username},
            code="not_locked",
        )
    locked.lifted_at, locked.lifted_by = now, actor
    locked.save(update_fields=["lifted_at", "lifted_by"])
    audit.record(
        actor=actor,
        verb="login_lock.lifted",
        obj=locked,
        source=source,
        before={"until": locked.until},
        after={"username": locked.username},
        at=now,
    )
    # At once, not on commit: counts started afresh under a lock that stays (the change
    # rolled back) only give its account a few more tries from each address.
    _start_afresh(locked.username)
    return locked


def _start_afresh(name: str) -> None:
    cache.delete(f"login:account:{_digest(name)}")
    generation = _generation_key(name)
    # A new generation for a window longer than any pair's count.
    cache.set(generation, cache.get(generation, 0) + 1, settings.LOGIN_THROTTLE_WINDOW * 2)


class ThrottledModelBackend(ModelBackend):
    """Django's backend, refusing any password (even the right one) while ``check``
    refuses the login."""

    def authenticate(self, request: HttpRequest | None, username: Any = None, **kwargs: Any):
        name = username if username is not None else kwargs.get("username", "")
        if check(request, name) is not None:
            raise PermissionDenied
        return super().authenticate(request, username=username, **kwargs)

    def user_can_authenticate(self, user: Any) -> bool:
        """Never a service token's account (portal/service_tokens.py): it has no password,
        and a session of it, however made, is no one's (Django asks here for both)."""
        return super().user_can_authenticate(user) and not is_service_account(user)

    def get_user(self, user_id: Any) -> Any:
        """The session's user with whether it is in the finance group
        (``access.is_finance``), its unread notifications as the request starts (the
        navigation's bell) and its roles (``access.roles``): what every page asks, in one
        written-out statement (``portal.session_user``). A service token's account is no
        one's session."""
        user = session_user.read(user_id)
        if user is None or user._portal_is_token:
            return None
        return user if super().user_can_authenticate(user) else None


@receiver(user_login_failed)
def _count_failure(sender: Any, credentials: dict, request: HttpRequest | None = None, **_: Any):
    if refused(request):
        return  # refused before the password was tried: not a guess
    record_failure(request, credentials.get("username", ""))


@receiver(user_logged_in)
def _forget_pair(sender: Any, request: HttpRequest | None, user: Any, **_: Any) -> None:
    forget_pair(request, user.get_username())
