"""bench/production.py and bench/pages.py at a tiny size: the builder fills the test
database with the shape the bench needs, and every page the bench times answers 200 over
HTTP from gunicorn under the production settings, for our roles and for a fake peer."""

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import PBKDF2PasswordHasher
from django.db import connection

from bench import pages, serving
from bench.generate import PASSWORD
from bench.production import build
from billing.models import Statement
from portal.models import AuditEvent
from rental.models import Instance, Reservation, UsageRecord


@pytest.mark.django_db(transaction=True)
def test_it_builds_a_site_and_times_every_page(tmp_path, capsys):
    built = build(
        leases=400, projects=3, users=12, usage=4000, live=20, months=1, say=lambda text: None
    )

    assert Reservation.objects.count() == built.counts["leases"] == 400
    assert Reservation.objects.filter(status=Reservation.Status.ACTIVE).count() == 20
    assert Reservation.objects.filter(status=Reservation.Status.PENDING_APPROVAL).count() == 6
    assert Reservation.objects.filter(status=Reservation.Status.QUEUED).count() == 3
    assert UsageRecord.objects.count() == 4000
    running = Instance.objects.filter(state=Instance.State.RUNNING).count()
    assert UsageRecord.objects.filter(end__isnull=True).count() == running == 20
    # The closed runs are loaded rolled up and their rollups rebuilt; the open ones are not.
    assert built.counts["usage rollup rows"] > 0
    assert UsageRecord.objects.filter(rolled_up=False).count() == 20
    assert Statement.objects.filter(project__isnull=False, status="closed").count() == 3
    assert AuditEvent.objects.filter(verb="lease.submitted").count() == 400

    # The test settings hash with MD5, which the production settings do not accept.
    hasher = PBKDF2PasswordHasher()
    get_user_model().objects.filter(username__in=pages.USERNAMES.values()).update(
        password=hasher.encode(PASSWORD, hasher.salt())
    )
    ours = pages.our_pages(pages.targets())
    peer = [pages.Page("peer projects", "peer", "/projects/")]
    results = {page: pages.Result(page) for page in ours + peer}
    pages.count_queries(ours, results)

    db = connection.settings_dict
    url = f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
    env = serving.production_env(
        database=url, redis=settings.CELERY_BROKER_URL, static=tmp_path / "static"
    )
    serving.collect_static(env)
    port = serving.free_port(set())
    server = serving.start_gunicorn(port, env, tmp_path / "gunicorn.log")
    try:
        base = f"http://127.0.0.1:{port}"
        browsers = {role: serving.Browser(base) for role in pages.ROLES}
        for role, browser in browsers.items():
            browser.log_in("/login/", pages.USERNAMES[role], PASSWORD)
        browsers["peer"] = serving.Browser(base)
        browsers["peer"].log_in("/login/", "bench-admin", PASSWORD)
        pages.time_rounds(ours + peer, browsers, results, warmup=0, rounds=1)
    finally:
        serving.stop(server)

    failed = {result.label: result.statuses for result in results.values()}
    assert {label: statuses for label, statuses in failed.items() if statuses != {200}} == {}
    assert all(len(result.times) == 1 for result in results.values())
    assert all(result.queries for page, result in results.items() if page.role != "peer")
    pages.print_table(list(results.values()))
    pages.print_pairs(list(results.values()), [("projects", "peer projects")])
    shown = capsys.readouterr().out
    assert "all leases last page · admin" in shown
    assert "projects · admin" in shown and "peer projects · peer" in shown
