"""The lease list's pages follow a cursor: Older and Newer walk every lease once, in
order, with the filters kept; Oldest shows the oldest; a bad cursor is the first page."""

import re

import pytest
from django.urls import reverse

from portal.models import Membership
from rental.models import Reservation
from rental.views import leases as lease_views
from tests import factories
from tests.rental.views.test_page_costs import add_history


@pytest.fixture(autouse=True)
def pages_of_fifty(monkeypatch):
    """The walks below are written for pages of 50 leases, whatever the list's own size."""
    monkeypatch.setattr(lease_views, "LEASES_PER_PAGE", 50)


def shown(client, query: str) -> tuple[list[int], dict[str, str]]:
    """The lease ids on the page, and its links by id (newest, newer, older, oldest)."""
    page = client.get(f"{reverse('rental:leases')}?{query}").content.decode()
    ids = [int(pk) for pk in re.findall(r'<tr id="lease-row-(\d+)"', page)]
    links = {
        name: href.replace("&amp;", "&")
        for href, name in re.findall(r'href="\?([^"]*)" id="leases-(\w+)"', page)
    }
    return ids, links


@pytest.mark.django_db
def test_older_and_newer_walk_every_lease_once_in_order(f0, client):
    add_history(f0, 120)
    client.force_login(f0.admin)
    expected = list(
        Reservation.objects.order_by("-submitted_at", "-pk").values_list("pk", flat=True)
    )
    seen, query, pages = [], "", []
    while True:
        ids, links = shown(client, query)
        seen += ids
        pages.append((query, ids))
        if "older" not in links:
            break
        query = links["older"]
    assert seen == expected
    assert [len(ids) for _query, ids in pages] == [50, 50, 20]
    assert "newer" not in shown(client, "")[1]
    # Back from the last page, one page at a time.
    ids, links = shown(client, pages[-1][0])
    assert shown(client, links["newer"])[0] == pages[1][1]
    # Oldest: the last page as it ends, older links gone.
    ids, links = shown(client, "page=last")
    assert ids == expected[-50:]
    assert "older" not in links and "oldest" not in links
    assert shown(client, links["newer"])[0] == expected[-100:-50]


@pytest.mark.django_db
def test_newer_from_near_the_top_shows_the_first_page(f0, client):
    add_history(f0, 60)
    client.force_login(f0.admin)
    expected = list(
        Reservation.objects.order_by("-submitted_at", "-pk").values_list("pk", flat=True)
    )
    near_top = Reservation.objects.get(pk=expected[10])
    micros = int((near_top.submitted_at.timestamp()) * 1_000_000)
    ids, links = shown(client, f"before={micros}-{near_top.pk}")
    assert ids == expected[:50]
    assert "newer" not in links


@pytest.mark.django_db
def test_the_filters_hold_on_every_page(f0, client):
    add_history(f0, 120)  # alternately alpha's and beta's
    client.force_login(f0.admin)
    ids, links = shown(client, f"project={f0.alpha.slug}&status=ended")
    assert "project=alpha" in links["older"] and "status=ended" in links["older"]
    second, _links = shown(client, links["older"])
    last, _links = shown(client, links["oldest"])
    alpha = set(
        Reservation.objects.filter(project=f0.alpha, status="ended").values_list("pk", flat=True)
    )
    assert set(ids + second) == alpha and len(ids + second) == 60
    assert set(last) <= alpha and len(last) == 50


@pytest.mark.django_db
@pytest.mark.parametrize("cursor", ["x", "12-", "-5", "9" * 40 + "-1", "1.5-2", "١٢-٣"])
def test_a_bad_cursor_is_the_first_page(f0, client, cursor):
    add_history(f0, 60)
    client.force_login(f0.admin)
    first, _links = shown(client, "")
    for name in ("after", "before"):
        assert shown(client, f"{name}={cursor}")[0] == first


@pytest.mark.django_db
def test_a_member_of_several_projects_walks_theirs_merged_and_no_other(f0, client):
    factories.member(f0.alpha_manager, f0.beta, Membership.Role.ENGINEER)
    add_history(f0, 120)  # alpha's and beta's
    gamma = Reservation.objects.filter(project=f0.alpha).first()
    gamma.pk, gamma.project = None, f0.gamma
    gamma.save()
    client.force_login(f0.alpha_manager)
    expected = list(
        Reservation.objects.filter(project__in=[f0.alpha, f0.beta])
        .order_by("-submitted_at", "-pk")
        .values_list("pk", flat=True)
    )
    seen, query = [], ""
    while query is not None:
        ids, links = shown(client, query)
        seen += ids
        query = links.get("older")
    assert seen == expected
    ids, links = shown(client, "page=last")
    assert ids == expected[-50:]
    assert shown(client, links["newer"])[0] == expected[-100:-50]
