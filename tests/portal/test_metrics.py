"""/metrics: django-prometheus's request and database metrics and the portal's own gauges,
scraped and parsed as Prometheus reads them; the gauges take a fixed number of queries
whatever the number of rows; only the token or a configured address may scrape; the
alert rules in docs/operations/alerts.yml parse and name only metrics that exist."""

import ipaddress
import re
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest
import yaml
from django.test import Client
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from billing.models import SpendSnapshot
from billing.periods import period_start
from portal import metrics
from portal.models import Heartbeat
from rental.models import (
    Instance,
    Orphan,
    OutboxMessage,
    Pool,
    RegionSync,
    Reservation,
    TerminationReason,
    UnbilledCloudTime,
)
from tests import factories
from tests.billing.helpers import lease, run

ROOT = Path(__file__).resolve().parents[2]
ALERTS = ROOT / "docs" / "operations" / "alerts.yml"
TOKEN = "metrics-token-for-tests-0123456789"
INF = float("inf")


def samples(text: str) -> dict[tuple[str, frozenset], float]:
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(found: dict, name: str, **labels: str) -> float:
    return found[(name, frozenset(labels.items()))]


@pytest.fixture
def scrape_from_anywhere(settings):
    settings.PORTAL_METRICS_TOKEN = ""
    settings.PORTAL_METRICS_NETWORKS = [ipaddress.ip_network("0.0.0.0/0")]


def _world(f0, now):
    """Two pools, leases holding GPUs in two tiers, two queued, live and failed
    instances, two regions (one never synced and failing), orphans, unbilled cloud time
    and a spend."""
    h100 = factories.gpu_model("H100 80GB")
    Pool.objects.create(gpu_model=h100, capacity=4)
    run(lease(f0, f0.alpha, tier="guaranteed", gpus=2, status="active"), start=now, gpus=2)
    run(lease(f0, f0.beta, tier="burst", gpus=1, status="ending"), start=now)
    ended_run = run(lease(f0, f0.beta, tier="burst"), start=now - timedelta(hours=3), hours=1)
    for minutes in (120, 30):
        queued = lease(f0, f0.gamma, tier="", status="queued")
        Reservation.objects.filter(pk=queued.pk).update(
            submitted_at=now - timedelta(minutes=minutes)
        )
    failed = lease(f0, f0.gamma, status="failed")
    failed_instance = Instance.objects.create(
        reservation=failed,
        account=f0.account,
        offering=f0.offering,
        region="us-east-1",
        market="on_demand",
        gpu_count=1,
        rate_per_hour=Decimal("2.50"),
        state=Instance.State.FAILED,
        termination_reason=TerminationReason.FAILED,
    )
    RegionSync.objects.create(
        account=f0.account, region="us-east-1", synced_at=now - timedelta(seconds=45)
    )
    RegionSync.objects.create(account=f0.account, region="us-west-2", sync_error="auth: denied")
    for status, cost in (("open", "3.20"), ("stuck", "1.00"), ("terminated", "9.00")):
        Orphan.objects.create(
            account=f0.account,
            region="us-east-1",
            external_id=f"i-{status}",
            status=status,
            hourly_cost=Decimal(cost),
            first_seen_at=now,
            last_seen_at=now,
        )
    SpendSnapshot.objects.create(
        project=f0.alpha,
        period=period_start(now).date(),
        amount=Decimal("123.45"),
        as_of=now - timedelta(seconds=30),
    )
    Heartbeat.objects.create(name=Heartbeat.BEAT, at=now - timedelta(seconds=10))
    # Work for Celery: two messages waiting since the broker went down 90 s ago, one sent.
    for seconds, sent in ((90, None), (20, None), (200, now)):
        OutboxMessage.objects.create(
            task="rental.tasks.provision_instance_task",
            args=[seconds],
            created=now - timedelta(seconds=seconds),
            sent_at=sent,
        )
    # Cloud time after billing stopped: 40 s of the ended run, 5 s of the failed one.
    for instance, seconds in ((ended_run.instance, 40), (failed_instance, 5)):
        UnbilledCloudTime.objects.create(
            instance=instance,
            gpu_model=f0.model,
            gpu_count=instance.gpu_count,
            market="on_demand",
            start=now - timedelta(hours=1),
            end=now - timedelta(hours=1) + timedelta(seconds=seconds),
            gpu_seconds=instance.gpu_count * seconds,
            rate=Decimal("2.50"),
        )


def test_it_exposes_the_portals_gauges(f0, settings):
    now = timezone.now().replace(microsecond=0)
    _world(f0, now)
    found = samples(metrics.exposition(now=now).decode())

    assert value(found, "portal_live_instances", account="Test cloud", region="us-east-1") == 2
    assert value(found, "portal_pool_capacity_gpus", pool="A100 80GB") == 8
    assert value(found, "portal_pool_capacity_gpus", pool="H100 80GB") == 4
    assert value(found, "portal_gpus_in_use", pool="A100 80GB", tier="guaranteed") == 2
    assert value(found, "portal_gpus_in_use", pool="A100 80GB", tier="burst") == 1
    assert value(found, "portal_gpus_in_use", pool="A100 80GB", tier="spot") == 0
    assert value(found, "portal_gpus_in_use", pool="H100 80GB", tier="guaranteed") == 0
    assert value(found, "portal_queue_length", pool="A100 80GB") == 2
    assert value(found, "portal_queue_length", pool="H100 80GB") == 0
    assert value(found, "portal_queue_oldest_wait_seconds", pool="A100 80GB") == 7200
    assert value(found, "portal_queue_oldest_wait_seconds", pool="H100 80GB") == 0
    assert value(found, "portal_sync_lag_seconds", account="Test cloud", region="us-east-1") == 45
    assert value(found, "portal_sync_lag_seconds", account="Test cloud", region="us-west-2") == INF
    assert value(found, "portal_sync_failing", account="Test cloud", region="us-east-1") == 0
    assert value(found, "portal_sync_failing", account="Test cloud", region="us-west-2") == 1
    assert value(found, "portal_sync_period_seconds") == 30
    assert value(found, "portal_failed_launches_total") == 1
    assert value(found, "portal_orphans", status="open") == 1
    assert value(found, "portal_orphans", status="stuck") == 1
    assert value(found, "portal_orphans", status="terminating") == 0
    assert value(found, "portal_orphans_hourly_cost") == pytest.approx(4.20)
    assert value(found, "portal_unbilled_gpu_seconds_total", pool="A100 80GB") == 45
    assert value(found, "portal_spend_month_to_date", project="alpha", currency="USD") == 123.45
    assert (
        "portal_spend_month_to_date",
        frozenset({"project": "beta", "currency": "USD"}.items()),
    ) not in found
    assert value(found, "portal_spend_snapshot_age_seconds") == 30
    assert value(found, "portal_beat_heartbeat_age_seconds") == 10
    assert (
        value(found, "portal_beat_heartbeat_period_seconds")
        == settings.PORTAL_BEAT_HEARTBEAT_SECONDS
    )
    assert value(found, "portal_outbox_pending") == 2
    assert value(found, "portal_outbox_oldest_pending_seconds") == 90
    # The rows stay as they were: a scrape writes nothing.
    assert Reservation.objects.filter(status="queued").count() == 2


def test_it_says_never_when_nothing_has_run_yet(db):
    found = samples(metrics.exposition().decode())
    assert value(found, "portal_beat_heartbeat_age_seconds") == INF
    assert value(found, "portal_spend_snapshot_age_seconds") == INF
    assert value(found, "portal_failed_launches_total") == 0
    assert value(found, "portal_outbox_pending") == 0
    assert value(found, "portal_outbox_oldest_pending_seconds") == 0


def test_it_computes_the_gauges_in_a_fixed_number_of_queries(f0, django_assert_num_queries):
    now = timezone.now()
    with django_assert_num_queries(10):
        metrics.exposition(now=now)
    _world(f0, now)
    for n in range(5):
        run(lease(f0, f0.gamma, tier="burst", status="active"), start=now)
        RegionSync.objects.create(account=f0.account, region=f"ap-south-{n}")
    with django_assert_num_queries(10):
        found = samples(metrics.exposition(now=now).decode())
    assert value(found, "portal_live_instances", account="Test cloud", region="us-east-1") == 7


def test_it_exposes_request_and_database_metrics(db, client, scrape_from_anywhere):
    assert client.get("/healthz").status_code == 200
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain; version=")
    found = samples(response.content.decode())
    assert (
        value(
            found,
            "django_http_responses_total_by_status_view_method_total",
            status="200",
            view="healthz",
            method="GET",
        )
        >= 1
    )
    assert value(found, "django_db_execute_total", alias="default", vendor="postgresql") >= 1
    assert value(found, "portal_failed_launches_total") == 0


def test_it_is_off_until_a_token_or_an_address_is_configured(f0, client, settings):
    settings.PORTAL_METRICS_TOKEN = ""
    settings.PORTAL_METRICS_NETWORKS = []
    client.force_login(f0.admin)
    assert client.get("/metrics", REMOTE_ADDR="127.0.0.1").status_code == 404
    anonymous = Client()
    response = anonymous.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 404
    assert b"portal_" not in response.content


def test_it_lets_in_the_bearer_token_only(f0, client, settings):
    settings.PORTAL_METRICS_TOKEN = TOKEN
    settings.PORTAL_METRICS_NETWORKS = []
    assert client.get("/metrics").status_code == 403
    assert client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}x").status_code == 403
    assert client.get("/metrics", HTTP_AUTHORIZATION=f"Basic {TOKEN}").status_code == 403
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer ключ").status_code == 403
    client.force_login(f0.admin)  # a person's session is not a scraper's token
    refused = client.get("/metrics")
    assert refused.status_code == 403 and b"portal_" not in refused.content
    allowed = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert allowed.status_code == 200 and b"portal_live_instances" in allowed.content
    assert TOKEN not in allowed.content.decode()


def test_it_lets_in_configured_addresses_and_believes_no_forwarded_header(db, client, settings):
    settings.PORTAL_METRICS_TOKEN = ""
    settings.PORTAL_METRICS_NETWORKS = [ipaddress.ip_network("10.0.0.0/8")]
    assert client.get("/metrics", REMOTE_ADDR="10.1.2.3").status_code == 200
    assert client.get("/metrics", REMOTE_ADDR="::ffff:10.1.2.3").status_code == 200
    assert client.get("/metrics", REMOTE_ADDR="192.168.1.9").status_code == 403
    spoofed = client.get("/metrics", REMOTE_ADDR="192.168.1.9", HTTP_X_FORWARDED_FOR="10.1.2.3")
    assert spoofed.status_code == 403
    assert client.get("/metrics", REMOTE_ADDR="not-an-address").status_code == 403


# --- The alert rules --------------------------------------------------------------------

METRIC = re.compile(r"\b((?:portal|django)_[a-z0-9_]+)")
SUFFIXES = ("_bucket", "_count", "_sum")


def rules() -> list[dict]:
    document = yaml.safe_load(ALERTS.read_text())
    return [rule for group in document["groups"] for rule in group["rules"]]


def test_every_alert_rule_has_what_prometheus_and_the_reader_need():
    found = rules()
    assert len(found) >= 8
    names = [rule["alert"] for rule in found]
    assert len(set(names)) == len(names)
    operations = (ROOT / "docs" / "operations.md").read_text()
    for rule in found:
        assert set(rule) == {"alert", "expr", "for", "labels", "annotations"}, rule["alert"]
        assert rule["labels"]["severity"] in {"critical", "warning"}, rule["alert"]
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]
        assert re.fullmatch(r"\d+[smh]", rule["for"]), rule["alert"]
        assert f"`{rule['alert']}`" in operations, f"{rule['alert']} is not explained"


def test_every_metric_an_alert_names_is_exposed(f0, client, scrape_from_anywhere):
    _world(f0, timezone.now())
    assert client.get("/healthz").status_code == 200
    exposed = {name for name, _labels in samples(client.get("/metrics").content.decode())}
    named = {name for rule in rules() for name in METRIC.findall(rule["expr"])}
    assert named, "the rules name no metric"
    missing = sorted(
        name
        for name in named
        if name not in exposed and not any(name + suffix in exposed for suffix in SUFFIXES)
    )
    assert missing == []


def test_the_alert_check_catches_a_metric_that_does_not_exist():
    assert METRIC.findall("portal_queue_lenght > 3 and on() django_x_total") == [
        "portal_queue_lenght",
        "django_x_total",
    ]


# The opening of an aggregation that keeps one value of the series every web replica
# reports alike: ``max without (instance) (`` or ``max by (pool) (``.
ONE_OF_THE_REPLICAS = re.compile(r"max\s+(?:without\s*\(\s*instance\s*\)|by\s*\([^()]*\))\s*$")


def counted_once(expr: str, at: int) -> bool:
    """Whether the metric named at ``at`` of ``expr`` is inside a max across replicas."""
    opened: list[int] = []
    for place, char in enumerate(expr[:at]):
        if char == "(":
            opened.append(place)
        elif char == ")" and opened:
            opened.pop()
    return any(ONE_OF_THE_REPLICAS.search(expr[:place]) for place in opened)


def test_no_alert_counts_the_portals_own_metrics_once_per_web_replica():
    """The portal's own metrics are read from the database, so every web replica reports
    the same values, and Prometheus scraping each replica has every such series once per
    replica. A rule takes one of them (the max across replicas) before it compares or
    adds up, or two replicas would halve a threshold (a sum) or fire each alert twice."""
    for rule in rules():
        expr = rule["expr"]
        for found in re.finditer(r"\bportal_[a-z0-9_]+", expr):
            assert counted_once(expr, found.start()), (rule["alert"], found.group(0))


def test_the_replica_check_can_fail():
    def checked(expr: str) -> bool:
        return counted_once(expr, expr.index("portal_x"))

    assert not checked("sum by (pool) (increase(portal_x[1h])) > 1800")
    assert not checked("portal_x > 3 * max without (instance) (portal_y)")
    assert not checked("max without (instance) (portal_y) < portal_x")
    assert checked("sum(max without (instance) (portal_x{status=~'open|stuck'})) > 0")
    assert checked("max by (pool) (increase(portal_x[1h])) > 1800")
