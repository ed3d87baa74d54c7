"""The Celery broker on Redis: kombu's transport, with a worker that survives losing Redis.

When the connection to Redis drops while tasks are running (they are acknowledged late),
the worker closes its channel to reconnect, and kombu first tries to put those tasks'
messages back in the queue. The connection is already gone, so kombu has nothing to do
that with and raises ``AttributeError`` ("'NoneType' object has no attribute
'hostname'"), which stops the worker ("Unrecoverable error") instead of letting it wait
for Redis. Here that one step is skipped when the connection is gone: the messages stay
in Redis's unacknowledged set, and kombu hands them out again after the visibility
timeout (``PORTAL_BROKER_VISIBILITY_TIMEOUT``); a task that runs twice claims nothing
the second time. Used with ``CELERY_BROKER_URL=redis://…`` (``portal.settings``).
"""

import logging

from kombu.transport import redis

logger = logging.getLogger(__name__)


class QoS(redis.QoS):
    def restore_unacked(self, client=None) -> None:
        if client is None and self.channel.connection.client is None:
            logger.warning(
                "The broker connection was lost with %d message(s) in progress; they "
                "are handed out again after the visibility timeout.",
                len(self._delivered),
            )
            return
        super().restore_unacked(client)


class Channel(redis.Channel):
    QoS = QoS


class Transport(redis.Transport):
    Channel = Channel
