"""Admins configure a pool on its own page: capacity C, committed GPUs K, monthly cost F
and cost sharing (Q1 checked, degraded below Σ G), a degraded mark with a reason, and the
offerings' prices and availability. Bad input is a field error and writes nothing; other
roles see none of it and may post none of it."""

import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse
from django.utils import timezone

from portal.models import AuditEvent, Notification
from rental.models import Offering, Pool
from tests import factories
from tests.api.catalog_support import counts

pytestmark = pytest.mark.django_db

SETTINGS = {
    "capacity": "8",
    "committed_gpus": "0",
    "committed_monthly_cost": "0",
    "apportionment": "hybrid",
    "residual": "shared",
}
BAD_NUMBERS = ["", "-1", "10" + "0" * 25, "1e26", "many", "\x00"]


def page_of(f0) -> str:
    return reverse("rental:pool", args=[f0.pool.pk])


def post_settings(client, f0, **changes):
    return client.post(reverse("rental:pool_settings", args=[f0.pool.pk]), SETTINGS | changes)


def test_it_saves_the_settings_an_admin_changes_with_one_audit_event(f0, client):
    client.force_login(f0.admin)
    answer = post_settings(
        client,
        f0,
        capacity="10",
        committed_gpus="6",
        committed_monthly_cost="8400.50",
        apportionment="by_usage",
    )
    assert answer.status_code == 302
    pool = Pool.objects.get()
    assert (pool.capacity, pool.committed_gpus, pool.committed_monthly_cost) == (
        10,
        6,
        Decimal("8400.50"),
    )
    assert (pool.apportionment, pool.residual, pool.state) == ("by_usage", "shared", "ok")
    event = AuditEvent.objects.get()
    assert (event.verb, event.actor, event.source) == ("pool.changed", f0.admin, "web")
    assert event.before == {
        "capacity": 8,
        "committed_gpus": 0,
        "committed_monthly_cost": "0.00",
        "apportionment": "hybrid",
    }
    assert event.after == {
        "capacity": 10,
        "committed_gpus": 6,
        "committed_monthly_cost": "8400.50",
        "apportionment": "by_usage",
    }
    page = client.get(page_of(f0)).content.decode()
    assert 'id="pool-capacity">10<' in page and 'id="pool-cost">$8,400.50<' in page


def test_saving_the_same_settings_writes_nothing(f0, client):
    client.force_login(f0.admin)
    assert post_settings(client, f0).status_code == 302
    assert not AuditEvent.objects.exists()


@pytest.mark.parametrize("field", ["capacity", "committed_gpus", "committed_monthly_cost"])
@pytest.mark.parametrize("value", BAD_NUMBERS)
def test_a_bad_number_is_an_error_on_its_field_and_nothing_is_written(f0, client, field, value):
    client.force_login(f0.admin)
    before = counts()
    answer = post_settings(client, f0, **{field: value})
    assert answer.status_code == 400
    page = answer.content.decode()
    assert f'id="error-{field}"' in page
    assert 'aria-invalid="true" aria-describedby="error-' + field in page
    assert counts() == before
    assert Pool.objects.get().capacity == 8


@pytest.mark.parametrize(
    ("field", "value"),
    [("capacity", "1.5"), ("committed_monthly_cost", "10.005"), ("apportionment", "fair")],
)
def test_a_fraction_or_an_unknown_mode_is_refused_on_its_field(f0, client, field, value):
    client.force_login(f0.admin)
    answer = post_settings(client, f0, **{field: value})
    assert answer.status_code == 400
    assert f'id="error-{field}"' in answer.content.decode()
    assert not AuditEvent.objects.exists()


def test_committed_gpus_follow_rule_q1(f0, client):
    """K ≤ C, and K > 0 must cover Σ G (6 in F0) so every guarantee is prepaid."""
    client.force_login(f0.admin)
    over = post_settings(client, f0, committed_gpus="9")
    assert over.status_code == 400
    assert "cannot be more than the capacity C (8)" in over.content.decode()
    short = post_settings(client, f0, committed_gpus="4")
    assert short.status_code == 400
    page = short.content.decode()
    assert 'id="error-committed_gpus"' in page and "at least 6" in page
    assert 'value="4"' in page  # what was typed, to correct
    assert Pool.objects.get().committed_gpus == 0
    assert post_settings(client, f0, committed_gpus="6").status_code == 302
    assert Pool.objects.get().committed_gpus == 6
    below = post_settings(client, f0, capacity="5", committed_gpus="6")
    assert 'id="error-capacity"' in below.content.decode()


def test_a_capacity_below_the_guarantees_degrades_the_pool_and_tells_the_admins(f0, client):
    client.force_login(f0.admin)
    assert post_settings(client, f0, capacity="5").status_code == 302
    assert Pool.objects.get().state == "degraded"
    assert Notification.objects.get(user=f0.admin).link == page_of(f0)
    verbs = list(AuditEvent.objects.order_by("pk").values_list("verb", flat=True))
    assert verbs == ["pool.changed", "pool.state"]
    page = client.get(page_of(f0)).content.decode()
    assert "the capacity of 5 GPUs is below the 6 GPUs guaranteed" in page
    post_settings(client, f0, capacity="6")
    assert Pool.objects.get().state == "ok"


def test_an_admin_marks_the_pool_degraded_with_a_reason_and_clears_it(f0, client):
    client.force_login(f0.admin)
    url = reverse("rental:pool_degraded", args=[f0.pool.pk])
    marked = client.post(url, {"action": "mark", "reason": "us-east-1 GPU quota cut to 4"})
    assert marked.status_code == 302
    pool = Pool.objects.get()
    assert (pool.state, pool.degraded_reason) == ("degraded", "us-east-1 GPU quota cut to 4")
    note = Notification.objects.get(user=f0.admin)
    assert "us-east-1 GPU quota cut to 4" in str(note.body)
    client.force_login(f0.alice)  # everyone who sees the pool reads why
    page = client.get(page_of(f0)).content.decode()
    assert 'id="pool-degraded-reason"' in page and "us-east-1 GPU quota cut to 4" in page
    pools_page = client.get(reverse("rental:pools")).content.decode()
    assert "Degraded" in pools_page
    client.force_login(f0.admin)
    assert client.post(url, {"action": "clear"}).status_code == 302
    pool = Pool.objects.get()
    assert (pool.state, pool.degraded_reason) == ("ok", "")
    verbs = list(AuditEvent.objects.order_by("pk").values_list("verb", flat=True))
    assert verbs == ["pool.marked_degraded", "pool.state", "pool.state", "pool.degraded_cleared"]


def test_clearing_the_mark_keeps_a_pool_below_its_guarantees_degraded(f0, client):
    client.force_login(f0.admin)
    url = reverse("rental:pool_degraded", args=[f0.pool.pk])
    client.post(url, {"action": "mark", "reason": "maintenance"})
    post_settings(client, f0, capacity="5")
    answer = client.post(url, {"action": "clear"}, follow=True)
    assert "still degraded" in answer.content.decode()
    assert Pool.objects.get().state == "degraded"


@pytest.mark.parametrize("reason", ["", "   ", "bad\x00reason", "\u202eevil", "x" * 301])
def test_marking_needs_a_plain_reason(f0, client, reason):
    client.force_login(f0.admin)
    before = counts()
    answer = client.post(
        reverse("rental:pool_degraded", args=[f0.pool.pk]), {"action": "mark", "reason": reason}
    )
    assert answer.status_code == 400
    assert 'id="error-degraded-reason"' in answer.content.decode()
    assert counts() == before


def test_clearing_a_pool_not_marked_is_refused_in_words(f0, client):
    client.force_login(f0.admin)
    answer = client.post(reverse("rental:pool_degraded", args=[f0.pool.pk]), {"action": "clear"})
    assert answer.status_code == 409
    assert 'id="error-degraded"' in answer.content.decode()
    assert not AuditEvent.objects.exists()


def offering_form(**changes):
    return {
        "on_demand_price_per_hour": "2.75",
        "spot_price_per_hour": "1.10",
        "is_available": "on",
    } | changes


def test_an_admin_changes_an_offerings_prices_and_availability(f0, client):
    client.force_login(f0.admin)
    Offering.objects.filter(pk=f0.offering.pk).update(price_updated_at="2026-01-01")
    url = reverse("rental:offering_terms", args=[f0.pool.pk, f0.offering.pk])
    form = offering_form(spot_price_per_hour="")
    del form["is_available"]  # an unticked box is not sent
    answer = client.post(url, form)
    assert answer.status_code == 302
    assert answer["Location"].endswith(f"#offering-{f0.offering.pk}")
    offering = Offering.objects.get()
    assert (offering.on_demand_price_per_hour, offering.spot_price_per_hour) == (
        Decimal("2.75"),
        None,
    )
    assert offering.is_available is False
    assert offering.price_updated_at == timezone.now().date()
    event = AuditEvent.objects.get()
    assert (event.verb, event.object_type, event.object_id) == (
        "offering.changed",
        "rental.offering",
        str(f0.offering.pk),
    )
    assert event.before == {
        "on_demand_price_per_hour": "2.500000",
        "spot_price_per_hour": "1.000000",
        "is_available": True,
    }
    assert event.after == {
        "on_demand_price_per_hour": "2.750000",
        "spot_price_per_hour": None,
        "is_available": False,
    }


@pytest.mark.parametrize("field", ["on_demand_price_per_hour", "spot_price_per_hour"])
@pytest.mark.parametrize("value", [*BAD_NUMBERS[1:], "0.0000001", "1000000"])
def test_a_bad_price_is_an_error_on_its_field_and_nothing_is_written(f0, client, field, value):
    client.force_login(f0.admin)
    before = counts()
    url = reverse("rental:offering_terms", args=[f0.pool.pk, f0.offering.pk])
    answer = client.post(url, offering_form(**{field: value}))
    assert answer.status_code == 400
    assert f'id="error-{field}-{f0.offering.pk}"' in answer.content.decode()
    assert counts() == before


def test_the_on_demand_price_may_not_be_empty(f0, client):
    client.force_login(f0.admin)
    url = reverse("rental:offering_terms", args=[f0.pool.pk, f0.offering.pk])
    answer = client.post(url, offering_form(on_demand_price_per_hour=""))
    assert answer.status_code == 400
    assert f'id="error-on_demand_price_per_hour-{f0.offering.pk}"' in answer.content.decode()


def test_an_offering_of_another_gpu_model_is_not_found_under_this_pool(f0, client):
    other = factories.offering(f0.account, factories.gpu_model("L4 24GB"), instance_type="g6")
    client.force_login(f0.admin)
    url = reverse("rental:offering_terms", args=[f0.pool.pk, other.pk])
    assert client.post(url, offering_form()).status_code == 404


def test_the_admin_forms_are_for_admins_only(f0, client):
    client.force_login(f0.admin)
    page = client.get(page_of(f0)).content.decode()
    for part in ('id="pool-settings-form"', 'id="pool-degraded-form"', 'id="prices-table"'):
        assert part in page
    assert f'id="offering-{f0.offering.pk}"' in page
    # The price inputs sit in table cells and belong to their row's form by its id, so
    # that id must name one element, the form (a browser sends nothing otherwise).
    for owner in set(re.findall(r' form="([^"]+)"', page)):
        assert page.count(f'id="{owner}"') == 1, owner
        assert re.search(rf'<form [^>]*id="{owner}"', page), owner
    for who in (f0.alice, f0.alpha_manager, factories.user("fiona", finance=True)):
        client.force_login(who)
        page = client.get(page_of(f0)).content.decode()
        assert 'id="pool-settings"' not in page and 'id="prices-table"' not in page
        # The pool's monthly cost is for admins and finance.
        assert ('id="pool-cost"' in page) == (who.username == "fiona")
        before = counts()
        for url, body in (
            (reverse("rental:pool_settings", args=[f0.pool.pk]), SETTINGS | {"capacity": "20"}),
            (reverse("rental:pool_degraded", args=[f0.pool.pk]), {"reason": "x"}),
            (
                reverse("rental:offering_terms", args=[f0.pool.pk, f0.offering.pk]),
                offering_form(),
            ),
        ):
            assert client.post(url, body).status_code == 404
        assert counts() == before


def test_the_week_grid_says_what_its_numbers_are_and_marks_the_current_hour(f0, client):
    client.force_login(f0.alice)
    page = client.get(page_of(f0)).content.decode()
    now = timezone.now().astimezone(UTC)
    cell = f'id="week-{now:%Y%m%d-%H}"'
    assert page.count('aria-current="time"') == 1
    marked = page[page.index(cell) - 200 : page.index(cell) + 200]
    assert "is-now" in marked and 'aria-current="time"' in marked
    assert 'id="week-legend"' in page
    assert "GPUs booked beyond the guarantees" in page and "the current hour" in page
    assert "Guaranteed in all" in page and ">Σ G</abbr>" in page
    said = f"{now:%Y-%m-%d %H}:00 UTC: 0 GPUs booked beyond the guarantees, 6 guaranteed in all"
    assert said in page
    later = client.get(page_of(f0), {"week": f"{now + timedelta(days=7):%Y-%m-%d}"})
    assert 'aria-current="time"' not in later.content.decode()


def test_an_old_week_has_no_current_hour(f0, client):
    client.force_login(f0.alice)
    old = datetime(2026, 4, 6, tzinfo=UTC)
    page = client.get(page_of(f0), {"week": f"{old:%Y-%m-%d}"}).content.decode()
    assert "is-now" not in page.replace("week-swatch is-now", "")


def test_djangos_admin_saves_a_pool_through_the_same_rule_and_audit(f0, client):
    superuser = get_user_model().objects.create_superuser(username="su", password="x")
    client.force_login(superuser)
    url = reverse("admin:rental_pool_change", args=[f0.pool.pk])
    form = SETTINGS | {"committed_monthly_cost": "0.00"}
    refused = client.post(url, form | {"committed_gpus": "4"})
    assert refused.status_code == 200
    assert "at least 6" in refused.content.decode()
    assert Pool.objects.get().committed_gpus == 0
    assert client.post(url, form | {"capacity": "5"}).status_code == 302
    pool = Pool.objects.get()
    assert (pool.capacity, pool.state) == (5, "degraded")
    event = AuditEvent.objects.get(verb="pool.changed")
    assert (event.source, event.after) == ("admin", {"capacity": 5})
