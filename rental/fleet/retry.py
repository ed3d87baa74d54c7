"""When to try a failed cloud call again: pure functions of the attempts so far.

Every number is in seconds; ``jitter`` is a value in [0, 1) the caller draws, so the
functions stay deterministic and are tested alone.
"""

# The base wait before the n-th retry (n = 1, 2, …); the last one repeats.
RETRY_COUNTDOWNS: tuple[int, ...] = (5, 15, 45, 120, 300)
# The longest wait a retry is ever scheduled with (the broker's visibility timeout must
# exceed it; see CELERY_BROKER_TRANSPORT_OPTIONS in the settings).
MAX_COUNTDOWN = max(RETRY_COUNTDOWNS)


def retry_countdown(retries_done: int, *, jitter: float) -> int:
    """Seconds to wait before the next try after ``retries_done`` retries: the base wait
    spread over [base/2, base) so workers that failed together do not retry together."""
    base = RETRY_COUNTDOWNS[min(max(retries_done, 0), len(RETRY_COUNTDOWNS) - 1)]
    return max(1, int(base / 2 + base / 2 * min(max(jitter, 0.0), 0.999)))


def should_give_up(retries_done: int) -> bool:
    """True once every scheduled retry has been spent."""
    return retries_done >= len(RETRY_COUNTDOWNS)
