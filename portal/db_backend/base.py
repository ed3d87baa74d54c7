"""PostgreSQL for the portal: django-prometheus's backend (query metrics for /metrics) that
waits for a server that is restarting instead of failing at once.

While PostgreSQL restarts (a fast stop and a start: a second or two), a new connection is
refused ("Connection refused", "the database system is starting up"). Kept connections
are checked before reuse (``DATABASE_CONN_HEALTH_CHECKS``), so after a restart every
request and task needs a new one: without a wait, every request that arrived meanwhile
would answer 503. Here a connection is tried again for up to
``DATABASE_RESTART_WAIT_SECONDS``, so those requests are served a moment late and a
restart costs only the requests whose queries it cut.

A server away for longer is an outage: the wait ends in the error (a 503 for a request),
one warning is logged (``portal.outages``), and for ``PORTAL_OUTAGE_RETRY_SECONDS`` this
process tries once without waiting, so an outage does not hold every request for the
whole wait. One line is logged when the database answers again.
"""

import time

from django.conf import settings
from django_prometheus.db.backends.postgresql import base

from portal.outages import Outage

PAUSE = 0.1  # seconds between two attempts
CONSEQUENCE = "requests that need it answer 503, tasks that need it fail"

outage = Outage("The database")


class DatabaseWrapper(base.DatabaseWrapper):
    def get_new_connection(self, conn_params):
        wait = 0 if outage.skip() else settings.DATABASE_RESTART_WAIT_SECONDS
        deadline = time.monotonic() + wait
        while True:
            try:
                connection = super().get_new_connection(conn_params)
            except self.Database.OperationalError as error:
                if time.monotonic() + PAUSE > deadline:
                    outage.failed(error, consequence=CONSEQUENCE)
                    raise
                time.sleep(PAUSE)
            else:
                outage.answered()
                return connection
