"""Celery tasks of the people side: thin interfaces to services."""

from celery import shared_task

from portal import health


@shared_task(ignore_result=True)
def record_beat_task() -> None:
    """Beat's heartbeat (``/readyz``): sent by beat, run by a worker. Each message expires
    after one period (the beat schedule), so heartbeats queued while no worker ran do not
    make a stopped beat look alive when a worker comes back."""
    health.record_beat()
