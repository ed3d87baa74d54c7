"""Reports (point 6): trend, idle waste, committed-capacity and rent-or-buy advice."""

import random
from datetime import timedelta
from decimal import Decimal

import pytest
from django.core.cache import cache
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from billing import reports, services, spend
from billing.periods import period_start
from billing.tasks import keep_commitment_advice_task
from portal.models import Project
from rental.agent import samples
from rental.catalog import storage
from rental.models import DataVolume, Pool, Quota, Reservation, UtilizationSample
from tests import factories
from tests.billing.helpers import at, lease, run

HOUR = 3600


def test_it_finds_the_commitment_that_would_have_cost_least():
    # One 730-hour month: 2 GPUs all the time, 6 GPUs half of it; $1,000 a committed
    # GPU-month against $2.50 metered. K = 2: $2,000 + 1,460 GPU-h × $2.50 = $5,650.00.
    best, options = reports.best_commitment(
        seconds_at_level={2: 365 * HOUR, 6: 365 * HOUR},
        span_seconds=730 * HOUR,
        price_per_gpu_month=Decimal("1000.00"),
        metered_rate=Decimal("2.50"),
        capacity=8,
    )
    totals = {option.committed: option.total for option in options}
    assert best == 2
    assert totals[0] == Decimal("7300.00")
    assert totals[1] == Decimal("6475.00")
    assert totals[2] == Decimal("5650.00")
    assert totals[3] == Decimal("5737.50")
    assert totals[6] == Decimal("6000.00")
    assert max(totals) == 6  # a K above the most GPUs run at once only adds committed cost


def test_it_prices_a_pool_of_a_million_gpus_up_to_the_load_it_ran():
    """C may be a million (the pool's bound): the advice prices only the K that can win,
    instead of a million options on one page."""
    best, options = reports.best_commitment(
        seconds_at_level={0: 365 * HOUR, 3: 365 * HOUR},
        span_seconds=730 * HOUR,
        price_per_gpu_month=Decimal("1000.00"),
        metered_rate=Decimal("2.50"),
        capacity=1_000_000,
    )
    assert [option.committed for option in options] == [0, 1, 2, 3]
    assert best == 0  # 3 GPUs × 365 h × $2.50 = $2,737.50 metered, less than 3 × $1,000


def exhaustive_best(seconds_at_level, *, span_seconds, price, rate, capacity) -> int:
    """The rule as written: price every K from 0 to the top, the cheapest (ties to the
    smaller) wins."""
    top = min(capacity, max((lvl for lvl, sec in seconds_at_level.items() if sec), default=0))
    months = Decimal(span_seconds) / (730 * HOUR)

    def cost(k):
        above = sum((lvl - k) * sec for lvl, sec in seconds_at_level.items() if lvl > k)
        return price * k * months + Decimal(above) * rate / HOUR

    return min(range(top + 1), key=lambda k: (cost(k), k))


@pytest.mark.parametrize("seed", range(40))
def test_the_best_commitment_is_the_one_every_k_priced_would_give(seed):
    chooser = random.Random(seed)
    profile = {
        chooser.randrange(0, 60): chooser.randrange(0, 400) * HOUR
        for _ in range(chooser.randrange(1, 8))
    }
    figures = {
        "span_seconds": 730 * HOUR,
        "capacity": chooser.choice([5, 30, 1_000_000]),
    }
    price = Decimal(chooser.randrange(50, 3000))
    rate = Decimal(chooser.randrange(50, 900)) / 100
    best, options = reports.best_commitment(
        seconds_at_level=profile, price_per_gpu_month=price, metered_rate=rate, **figures
    )
    assert best == exhaustive_best(profile, price=price, rate=rate, **figures)
    assert best in [option.committed for option in options]


def test_a_pool_that_ran_thousands_of_gpus_gets_a_table_a_person_reads():
    best, options = reports.best_commitment(
        seconds_at_level={0: 100 * HOUR, 1000: 600 * HOUR, 32767: 30 * HOUR},
        span_seconds=730 * HOUR,
        price_per_gpu_month=Decimal("1000.00"),
        metered_rate=Decimal("2.50"),
        capacity=2**31 - 1,
    )
    shown = [option.committed for option in options]
    assert best == 1000
    assert len(shown) <= reports.SHOWN_OPTIONS
    assert shown[0] == 0 and shown[-1] == 32767 and shown == sorted(set(shown))
    assert {998, 999, 1000, 1001, 1002} <= set(shown)  # the best and its neighbours
    by_k = {option.committed: option.total for option in options}
    assert by_k[1000] == min(by_k.values())


def test_rent_or_buy_shows_its_figures():
    answer = reports.rent_or_buy(
        steady_gpus=Decimal(4),
        rate=Decimal("2.50"),
        card_price=Decimal("25000.00"),
        lifetime_months=36,
        power_per_gpu_month=Decimal("60.00"),
        hosting_per_gpu_month=Decimal("90.00"),
    )
    assert answer.rent_per_month == Decimal("7300.00")
    assert answer.buy_per_month == Decimal("3377.78")
    assert answer.cheaper == "buy"


def test_the_load_profile_sweeps_overlapping_runs():
    t0 = at(2026, 4, 1)
    profile = reports.load_profile(
        [
            (t0, t0 + timedelta(hours=2), 2),
            (t0 + timedelta(hours=1), t0 + timedelta(hours=3), 1),
        ],
        start=t0,
        end=t0 + timedelta(hours=4),
    )
    assert profile == {0: HOUR, 1: HOUR, 2: HOUR, 3: HOUR}


def test_it_prices_idle_samples_as_waste(f0):
    now = timezone.now()
    running = lease(f0, f0.alpha, tier="burst", gpus=2, status="active")
    record = run(running, start=now - timedelta(hours=1), gpus=2)
    for minute in range(16):
        UtilizationSample.objects.create(
            instance=record.instance,
            at=now - timedelta(minutes=30 - minute),
            gpu_utilization=[] if minute == 15 else ([1, 4] if minute < 10 else [1, 80]),
        )
    [waste] = reports.idle_waste(project_id=f0.alpha.pk, now=now)
    assert (waste.samples, waste.idle_samples, waste.idle_gpu_seconds) == (16, 10, 1200)
    assert waste.cost == Decimal("0.83")  # 10 min × $5.00 an hour


def test_it_counts_idle_hours_from_the_rollups_once_raw_samples_are_gone(f0, settings):
    now = timezone.now().replace(minute=30, second=0, microsecond=0)
    running = lease(f0, f0.alpha, tier="burst", gpus=2, status="active")
    record = run(running, start=now - timedelta(days=21), gpus=2)
    old, recent = now - timedelta(days=20), now - timedelta(hours=2)
    for base in (old, recent):
        for minute in range(10):
            UtilizationSample.objects.create(
                instance=record.instance,
                at=base.replace(minute=minute),
                gpu_utilization=[1, 4] if minute < 6 else [90, 90],
            )
    samples.roll_up_hours(now=old + timedelta(hours=1), hours=1)
    samples.roll_up_hours(now=recent + timedelta(hours=1), hours=1)
    samples.purge_samples(now=now)  # the raw samples of 20 days ago are past retention
    assert UtilizationSample.objects.filter(at__lt=now - timedelta(days=7)).count() == 0
    [waste] = reports.idle_waste(project_id=f0.alpha.pk, now=now)
    # Two hours of 10 samples, 6 idle each: the recent hour is rolled up and still raw,
    # and counts once.
    assert (waste.samples, waste.idle_samples, waste.idle_gpu_seconds) == (20, 12, 1440)
    assert waste.cost == Decimal("1.00")  # 12 min × $5.00 an hour


def test_the_trend_uses_closed_lines_and_the_live_draft(f0):
    now = timezone.now()
    this_month = period_start(now)
    last_month = period_start(this_month - timedelta(days=1))
    run(lease(f0, f0.alpha, tier="burst"), start=last_month, hours=10)
    services.close_period(period=last_month, now=this_month + timedelta(seconds=1))
    run(lease(f0, f0.alpha, tier="burst"), start=this_month, hours=1)
    months = reports.trend(project_id=f0.alpha.pk, now=max(now, this_month + timedelta(hours=2)))
    # The project was made this month; its history starts last month: two months, not 12.
    assert [month.period for month in months] == [last_month, this_month]
    assert months[-2].closed and months[-2].total == Decimal("25.00")
    assert not months[-1].closed and months[-1].total == Decimal("2.50")


def test_the_trend_starts_at_the_projects_first_month(f0, client):
    now = timezone.now()
    assert [m.period for m in reports.trend(project_id=f0.gamma.pk, now=now)] == [period_start(now)]
    Project.objects.filter(pk=f0.beta.pk).update(created_at=now - timedelta(days=100))
    months = reports.trend(project_id=f0.beta.pk, now=now)
    first = period_start(now - timedelta(days=100))
    assert months[0].period == first
    assert len(months) == (now.year - first.year) * 12 + now.month - first.month + 1
    Project.objects.filter(pk=f0.alpha.pk).update(created_at=now - timedelta(days=900))
    assert len(reports.trend(project_id=f0.alpha.pk, now=now)) == 12
    client.force_login(f0.bob)
    body = client.get(
        reverse("billing:reports", args=[f0.gamma.slug]), HTTP_ACCEPT_LANGUAGE="zh-hans"
    )
    assert body.status_code == 404  # bob is not in gamma
    client.force_login(f0.gary)
    body = client.get(
        reverse("billing:reports", args=[f0.gamma.slug]), HTTP_ACCEPT_LANGUAGE="zh-hans"
    ).content.decode()
    label = f"{now.year}年{now.month}月"
    assert (
        f"自项目的第一个月 {label} 起" in body
        and body.count(f'<tr><td class="nowrap">{label}') == 1
    )


@pytest.mark.parametrize("who", ["alice", "alpha_manager"])
def test_members_read_the_reports_and_outsiders_do_not(client, f0, who):
    run(lease(f0, f0.alpha, tier="burst"), start=timezone.now() - timedelta(days=3), hours=5)
    client.force_login(getattr(f0, who))
    response = client.get(reverse("billing:reports", args=[f0.alpha.slug]))
    assert response.status_code == 200
    body = response.content.decode()
    assert 'id="report-trend"' in body and 'id="report-advice-1"' in body
    client.force_login(f0.outsider)
    assert client.get(reverse("billing:reports", args=[f0.alpha.slug])).status_code == 404


def test_lines_of_no_gpu_model_have_their_own_column_last(f0, client):
    now = timezone.now()
    this_month = period_start(now)
    last_month = period_start(this_month - timedelta(days=1))
    volume = DataVolume.objects.create(
        project=f0.alpha,
        account=f0.account,
        name="data",
        zone="us-east-1a",
        region="us-east-1",
        size_gb=500,
        storage_rate_per_gb_month=Decimal("0.10"),
    )
    storage.open_volume(volume, at=last_month)
    storage.close_volume(volume, at=last_month + timedelta(days=3))
    run(lease(f0, f0.alpha, tier="burst"), start=last_month, hours=10)
    services.close_period(period=last_month, now=this_month + timedelta(seconds=1))
    [previous, _current] = reports.trend(project_id=f0.alpha.pk, now=now)
    assert previous.per_model == {
        "A100 80GB": Decimal("25.00"),
        "Storage and corrections": Decimal("5.00"),
    }
    client.force_login(f0.alice)
    body = client.get(reverse("billing:reports", args=["alpha"])).content.decode()
    assert body.index("A100 80GB</th>") < body.index("Storage and corrections</th>")
    assert "—</th>" not in body


def test_it_counts_each_idle_sample_for_the_agents_interval(f0, settings):
    settings.PORTAL_AGENT_HEARTBEAT_SECONDS = 10  # the demo's agents report every 10 s
    now = timezone.now().replace(minute=30, second=0, microsecond=0)
    running = lease(f0, f0.alpha, tier="burst", gpus=2, status="active")
    record = run(running, start=now - timedelta(hours=1), gpus=2)
    for step in range(12):
        UtilizationSample.objects.create(
            instance=record.instance,
            at=now - timedelta(seconds=120 - 10 * step),
            gpu_utilization=[1, 2] if step < 6 else [1, 90],
        )
    [waste] = reports.idle_waste(project_id=f0.alpha.pk, now=now)
    # 6 idle samples × 10 s × 2 GPUs, not 6 minutes.
    assert (waste.samples, waste.idle_samples, waste.idle_gpu_seconds) == (12, 6, 120)


def reports_page_queries(client, project) -> tuple[int, str]:
    with CaptureQueriesContext(connection) as queries:
        response = client.get(reverse("billing:reports", args=[project.slug]))
    assert response.status_code == 200
    return len(queries), response.content.decode()


def test_the_page_makes_the_same_few_queries_whatever_the_data(f0, client):
    """Session, user, access (3), the project's first run, its statements with their
    lines, the GPU models with its quotas, the kept draft, idle hours (2) and the
    notification badge: 12, with one GPU model or two, one month of history or three."""
    now = timezone.now()
    run(lease(f0, f0.alpha, tier="burst"), start=now - timedelta(days=3), hours=5)
    spend.refresh(now=now)
    reports.keep_commitment_advice(now=now)  # the hourly beat task
    client.force_login(f0.alpha_manager)
    small, _body = reports_page_queries(client, f0.alpha)

    h100 = factories.gpu_model("H100 80GB")
    Pool.objects.create(gpu_model=h100, capacity=16)
    Quota.objects.create(project=f0.alpha, gpu_model=h100, guaranteed=0, ceiling=8)
    this_month = period_start(now)
    months = [period_start(this_month - timedelta(days=40)), this_month - timedelta(days=1)]
    for start in (*months, now - timedelta(days=2)):
        for model in (f0.model, h100):
            booked = lease(f0, f0.alpha, tier="burst", gpus=2)
            Reservation.objects.filter(pk=booked.pk).update(gpu_model=model)
            booked.refresh_from_db()
            for hour in range(5):
                run(booked, start=start + timedelta(hours=hour), hours=1, gpus=2)
    services.close_period(
        period=period_start(months[0]), now=period_start(months[1]) + timedelta(seconds=1)
    )
    services.close_period(period=period_start(months[1]), now=this_month + timedelta(seconds=1))
    spend.refresh(now=now)
    reports.keep_commitment_advice(now=now)
    large, body = reports_page_queries(client, f0.alpha)
    assert 'id="report-advice-2"' in body and "H100 80GB</th>" in body
    assert small == large <= 12


def test_the_page_shows_the_advice_kept_as_computed_for_its_moment(f0, client):
    kept_at = timezone.now().replace(second=0, microsecond=0) - timedelta(minutes=30)
    run(lease(f0, f0.alpha, tier="burst", gpus=2), start=kept_at - timedelta(days=5), hours=30)
    assert reports.keep_commitment_advice(now=kept_at) == 1
    expected = reports.commitment_advice(gpu_model_ids=[f0.model.pk], now=kept_at)
    # Usage after the advice was kept changes what it would be now, not what is shown.
    run(lease(f0, f0.alpha, tier="burst", gpus=4), start=kept_at - timedelta(days=1), hours=20)
    later = kept_at + timedelta(minutes=29)
    assert reports.commitment_advice(gpu_model_ids=[f0.model.pk], now=later) != expected
    with CaptureQueriesContext(connection) as queries:
        kept = reports.kept_commitment_advice(gpu_model_ids=[f0.model.pk], now=later)
    assert kept == expected and len(queries) == 0
    client.force_login(f0.alice)
    body = client.get(reverse("billing:reports", args=[f0.alpha.slug])).content.decode()
    assert f"Advice as of {kept_at:%Y-%m-%d %H:%M} UTC" in body
    # Past its age (the beat stopped), the advice is computed at the page's moment and kept.
    stale = kept_at + reports.ADVICE_MAX_AGE + timedelta(seconds=1)
    [fresh] = reports.kept_commitment_advice(gpu_model_ids=[f0.model.pk], now=stale)
    assert [fresh] == reports.commitment_advice(gpu_model_ids=[f0.model.pk], now=stale)
    assert fresh.as_of == stale
    assert reports.kept_commitment_advice(gpu_model_ids=[f0.model.pk], now=stale) == [fresh]


def test_without_kept_advice_the_page_computes_it_in_two_queries(f0, client):
    """A flushed cache (or Redis down): the pool's terms and its runs, whatever their number."""
    now = timezone.now()
    run(lease(f0, f0.alpha, tier="burst"), start=now - timedelta(days=3), hours=5)
    spend.refresh(now=now)
    keep_commitment_advice_task()  # as the beat does every hour
    client.force_login(f0.alpha_manager)
    kept, _body = reports_page_queries(client, f0.alpha)
    cache.clear()
    computed, _body = reports_page_queries(client, f0.alpha)
    assert computed == kept + 2
