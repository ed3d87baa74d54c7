"""Values already stored at the edge of their columns (from an old version, the admin or
an import) are shown, never a server error: every page, partial and API list that reads
them answers, for every persona."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.urls import reverse
from django.utils import timezone

from billing.models import Budget, BudgetAlert
from billing.periods import period_start
from rental.models import DataVolume, GpuModel, Offering, Pool, Quota, Reservation
from tests import factories
from tests.billing.helpers import lease, run

INT_MAX = 2**31 - 1
SMALL_MAX = 2**15 - 1
MONEY_MAX = Decimal("999999999999.99")  # 14 digits, 2 decimals
PRICE_MAX = Decimal("999999.999999")  # 12 digits, 6 decimals
NOW = timezone.now()


def thresholds_raw(project, json_text: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE billing_budget SET thresholds = %s::jsonb WHERE project_id = %s",
            [json_text, project.pk],
        )


BAD_THRESHOLDS = [
    '[{"percent": 1000000000000000000000000000000, "kind": "actual"}]',
    '[{"percent": "abc", "kind": "actual"}]',
    '[{"kind": "forecast"}]',
    '[{"percent": 50, "kind": "sideways"}]',
    '[50, "actual"]',
    '{"percent": 50, "kind": "actual"}',
    '"abc"',
    "null",
    '[{"percent": -5, "kind": "actual"}]',
    '[{"percent": 1.5e300, "kind": "actual"}]',
]


@pytest.fixture
def extremes(f0):
    """Every number of F0 at the edge of its column, alpha's budget tiny beside a huge
    spend, and a running lease at the highest price."""
    f0.finance = factories.user("fiona", finance=True)
    f0.admin.is_superuser = True  # the admin site's pages need its permissions
    f0.admin.save(update_fields=["is_superuser"])
    GpuModel.objects.filter(pk=f0.model.pk).update(
        memory_gb=INT_MAX,
        memory_bandwidth_gbps=INT_MAX,
        bf16_tflops=Decimal("9999999.9"),
        fp16_tflops=Decimal("9999999.9"),
    )
    Pool.objects.filter(pk=f0.pool.pk).update(
        capacity=INT_MAX, committed_gpus=INT_MAX, committed_monthly_cost=MONEY_MAX
    )
    Quota.objects.filter(project=f0.alpha).update(
        guaranteed=INT_MAX,
        ceiling=INT_MAX,
        weight=Decimal("99999.999"),
        max_hours_per_lease=INT_MAX,
        max_gpus_per_lease=INT_MAX,
        auto_approve_gpus_cap=INT_MAX,
        auto_approve_hours_cap=INT_MAX,
    )
    Quota.objects.filter(project=f0.beta).update(weight=Decimal("0.001"))
    Offering.objects.filter(pk=f0.offering.pk).update(
        gpus_per_instance=SMALL_MAX,
        vcpus=SMALL_MAX,
        memory_gib=INT_MAX,
        on_demand_price_per_hour=PRICE_MAX,
        spot_price_per_hour=PRICE_MAX,
        storage_price_per_gb_month=PRICE_MAX,
        root_disk_gb=INT_MAX,
    )
    f0.offering.refresh_from_db()
    big = lease(f0, f0.alpha, tier="burst", gpus=INT_MAX, status="active", start=NOW)
    Reservation.objects.filter(pk=big.pk).update(end=NOW + timedelta(days=3650))
    usage = run(big, start=period_start(NOW), rate=str(PRICE_MAX), tier="burst")
    type(usage).objects.filter(pk=usage.pk).update(gpu_count=SMALL_MAX)
    type(usage.instance).objects.filter(pk=usage.instance_id).update(gpu_count=SMALL_MAX)
    DataVolume.objects.create(
        project=f0.alpha,
        account=f0.account,
        name="huge",
        region="us-east-1",
        zone="us-east-1a",
        size_gb=INT_MAX,
        volume_id="vol-huge",
        state=DataVolume.State.AVAILABLE,
    )
    budget = Budget.objects.create(
        project=f0.alpha,
        monthly_amount=Decimal("0.01"),
        thresholds=[{"percent": 1000, "kind": "forecast"}],
    )
    BudgetAlert.objects.create(
        budget=budget,
        period=period_start(NOW).date(),
        percent=SMALL_MAX,
        kind="actual",
        value=MONEY_MAX,
    )
    Budget.objects.create(project=f0.beta, monthly_amount=MONEY_MAX, thresholds=[])
    f0.big = big
    return f0


def pages(f0):
    slug, lease_pk = f0.alpha.slug, f0.big.pk
    month = f"{period_start(NOW):%Y-%m}"
    return [
        reverse("dashboard"),
        reverse("rental:projects"),
        reverse("rental:project", args=[slug]),
        reverse("rental:project_volumes", args=[slug]),
        reverse("rental:leases"),
        reverse("rental:lease_list_partial"),
        reverse("rental:lease", args=[lease_pk]),
        reverse("rental:lease_status_partial", args=[lease_pk]),
        reverse("rental:lease_new") + f"?project={f0.alpha.pk}",
        reverse("rental:approvals"),
        reverse("rental:pools"),
        reverse("rental:pool", args=[f0.pool.pk]),
        reverse("rental:panel_leases"),
        reverse("rental:panel_approvals"),
        reverse("rental:images"),
        reverse("billing:statement", args=[slug]),
        reverse("billing:statement", args=[slug]) + "?format=csv",
        reverse("billing:statement", args=[slug]) + "?format=pdf",
        reverse("billing:finance") + "?format=csv",
        reverse("billing:statement_partial", args=[slug]),
        reverse("billing:line", args=[slug, month, 0]),
        reverse("billing:reports", args=[slug]),
        reverse("billing:finance"),
        reverse("billing:lease_cost", args=[lease_pk]),
        reverse("billing:panel_spend"),
        reverse("audit_log"),
        reverse("notifications"),
        "/api/v1/budgets",
        "/api/v1/quotas",
        "/api/v1/pools",
        f"/api/v1/pools/{f0.pool.pk}",
        "/api/v1/offerings",
        "/api/v1/gpu-models",
        "/api/v1/leases",
        f"/api/v1/leases/{lease_pk}",
        f"/api/v1/leases/{lease_pk}/cost",
        "/api/v1/instances",
        "/api/v1/usage",
        "/api/v1/volumes",
        "/api/v1/statements",
        f"/api/v1/statements/preview?project={slug}",
        f"/api/v1/budgets/{Budget.objects.get(project=f0.alpha).pk}",
        f"/api/v1/quotas/{Quota.objects.get(project=f0.alpha).pk}",
        f"/api/v1/offerings/{f0.offering.pk}",
        "/api/v1/availability-watches",
        "/api/v1/quota-requests",
        "/api/v1/projects",
        f"/api/v1/projects/{slug}/config",
        "/api/v1/audit-events",
    ]


ADMIN_PAGES = [
    "admin:billing_budget_changelist",
    "admin:billing_budgetalert_changelist",
    "admin:rental_pool_changelist",
    "admin:rental_quota_changelist",
    "admin:rental_offering_changelist",
    "admin:rental_gpumodel_changelist",
    "admin:rental_reservation_changelist",
    "admin:rental_instance_changelist",
    "admin:rental_usagerecord_changelist",
    "admin:rental_datavolume_changelist",
]


def admin_pages(f0):
    budget = Budget.objects.get(project=f0.alpha)
    quota = Quota.objects.get(project=f0.alpha)
    return [reverse(name) for name in ADMIN_PAGES] + [
        reverse("admin:billing_budget_change", args=[budget.pk]),
        reverse("admin:rental_pool_change", args=[f0.pool.pk]),
        reverse("admin:rental_quota_change", args=[quota.pk]),
        reverse("admin:rental_offering_change", args=[f0.offering.pk]),
        reverse("admin:rental_gpumodel_change", args=[f0.model.pk]),
        reverse("admin:rental_reservation_change", args=[f0.big.pk]),
    ]


PERSONAS = ["alice", "alpha_manager", "admin", "finance"]


def answers(client, f0, who, urls):
    client.force_login(getattr(f0, who))
    broken = []
    for url in urls:
        try:
            response = client.get(url)
        except Exception as error:  # every broken page listed, not only the first
            broken.append((url, repr(error)[:300]))
            continue
        if response.status_code >= 500:
            broken.append((url, response.status_code))
    return broken


@pytest.mark.parametrize("who", PERSONAS)
def test_every_page_answers_with_numbers_at_the_edge_of_their_columns(client, extremes, who):
    assert answers(client, extremes, who, pages(extremes)) == []


def test_the_admin_site_answers_with_numbers_at_the_edge_of_their_columns(client, extremes):
    assert answers(client, extremes, "admin", admin_pages(extremes)) == []


def read(client, user, url: str) -> str:
    client.force_login(user)
    response = client.get(url)
    assert response.status_code == 200, (url, response.status_code)
    return response.content.decode()


def test_the_values_are_shown_as_stored(client, extremes):
    f0 = extremes
    pool = read(client, f0.admin, reverse("rental:pool", args=[f0.pool.pk]))
    assert "2147483647" in pool.replace(",", "")  # C and K
    assert "999999.999999" in pool  # the offering's price, in its form
    beta = read(client, f0.admin, reverse("billing:statement_partial", args=[f0.beta.slug]))
    assert 'value="999999999999.99"' in beta  # the budget form, ready to change
    quotas = read(client, f0.alpha_manager, reverse("rental:project", args=[f0.alpha.slug]))
    assert "2147483647" in quotas.replace(",", "")
    client.force_login(f0.admin)
    budgets = client.get("/api/v1/budgets").json()["results"]
    assert {b["project"]: b["monthly_amount"] for b in budgets}["beta"] == "999999999999.99"
    alerts = read(client, f0.admin, reverse("admin:billing_budgetalert_changelist"))
    assert "999999999999.99" in alerts.replace(",", "")


def test_the_edit_forms_save_a_valid_value_over_an_extreme_one(client, extremes):
    f0 = extremes
    quota = Quota.objects.get(project=f0.alpha)
    client.force_login(f0.admin)
    saved = [
        client.post(
            reverse("rental:pool_settings", args=[f0.pool.pk]),
            {
                "capacity": "16",
                "committed_gpus": "0",
                "committed_monthly_cost": "0",
                "apportionment": "hybrid",
                "residual": "shared",
            },
        ),
        client.post(
            reverse("rental:offering_terms", args=[f0.pool.pk, f0.offering.pk]),
            {"on_demand_price_per_hour": "2.50", "spot_price_per_hour": "1.00"},
        ),
        client.post(
            reverse("rental:quota_auto_approve_caps", args=[f0.alpha.slug, quota.pk]),
            {"auto_approve_gpus_cap": "4", "auto_approve_hours_cap": "24"},
        ),
        client.post(
            reverse("billing:budget_set", args=[f0.beta.slug]),
            {"monthly_amount": "500.00", "thresholds": ["80:actual"]},
        ),
    ]
    assert [answer.status_code for answer in saved] == [302] * len(saved)
    f0.pool.refresh_from_db()
    f0.offering.refresh_from_db()
    quota.refresh_from_db()
    assert (f0.pool.capacity, f0.pool.committed_gpus) == (16, 0)
    assert f0.offering.on_demand_price_per_hour == Decimal("2.50")
    assert (quota.auto_approve_gpus_cap, quota.auto_approve_hours_cap) == (4, 24)
    assert Budget.objects.get(project=f0.beta).monthly_amount == Decimal("500.00")


# Malformed thresholds: the manager (who sees the budget's form) and finance (who sees
# every project's figures) read every page; the admin reads the admin's.
@pytest.mark.parametrize("thresholds", BAD_THRESHOLDS)
@pytest.mark.parametrize("who", ["alpha_manager", "finance"])
def test_every_page_answers_with_a_budget_whose_thresholds_are_malformed(
    client, extremes, who, thresholds
):
    thresholds_raw(extremes.alpha, thresholds)
    assert answers(client, extremes, who, pages(extremes)) == []


@pytest.mark.parametrize("thresholds", BAD_THRESHOLDS)
def test_the_admin_budget_pages_answer_with_malformed_thresholds(client, extremes, thresholds):
    thresholds_raw(extremes.alpha, thresholds)
    assert answers(client, extremes, "admin", admin_pages(extremes)) == []


def test_the_budget_form_says_what_it_left_out_and_a_save_replaces_it(client, extremes):
    f0 = extremes
    thresholds_raw(f0.alpha, '[{"percent": 80, "kind": "actual"}, {"percent": "abc", "kind": "x"}]')
    page = read(
        client, f0.alpha_manager, reverse("billing:statement_partial", args=[f0.alpha.slug])
    )
    assert 'value="80:actual"' in page  # the well-formed one, ready to keep
    assert 'id="budget-thresholds-problem"' in page and "percent" in page
    answer = client.post(
        reverse("billing:budget_set", args=[f0.alpha.slug]),
        {"monthly_amount": "100.00", "thresholds": ["80:actual", "100:forecast"]},
    )
    assert answer.status_code == 302
    assert Budget.objects.get(project=f0.alpha).thresholds == [
        {"percent": 80, "kind": "actual"},
        {"percent": 100, "kind": "forecast"},
    ]
    page = read(
        client, f0.alpha_manager, reverse("billing:statement_partial", args=[f0.alpha.slug])
    )
    assert 'id="budget-thresholds-problem"' not in page


def test_the_admin_saves_valid_thresholds_over_malformed_ones(client, extremes):
    f0 = extremes
    thresholds_raw(f0.alpha, '"abc"')
    budget = Budget.objects.get(project=f0.alpha)
    client.force_login(f0.admin)
    answer = client.post(
        reverse("admin:billing_budget_change", args=[budget.pk]),
        {
            "project": f0.alpha.pk,
            "monthly_amount": "100.00",
            "thresholds": '[{"percent": 90, "kind": "actual"}]',
            "cap_policy": "refuse_new",
        },
    )
    assert answer.status_code == 302
    budget.refresh_from_db()
    assert budget.thresholds == [{"percent": 90, "kind": "actual"}]
