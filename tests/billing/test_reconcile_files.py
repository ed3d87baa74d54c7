"""Reading a provider's bill: the CUR's CSV (plain and gzipped) and Parquet, the simple CSV
of other providers, matching by tags, and bad files refused by line and column with
nothing written."""

import gzip
import io
from datetime import UTC, date, datetime
from decimal import Decimal

import pytest

from billing import reconcile
from billing.reconcile_models import CostImport, CostImportItem
from portal.errors import InvalidInput, NotPermitted
from portal.models import AuditEvent
from rental.models import Instance
from tests import factories
from tests.billing.helpers import at, lease, run

MARCH = date(2026, 3, 1)
AFTER = datetime(2026, 4, 2, tzinfo=UTC)
CUR = (
    "lineItem/LineItemType,lineItem/UsageStartDate,lineItem/UsageType,lineItem/ResourceId,"
    "lineItem/UsageAmount,lineItem/CurrencyCode,lineItem/UnblendedRate,lineItem/UnblendedCost,"
    "product/instanceType,resourceTags/user:gpu-portal:project,"
    "resourceTags/user:gpu-portal:idempotency-key\n"
)
SIMPLE = "resource_id,usage_start,usage_type,usage_amount,rate,cost,currency,instance_type\n"


@pytest.fixture
def instance(f0):
    """alpha's 1-GPU run of 10 hours on 2 March at $2.50, known as i-0aaa."""
    record = run(lease(f0, f0.alpha), start=at(2026, 3, 2, 8), hours=10)
    Instance.objects.filter(pk=record.instance_id).update(external_id="i-0aaa")
    return Instance.objects.get(pk=record.instance_id)


@pytest.fixture
def finance(db):
    return factories.user("fiona", finance=True)


def bill_lines(resource="i-0aaa", hours=10, rate="2.50", key="", day="2026-03-02"):
    return "".join(
        f"Usage,{day}T{8 + h:02d}:00:00Z,USE1-BoxUsage:test.a100x1,{resource},1,USD,{rate},"
        f"{rate},test.a100x1,alpha,{key}\n"
        for h in range(hours)
    )


def imported(finance, data: bytes, fmt=CostImport.Format.CUR_CSV, account=None):
    return reconcile.import_bill(
        actor=finance,
        file=io.BytesIO(data),
        file_name="bill.csv",
        fmt=fmt,
        period=MARCH,
        account=account,
        now=AFTER,
    )


def test_it_matches_a_cur_to_the_cent(f0, instance, finance):
    record = imported(finance, (CUR + bill_lines()).encode(), account=f0.account)
    [item] = record.items.all()
    assert (item.instance_id, item.matched_by, item.finding, item.flagged) == (
        instance.pk,
        "resource_id",
        "matches",
        False,
    )
    assert (item.portal_cost, item.provider_cost) == (Decimal("25.00"), Decimal("25.00"))
    assert record.status == CostImport.Status.CLEAR
    assert AuditEvent.objects.filter(verb="bill.import", object_id=str(record.pk)).exists()


def test_it_reads_a_gzipped_cur(f0, instance, finance):
    record = imported(finance, gzip.compress((CUR + bill_lines()).encode()))
    assert record.items.get().finding == "matches"


def test_it_matches_by_the_idempotency_key_tag_when_the_id_is_another(f0, instance, finance):
    data = CUR + bill_lines(resource="i-0zzz", key=instance.idempotency_key)
    item = imported(finance, data.encode()).items.get()
    assert (item.instance_id, item.matched_by, item.finding) == (
        instance.pk,
        "idempotency_key",
        "matches",
    )


def test_a_small_difference_is_not_flagged_and_a_larger_one_is(f0, instance, finance, settings):
    # 2.51 instead of 2.50: a 0.4 % difference, under the 0.5 % threshold.
    item = imported(finance, (CUR + bill_lines(rate="2.51")).encode()).items.get()
    assert (item.finding, item.flagged, item.difference) == ("price", False, Decimal("0.10"))
    settings.PORTAL_RECONCILE_THRESHOLD_PERCENT = "0.3"
    item = imported(finance, (CUR + bill_lines(rate="2.51")).encode()).items.get()
    assert (item.finding, item.flagged) == ("price", True)
    assert item.cost_import.threshold_percent == Decimal("0.30")


def test_a_rate_another_offering_is_priced_at_names_that_offering(f0, instance, finance):
    other = factories.offering(f0.account, f0.model, instance_type="test.a100x1b", on_demand="2.75")
    item = imported(finance, (CUR + bill_lines(rate="2.75")).encode()).items.get()
    assert item.explaining_offering == other
    assert item.details["price"]["explained"] == "other_offering"
    assert item.difference == Decimal("2.50")


def test_a_day_billed_that_the_portal_did_not_meter_is_named(f0, instance, finance):
    data = CUR + bill_lines() + bill_lines(hours=2, day="2026-03-09")
    item = imported(finance, data.encode()).items.get()
    assert item.finding == "extra_day"
    assert item.details["extra_days"] == [["2026-03-09", "2.000000", "5.000000"]]


def test_an_instance_metered_but_not_on_the_bill_is_flagged_for_its_account(f0, instance, finance):
    record = imported(finance, (CUR + bill_lines(resource="i-0other")).encode(), account=f0.account)
    items = {item.resource_id: item for item in record.items.all()}
    assert items["i-0aaa"].finding == "portal_only"
    assert items["i-0aaa"].portal_cost == Decimal("25.00")
    assert items["i-0other"].finding == "unknown"


def test_it_reads_the_simple_csv_of_other_providers(f0, instance, finance):
    data = SIMPLE + "".join(
        f"i-0aaa,2026-03-02 {8 + h:02d}:00:00,instance,1,2.50,2.50,USD,gpu.big\n" for h in range(10)
    )
    record = imported(finance, data.encode(), fmt=CostImport.Format.SIMPLE_CSV)
    item = record.items.get()
    assert (item.finding, item.provider_cost) == ("matches", Decimal("25.00"))


def test_it_matches_by_the_lease_tag_when_the_lease_has_one_instance(f0, instance, finance):
    data = "resource_id,usage_start,usage_type,usage_amount,cost,tag:gpu-portal:reservation\n"
    data += f"vm-77,2026-03-02T08:00:00Z,instance,10,25.00,{instance.reservation_id}\n"
    item = imported(finance, data.encode(), fmt=CostImport.Format.SIMPLE_CSV).items.get()
    assert (item.instance_id, item.matched_by, item.finding) == (
        instance.pk,
        "reservation",
        "matches",
    )
    assert item.provider_rate == Decimal("2.5")  # cost / hours without a rate column


def test_it_reads_a_cur_in_parquet(f0, instance, finance):
    pyarrow = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    hours = list(range(10))
    table = pyarrow.table(
        {
            "line_item_usage_start_date": [datetime(2026, 3, 2, 8 + h, tzinfo=UTC) for h in hours],
            "line_item_usage_type": ["USE1-BoxUsage:test.a100x1"] * 10,
            "line_item_resource_id": ["i-0aaa"] * 10,
            "line_item_usage_amount": [1.0] * 10,
            "line_item_unblended_rate": ["2.5"] * 10,
            "line_item_unblended_cost": [2.5] * 10,
            "line_item_currency_code": ["USD"] * 10,
        }
    )
    out = io.BytesIO()
    pq.write_table(table, out, row_group_size=4)
    record = imported(finance, out.getvalue(), fmt=CostImport.Format.CUR_PARQUET)
    assert (record.line_count, record.items.get().provider_cost) == (10, Decimal("25.0"))
    assert record.items.get().finding == "matches"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "The file is empty."),
        (CUR.encode(), "The file has a header but no lines."),
        (
            b"lineItem/UsageStartDate,lineItem/UsageType\n",
            "Line 1: the file has no column \u201clineItem/ResourceId\u201d",
        ),
        (
            (
                CUR + bill_lines(hours=2) + bill_lines(hours=1).replace(",1,USD", ",one,USD")
            ).encode(),
            "Line 4, column \u201clineItem/UsageAmount\u201d: \u201cone\u201d is not a number.",
        ),
        (
            (CUR + bill_lines(hours=1, day="2026-04-01")).encode(),
            "Line 2, column \u201clineItem/UsageStartDate\u201d: 2026-04-01 is not in 2026-03",
        ),
        (
            (CUR + bill_lines(hours=1, day="2026-3-x")).encode(),
            "Line 2, column \u201clineItem/UsageStartDate\u201d: "
            "\u201c2026-3-xT08:00:00Z\u201d is not a date",
        ),
        (
            (CUR + bill_lines(hours=2) + bill_lines(hours=1).replace("USD", "EUR")).encode(),
            "Line 4, column \u201clineItem/CurrencyCode\u201d: "
            "EUR, where the lines before are in USD",
        ),
        (
            (CUR + bill_lines(hours=1, resource="")).encode(),
            "Line 2, column \u201clineItem/ResourceId\u201d: "
            "an instance-hour line without a resource id",
        ),
        ((CUR + "Usage,2026-03-02\n").encode(), "Line 2 has 2 columns; the header has 11."),
        ((CUR + bill_lines(hours=1)).encode("utf-16"), "not UTF-8 text"),
    ],
)
def test_a_bad_file_is_refused_by_line_and_column_and_nothing_is_written(
    finance, f0, data, message
):
    with pytest.raises(InvalidInput) as refused:
        imported(finance, data)
    assert refused.value.field == "file"
    assert message in refused.value.message
    assert not CostImport.objects.exists()
    assert not CostImportItem.objects.exists()


def test_a_bad_parquet_file_is_refused(finance, f0):
    pytest.importorskip("pyarrow")
    with pytest.raises(InvalidInput, match="cannot be read as Parquet"):
        imported(finance, b"PAR1 not really", fmt=CostImport.Format.CUR_PARQUET)
    assert not CostImport.objects.exists()


def test_only_finance_and_admins_import(f0, instance):
    for who in (f0.alice, f0.alpha_manager, f0.outsider):
        with pytest.raises(NotPermitted):
            imported(who, (CUR + bill_lines()).encode())
    assert imported(f0.admin, (CUR + bill_lines()).encode()).status == "clear"
