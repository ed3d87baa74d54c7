"""Statements read in the person's language: month names in their natural order, line names
and kinds rendered from the lines' data, a disputed statement saying why it cannot be
signed off, and the finance page saying when the month closes by itself."""

import csv
import io
from datetime import timedelta
from decimal import Decimal

import pytest
from django.urls import reverse
from django.utils import timezone

from billing import services
from billing.models import Statement
from billing.periods import period_end, period_start
from rental.models import Pool
from tests import factories
from tests.billing.helpers import at, lease, run

APRIL = at(2026, 4, 1)
MAY = at(2026, 5, 1)


@pytest.fixture
def april(f0):
    """April 2026 closed: alpha ran 10 burst and 4 spot GPU-hours; K = 8 at $8,000.00."""
    Pool.objects.filter(pk=f0.pool.pk).update(
        committed_gpus=8, committed_monthly_cost=Decimal("8000.00")
    )
    run(lease(f0, f0.alpha, tier="burst"), start=at(2026, 4, 5), hours=10)
    run(
        lease(f0, f0.alpha, tier="spot", market="spot"),
        start=at(2026, 4, 6),
        hours=4,
        rate="1.00",
        market="spot",
    )
    services.close_period(period=APRIL, now=MAY + timedelta(seconds=1))
    f0.finance = factories.user("fiona", finance=True)
    return f0


def page(client, url, language="en"):
    response = client.get(url, HTTP_ACCEPT_LANGUAGE=language)
    assert response.status_code == 200
    return response.content.decode()


def statement_url(project, period):
    return reverse("billing:statement", args=[project.slug]) + f"?period={period:%Y-%m}"


def test_month_names_read_in_their_natural_order(client, april):
    client.force_login(april.alpha_manager)
    english = page(client, statement_url(april.alpha, APRIL))
    assert "Statement for April 2026" in english
    chinese = page(client, statement_url(april.alpha, APRIL), "zh-hans")
    assert "2026年4月账单" in chinese
    assert "四月 2026" not in chinese and "的账单" not in chinese
    client.force_login(april.finance)
    assert "2026年4月各项目账单" in page(
        client, reverse("billing:finance") + "?period=2026-04", "zh-hans"
    )
    assert "Statements for April 2026" in page(
        client, reverse("billing:finance") + "?period=2026-04"
    )


def test_line_names_and_kinds_follow_the_readers_language(client, april):
    client.force_login(april.alpha_manager)
    chinese = page(client, statement_url(april.alpha, APRIL), "zh-hans")
    assert "A100 80GB，按需，弹性" in chinese and "A100 80GB，竞价" in chinese
    assert "on-demand" not in chinese and ">Usage<" not in chinese and ">用量<" in chinese
    assert "10 GPU 小时" in chinese and "$2.50/GPU 小时" in chinese
    english = page(client, statement_url(april.alpha, APRIL))
    assert "A100 80GB, on-demand, burst" in english and "spot, spot" not in english
    # The project page's panel too.
    run(
        lease(april, april.alpha, tier="burst", status="active"), start=period_start(timezone.now())
    )
    panel = page(client, reverse("billing:statement_partial", args=["alpha"]), "zh-hans")
    assert "A100 80GB，按需，弹性" in panel and "GPU 小时" in panel and ">数量<" in panel


def test_exports_stay_in_english_with_a_unit_column(client, april):
    client.force_login(april.alpha_manager)
    response = client.get(
        statement_url(april.alpha, APRIL) + "&format=csv", HTTP_ACCEPT_LANGUAGE="zh-hans"
    )
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    descriptions = {row["description"] for row in rows}
    assert "A100 80GB, spot" in descriptions and "A100 80GB, on-demand, burst" in descriptions
    assert {row["unit"] for row in rows} == {"gpu_hours"}
    pdf = client.get(
        statement_url(april.alpha, APRIL) + "&format=pdf", HTTP_ACCEPT_LANGUAGE="zh-hans"
    )
    assert pdf.content.startswith(b"%PDF")


def test_a_disputed_statement_says_why_it_cannot_be_signed_off(client, april):
    line = Statement.objects.get(project=april.alpha, period=APRIL.date()).lines.first()
    services.dispute_line(line_id=line.pk, actor=april.alpha_manager, comment="Too much.")
    client.force_login(april.alpha_manager)
    body = page(client, statement_url(april.alpha, APRIL))
    assert 'id="approve-statement"' not in body
    assert "A line of this statement is disputed, so it cannot be signed off yet." in body
    assert "“Sign off statement” appears here again" in body
    chinese = page(client, statement_url(april.alpha, APRIL), "zh-hans")
    assert "本账单有明细存在异议，暂时无法确认。" in chinese
    client.force_login(april.finance)
    body = page(client, statement_url(april.alpha, APRIL))
    assert "once an admin has answered every dispute" in body
    finance = page(client, reverse("billing:finance") + "?period=2026-04")
    assert "waiting for an admin's answer; it cannot be signed off until then" in finance
    # Once answered, sign-off is back.
    services.answer_dispute(
        dispute_id=line.disputes.get().pk, actor=april.admin, answer="It is right."
    )
    client.force_login(april.alpha_manager)
    body = page(client, statement_url(april.alpha, APRIL))
    assert 'id="approve-statement"' in body and 'id="disputed-note"' not in body


def test_the_finance_page_says_when_the_month_closes_by_itself(client, april, settings):
    settings.PORTAL_STATEMENT_GRACE_HOURS = 48
    client.force_login(april.finance)
    now = timezone.now()
    closes = period_end(period_start(now)) + timedelta(hours=48)
    body = page(client, reverse("billing:finance"))
    assert (
        f"This month closes by itself on {closes:%Y-%m-%d %H:%M} UTC, 48 hours after it ends "
        "(the closing task runs every hour). There is no “close month” action"
    ) in body
    chinese = page(client, reverse("billing:finance"), "zh-hans")
    assert f"本月将于 UTC {closes:%Y-%m-%d %H:%M}（月末后 48 小时）自动结账" in chinese
    closed = page(client, reverse("billing:finance") + "?period=2026-04")
    assert "This month was closed on 2026-05-01 00:00 UTC; its lines never change." in closed
    assert services.closes_at(APRIL) == at(2026, 5, 3)
    long_ago = page(client, reverse("billing:finance") + "?period=2020-01")
    assert "Months close by themselves 48 hours after they end" in long_ago
