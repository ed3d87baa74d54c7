"""A project's page shows its newest leases in progress, at most PROJECT_LEASES_SHOWN,
and says so with a link to all of them when there are more; ended leases are never
among them."""

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from rental.models import Reservation
from rental.views.projects import PROJECT_LEASES_SHOWN
from tests import factories
from tests.billing.helpers import lease


def in_progress(f0, count: int) -> list[Reservation]:
    now = timezone.now()
    made = []
    for n in range(count):
        made.append(lease(f0, f0.alpha, status=("active", "queued", "scheduled")[n % 3]))
        Reservation.objects.filter(pk=made[-1].pk).update(submitted_at=now - timedelta(hours=n))
    lease(f0, f0.alpha, status="ended")  # the newest of all, and never shown
    return made  # newest first


@pytest.mark.django_db
@pytest.mark.parametrize("extra", [0, 1, 7])
def test_the_newest_leases_in_progress_are_shown_and_the_rest_are_a_link_away(f0, client, extra):
    made = in_progress(f0, PROJECT_LEASES_SHOWN + extra)
    client.force_login(f0.alpha_manager)
    page = client.get(reverse("rental:project", args=[f0.alpha.slug]))
    shown = [row.pk for row in page.context["leases"]]
    assert shown == [row.pk for row in made[:PROJECT_LEASES_SHOWN]]
    text = page.content.decode()
    assert ('id="project-more-leases"' in text) == (extra > 0)
    if extra:
        assert f"The {PROJECT_LEASES_SHOWN} newest leases in progress are shown." in text
        assert f"{reverse('rental:leases')}?project={f0.alpha.slug}" in text


@pytest.mark.django_db
def test_a_few_leases_in_progress_are_all_shown(f0, client):
    made = in_progress(f0, 3)
    client.force_login(f0.alpha_manager)
    page = client.get(reverse("rental:project", args=[f0.alpha.slug]))
    assert [row.pk for row in page.context["leases"]] == [row.pk for row in made]
    assert 'id="project-more-leases"' not in page.content.decode()


@pytest.mark.django_db
def test_each_lease_shows_who_asked_for_it(f0, client):
    made = in_progress(f0, 2)
    Reservation.objects.filter(pk=made[1].pk).update(requester=f0.alpha_manager)
    client.force_login(f0.alpha_manager)
    text = client.get(reverse("rental:project", args=[f0.alpha.slug])).content.decode()
    rows = text.split('<table class="table table-cards" id="project-lease-table">')[1]
    rows = rows.split("</table>")[0].split("<tr>")[2:]
    assert f"<td>{made[0].requester.get_username()}</td>" in rows[0]
    assert f"<td>{f0.alpha_manager.get_username()}</td>" in rows[1]


@pytest.mark.django_db
def test_the_page_costs_the_same_queries_however_many_leases_and_members_it_shows(f0, client):
    """The rows read only some of their columns: a column a row draws but did not read
    would cost a query a row."""
    client.force_login(f0.alpha_manager)
    url = reverse("rental:project", args=[f0.alpha.slug])
    lease(f0, f0.alpha, status="queued")
    with CaptureQueriesContext(connection) as few:
        first = client.get(url)
    # Waiting, so that none runs above the ceiling (which reads who approved it).
    for _n in range(PROJECT_LEASES_SHOWN):
        lease(f0, f0.alpha, status="queued")
    for n in range(6):
        factories.member(factories.user(f"extra-{n}"), f0.alpha)
    with CaptureQueriesContext(connection) as many:
        second = client.get(url)
    assert len(second.context["leases"]) == PROJECT_LEASES_SHOWN
    assert len(second.context["members"]) == len(first.context["members"]) + 6
    assert len(many) == len(few)
