"""Currencies: offerings priced in CNY and USD, dated exchange rates captured at launch,
statements in the billing currency that say which rates they used."""

import html
import io
from datetime import timedelta
from decimal import Decimal

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse

from billing import exports
from billing.selectors import draft_statement, lease_cost
from billing.statements import compute_period
from portal.errors import InvalidInput, NotPermitted
from portal.models import AuditEvent
from rental.catalog import exchange
from rental.fleet import launching
from rental.fleet.failover import Place
from rental.fleet.instances import mark_running
from rental.models import ExchangeRate, Instance, Offering, UsageRecord
from rental.providers.base import CloudInstance, CloudState
from tests import factories
from tests.billing.helpers import at, lease
from tests.e2e.conftest import ARTIFACTS

APRIL = at(2026, 4, 1)


@pytest.fixture
def cny(f0):
    """A second provider selling A100s in CNY: 20.00 per GPU-hour on demand."""
    account = factories.account(name="aliyun-cn", endpoint_url="http://127.0.0.1:9")
    offering = factories.offering(account, f0.model, instance_type="cn.a100x1", on_demand="20.00")
    Offering.objects.filter(pk=offering.pk).update(currency="CNY")
    offering.refresh_from_db()
    return offering


def add_rate(value, valid_from, *, source="PBOC central parity"):
    return exchange.add_exchange_rate(
        actor=None,
        currency="CNY",
        units_per_billing_unit=value,
        valid_from=valid_from,
        source=source,
        now=valid_from,
    )


def launch(f0, offering, *, project, at_, seconds):
    """A lease on ``offering`` launched (rate captured by launching.aim) at ``at_``, running
    for ``seconds`` through mark_running, then ended."""
    reservation = lease(f0, project, tier="burst", status="active")
    reservation.offering = offering
    reservation.save()
    instance = Instance.objects.create(
        reservation=reservation,
        account=offering.account,
        offering=offering,
        region=offering.region,
        market="on_demand",
        gpu_count=1,
        rate_per_hour=offering.on_demand_price_per_hour,
    )
    place = Place(offering.pk, offering.account_id, offering.region, offering.instance_type, "")
    launching.aim(instance, place, now=at_)
    cloud = CloudInstance(
        external_id=f"i-{instance.pk:017x}",
        state=CloudState.RUNNING,
        market="on_demand",
        region=offering.region,
        zone="",
        instance_type=offering.instance_type,
        public_address="",
        private_address="",
        launched_at=at_,
        state_reason="",
        state_changed_at=at_,
        tags=(),
    )
    mark_running(instance, cloud, now=at_)
    UsageRecord.objects.filter(instance=instance).update(
        end=at_ + timedelta(seconds=seconds), end_reason="lease_end"
    )
    return instance


def usage_lines(project, now):
    return [
        line
        for line in draft_statement(project_id=project.pk, now=now).lines
        if line.kind == "usage"
    ]


@pytest.mark.parametrize("in_database", [True, False])
def test_it_converts_cny_usage_at_the_rate_captured_at_launch(f0, cny, in_database):
    rate = add_rate("7.2500", APRIL)
    instance = launch(f0, cny, project=f0.gamma, at_=at(2026, 4, 2, 9), seconds=3600)
    instance.refresh_from_db()
    assert (instance.currency, instance.exchange_rate, instance.exchange_rate_ref_id) == (
        "CNY",
        Decimal("7.25"),
        rate.pk,
    )
    record = UsageRecord.objects.get(instance=instance)
    assert (record.rate, record.currency, record.exchange_rate) == (
        Decimal("20.000000"),
        "CNY",
        Decimal("7.25"),
    )
    computed = compute_period(period=APRIL, now=at(2026, 4, 3), in_database=in_database)
    [line] = [line for line in computed.for_project(f0.gamma.pk) if line.kind == "usage"]
    # CNY 20.00 × 3,600 s / 3600 / 7.25 = USD 2.7586… → 2.76, one rounding.
    assert line.amount == Decimal("2.76")
    assert line.unit_price == Decimal("2.758621")
    assert line.references["exchange_rate"] == "7.25000000"
    assert line.references["exchange_rate_source"] == "PBOC central parity"
    assert "(CNY 20.00/GPU-h at 7.25 CNY per USD)" in line.description


def test_it_keeps_the_earlier_rate_for_launches_before_a_mid_month_change(f0, cny):
    add_rate("7.2500", APRIL)
    add_rate("7.0000", at(2026, 4, 15), source="PBOC central parity, 15 April")
    launch(f0, cny, project=f0.gamma, at_=at(2026, 4, 10), seconds=3600)
    launch(f0, cny, project=f0.gamma, at_=at(2026, 4, 20), seconds=3600)
    lines = sorted(usage_lines(f0.gamma, at(2026, 4, 25)), key=lambda line: line.amount)
    # 20 / 7.25 = 2.7586 → 2.76 (launched before the change); 20 / 7 = 2.857 → 2.86.
    assert [line.amount for line in lines] == [Decimal("2.76"), Decimal("2.86")]
    view = draft_statement(project_id=f0.gamma.pk, now=at(2026, 4, 25))
    assert [(r.units_per_billing_unit, r.since) for r in view.rates_used] == [
        (Decimal("7.25"), "2026-04-01 00:00"),
        (Decimal("7.00"), "2026-04-15 00:00"),
    ]
    # A rate recorded later does not reach back: the first launch keeps 7.25.
    add_rate("6.5000", at(2026, 4, 11))
    again = sorted(usage_lines(f0.gamma, at(2026, 4, 25)), key=lambda line: line.amount)
    assert [line.amount for line in again] == [Decimal("2.76"), Decimal("2.86")]


def test_it_leaves_billing_currency_usage_unconverted(f0, cny):
    add_rate("7.2500", APRIL)
    instance = launch(f0, f0.offering, project=f0.alpha, at_=at(2026, 4, 2), seconds=3600)
    instance.refresh_from_db()
    assert (instance.currency, instance.exchange_rate, instance.exchange_rate_ref) == (
        "USD",
        Decimal("1"),
        None,
    )
    [line] = usage_lines(f0.alpha, at(2026, 4, 3))
    assert line.amount == Decimal("2.50")
    assert draft_statement(project_id=f0.alpha.pk, now=at(2026, 4, 3)).rates_used == []


def test_it_refuses_to_launch_in_a_currency_with_no_rate_in_force(f0, cny):
    add_rate("7.2500", at(2026, 5, 1))  # only from May: none in force in April
    reservation = lease(f0, f0.gamma, tier="burst", status="provisioning")
    instance = Instance.objects.create(
        reservation=reservation,
        account=cny.account,
        offering=cny,
        region=cny.region,
        market="on_demand",
        gpu_count=1,
        rate_per_hour=cny.on_demand_price_per_hour,
    )
    place = Place(cny.pk, cny.account_id, cny.region, cny.instance_type, "")
    with pytest.raises(InvalidInput) as refused:
        launching.aim(instance, place, now=at(2026, 4, 2))
    assert "CNY" in refused.value.message and "USD" in refused.value.message
    instance.refresh_from_db()
    assert instance.exchange_rate_ref is None
    assert not exchange.can_price("CNY", at(2026, 4, 30))
    assert exchange.can_price("CNY", at(2026, 5, 1))
    assert exchange.can_price("USD", at(2026, 4, 1))


def test_it_lets_the_lease_page_cost_use_the_captured_rate(f0, cny):
    add_rate("7.2500", APRIL)
    instance = launch(f0, cny, project=f0.gamma, at_=at(2026, 4, 2), seconds=7200)
    seconds, cost = lease_cost(reservation_id=instance.reservation_id, now=at(2026, 4, 3))
    assert (seconds, cost) == (7200, Decimal("5.52"))  # 40 / 7.25 = 5.517


def test_it_records_rates_only_with_valid_input(f0):
    with pytest.raises(NotPermitted):
        exchange.add_exchange_rate(
            actor=f0.alice,
            currency="CNY",
            units_per_billing_unit="7.25",
            valid_from=APRIL,
            source="x",
        )
    bad = [
        ({"currency": "yuan"}, "currency"),
        ({"currency": "USD"}, "currency"),
        ({"units_per_billing_unit": "0"}, "units_per_billing_unit"),
        ({"units_per_billing_unit": "seven"}, "units_per_billing_unit"),
        ({"units_per_billing_unit": "7.123456789"}, "units_per_billing_unit"),
        ({"source": " "}, "source"),
        ({"valid_from": None}, "valid_from"),
    ]
    for change, field in bad:
        values = {
            "currency": "CNY",
            "units_per_billing_unit": "7.25",
            "valid_from": APRIL,
            "source": "PBOC",
        }
        values.update(change)
        with pytest.raises(InvalidInput) as refused:
            exchange.add_exchange_rate(actor=f0.admin, **values)
        assert refused.value.field == field
    assert not ExchangeRate.objects.exists()
    rate = exchange.add_exchange_rate(
        actor=f0.admin,
        currency="cny",
        units_per_billing_unit="7.2500",
        valid_from=APRIL,
        source="PBOC",
    )
    assert (rate.currency, rate.billing_currency, rate.units_per_billing_unit) == (
        "CNY",
        "USD",
        Decimal("7.25"),
    )
    assert AuditEvent.objects.filter(verb="exchange_rate.added", object_id=str(rate.pk)).exists()
    with pytest.raises(InvalidInput) as duplicate:
        exchange.add_exchange_rate(
            actor=f0.admin,
            currency="CNY",
            units_per_billing_unit="7.3",
            valid_from=APRIL,
            source="x",
        )
    assert duplicate.value.field == "valid_from"


def test_it_loads_rates_from_a_csv_file_all_or_nothing(f0, tmp_path):
    good = tmp_path / "rates.csv"
    good.write_text(
        "currency,units_per_billing_unit,valid_from,source\n"
        "CNY,7.2500,2026-04-01,PBOC central parity\n"
        "EUR,0.9200,2026-04-01T00:00:00+00:00,ECB reference\n"
    )
    out = io.StringIO()
    call_command("load_exchange_rates", str(good), stdout=out)
    assert "Loaded 2" in out.getvalue()
    assert exchange.rate_in_force("CNY", at(2026, 4, 2)).units_per_billing_unit == Decimal("7.25")
    assert exchange.rate_in_force("EUR", at(2026, 4, 2)).source == "ECB reference"
    bad = tmp_path / "bad.csv"
    bad.write_text("CNY,7.1,2026-05-01,PBOC\nCNY,-1,2026-06-01,PBOC\n")
    err = io.StringIO()
    with pytest.raises(CommandError, match="1 bad row"):
        call_command("load_exchange_rates", str(bad), stderr=err)
    assert err.getvalue().startswith("line 2: units_per_billing_unit: ")
    assert ExchangeRate.objects.count() == 2  # the good first row was not kept either


def test_it_shows_the_rates_used_on_the_page_and_in_the_csv(f0, cny, client):
    add_rate("7.2500", APRIL)
    launch(f0, cny, project=f0.gamma, at_=at(2026, 4, 2), seconds=3600)
    now = at(2026, 4, 3)
    view = draft_statement(project_id=f0.gamma.pk, now=now)
    csv_text = exports.to_csv(
        [exports.ExportStatement("gamma", "Gamma", view)], names={f0.model.pk: f0.model.name}
    )
    header, *rows = [row.split(",") for row in csv_text.strip().splitlines()]
    assert header[-2:] == ["priced_in", "exchange_rate"]
    usage = [row for row in rows if row[3] == "usage"]
    assert usage[0][-2:] == ["CNY", "7.25000000"]
    assert usage[0][header.index("amount")] == "2.76"
    pdf = exports.to_pdf(
        [exports.ExportStatement("gamma", "Gamma", view)],
        names={},
        title="Gamma",
        period=APRIL,
        generated_at=now,
    )
    assert pdf.startswith(b"%PDF")
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / "statement-rates-used.pdf").write_bytes(pdf)  # to turn into an image
    assert "7.25 CNY = 1 USD from 2026-04-01 00:00 UTC (PBOC central parity)" in (
        exports.rates_paragraph_text(view)
    )
    client.force_login(f0.admin)
    page = client.get(reverse("billing:statement", args=["gamma"]) + "?period=2026-04")
    assert page.status_code == 200
    text = page.content.decode()
    assert 'id="rates-used"' in text
    assert "PBOC central parity" in text and "2026-04-01 00:00 UTC" in text


def test_it_fails_over_only_to_offerings_whose_currency_has_a_rate(f0):
    account = factories.account(name="aliyun-cn")
    same_type = factories.offering(account, f0.model, on_demand="20.00")  # test.a100x1
    Offering.objects.filter(pk=same_type.pk).update(currency="CNY")
    reservation = lease(f0, f0.alpha, tier="burst", status="provisioning")
    instance = Instance.objects.create(
        reservation=reservation,
        account=f0.offering.account,
        offering=f0.offering,
        region=f0.offering.region,
        market="on_demand",
        gpu_count=1,
        rate_per_hour=f0.offering.on_demand_price_per_hour,
    )
    offerings = {place.offering_id for place in launching.launch_places(instance)}
    assert offerings == {f0.offering.pk}
    add_rate("7.2500", at(2020, 1, 1))
    offerings = {place.offering_id for place in launching.launch_places(instance)}
    assert offerings == {f0.offering.pk, same_type.pk}


def test_it_lets_an_admin_add_a_rate_in_the_admin_but_never_edit_it(f0, client):
    f0.admin.is_superuser = True
    f0.admin.save()
    client.force_login(f0.admin)
    add = reverse("admin:rental_exchangerate_add")
    form = {
        "currency": "CNY",
        "units_per_billing_unit": "7.2500",
        "valid_from_0": "2026-04-01",
        "valid_from_1": "00:00:00",
        "source": "PBOC central parity",
    }
    refused = client.post(add, {**form, "currency": "USD"})
    assert refused.status_code == 200 and "billing currency" in refused.content.decode()
    assert not ExchangeRate.objects.exists()
    created = client.post(add, form)
    assert created.status_code == 302
    rate = ExchangeRate.objects.get()
    assert (rate.currency, rate.units_per_billing_unit, rate.created_by) == (
        "CNY",
        Decimal("7.25"),
        f0.admin,
    )
    assert AuditEvent.objects.get(verb="exchange_rate.added").source == "admin"
    change = reverse("admin:rental_exchangerate_change", args=[rate.pk])
    client.post(change, {**form, "units_per_billing_unit": "1.0"})
    rate.refresh_from_db()
    assert rate.units_per_billing_unit == Decimal("7.25")


def test_it_converts_a_reservation_at_the_rate_in_force_when_its_window_began(f0, cny):
    add_rate("7.2500", APRIL)
    add_rate("7.0000", at(2026, 4, 2, 0, 30))  # after the window began: not used
    booked = lease(f0, f0.gamma, tier="reserved", start=at(2026, 4, 2), end=at(2026, 4, 2, 1))
    booked.offering = cny
    booked.save()
    computed = compute_period(period=APRIL, now=at(2026, 4, 3))
    [line] = [line for line in computed.for_project(f0.gamma.pk) if line.kind == "reservation"]
    assert line.amount == Decimal("2.76")  # CNY 20.00 × 1 GPU × 3,600 s / 7.25
    assert line.references["exchange_rate"] == "7.25000000"
    assert line.references["exchange_rate_from"] == "2026-04-01T00:00:00+00:00"


def test_it_keeps_the_rates_used_on_a_closed_statement(f0, cny):
    from billing import services

    add_rate("7.2500", APRIL)
    launch(f0, cny, project=f0.gamma, at_=at(2026, 4, 2), seconds=3600)
    services.close_period(period=APRIL, now=at(2026, 5, 3))
    add_rate("6.0000", at(2026, 5, 4))  # a later rate changes nothing that is closed
    view = draft_statement(project_id=f0.gamma.pk, period=APRIL, now=at(2026, 5, 5))
    assert view.status == "closed"
    [used] = view.rates_used
    assert (used.currency, used.units_per_billing_unit, used.source) == (
        "CNY",
        Decimal("7.25"),
        "PBOC central parity",
    )
    [line] = [line for line in view.lines if line.kind == "usage"]
    assert line.amount == Decimal("2.76")


def test_explain_says_how_a_converted_line_was_converted(f0, cny, client):
    add_rate("7.2500", APRIL)
    launch(f0, cny, project=f0.gamma, at_=at(2026, 4, 2), seconds=7200)
    client.force_login(f0.admin)
    view = client.get(reverse("billing:statement", args=["gamma"]) + "?period=2026-04")
    [row] = [row for row in view.context["rows"] if row["line"].kind == "usage"]
    assert row["words"].title == (
        "A100 80GB, on-demand, burst (CNY 20.00/GPU-h at 7.25 CNY per USD)"
    )
    body = client.get(
        reverse("billing:line", args=["gamma", "2026-04", row["index"]])
    ).content.decode()
    assert (
        "2 GPU-hours at CNY 20.00 per GPU-hour, converted at 7.25 CNY per USD (the rate in "
        "force when each instance launched): 7,200 GPU-seconds × 20.00 ÷ 3,600 ÷ 7.25 = $5.52"
    ) in html.unescape(body)
    assert "CNY 20.00" in body  # the runs' rate, in their own currency
