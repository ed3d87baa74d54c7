"""Reconciliation against a bill made from the local cloud's own records (issue 22.4).

Instances are launched, run and ended through the portal's services against the local
EC2 endpoint in March 2026. The bill is then written as an AWS Cost and Usage Report from
what the cloud lists (instance ids, types, markets and tags, from DescribeInstances) priced
at the provider's real price per instance-hour, hour by hour, per second. The local cloud's
clock is the wall clock while the portal's is the test's, so each instance's hours are the
ones the portal recorded of it in the cloud (running → termination). Three faults are put
in on purpose: a wrong catalog price, an instance the portal never saw, a missing day.
"""

import csv
import io
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest

from billing import reconcile, services
from billing.models import Statement, StatementLine
from billing.reconcile_models import CostImport, CostImportItem
from billing.reconcile_words import explain
from portal.errors import InvalidTransition
from rental.fleet import instances, sync, termination
from rental.fleet.cloud import provider_for
from rental.loans import admission, ending
from rental.models import Instance, Offering, Reservation
from rental.providers.base import TAG_PROJECT, LaunchSpec
from tests import factories

MARCH = date(2026, 3, 1)
AFTER = datetime(2026, 4, 3, 12, 0, tzinfo=UTC)  # past March's close (end + 48 h grace)
REAL_PRICE = {("test.a100x1", "on_demand"): Decimal("2.50"), ("test.a100x1", "spot"): Decimal("1")}
HOUR = timedelta(hours=1)
CUR_HEADER = [
    "identity/LineItemId",
    "lineItem/LineItemType",
    "lineItem/UsageStartDate",
    "lineItem/UsageEndDate",
    "lineItem/ProductCode",
    "lineItem/UsageType",
    "lineItem/ResourceId",
    "lineItem/UsageAmount",
    "lineItem/CurrencyCode",
    "lineItem/UnblendedRate",
    "lineItem/UnblendedCost",
    "product/instanceType",
    "product/region",
    "resourceTags/user:gpu-portal:project",
    "resourceTags/user:gpu-portal:reservation",
]


def at(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)


@pytest.fixture
def f0c(db, cloud):
    return factories.fixture_f0(endpoint_url=cloud.url)


def run_lease(f0c, project, start: datetime, end: datetime) -> Instance:
    """A 1-GPU lease of ``project`` launched at ``start`` (running 30 s later) and ended at
    ``end``, through the services and the local cloud."""
    lease = admission.submit_reservation(
        actor=f0c.engineer_of(project),
        project=project,
        gpu_model=f0c.model,
        gpu_count=1,
        duration_hours=72,
        priority="experiment",
        market="on_demand",
        now=start,
    )
    instance = lease.instances.get()
    instances.provision_instance(instance_id=instance.pk, now=start)
    sync.sync_instances(now=start + timedelta(seconds=30))
    ending.end_reservation(
        actor=f0c.engineer_of(project), reservation=Reservation.objects.get(pk=lease.pk), now=end
    )
    termination.terminate_instance(instance_id=instance.pk, now=end)
    instance.refresh_from_db()
    return instance


def hourly_lines(cloud_instance, start: datetime, end: datetime) -> list[list[str]]:
    """One CUR line per hour the instance ran in, per second (UsageAmount in hours)."""
    rate = REAL_PRICE[(cloud_instance.instance_type, cloud_instance.market)]
    usage = "SpotUsage" if cloud_instance.market == "spot" else "BoxUsage"
    rows = []
    hour = start.replace(minute=0, second=0, microsecond=0)
    while hour < end:
        seconds = int((min(end, hour + HOUR) - max(start, hour)) / timedelta(seconds=1))
        amount = (Decimal(seconds) / 3600).quantize(Decimal("0.0000000001"))
        rows.append(
            [
                f"line-{cloud_instance.external_id}-{hour:%d%H}",
                "Usage",
                f"{hour:%Y-%m-%dT%H:%M:%SZ}",
                f"{hour + HOUR:%Y-%m-%dT%H:%M:%SZ}",
                "AmazonEC2",
                f"USE1-{usage}:{cloud_instance.instance_type}",
                cloud_instance.external_id,
                str(amount),
                "USD",
                str(rate),
                str((amount * rate).quantize(Decimal("0.0000000001"))),
                cloud_instance.instance_type,
                "us-east-1",
                cloud_instance.tag(TAG_PROJECT),
                cloud_instance.tag("gpu-portal:reservation"),
            ]
        )
        hour += HOUR
    return rows


def cur_from_cloud(account, windows: dict[str, tuple[datetime, datetime]], *, drop=()) -> bytes:
    """The month's CUR of every instance the local cloud lists, over the given windows;
    ``drop``: (resource id, day) pairs left off the bill. Tax and storage lines beside."""
    listed = provider_for(Instance(account=account)).describe(region="us-east-1", tag_filter={})
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(CUR_HEADER)
    for cloud_instance in sorted(listed, key=lambda item: item.external_id):
        start, end = windows[cloud_instance.external_id]
        for row in hourly_lines(cloud_instance, start, end):
            if (row[6], date.fromisoformat(row[2][:10])) not in drop:
                writer.writerow(row)
    writer.writerow(
        ["tax-1", "Tax", "2026-03-01T00:00:00Z", "2026-04-01T00:00:00Z", "AmazonEC2", "", "",
         "1", "USD", "", "15.40", "", "", "", ""]
    )  # fmt: skip
    writer.writerow(
        ["ebs-1", "Usage", "2026-03-02T00:00:00Z", "2026-03-02T01:00:00Z", "AmazonEC2",
         "EBS:VolumeUsage.gp3", "vol-0abc", "0.1", "USD", "0.08", "0.008", "", "us-east-1", "", ""]
    )  # fmt: skip
    return out.getvalue().encode()


@pytest.fixture
def march(f0c):
    """Four leases in March on the local cloud, the catalog price mistyped for one, and an
    instance started in the cloud outside the portal."""
    a = run_lease(f0c, f0c.alpha, at(2026, 3, 2, 10, 0), at(2026, 3, 4, 10, 0, 30))
    d = run_lease(f0c, f0c.gamma, at(2026, 3, 4, 15, 0), at(2026, 3, 4, 20, 0, 30))
    # An admin mistypes the catalog price: beta's lease captures $2.00, the cloud charges $2.50.
    Offering.objects.filter(pk=f0c.offering.pk).update(on_demand_price_per_hour=Decimal("2.00"))
    b = run_lease(f0c, f0c.beta, at(2026, 3, 5, 8, 0), at(2026, 3, 5, 20, 0, 30))
    stray = provider_for(Instance(account=f0c.account)).launch(
        LaunchSpec(
            region="us-east-1",
            instance_type="test.a100x1",
            image_id=f0c.image.image_id,
            market="on_demand",
            tags=(("Name", "started by hand"),),
        ),
        idempotency_key="by-hand-0001",
    )
    windows = {i.external_id: (i.running_at, i.usage.get().end) for i in (a, b, d)} | {
        stray.external_id: (at(2026, 3, 10), at(2026, 3, 11, 12))
    }
    bill = cur_from_cloud(f0c.account, windows, drop={(a.external_id, date(2026, 3, 3))})
    return {"a": a, "b": b, "d": d, "stray": stray.external_id, "bill": bill}


def do_import(f0c, bill: bytes, *, who=None, now=AFTER) -> CostImport:
    return reconcile.import_bill(
        actor=who or factories.user("fiona", finance=True),
        file=io.BytesIO(bill),
        file_name="cur-2026-03.csv",
        fmt=CostImport.Format.CUR_CSV,
        period=MARCH,
        account=f0c.account,
        now=now,
    )


def test_it_finds_and_explains_the_three_faults(f0c, march):
    record = do_import(f0c, march["bill"])

    assert record.line_count == 48 - 24 + 13 + 6 + 37 + 2  # hourly lines, minus a day, + 2
    assert record.instance_line_count == 48 - 24 + 13 + 6 + 37
    assert record.other_total == Decimal("15.408")
    assert round(record.provider_total, 2) == Decimal("192.50")
    assert round(record.portal_total, 2) == Decimal("156.50")
    assert (record.status, record.flagged_count) == (CostImport.Status.REVIEW, 3)
    items = {item.resource_id: item for item in record.items.all()}

    # A missing day: the portal metered alpha's 24 hours of 3 March, the bill has none.
    a = items[march["a"].external_id]
    assert (a.finding, a.flagged, a.instance_id) == ("missing_day", True, march["a"].pk)
    assert a.details["missing_days"] == [["2026-03-03", "24.000000", "60.000000"]]
    assert (round(a.portal_cost, 2), round(a.provider_cost, 2)) == (
        Decimal("120.00"),
        Decimal("60.00"),
    )
    assert (
        "The bill has no line for 2026-03-03, when the portal metered 24.00 hours (60.00)."
        in explain(a, record)
    )

    # A wrong catalog price: beta's instance captured $2.00, the provider charged $2.50,
    # and the catalog price that explains it is the offering's own $2.00.
    b = items[march["b"].external_id]
    assert (b.finding, b.flagged) == ("price", True)
    assert b.explaining_offering_id == f0c.offering.pk
    assert b.details["price"] == {
        "charged": "2.500000",
        "captured": "2.000000",
        "hours": "12.000000",
        "market": "on_demand",
        "explained": "own_wrong",
        "catalog": "2.000000",
        "catalog_market": "on_demand",
    }
    assert (round(b.portal_cost, 2), round(b.provider_cost, 2)) == (
        Decimal("24.00"),
        Decimal("30.00"),
    )
    words = " ".join(explain(b, record))
    assert (
        "Charged 2.500000 an hour for 12.00 hours; the rate captured at launch was 2.000000."
        in words
    )
    assert f"The catalog price of {f0c.offering} (on-demand, 2.000000 an hour)" in words

    # An instance the portal never saw: on the bill, in the cloud, not in the database.
    stray = items[march["stray"]]
    assert (stray.finding, stray.flagged, stray.instance_id) == ("unknown", True, None)
    assert round(stray.provider_cost, 2) == Decimal("90.00")
    assert stray.gpu_model_id == f0c.model.pk  # from the catalog's offering of its type
    assert (
        "The portal never knew this instance: 36.00 hours of test.a100x1 charged 90.00."
        in explain(stray, record)
    )

    # gamma's lease matches to the cent.
    d = items[march["d"].external_id]
    assert (d.finding, d.flagged, round(d.difference, 2)) == ("matches", False, Decimal("0.00"))


def test_it_rolls_up_per_project_and_gpu_model(f0c, march):
    record = do_import(f0c, march["bill"])
    by_project, by_model = reconcile.rollups(record)
    figures = {
        row.label: (round(row.portal, 2), round(row.provider, 2), row.flagged, row.beyond)
        for row in by_project
    }
    assert figures == {
        "Alpha": (Decimal("120.00"), Decimal("60.00"), 1, True),
        "Beta": (Decimal("24.00"), Decimal("30.00"), 1, True),
        "Gamma": (Decimal("12.50"), Decimal("12.50"), 0, False),
        "No project known": (Decimal("0.00"), Decimal("90.00"), 1, True),
    }
    assert [row.label for row in by_project][-1] == "Gamma"  # beyond the threshold first
    [model] = by_model
    assert (model.label, round(model.portal, 2), round(model.provider, 2)) == (
        "A100 80GB",
        Decimal("156.50"),
        Decimal("192.50"),
    )
    assert model.percent == Decimal("18.70")


def test_the_month_does_not_close_until_the_flags_are_looked_at(f0c, march):
    record = do_import(f0c, march["bill"])
    assert services.close_due_periods(now=AFTER) == 0
    with pytest.raises(InvalidTransition) as refused:
        services.close_period(period=MARCH, now=AFTER)
    assert refused.value.code == "bill_not_looked_at"
    assert "cur-2026-03.csv (3 flagged)" in refused.value.message
    assert not Statement.objects.filter(period=MARCH).exists()

    reconcile.acknowledge(actor=f0c.admin, import_id=record.pk, note="Catalog fixed; stray ended.")
    assert services.close_due_periods(now=AFTER) > 0
    assert not Statement.objects.filter(period=MARCH, status="draft").exists()


def test_an_import_never_changes_a_closed_month_and_corrects_in_the_open_one(f0c, march):
    services.close_period(period=MARCH, now=AFTER)
    closed = list(
        StatementLine.objects.filter(statement__period=MARCH)
        .order_by("pk")
        .values_list("pk", "amount", "description", "locked")
    )
    totals = dict(Statement.objects.filter(period=MARCH).values_list("pk", "total"))
    record = do_import(f0c, march["bill"])
    b = record.items.get(resource_id=march["b"].external_id)
    assert reconcile.suggested_correction(b) == Decimal("6.00")

    line = reconcile.correct_item(actor=f0c.admin, item_id=b.pk, amount="6.00", now=AFTER)

    assert (line.kind, line.amount, line.statement.period) == (
        "adjustment",
        Decimal("6.00"),
        date(2026, 4, 1),
    )
    assert line.statement.project == f0c.beta and line.statement.status == "draft"
    assert line.references == {"cost_import_item": b.pk, "cost_import": record.pk}
    b.refresh_from_db()
    assert b.correction_id == line.pk
    assert (
        list(
            StatementLine.objects.filter(statement__period=MARCH)
            .order_by("pk")
            .values_list("pk", "amount", "description", "locked")
        )
        == closed
    )
    assert dict(Statement.objects.filter(period=MARCH).values_list("pk", "total")) == totals
    with pytest.raises(Exception, match="corrected already"):
        reconcile.correct_item(actor=f0c.admin, item_id=b.pk, amount="6.00", now=AFTER)


def test_a_new_import_replaces_the_earlier_one(f0c, march):
    first = do_import(f0c, march["bill"])
    second = do_import(f0c, march["bill"], who=f0c.admin)
    first.refresh_from_db()
    assert (first.status, second.status) == ("superseded", "review")
    assert CostImportItem.objects.filter(cost_import=second).count() == 4
