"""Celery beat's scheduler for the portal (``CELERY_BEAT_SCHEDULER``): one warning per
broker outage instead of a traceback per task.

Beat sends each periodic task when it is due. While the broker cannot be reached, Celery's
own scheduler logs "Message Error" with the exception's chain and the whole stack for
every task it fails to send (about 170 lines each), each time one falls due: with the
default intervals some forty times a minute. Here a send that fails because the broker cannot
be reached is one warning when the outage begins and one line when the broker answers
again (``portal.outages``, as the web and worker processes log it). For
``PORTAL_OUTAGE_RETRY_SECONDS`` after a failure beat does not try (each try may wait
``PORTAL_REDIS_TIMEOUT_SECONDS`` twice), and the tasks that fall due meanwhile are skipped.
Nothing is lost by that: each is a periodic sweep or check that runs again at its next
time and does the work of the runs it missed, and work asked for by people waits in the
outbox (``rental.jobs``), which beat's sweep sends once the broker is back.

Any other error is logged as Celery logs it: it is a bug, not an outage.
"""

import logging

from celery import beat
from kombu.exceptions import OperationalError as BrokerUnreachable

from portal.outages import Outage

logger = logging.getLogger("celery.beat")  # beat's own lines keep their logger's name

CONSEQUENCE = "beat skips the periodic tasks that fall due meanwhile (each runs at its next time)"

outage = Outage("The Celery broker (beat)")


def unreachable(error: BaseException) -> BrokerUnreachable | None:
    """The broker's error behind ``error``, if that is what it is. Celery raises
    SchedulingError while handling the send's error, so that one is its context."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, BrokerUnreachable):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


class Scheduler(beat.PersistentScheduler):
    def apply_entry(self, entry: beat.ScheduleEntry, producer=None) -> None:
        if outage.skip():
            logger.debug("Scheduler: broker out of reach, %s skipped", entry.name)
            return
        logger.info("Scheduler: Sending due task %s (%s)", entry.name, entry.task)
        try:
            self.apply_async(entry, producer=producer, advance=False)
        except Exception as error:  # as Celery's scheduler: beat must go on
            broker_error = unreachable(error)
            if broker_error is None:
                logger.exception("Message Error: %s", error)
            else:
                outage.failed(broker_error, consequence=CONSEQUENCE)
            return
        outage.answered()
