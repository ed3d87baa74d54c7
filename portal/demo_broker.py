"""The demo's Celery broker: kombu's filesystem transport, with messages that appear whole.

kombu's own ``_put`` creates the message file under its final name, then writes it; a
worker polling the folder in between takes the empty file, fails to decode it and dies
(``JSONDecodeError``), stopping the whole demo. Here a message is written under a name no
reader takes and renamed into place: the rename is atomic, so a reader sees all or nothing.
Used only with ``CELERY_BROKER_URL=filesystem://`` (``portal.settings``).
"""

import os
import uuid
from time import monotonic
from typing import Any

from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.encoding import str_to_bytes
from kombu.utils.json import dumps


class Channel(filesystem.Channel):
    def _put(self, queue: str, payload: Any, **kwargs: Any) -> None:
        """Put ``payload`` on ``queue``, visible to readers only once written in full."""
        name = f"{round(monotonic() * 1000)}_{uuid.uuid4()}.{queue}.msg"
        final = os.path.join(self.data_folder_out, name)
        # A dot name: readers take only names that end in ".<queue>.msg".
        partial = os.path.join(self.data_folder_out, f".{uuid.uuid4()}.partial")
        try:
            with open(partial, "wb") as handle:
                handle.write(str_to_bytes(dumps(payload)))
            os.replace(partial, final)
        except OSError as exc:
            raise ChannelError(f"Cannot add file {final!r} to directory") from exc


class Transport(filesystem.Transport):
    Channel = Channel
