"""``/metrics`` in Prometheus's text format: django-prometheus's request and database
metrics of this process (or of every gunicorn worker, in prometheus_client's
multiprocess mode), then the portal's own gauges.

The portal's gauges are computed from the database at each scrape by the functions named
in ``PORTAL_METRICS_FAMILIES`` (portal's here, rental's and billing's in their apps), each
a fixed number of aggregate queries whatever the number of rows. Being read from the
database, they are the same whichever process answers.
"""

import os
from collections.abc import Iterable
from datetime import datetime

from django.conf import settings
from django.utils import timezone
from django.utils.module_loading import import_string
from prometheus_client import REGISTRY, CollectorRegistry, generate_latest, multiprocess
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from portal.models import Heartbeat


def gauge(name: str, documentation: str, labels: Iterable[str] = ()) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, labels=list(labels))


def families(*, now: datetime) -> list[Metric]:
    """Beat's heartbeat: its age and its period (an alert compares the two). One query."""
    at = Heartbeat.objects.filter(name=Heartbeat.BEAT).values_list("at", flat=True).first()
    age = gauge(
        "portal_beat_heartbeat_age_seconds",
        "Seconds since beat's heartbeat task last ran on a worker (+Inf: never).",
    )
    age.add_metric([], float("inf") if at is None else (now - at).total_seconds())
    period = gauge("portal_beat_heartbeat_period_seconds", "How often beat sends its heartbeat.")
    period.add_metric([], float(settings.PORTAL_BEAT_HEARTBEAT_SECONDS))
    return [age, period]


class PortalCollector(Collector):
    """Every family of ``PORTAL_METRICS_FAMILIES``, computed when collected."""

    def __init__(self, now: datetime) -> None:
        self.now = now

    def collect(self) -> Iterable[Metric]:
        for path in settings.PORTAL_METRICS_FAMILIES:
            yield from import_string(path)(now=self.now)


def process_registry() -> CollectorRegistry:
    """django-prometheus's metrics: this process's, or every worker's when
    ``PROMETHEUS_MULTIPROC_DIR`` is set (docs/operations.md, "Metrics")."""
    if "PROMETHEUS_MULTIPROC_DIR" in os.environ:
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        return registry
    return REGISTRY


def exposition(*, now: datetime | None = None) -> bytes:
    portal = CollectorRegistry()
    portal.register(PortalCollector(now or timezone.now()))
    return generate_latest(process_registry()) + generate_latest(portal)
