"""Explain, and each statement line's name, in words: every line kind says what was counted
and how, with its own figures, in English and in Chinese, and no raw key, boolean, ISO
moment or reason code reaches the page."""

import html
import re
from datetime import timedelta
from decimal import Decimal

import pytest
from django.urls import reverse

from billing import services
from billing.models import Statement
from rental.catalog import storage
from rental.models import DataVolume, Pool, Quota, Reservation, StorageInterval
from tests import factories
from tests.billing.helpers import at, lease, run

APRIL = at(2026, 4, 1)
MAY = at(2026, 5, 1)
RAW = re.compile(
    r"\b(gpu_seconds|sum_G|formula|month_seconds|window_seconds|reservation_id|"
    r"burst_gpu_seconds|project_share|gb_seconds|dispute_id|True|False|None|lease_end|"
    r"on_demand|committed_share|shared_residual)\b|\d{4}-\d{2}-\d{2}T\d{2}|\+00:00"
)


def visible(body: str) -> str:
    """The page's main text as a person reads it: no tags, entities decoded."""
    main = body[body.index("<main") : body.index("</main>")]
    blocks = re.sub(r"</?(p|div|td|th|tr|br|li|h\d|dd|dt|section|table)\b[^>]*>", " ", main)
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", blocks)))


@pytest.fixture
def april(f0):
    """April 2026 closed. A100 pool: K = 8 at $8,000.00 a month, hybrid, ΣG = 6 (alpha 2,
    beta 4). alpha: 100 burst GPU-hours in two runs, 10 spot, 5 guaranteed (covered), a
    reservation of 2 GPUs for 24 h, a 500 GB volume for 3 days, a stopped 200 GB disk for
    36 h; gamma: 300 burst GPU-hours. An L4 pool with no commitment: alpha 2 × L4 from
    1 Apr 09:00 to 3 Apr 17:30 at $1.006."""
    Pool.objects.filter(pk=f0.pool.pk).update(
        committed_gpus=8, committed_monthly_cost=Decimal("8000.00")
    )
    burst = lease(f0, f0.alpha, tier="burst")
    run(burst, start=at(2026, 4, 5), hours=50)
    run(burst, start=at(2026, 4, 8), hours=50)
    run(
        lease(f0, f0.alpha, tier="spot", market="spot"),
        start=at(2026, 4, 12),
        hours=10,
        rate="1.00",
        market="spot",
    )
    run(lease(f0, f0.alpha, tier="guaranteed"), start=at(2026, 4, 14), hours=5)
    run(lease(f0, f0.gamma, tier="burst"), start=at(2026, 4, 5), hours=300)
    f0.reserved = lease(
        f0, f0.alpha, tier="reserved", gpus=2, start=at(2026, 4, 10, 9), end=at(2026, 4, 11, 9)
    )
    l4 = factories.gpu_model("L4 24GB")
    Pool.objects.create(gpu_model=l4, capacity=8)
    Quota.objects.create(project=f0.alpha, gpu_model=l4, guaranteed=2, ceiling=4, weight=1)
    l4_offering = factories.offering(f0.account, l4, instance_type="test.l4x1", on_demand="1.006")
    f0.l4_lease = Reservation.objects.create(
        project=f0.alpha,
        requester=f0.alice,
        gpu_model=l4,
        gpu_count=2,
        offering=l4_offering,
        start=at(2026, 4, 1),
        end=at(2026, 4, 30),
        status="ended",
        tier="guaranteed",
        market="on_demand",
    )
    run(f0.l4_lease, start=at(2026, 4, 1, 9), end=at(2026, 4, 3, 17, 30), gpus=2, rate="1.006")
    volume = DataVolume.objects.create(
        project=f0.alpha,
        account=f0.account,
        name="imagenet",
        zone="us-east-1a",
        region="us-east-1",
        size_gb=500,
        storage_rate_per_gb_month=Decimal("0.10"),
    )
    storage.open_volume(volume, at=at(2026, 4, 1))
    storage.close_volume(volume, at=at(2026, 4, 4))
    StorageInterval.objects.create(
        project=f0.alpha,
        kind="disk",
        instance=burst.instances.first(),
        size_gb=200,
        rate_per_gb_month=Decimal("0.08"),
        start=at(2026, 4, 5),
        end=at(2026, 4, 6, 12),
    )
    f0.burst = burst
    services.close_period(period=APRIL, now=MAY + timedelta(seconds=1))
    return f0


def rows_of(client, project, period):
    response = client.get(
        reverse("billing:statement", args=[project.slug]) + f"?period={period:%Y-%m}"
    )
    assert response.status_code == 200
    return response, response.context["rows"]


def explain(client, project, period, row, language="en"):
    response = client.get(
        reverse("billing:line", args=[project.slug, f"{period:%Y-%m}", row["index"]]),
        HTTP_ACCEPT_LANGUAGE=language,
    )
    assert response.status_code == 200
    text = visible(response.content.decode())
    assert not RAW.search(text), RAW.search(text)
    return text


def row_titled(rows, title):
    [row] = [row for row in rows if row["words"].title == title]
    return row


def test_a_metered_usage_line_says_what_was_counted_and_how(client, april):
    client.force_login(april.alpha_manager)
    _, rows = rows_of(client, april.alpha, APRIL)
    row = row_titled(rows, "L4 24GB, on-demand, guaranteed")
    assert row["line"].amount == Decimal("113.68")
    text = explain(client, april.alpha, APRIL, row)
    lease_id = april.l4_lease.pk
    assert (
        f"2 × L4 24GB, on-demand, guaranteed, from 2026-04-01 09:00 to 2026-04-03 17:30 UTC "
        f"(lease #{lease_id}, requested by alice): 56.5 h × 2 GPUs = 113 GPU-hours."
    ) in text
    assert (
        "113 GPU-hours at $1.006 per GPU-hour: 406,800 GPU-seconds × $1.006 ÷ 3,600 = "
        "$113.68, rounded once to the cent."
    ) in text
    assert "Lease ended" in text  # the run's end reason, in words
    zh = explain(client, april.alpha, APRIL, row, "zh-hans")
    assert (
        f"2 × L4 24GB，按需，保障，UTC 2026-04-01 09:00 至 2026-04-03 17:30（租约 #{lease_id}，"
        "申请人 alice）：56.5 小时 × 2 块 GPU = 113 GPU 小时。"
    ) in zh
    assert "406,800 GPU 秒 × $1.006 ÷ 3,600 = $113.68" in zh
    assert "租约到期" in zh
    page = client.get(
        reverse("billing:line", args=[april.alpha.slug, "2026-04", row["index"]]),
        HTTP_ACCEPT_LANGUAGE="en",
    ).content.decode()
    assert reverse("rental:lease", args=[lease_id]) in page  # a link to the lease


def test_a_line_of_several_runs_lists_them_with_their_leases(client, april):
    client.force_login(april.alpha_manager)
    _, rows = rows_of(client, april.alpha, APRIL)
    row = row_titled(rows, "A100 80GB, on-demand, burst")
    text = explain(client, april.alpha, APRIL, row)
    assert (
        "2 runs of A100 80GB, on-demand, burst, between 2026-04-05 00:00 and 2026-04-10 02:00 "
        f"UTC on leases #{april.burst.pk}: 100 GPU-hours in all."
    ) in text
    assert "360,000 GPU-seconds × $2.50 ÷ 3,600 = $250.00" in text
    zh = explain(client, april.alpha, APRIL, row, "zh-hans")
    assert "A100 80GB，按需，弹性，UTC 2026-04-05 00:00 至 2026-04-10 02:00 之间共 2 段运行" in zh


def test_a_spot_line_says_spot_once_and_a_covered_line_says_why_it_is_free(client, april):
    client.force_login(april.alpha_manager)
    _, rows = rows_of(client, april.alpha, APRIL)
    titles = [row["words"].title for row in rows]
    assert "A100 80GB, spot" in titles
    assert not any("spot, spot" in title for title in titles)
    covered = row_titled(rows, "A100 80GB, on-demand, guaranteed (covered by the commitment)")
    text = explain(client, april.alpha, APRIL, covered)
    assert (
        "They ran in the guaranteed tier of a pool with committed GPUs, so the pool's committed "
        "cost pays for them (the committed share line) and this line is $0.00."
    ) in text
    zh_page = client.get(
        reverse("billing:statement", args=["alpha"]) + "?period=2026-04",
        HTTP_ACCEPT_LANGUAGE="zh-hans",
    ).content.decode()
    assert "A100 80GB，竞价" in zh_page and "竞价，竞价" not in zh_page
    assert "A100 80GB，按需，保障（由承诺容量覆盖）" in zh_page
    assert ">用量<" in zh_page and ">Usage<" not in zh_page  # the kind, in Chinese


def test_the_committed_share_is_this_projects_part_of_the_reserved_capacity(client, april):
    client.force_login(april.alpha_manager)
    _, rows = rows_of(client, april.alpha, APRIL)
    [row] = [row for row in rows if row["line"].kind == "committed_share"]
    assert row["words"].title == "A100 80GB: share of the committed cost (G = 2)"
    text = explain(client, april.alpha, APRIL, row)
    assert (
        "This project's share of the A100 80GB pool's committed capacity: the pool has 8 "
        "committed GPUs, and this project is guaranteed 2 of them."
    ) in text
    assert "The committed GPUs cost $8,000.00 in April 2026, whether they are used or not." in text
    assert "This project pays $8,000.00 × 2 / 8 = $2,000.00 (25 % of the committed cost)." in text
    assert (
        "Its 1,440 GPU-hours are the 2 guaranteed GPUs × 720 hours, so a guaranteed GPU-hour "
        "cost $1.388889."
    ) in text
    zh = explain(client, april.alpha, APRIL, row, "zh-hans")
    assert "承诺 GPU 在2026年4月的费用为 $8,000.00，无论是否使用。" in zh
    assert "本项目支付 $8,000.00 × 2 / 8 = $2,000.00（承诺费用的 25 %）。" in zh


def test_the_shared_residual_is_split_by_burst_use(client, april):
    client.force_login(april.alpha_manager)
    _, rows = rows_of(client, april.alpha, APRIL)
    [row] = [row for row in rows if row["line"].kind == "shared_residual"]
    assert row["line"].amount == Decimal("500.00")
    text = explain(client, april.alpha, APRIL, row)
    assert (
        "The A100 80GB pool has 8 committed GPUs costing $8,000.00 in April 2026, but the "
        "projects' guarantees cover only 6 of them. The unassigned part, $8,000.00 × (8 − 6) / "
        "8 = $2,000.00, is shared by burst use."
    ) in text
    assert (
        "This project ran 100 of the 400 burst GPU-hours on the pool (25 %), so it pays "
        "$500.00 of the $2,000.00."
    ) in text
    zh = explain(client, april.alpha, APRIL, row, "zh-hans")
    assert (
        "本项目使用了该资源池全部 400 弹性 GPU 小时中的 100（25 %），"
        "因此支付 $2,000.00 中的 $500.00。"
    ) in zh


def test_a_reservation_is_charged_for_its_window(client, april):
    client.force_login(april.alpha_manager)
    _, rows = rows_of(client, april.alpha, APRIL)
    [row] = [row for row in rows if row["line"].kind == "reservation"]
    reserved = april.reserved.pk
    text = explain(client, april.alpha, APRIL, row)
    assert (
        f"Reservation #{reserved} booked 2 × A100 80GB from 2026-04-10 09:00 to 2026-04-11 "
        "09:00 UTC."
    ) in text
    assert (
        "24 hours of its window fall in April 2026: 2 GPUs × 24 h = 48 GPU-hours at $2.50 per "
        "GPU-hour = $120.00, charged whether the GPUs were used or not"
    ) in text
    zh = explain(client, april.alpha, APRIL, row, "zh-hans")
    assert (
        f"预约 #{reserved} 预订了 2 × A100 80GB，时段为 UTC 2026-04-10 09:00 至 2026-04-11 09:00。"
        in zh
    )
    assert "其时段在2026年4月有 24 小时：2 块 GPU × 24 小时 = 48 GPU 小时" in zh


def test_storage_lines_count_gb_hours_at_the_storage_rate(client, april):
    client.force_login(april.alpha_manager)
    _, rows = rows_of(client, april.alpha, APRIL)
    volumes = row_titled(rows, "Data volumes at $0.10 per GB-month")
    disks = row_titled(rows, "Stopped instances' disks at $0.08 per GB-month")
    # Storage has its own unit, not GPU-hours.
    assert volumes["words"].quantity == "50 GB-months"
    assert volumes["words"].unit_price == "$0.10/GB-month"
    text = explain(client, april.alpha, APRIL, volumes)
    assert (
        "1 data volume of this project, kept from 2026-04-01 00:00 to 2026-04-04 00:00 UTC." in text
    )
    assert (
        "36,000 GB-hours in all, that is 50 GB-months (a GB-month is 30 days, 720 hours), at "
        "$0.10 per GB-month: 129,600,000 GB-seconds × $0.10 ÷ 2,592,000 = $5.00"
    ) in text
    assert "imagenet" in text
    text = explain(client, april.alpha, APRIL, disks)
    assert (
        "The disk of 1 stopped instance, kept while its lease was stopped from 2026-04-05 "
        "00:00 to 2026-04-06 12:00 UTC"
    ) in text
    assert "25,920,000 GB-seconds × $0.08 ÷ 2,592,000 = $0.80" in text
    zh = explain(client, april.alpha, APRIL, volumes, "zh-hans")
    assert "合计 36,000 GB·小时，即 50 GB·月" in zh
    zh_page = client.get(
        reverse("billing:statement", args=["alpha"]) + "?period=2026-04",
        HTTP_ACCEPT_LANGUAGE="zh-hans",
    ).content.decode()
    assert "50 GB·月" in zh_page and ">数量<" in zh_page


def test_credits_and_adjustments_say_who_added_them_and_why(client, april):
    line = Statement.objects.get(project=april.alpha, period=APRIL.date()).lines.get(
        kind="usage", tier="burst"
    )
    dispute = services.dispute_line(
        line_id=line.pk, actor=april.alpha_manager, comment="Too many hours.", now=at(2026, 5, 2)
    )
    services.answer_dispute(
        dispute_id=dispute.pk,
        actor=april.admin,
        answer="Credited one hour.",
        kind="credit",
        amount="2.50",
        now=at(2026, 5, 3, 10),
    )
    services.add_correction(
        project=april.alpha,
        actor=april.admin,
        kind="adjustment",
        amount="12.50",
        description="Support hours",
        now=at(2026, 5, 4, 8),
    )
    client.force_login(april.alpha_manager)
    _, rows = rows_of(client, april.alpha, MAY)
    [credit] = [row for row in rows if row["line"].kind == "credit"]
    [adjustment] = [row for row in rows if row["line"].kind == "adjustment"]
    assert credit["words"].title == (
        "Correction of “A100 80GB, on-demand, burst” (April 2026): Credited one hour."
    )
    assert credit["words"].quantity == "—"
    text = explain(client, april.alpha, MAY, credit)
    assert (
        "A credit of $2.50 given back by root on 2026-05-03 10:00 UTC, booked as -$2.50 on this "
        "statement."
    ) in text
    assert (
        "It answers the dispute alma raised on 2026-05-02 00:00 UTC about the line “A100 80GB, "
        "on-demand, burst” of the April 2026 statement. The dispute: “Too many hours.” The "
        "answer: “Credited one hour.”"
    ) in text
    text = explain(client, april.alpha, MAY, adjustment)
    assert "An adjustment of $12.50 added by root on 2026-05-04 08:00 UTC." in text
    assert "The reason given: “Support hours”" in text
    zh = explain(client, april.alpha, MAY, credit, "zh-hans")
    assert "更正“A100 80GB，按需，弹性”（2026年4月）：Credited one hour." in zh
    assert "root 于 UTC 2026-05-03 10:00 给予 $2.50 的抵扣，在本账单中记为 -$2.50。" in zh


def test_a_usage_line_shared_by_usage_says_the_projects_percentage(client, april):
    Pool.objects.filter(pk=april.pool.pk).update(apportionment="by_usage")
    run(lease(april, april.alpha, tier="burst"), start=MAY, hours=30)
    run(lease(april, april.gamma, tier="burst"), start=MAY, hours=70)
    client.force_login(april.alpha_manager)
    _, rows = rows_of(client, april.alpha, MAY)
    [row] = [row for row in rows if row["words"].title == "A100 80GB, on-demand, burst"]
    text = explain(client, april.alpha, MAY, row)
    assert (
        "In this pool the committed cost and all metered usage are shared by GPU-hours used: "
        "$8,000.00 committed + $250.00 metered = $8,250.00. This project used 30 of the 100 "
        "GPU-hours (30 %), so its share is $2,475.00"
    ) in text


def test_the_platform_line_says_why_no_project_pays_it(client, april):
    Pool.objects.filter(pk=april.pool.pk).update(residual="platform")
    run(lease(april, april.alpha, tier="burst"), start=MAY, hours=1)
    services.close_period(period=MAY, now=at(2026, 6, 1, 0, 0, 1))
    finance = factories.user("fiona", finance=True)
    client.force_login(finance)
    body = client.get(reverse("billing:finance") + "?period=2026-05").content.decode()
    text = visible(body)
    assert "A100 80GB: platform overhead (site policy) · $2,000.00" in text
    assert (
        "No project pays this part of the A100 80GB pool's committed cost: by site policy, the "
        "commitment no guarantee covers ($2,000.00 in May 2026) is the platform's overhead."
    ) in text
    zh = visible(
        client.get(
            reverse("billing:finance") + "?period=2026-05", HTTP_ACCEPT_LANGUAGE="zh-hans"
        ).content.decode()
    )
    assert "A100 80GB：平台开销（站点策略）" in zh
    assert not RAW.search(text) and not RAW.search(zh)


def test_a_closed_line_without_the_data_for_its_name_keeps_its_stored_description(client, april):
    """Lines closed by an older version lack some references: their English description
    stays the fallback, never a blank or a code."""
    line = Statement.objects.get(project=april.alpha, period=APRIL.date()).lines.get(
        kind="committed_share"
    )
    # A closed line never changes, so an old one is written as a new row.
    old = type(line).objects.create(
        statement=line.statement,
        kind="committed_share",
        gpu_model=line.gpu_model,
        amount=Decimal("0.00"),
        description="Old share text",
        references={},
    )
    client.force_login(april.alpha_manager)
    _, rows = rows_of(client, april.alpha, APRIL)
    [row] = [row for row in rows if getattr(row["line"], "pk", None) == old.pk]
    assert row["words"].title == "Old share text"
    explain(client, april.alpha, APRIL, row)
