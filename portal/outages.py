"""Redis out of reach, remembered per process for a moment (the cache and the outbox).

When a call to Redis fails, the process leaves Redis alone for
``PORTAL_OUTAGE_RETRY_SECONDS``: the cache answers as an empty cache and the outbox keeps
its messages for the sweep, without paying a connection attempt on every request. One
warning when an outage begins and one line when the service answers again, whatever
the number of requests in between.
"""

import logging
import time

from django.conf import settings

logger = logging.getLogger(__name__)


class Outage:
    """One service's state in this process: reachable, or failed and not to be tried
    again before a moment. Shared by the process's threads (a race costs at most one
    extra attempt or one extra log line)."""

    def __init__(self, service: str) -> None:
        self.service = service
        self._since: float | None = None  # when the outage began (monotonic seconds)
        self._retry_at = 0.0

    def skip(self) -> bool:
        """True while the last failure is more recent than the retry time."""
        return time.monotonic() < self._retry_at

    def failed(self, error: BaseException, *, consequence: str) -> None:
        now = time.monotonic()
        if self._since is None:
            self._since = now
            logger.warning(
                "%s cannot be reached (%s: %s); %s. Tried again every %s s.",
                self.service,
                type(error).__name__,
                error,
                consequence,
                settings.PORTAL_OUTAGE_RETRY_SECONDS,
            )
        self._retry_at = now + settings.PORTAL_OUTAGE_RETRY_SECONDS

    def answered(self) -> None:
        if self._since is not None:
            logger.warning(
                "%s answers again after %.0f s.", self.service, time.monotonic() - self._since
            )
            self._since = None
            self._retry_at = 0.0
