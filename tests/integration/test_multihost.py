"""More than one machine (issue 18 point 8): two web hosts and two worker hosts, each a
network namespace of its own (``tests/netns.py``), against one PostgreSQL, one Redis and
one cloud, hold every invariant:

- **sessions**: logged in through web-a, the same cookie (and CSRF token) opens a page and
  sends a form on web-b; an API token works on both; logging out on one ends it on both;
- **no duplicate instance**: six leases asked for through both web hosts at once are
  launched by both workers; one worker host is killed (SIGKILL) while all six launches
  wait at the cloud; each lease still becomes active with exactly one cloud instance
  (counted at the cloud: every instance ever created, by its lease tag), no orphan;
- **each region synced once a period**: every claim of the region's sync is logged by a
  trigger, with the sync's start and the host that made it; the beat's syncs are never
  less than three quarters of a period apart (``PERIOD_CLAIM``) and number one a period
  (two more at most, where a beat's phase changed), and the cloud saw no sync describe
  without a claim;
- **beat's work done once**: the lease check warns of each lease's end once and ends each
  lease once at its end second (one audit event, one notification, one usage record
  closed at the end); the outbox publishes each message once (each row is received by
  exactly one worker, once).

What runs where:

- web-a, web-b: gunicorn with the production settings (``PORTAL_ENV=production``: DEBUG
  off, the test's SECRET_KEY, encryption keys and installation id, the cache in Redis).
  No proxy: the test sends what the TLS proxy would, the public host name and
  ``X-Forwarded-Proto: https``.
- worker-a, worker-b: a Celery worker each, **each with an embedded beat**. Production
  runs exactly one beat (docker-compose.yml's ``beat``); two beats are what a second one
  by mistake, or one per worker host for fail-over, make, and the portal must still do
  each periodic task's work once. The timings are scaled down as in
  ``test_dead_worker.py``: a 2 s sync period, a 3 s stale claim, 1 s sweeps.
- The suite's PostgreSQL and Redis listen on 127.0.0.1, which no namespace reaches: a gate
  (``tests/gates.py``) on the bridge's address forwards to each. So the hosts and the
  test's own ORM share the suite's migrated database; a second cluster would need initdb
  and every migration, more than this test's whole time. The cloud is a local endpoint of
  its own on the bridge's address (moto's state is the suite's ``cloud``), so that it
  sees which host each request came from.

The test sends traffic only to the hosts' addresses and the bridge's. It is skipped,
saying why, without root or iproute2's ``ip``.
"""

import itertools
import re
import time
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
from django.conf import settings
from django.utils import timezone

from portal.models import AuditEvent, Notification
from rental.fleet.cloud import provider_for
from rental.fleet.sync import PERIOD_CLAIM
from rental.models import Instance, Orphan, OutboxMessage, Reservation, UsageRecord
from rental.providers.base import TAG_INSTALLATION, TAG_RESERVATION, CloudState
from tests import factories, netns
from tests.integration.multihost_cluster import (  # noqa: F401 (cluster: the fixture)
    END_IN,
    HOLD,
    LEASE_CHECK,
    LEASES,
    MARGIN,
    RECEIVED,
    STALE,
    SWEEP,
    SYNC_DESCRIBE,
    SYNC_PERIOD,
    WEBS,
    WORKERS,
    Answer,
    Cluster,
    SyncClaim,
    Visitor,
    basic,
    cluster,
    csrf_of,
    sync_claims,
)
from tests.integration.test_chaos import wait_for

Status = Reservation.Status
UNAVAILABLE = netns.unavailable()
pytestmark = [
    pytest.mark.integration,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(bool(UNAVAILABLE), reason=UNAVAILABLE),
]


# -- the test -------------------------------------------------------------------------------


def test_two_web_hosts_and_two_worker_hosts_hold_every_invariant(cluster):  # noqa: F811
    begun = time.monotonic()
    tokens = sessions_hold_on_either_web_host(cluster)
    leases = leases_launch_once_though_a_worker_host_dies(cluster, tokens)
    beat_ends_each_lease_once(cluster, leases)
    each_region_is_synced_once_a_period(cluster)
    the_outbox_sends_each_message_once(cluster)
    cluster.timings["test"] = time.monotonic() - begun
    print("multihost timings:", {k: round(v, 1) for k, v in cluster.timings.items()})  # noqa: T201


def sessions_hold_on_either_web_host(c: Cluster) -> dict[str, str]:
    """Log in on web-a; the page and a form on web-b with the same cookie and CSRF token;
    the token made by that form, and one made with a password on web-a, work on both;
    logging out on web-a ends the session on web-b. Returns each user's API token."""
    web_a, web_b = (c.net.hosts[name] for name in WEBS)
    browser = Visitor()
    login = browser.get(web_a, "/login/")
    assert login.status == 200, login.text[:500]
    sent = browser.post_form(
        web_a,
        "/login/",
        {
            "username": "alice",
            "password": factories.PASSWORD,
            "csrfmiddlewaretoken": csrf_of(login),
        },
    )
    assert sent.status == 302, sent.text[:500]
    assert "sessionid" in browser.cookies

    page = browser.get(web_b, "/tokens/")
    assert page.status == 200 and "alice" in page.text, page.text[:500]
    made = browser.post_form(
        web_b, "/tokens/", {"name": "multihost", "days": "7", "csrfmiddlewaretoken": csrf_of(page)}
    )
    assert made.status == 200, made.text[:500]
    alice = re.search(r"gpp_[A-Za-z0-9_-]{40}", made.text)
    assert alice, "the token page shows no new token"

    expires = (timezone.now() + timedelta(days=1)).isoformat()
    bob = Visitor().post_json(
        web_a, "/api/v1/tokens", {"name": "multihost", "expires_at": expires}, basic=basic("bob")
    )
    assert bob.status == 201, bob.text[:500]
    tokens = {"alice": alice.group(0), "bob": bob.json()["token"]}
    for username, token in tokens.items():
        for host in (web_a, web_b):
            me = Visitor().get(host, "/api/v1/me", token=token)
            assert (me.status, me.json().get("username")) == (200, username), me.text[:300]

    kept = dict(browser.cookies)  # the session cookie, as a thief or a second tab keeps it
    out = browser.post_form(web_a, "/logout/", {"csrfmiddlewaretoken": csrf_of(page)})
    assert out.status == 302, out.text[:300]
    again = Visitor(cookies=kept).get(web_b, "/tokens/")
    assert (again.status, again.headers["Location"]) == (302, "/login/?next=/tokens/")
    return tokens


def leases_launch_once_though_a_worker_host_dies(c: Cluster, tokens: dict[str, str]) -> list[int]:
    """Six leases asked for through both web hosts at once; every first RunInstances is
    held at the cloud; once all six wait there (so three from each worker host, the most
    a host runs at once), worker-a is killed and started again. Each lease becomes active
    with exactly one cloud instance, launched by both hosts."""
    begun = time.monotonic()
    c.cloud.delay("RunInstances", HOLD, when="before", times=LEASES)
    asks = [("alice", "alpha")] * 2 + [("bob", "beta")] * 4  # within each one's guarantee
    web_hosts = [c.net.hosts[WEBS[n % 2]] for n in range(LEASES)]

    def ask(n: int) -> Answer:
        username, project = asks[n]
        lease = {"project": project, "gpu_model": c.f0.model.pk, "gpu_count": 1}
        lease |= {"duration_hours": "4", "purpose": f"multihost {n}"}
        return Visitor().post_json(web_hosts[n], "/api/v1/leases", lease, token=tokens[username])

    with ThreadPoolExecutor(LEASES) as pool:
        answered = list(pool.map(ask, range(LEASES)))
    assert [a.status for a in answered] == [201] * LEASES, [a.text[:200] for a in answered]
    leases = [a.json()["id"] for a in answered]
    assert {a.json()["status"] for a in answered} == {Status.PROVISIONING}

    # Past HOLD the first launch is answered, and the moment when all wait is gone.
    held = c.cloud.wait_until_held("RunInstances", timeout=HOLD, count=LEASES)
    assert held, f"the six launches never all waited at the cloud: {launch_states(leases)}"
    dead = c.workers["worker-a"]
    dead.kill()
    killed_at = time.monotonic()
    dead.start()  # the host is back; its launches are the other host's to recover
    wait_for(
        lambda: Reservation.objects.filter(pk__in=leases, status=Status.ACTIVE).count() == LEASES,
        timeout=HOLD + STALE + SWEEP + SYNC_PERIOD + MARGIN,
        what=lambda: f"every lease active after the kill: {launch_states(leases)}",
    )
    c.timings["active after the kill"] = time.monotonic() - killed_at
    c.timings["leases"] = time.monotonic() - begun

    workers = {c.address(name) for name in WORKERS}
    wait_for(  # a first call answers after its hold, however early its lease became active
        lambda: workers <= {r.client for r in c.cloud.requests("RunInstances")},
        timeout=HOLD,
        what=lambda: f"both worker hosts to have launched: {c.cloud.requests('RunInstances')}",
    )
    every = cloud_instances(c)
    by_lease = Counter(item.tag(TAG_RESERVATION) for item in every)
    assert by_lease == {str(pk): 1 for pk in leases}, f"instances per lease: {by_lease}"
    rows = {i.reservation_id: i for i in Instance.objects.filter(reservation__in=leases)}
    assert len(rows) == LEASES
    for item in every:
        assert item.state == CloudState.RUNNING
        assert rows[int(item.tag(TAG_RESERVATION))].external_id == item.external_id
    assert not Orphan.objects.exists()
    return leases


def beat_ends_each_lease_once(c: Cluster, leases: list[int]) -> None:
    """Every lease's end is brought to a few seconds from now: both beats' lease checks
    (each every second) warn of it once and end it once, at its end second."""
    begun = time.monotonic()
    end = timezone.now().replace(microsecond=0) + timedelta(seconds=END_IN + 1)
    Reservation.objects.filter(pk__in=leases).update(end=end)
    wait_for(
        lambda: Reservation.objects.filter(pk__in=leases, status=Status.ENDED).count() == LEASES,
        timeout=END_IN + 1 + LEASE_CHECK + SYNC_PERIOD + MARGIN,
        what=lambda: f"every lease ended: {launch_states(leases)}",
    )
    c.timings["ends"] = time.monotonic() - begun
    for lease in Reservation.objects.filter(pk__in=leases):
        events = Counter(
            AuditEvent.objects.filter(
                object_type="rental.reservation", object_id=str(lease.pk)
            ).values_list("verb", flat=True)
        )
        assert (events["lease.end_warned"], events["lease.ended"]) == (1, 1), (lease.pk, events)
        warned = Notification.objects.filter(
            user=lease.requester, link=f"{lease.get_absolute_url()}#extend-form"
        )
        assert warned.count() == 1, (lease.pk, list(warned))
        assert lease.ended_at == end
        usage = list(UsageRecord.objects.filter(instance__reservation=lease))
        assert [u.end for u in usage] == [end], (lease.pk, usage)
    assert {item.state for item in cloud_instances(c)} == {CloudState.TERMINATED}


def each_region_is_synced_once_a_period(c: Cluster) -> None:
    """The beat's syncs of each region, from the claims the trigger logged: never two
    less than three quarters of a period apart, and one a period, though both beats send
    every period: two more at most over the whole test, one where both beats started and
    one where worker-a's started again (each may move the beat whose ticks sync, and the
    first tick of the new one may come early). No sync reached the cloud without a
    claim."""
    claims = sync_claims()
    periodic: dict[str, list[SyncClaim]] = defaultdict(list)
    for claim in claims:
        if claim.periodic:
            periodic[claim.region].append(claim)
    assert periodic, "no periodic sync ran"
    for region, runs in periodic.items():
        gaps = [(b.began - a.began).total_seconds() for a, b in itertools.pairwise(runs)]
        span = (runs[-1].began - runs[0].began).total_seconds()
        hosts = Counter(run.host for run in runs)
        print(  # noqa: T201
            f"region {region}: {len(runs)} periodic syncs over {span:.1f} s (a period of "
            f"{SYNC_PERIOD} s), by {dict(hosts)}; closest two {min(gaps, default=0):.2f} s apart"
        )
        assert min(gaps, default=SYNC_PERIOD) >= SYNC_PERIOD * PERIOD_CLAIM, (region, gaps)
        assert len(runs) <= span / SYNC_PERIOD + 2, (region, len(runs), span)
    workers = {c.address(name) for name in WORKERS}
    described = [
        r
        for r in c.cloud.requests("DescribeInstances")
        if r.client in workers and r.filters == SYNC_DESCRIBE
    ]
    assert len(described) <= len(claims), (len(described), len(claims))


def the_outbox_sends_each_message_once(c: Cluster) -> None:
    """Each outbox row published once: the messages the workers received (each start's
    log of both hosts, by task id) are as many as the rows sent, for every task sent only
    through the outbox. The launches are all done: equal. Syncs and terminations may
    still be on their way: never more."""
    received: dict[str, set[str]] = defaultdict(set)
    for served in c.workers.values():
        for task, task_id in RECEIVED.findall(served.text()):
            received[task].add(task_id)
    sent = Counter(
        OutboxMessage.objects.filter(sent_at__isnull=False).values_list("task", flat=True)
    )
    launches = "rental.tasks.provision_instance_task"
    assert len(received[launches]) == sent[launches], (received[launches], sent)
    for task in ("rental.tasks.sync_region_task", "rental.tasks.terminate_instance_task"):
        assert 0 < len(received[task]) <= sent[task], (task, len(received[task]), sent[task])


def cloud_instances(c: Cluster) -> list:
    """Every instance of this installation the cloud has, in any state."""
    return provider_for(Instance(account=c.f0.account)).describe(
        region="us-east-1", tag_filter={TAG_INSTALLATION: settings.PORTAL_INSTALLATION_ID}
    )


def launch_states(leases: list[int]) -> str:
    rows = Instance.objects.filter(reservation__in=leases).select_related("reservation")
    return "; ".join(
        f"lease {i.reservation_id} {i.reservation.status}: {i.state} "
        f"id={i.external_id or '-'} claimed={i.claimed_at}"
        for i in rows.order_by("pk")
    )
