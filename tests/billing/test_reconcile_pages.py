"""The reconciliation pages: who may see and act, the import form, the flags on the finance
page, acknowledging, correcting, and a fixed number of queries whatever the bill's size."""

from datetime import date
from decimal import Decimal

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from billing.models import StatementLine
from billing.reconcile_models import CostImport
from rental.models import Instance
from tests import factories
from tests.billing.helpers import at, lease, run
from tests.billing.test_reconcile_files import CUR, bill_lines

MARCH = date(2026, 3, 1)


@pytest.fixture
def finance(db):
    return factories.user("fiona", finance=True)


@pytest.fixture
def metered(f0):
    record = run(lease(f0, f0.alpha), start=at(2026, 3, 2, 8), hours=10)
    Instance.objects.filter(pk=record.instance_id).update(external_id="i-0aaa")
    return record


def upload(client, data: str, *, period="2026-03", fmt="cur_csv", account=""):
    return client.post(
        reverse("billing:reconcile"),
        {
            "period": period,
            "format": fmt,
            "account": account,
            "file": SimpleUploadedFile("cur.csv", data.encode(), content_type="text/csv"),
        },
    )


def test_it_hides_every_page_from_engineers_managers_and_outsiders(client, f0, finance, metered):
    client.force_login(finance)
    upload(client, CUR + bill_lines(rate="3.00"))
    record = CostImport.objects.get()
    item = record.items.get()
    for who in (f0.alice, f0.alpha_manager, f0.outsider):
        client.force_login(who)
        assert client.get(reverse("billing:reconcile")).status_code == 404
        assert client.get(reverse("billing:reconcile_import", args=[record.pk])).status_code == 404
        assert upload(client, CUR + bill_lines()).status_code == 404
        acknowledged = client.post(
            reverse("billing:reconcile_acknowledge", args=[record.pk]), {"note": "fine"}
        )
        assert acknowledged.status_code == 404
        corrected = client.post(
            reverse("billing:reconcile_correct", args=[item.pk]), {"amount": "5.00"}
        )
        assert corrected.status_code == 404
    assert CostImport.objects.count() == 1
    record.refresh_from_db()
    assert record.status == "review"
    assert not StatementLine.objects.filter(kind="adjustment").exists()


def test_finance_imports_through_the_form_and_sees_the_flags(client, f0, finance, metered):
    client.force_login(finance)
    answer = upload(client, CUR + bill_lines(rate="3.00"), account=str(f0.account.pk))
    record = CostImport.objects.get()
    assert answer.status_code == 302
    assert answer["Location"] == reverse("billing:reconcile_import", args=[record.pk])
    page = client.get(answer["Location"]).content.decode()
    assert "1 difference is flagged and must be looked at before the month closes." in page
    assert (
        "Charged 3.000000 an hour for 10.00 hours; the rate captured at launch was 2.500000."
        in page
    )
    assert "Create correction" not in page  # finance reads; admins correct
    month = client.get(reverse("billing:reconcile") + "?period=2026-03").content.decode()
    assert f'id="import-{record.pk}"' in month and "To be looked at" in month
    assert "2026-03 waits for its provider bill to be looked at: cur.csv (1 flagged)." in month

    finance_page = client.get(reverse("billing:finance") + "?period=2026-03").content.decode()
    assert "1 difference with the provider's bill is beyond the threshold." in finance_page
    assert "2026-03 waits for its provider bill to be looked at" in finance_page


def test_a_bad_file_is_said_on_the_form_and_nothing_is_written(client, finance, f0):
    client.force_login(finance)
    answer = upload(client, CUR + bill_lines(hours=1).replace(",1,USD", ",x,USD"))
    assert answer.status_code == 400
    assert "Line 2, column “lineItem/UsageAmount”: “x” is not a number." in answer.content.decode()
    assert not CostImport.objects.exists()
    assert upload(client, CUR + bill_lines(), period="March").status_code == 400


def test_acknowledging_needs_a_note_and_then_lets_the_month_close(client, finance, f0, metered):
    client.force_login(finance)
    upload(client, CUR + bill_lines(rate="3.00"))
    record = CostImport.objects.get()
    url = reverse("billing:reconcile_acknowledge", args=[record.pk])
    assert client.post(url, {"note": " "}).status_code == 400
    assert client.post(url, {"note": "The catalog was wrong; fixed."}).status_code == 302
    record.refresh_from_db()
    assert (record.status, record.acknowledged_by, record.acknowledgement) == (
        "acknowledged",
        finance,
        "The catalog was wrong; fixed.",
    )
    page = client.get(reverse("billing:finance") + "?period=2026-03").content.decode()
    assert "nothing waits to be looked at" in page


def test_an_admin_corrects_with_an_adjustment_line_and_finance_cannot(client, finance, f0, metered):
    client.force_login(finance)
    upload(client, CUR + bill_lines(rate="3.00"))
    item = CostImport.objects.get().items.get()
    url = reverse("billing:reconcile_correct", args=[item.pk])
    refused = client.post(url, {"amount": "5.00"})
    assert refused.status_code == 403
    assert "Only an admin corrects a statement." in refused.content.decode()
    client.force_login(f0.admin)
    assert client.post(url, {"amount": "5.x"}).status_code == 400
    assert client.post(url, {"amount": "5.00"}).status_code == 302
    line = StatementLine.objects.get(kind="adjustment")
    assert (line.amount, line.statement.project, line.statement.status) == (
        Decimal("5.00"),
        f0.alpha,
        "draft",
    )
    assert "charged 30.00, portal 25.00" in line.description


def test_the_import_page_reads_a_fixed_number_of_queries(client, finance, f0):
    client.force_login(finance)

    def queries(resources: int) -> int:
        data = CUR + "".join(bill_lines(resource=f"i-{n:05d}", hours=1) for n in range(resources))
        upload(client, data)
        record = CostImport.objects.order_by("-pk").first()
        with CaptureQueriesContext(connection) as seen:
            assert (
                client.get(reverse("billing:reconcile_import", args=[record.pk])).status_code == 200
            )
        return len(seen)

    assert queries(3) == queries(80)
