"""The pools page and a queued lease's page read a queue of many projects in a fixed
number of queries, in the order admission takes it."""

import random
from datetime import timedelta

from django.contrib.auth import get_user_model
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from rental.loans import queue
from rental.models import Quota, Reservation
from tests import factories
from tests.billing.helpers import lease


def many_queued(f0, count: int, rng: random.Random) -> None:
    now = timezone.now()
    for index in range(count):
        project = factories.project(f"queued-{count}-{index}")
        Quota.objects.create(
            project=project, gpu_model=f0.model, guaranteed=rng.randint(0, 2), ceiling=8
        )
        for _ in range(rng.randint(0, 2)):
            lease(
                f0,
                project,
                gpus=1,
                status="active",
                tier=rng.choice(["guaranteed", "burst"]),
                requester=f0.alice,
            )
        waiting = lease(
            f0,
            project,
            gpus=rng.randint(1, 3),
            status="queued",
            tier="burst",
            start=now,
            requester=f0.alice,
        )
        Reservation.objects.filter(pk=waiting.pk).update(
            submitted_at=now - timedelta(minutes=rng.randint(1, 500)),
            priority=rng.choice(["learning", "experiment", "production"]),
        )


def test_the_bulk_read_orders_the_queue_as_admission_does(f0):
    many_queued(f0, 12, random.Random(3))
    queued = list(Reservation.objects.filter(gpu_model=f0.model, status="queued"))
    now = timezone.now()
    one_by_one = queue.queue_in_order(f0.pool, queued, now=now)
    bulk = queue.queue_in_order(f0.pool, queued, now=now, bulk=True)
    assert [x.pk for x in bulk.leases] == [x.pk for x in one_by_one.leases]
    for project_id, standing in one_by_one.standings.items():
        found = bulk.standings[project_id]
        assert (found.guaranteed, found.ceiling, found.used_guaranteed, found.used) == (
            standing.guaranteed,
            standing.ceiling,
            standing.used_guaranteed,
            standing.used,
        )
        assert (found.running, found.capacity) == (standing.running, standing.capacity)


def test_the_pool_page_and_its_queue_read_many_projects_in_fixed_queries(f0, client):
    admin = get_user_model().objects.filter(is_staff=True).first()
    client.force_login(admin)
    counts = []
    for count in (3, 15):
        many_queued(f0, count, random.Random(count))
        for name in ("rental:pool", "rental:pool_queue"):
            url = reverse(name, args=[f0.pool.pk])
            client.get(url)
            with CaptureQueriesContext(connection) as queries:
                assert client.get(url).status_code == 200
            counts.append(len(queries))
    assert counts[:2] == counts[2:] and max(counts) <= 12, counts


def test_the_queue_shows_a_page_of_places_in_order(f0, client, monkeypatch):
    """A long queue is shown a page at a time; the places run on across pages in the
    order admission takes them, and each row still says why it is behind the one above,
    the first row of a page included."""
    monkeypatch.setattr("rental.views.pools.QUEUE_PER_PAGE", 5)
    many_queued(f0, 12, random.Random(5))
    order = [lease.pk for lease in queue.queue_of(f0.pool).leases]
    admin = get_user_model().objects.filter(is_staff=True).first()
    client.force_login(admin)
    url = reverse("rental:pool_queue", args=[f0.pool.pk])
    seen = []
    for number in (1, 2, 3):
        page = client.get(url, {"queue_page": number})
        rows = page.context["queue_rows"]
        assert [row.place for row in rows] == list(range(5 * number - 4, min(5 * number, 12) + 1))
        assert all(row.ahead for row in rows if row.place > 1)
        seen += [row.lease.pk for row in rows]
        text = page.content.decode()
        assert f"Places {5 * number - 4}–{min(5 * number, 12)} of 12" in text
        assert (f"queue_page={number + 1}" in text) == (number < 3)
    assert seen == order
    # The pool page hands the page asked for to its queue.
    pool_page = client.get(reverse("rental:pool", args=[f0.pool.pk]), {"queue_page": 2})
    assert f"{url}?queue_page=2" in pool_page.content.decode()
    assert client.get(url, {"queue_page": "nonsense"}).context["queue_rows"][0].place == 1
    # A page of one place says so in the singular.
    monkeypatch.setattr("rental.views.pools.QUEUE_PER_PAGE", 11)
    assert "Place 12 of 12" in client.get(url, {"queue_page": 2}).content.decode()
