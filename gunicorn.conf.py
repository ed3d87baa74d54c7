"""gunicorn's settings for the portal, read from the folder it starts in (the image's /app).

With ``PROMETHEUS_MULTIPROC_DIR`` set (docker-compose.yml sets it for web), every worker
process writes its request and database metrics into that folder and /metrics adds them
up; a worker that exits is marked dead here, so its gauges stop counting. See
docs/operations.md, "Metrics".
"""

import os

from prometheus_client import multiprocess


def child_exit(server: object, worker: object) -> None:
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        multiprocess.mark_process_dead(worker.pid)  # type: ignore[attr-defined]


# The longest request line gunicorn reads (its default is 4094): a list's filters can make
# long query strings, and beyond this gunicorn answers its own HTML 400 before the portal
# sees the request. nginx's default (large_client_header_buffers 8k) is the same bound.
limit_request_line = 8190
