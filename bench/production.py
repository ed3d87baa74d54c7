"""Production-sized bench data: a year of a 300-project site, built in PostgreSQL.

Call ``build()`` after Django is set up, on an empty migrated database (``bench/pages.py``
does). The small tables (people, the catalog, pools, quotas) go in through the ORM; the
leases, instances, usage runs and audit events are written by ``INSERT … SELECT`` over
``generate_series`` in PostgreSQL, so that 200,000 leases and 2,000,000 usage runs take
seconds, not the hours the ORM would. For the load the secondary indexes of the big tables
are dropped and their foreign keys not checked row by row; then the indexes are made again
and every foreign key is checked once, set-wise. The closed usage goes in marked rolled up
and billing's own ``rebuild`` makes its rollups; every project's statement of each of the
past ``months`` is closed by billing's own ``close_period`` (its lines, totals, audit
events and notifications), and the tables are vacuumed and analysed. The same ``seed``
and ``now`` give the same rows.

What a build holds, for ``leases`` leases (the defaults: 200,000):

- ``projects`` projects with ``users / projects`` people each: the first manages, the
  others are engineers; plus ``bench-admin`` (staff) and ``bench-finance`` (the finance
  group), all with the password ``PASSWORD``.
- The catalog of ``bench.generate`` (2 GPU models, 3 offerings, 1 image), a pool per
  model and a quota per project and model, sized to what runs now (G three quarters of
  it, L five quarters, in steps of 8 GPUs); the pools' capacity is the sum of L, their
  committed GPUs the sum of G + 4, at 120,000 a month.
- Leases: ``live`` running (one running instance and one open usage run each), 2 per
  project waiting for approval, 1 per project queued; these are fixed whatever the size.
  The rest is history spread over the past ``months`` months: mostly ended (1–2 terminated
  instances each), 2 % preempted, 3 % rejected and 3 % cancelled (no instances).
- ``usage`` usage runs in all (10 a lease by default): one open run per live instance, the
  rest closed, split over the ended instances' lifetimes (stops and resumes), inserted
  marked rolled up (``rollups.rebuild`` then sums them a month at a time).
- Audit events: one per lease asked for, one per decision, one per ended lease.
"""

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import make_password
from django.contrib.auth.models import AbstractBaseUser, Group
from django.db import connection, transaction
from django.utils import timezone

from bench.generate import PASSWORD, _catalog
from billing.periods import period_end, period_start
from billing.rollups import rebuild
from billing.services import close_period
from portal.models import FINANCE_GROUP, Membership, Project
from rental.models import Pool, Quota, Reservation

# Per project, whatever the size: leases waiting for a manager, and queued for capacity.
PENDING_PER_PROJECT = 2
QUEUED_PER_PROJECT = 1
# Shares of the historical leases (the rest ended normally).
PREEMPTED, REJECTED, CANCELLED = 0.02, 0.03, 0.03
BIG_TABLES = ("rental_reservation", "rental_instance", "rental_usagerecord", "portal_auditevent")


@dataclass
class Built:
    """What ``build`` made: the people a bench logs in as, and the row counts."""

    now: datetime
    projects: list[Project]
    manager: AbstractBaseUser  # manages projects[0]
    engineer: AbstractBaseUser  # engineer in projects[0]
    admin: AbstractBaseUser  # staff
    finance: AbstractBaseUser  # the finance group
    counts: dict[str, int] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)


def _step(built: Built, name: str, say: Callable[[str], None]) -> Callable[[], None]:
    began = time.perf_counter()

    def done() -> None:
        built.seconds[name] = time.perf_counter() - began
        say(f"  {name:<28} {built.seconds[name]:7.1f} s")

    return done


@contextmanager
def _indexes_dropped(tables: tuple[str, ...]) -> Iterator[None]:
    """Drop the tables' indexes that no constraint owns, and make them again afterwards."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT i.indexname, i.indexdef FROM pg_indexes i
            WHERE i.schemaname = 'public' AND i.tablename = ANY(%s)
              AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conname = i.indexname)
            """,
            [list(tables)],
        )
        indexes = cursor.fetchall()
        for name, _ in indexes:
            cursor.execute(f'DROP INDEX "{name}"')
    yield
    with connection.cursor() as cursor:
        for _, definition in indexes:
            cursor.execute(definition)


def _check_foreign_keys(tables: tuple[str, ...]) -> None:
    """Every foreign key of ``tables`` holds: one anti-join a key instead of a lookup a row."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT c.conname, c.conrelid::regclass::text, a.attname,
                   c.confrelid::regclass::text, f.attname
            FROM pg_constraint c
            JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = c.conkey[1]
            JOIN pg_attribute f ON f.attrelid = c.confrelid AND f.attnum = c.confkey[1]
            WHERE c.contype = 'f' AND c.conrelid::regclass::text = ANY(%s)
            """,
            [list(tables)],
        )
        for name, table, column, target, key in cursor.fetchall():
            cursor.execute(
                f'SELECT count(*) FROM {table} t WHERE t."{column}" IS NOT NULL AND NOT EXISTS '
                f'(SELECT 1 FROM {target} r WHERE r."{key}" = t."{column}")'
            )
            broken = cursor.fetchone()[0]
            if broken:
                raise RuntimeError(f"{broken} rows of {table} break {name}")


def _people(projects: int, users: int) -> tuple[list[Project], list[list[int]], dict]:
    """Projects and their members (manager first), an admin and a finance user."""
    user_model = get_user_model()
    password = make_password(PASSWORD)
    per_project = max(2, users // projects)
    created = Project.objects.bulk_create(
        Project(slug=f"bench-{index:03d}", name=f"Bench project {index:03d}")
        for index in range(projects)
    )
    people = user_model.objects.bulk_create(
        (
            user_model(
                username=f"bench-{index:03d}-{'manager' if n == 0 else f'eng{n}'}",
                email=f"bench-{index:03d}-{n}@example.com",
                password=password,
            )
            for index in range(projects)
            for n in range(per_project)
        ),
        batch_size=1000,
    )
    members = [
        [person.pk for person in people[index * per_project : (index + 1) * per_project]]
        for index in range(projects)
    ]
    Membership.objects.bulk_create(
        (
            Membership(
                user_id=user_id,
                project=project,
                role=Membership.Role.MANAGER if position == 0 else Membership.Role.ENGINEER,
            )
            for project, ids in zip(created, members, strict=True)
            for position, user_id in enumerate(ids)
        ),
        batch_size=1000,
    )
    admin = user_model.objects.create(
        username="bench-admin", email="bench-admin@example.com", password=password, is_staff=True
    )
    finance = user_model.objects.create(
        username="bench-finance", email="bench-finance@example.com", password=password
    )
    finance.groups.add(Group.objects.get_or_create(name=FINANCE_GROUP)[0])
    return created, members, {"admin": admin, "finance": finance}


LEASES_SQL = """
INSERT INTO rental_reservation
    (project_id, requester_id, gpu_model_id, gpu_count, offering_id, instance_count, market,
     priority, image_id, purpose, start, "end", tier, status, status_code, status_message,
     requeue_on_preemption, allow_other_instance_types, submitted_at, approved_by_id,
     approved_at, decision_comment, ended_at, end_reason, is_reservation, updated_at)
SELECT (%(project_ids)s::bigint[])[s.project + 1],
       (%(members)s::bigint[])[s.project * %(per)s + 1 + floor(s.r_who * %(per)s)::int],
       (%(models)s::bigint[])[s.o], s.count * (%(gpus)s::int[])[s.o],
       (%(offerings)s::bigint[])[s.o], s.count, s.market,
       (ARRAY['production', 'experiment', 'learning'])[1 + floor(s.r_priority * 3)::int],
       %(image)s, 'bench', s.start, s.start + ceil(s.hours) * interval '1 hour',
       CASE WHEN s.market = 'spot' THEN 'spot'
            WHEN s.r_tier < 0.67 THEN 'guaranteed' ELSE 'burst' END,
       s.status, '', %(empty)s::jsonb, false, true,
       s.start - (1 + floor(s.r_wait * 120)) * interval '1 minute',
       CASE WHEN s.status NOT IN ('pending_approval', 'cancelled')
            THEN (%(members)s::bigint[])[s.project * %(per)s + 1] END,
       CASE WHEN s.status NOT IN ('pending_approval', 'cancelled')
            THEN s.start - interval '1 minute' END,
       '',
       CASE WHEN s.status IN ('ended', 'preempted')
            THEN least(s.start + s.hours * interval '1 hour', %(latest)s)
            WHEN s.status IN ('rejected', 'cancelled') THEN s.start END,
       CASE WHEN s.status = 'preempted' THEN 'preempted'
            WHEN s.status <> 'ended' THEN ''
            WHEN s.market = 'spot' AND s.r_reason < 0.3 THEN 'spot_interrupted'
            WHEN s.r_reason < 0.65 THEN 'lease_end' ELSE 'user' END,
       false, %(now)s
FROM (
    SELECT g.n, g.n %% %(projects)s AS project,
           CASE WHEN g.n >= %(live)s AND g.n < %(live)s + %(pending)s THEN 2
                WHEN r.o < 0.6 THEN 1 WHEN r.o < 0.9 THEN 2 ELSE 3 END AS o,
           CASE WHEN g.n >= %(live)s AND g.n < %(live)s + %(pending)s + %(queued)s
                  OR r.market >= 0.2
                THEN 'on_demand' ELSE 'spot' END AS market,
           CASE WHEN g.n < %(live)s THEN 'active'
                WHEN g.n < %(live)s + %(pending)s THEN 'pending_approval'
                WHEN g.n < %(live)s + %(pending)s + %(queued)s THEN 'queued'
                WHEN r.status < %(preempted)s THEN 'preempted'
                WHEN r.status < %(preempted)s + %(rejected)s THEN 'rejected'
                WHEN r.status < %(preempted)s + %(rejected)s + %(cancelled)s THEN 'cancelled'
                ELSE 'ended' END AS status,
           CASE WHEN g.n < %(live)s THEN 1
                WHEN g.n < %(live)s + %(pending)s + %(queued)s THEN 1
                WHEN r.count < 0.75 THEN 1 ELSE 2 END AS count,
           CASE WHEN g.n < %(live)s THEN %(now)s - r.age * interval '7 days'
                WHEN g.n < %(live)s + %(pending)s + %(queued)s
                THEN %(now)s + interval '1 hour' - r.age * interval '50 minutes'
                ELSE %(first)s + r.age * (%(latest)s - %(first)s - interval '10 minutes')
           END AS start,
           CASE WHEN g.n < %(live)s THEN 24 * 7 + 1 + 24 * r.hours
                ELSE 1.0 / 6 + 48 * r.hours * r.hours END AS hours,
           r.who AS r_who, r.priority AS r_priority, r.tier AS r_tier, r.wait AS r_wait,
           r.reason AS r_reason
    FROM generate_series(0, %(leases)s - 1) AS g(n)
    CROSS JOIN LATERAL (
        SELECT random() + 0 * g.n AS o, random() AS market, random() AS status,
               random() AS count, random() AS age, random() AS hours, random() AS who,
               random() AS priority, random() AS tier, random() AS wait, random() AS reason
    ) AS r
) AS s
ORDER BY s.n
"""

QUOTAS_SQL = """
UPDATE rental_quota q SET guaranteed = greatest(8, ceil(u.used * 0.75 / 8) * 8),
                          ceiling = greatest(16, ceil(u.used * 1.25 / 8) * 8)
FROM (SELECT project_id, gpu_model_id, sum(gpu_count) AS used FROM rental_reservation
      WHERE status IN ('provisioning', 'active', 'ending') GROUP BY 1, 2) AS u
WHERE q.project_id = u.project_id AND q.gpu_model_id = u.gpu_model_id
"""

INSTANCES_SQL = """
INSERT INTO rental_instance
    (reservation_id, account_id, offering_id, region, zone, external_id, idempotency_key, state,
     market, gpu_count, rate_per_hour, currency, exchange_rate, launch_attempts, last_error,
     launched_at, running_at, terminated_at, public_address, private_address, ssh_user, tags,
     health, health_message, termination_reason, terminate_failures, agent_token_hash,
     agent_report, root_disk_gb, provisioning_since)
SELECT r.id, o.account_id, o.id, o.region, o.region || 'a',
       'i-pages' || lpad(r.id::text, 9, '0') || k, 'pages-' || r.id || '-' || k,
       CASE WHEN r.status = 'active' THEN 'running' ELSE 'terminated' END,
       r.market, o.gpus_per_instance,
       CASE WHEN r.market = 'spot' THEN o.spot_price_per_hour ELSE o.on_demand_price_per_hour END,
       %(currency)s, 1, 1, %(empty)s::jsonb, r.start, r.start, r.ended_at,
       CASE WHEN r.status = 'active' THEN '203.0.113.' || (r.id %% 250 + 1) ELSE '' END,
       '', 'ubuntu', '{}'::jsonb,
       CASE WHEN r.status = 'active' THEN 'healthy' ELSE 'unknown' END, %(empty)s::jsonb,
       r.end_reason, 0, '', '{}'::jsonb, 0, r.start
FROM rental_reservation r
JOIN rental_offering o ON o.id = r.offering_id
CROSS JOIN LATERAL generate_series(1, r.instance_count) AS k
WHERE r.status IN ('active', 'ended', 'preempted')
ORDER BY r.id, k
"""

# Closed runs: each terminated instance's lifetime cut into ``pieces`` runs with a stop
# (a tenth of a piece) between them; together exactly ``closed`` runs.
CLOSED_USAGE_SQL = """
INSERT INTO rental_usagerecord
    (instance_id, project_id, gpu_model_id, tier, market, gpu_count, start, "end", rate,
     end_reason, currency, exchange_rate, rolled_up)
SELECT i.id, r.project_id, r.gpu_model_id, r.tier, i.market, i.gpu_count,
       i.running_at + (i.terminated_at - i.running_at) * j / i.pieces,
       i.running_at + (i.terminated_at - i.running_at) * (j + 0.9) / i.pieces,
       i.rate_per_hour / i.gpu_count,
       CASE WHEN j = i.pieces - 1 THEN i.termination_reason ELSE 'user' END,
       i.currency, i.exchange_rate, true
FROM (
    SELECT i.*, %(base)s + CASE WHEN row_number() OVER (ORDER BY i.id) <= %(extra)s
                                THEN 1 ELSE 0 END AS pieces
    FROM rental_instance i WHERE i.state = 'terminated'
) AS i
JOIN rental_reservation r ON r.id = i.reservation_id
CROSS JOIN LATERAL generate_series(0, i.pieces - 1) AS j
ORDER BY i.id, j
"""

OPEN_USAGE_SQL = """
INSERT INTO rental_usagerecord
    (instance_id, project_id, gpu_model_id, tier, market, gpu_count, start, "end", rate,
     end_reason, currency, exchange_rate, rolled_up)
SELECT i.id, r.project_id, r.gpu_model_id, r.tier, i.market, i.gpu_count, i.running_at, NULL,
       i.rate_per_hour / i.gpu_count, '', i.currency, i.exchange_rate, false
FROM rental_instance i JOIN rental_reservation r ON r.id = i.reservation_id
WHERE i.state = 'running'
ORDER BY i.id
"""

AUDIT_SQL = """
INSERT INTO portal_auditevent (at, verb, object_type, object_id, before, after, source,
                               actor_id, project_id)
SELECT e.at, e.verb, 'rental.reservation', r.id::text, e.before, e.after, e.source,
       e.actor, r.project_id
FROM rental_reservation r
CROSS JOIN LATERAL (
    SELECT r.submitted_at AS at, 'lease.submitted' AS verb, '{}'::jsonb AS before,
           jsonb_build_object('status', CASE WHEN r.tier = 'burst' THEN 'pending_approval'
                                             ELSE 'queued' END,
                              'gpus', r.gpu_count) AS after,
           'web' AS source, r.requester_id AS actor
    UNION ALL
    SELECT r.approved_at, CASE WHEN r.status = 'rejected' THEN 'lease.rejected'
                               ELSE 'lease.approved' END,
           '{"status": "pending_approval"}'::jsonb,
           jsonb_build_object('status', r.status), 'web', r.approved_by_id
    WHERE r.approved_at IS NOT NULL AND (r.tier = 'burst' OR r.status = 'rejected')
    UNION ALL
    SELECT r.ended_at, 'lease.ended', '{"status": "active"}'::jsonb,
           jsonb_build_object('status', r.status, 'reason', r.end_reason),
           CASE WHEN r.end_reason = 'user' THEN 'web' ELSE 'worker' END,
           CASE WHEN r.end_reason = 'user' THEN r.requester_id END
    WHERE r.status IN ('ended', 'preempted')
) AS e
ORDER BY e.at, r.id
"""


def build(
    *,
    leases: int = 200_000,
    projects: int = 300,
    users: int = 3000,
    usage: int = 2_000_000,
    live: int = 10_000,
    months: int = 12,
    seed: int = 1,
    now: datetime | None = None,
    say: Callable[[str], None] = print,
) -> Built:
    """Fill an empty migrated database; prints the time of each step through ``say``."""
    fixed = live + (PENDING_PER_PROJECT + QUEUED_PER_PROJECT) * projects
    if leases < fixed + projects:
        raise ValueError(f"{leases} leases: need more than the {fixed} live and waiting ones")
    if usage < live:
        raise ValueError("every live instance has an open usage run: usage >= live")
    now = (now or timezone.now()).replace(microsecond=0)
    current = period_start(now)
    first = current
    for _ in range(months):
        first = period_start(first - timedelta(days=1))
    empty = json.dumps(Reservation._meta.get_field("status_message").get_prep_value(""))
    built = Built(now=now, projects=[], manager=None, engineer=None, admin=None, finance=None)
    total = _step(built, "total", say)

    with transaction.atomic():
        done = _step(built, "people, catalog, pools", say)
        gpu_models, offerings, image = _catalog()
        for model in gpu_models:
            Pool.objects.create(gpu_model=model, capacity=16 * projects)
        created, members, staff = _people(projects, users)
        Quota.objects.bulk_create(
            Quota(project=project, gpu_model=model, guaranteed=8, ceiling=16)
            for project in created
            for model in gpu_models
        )
        done()
        with connection.cursor() as cursor:
            # No foreign key checked row by row (millions of lookups): they are checked
            # once, set-wise, by _check_foreign_keys after the load.
            cursor.execute("SET LOCAL session_replication_role = replica")
            cursor.execute("SET LOCAL synchronous_commit = off")
            cursor.execute("SET LOCAL maintenance_work_mem = '256MB'")
            cursor.execute("SELECT setseed(%s)", [(seed % 1000) / 1000])
        with _indexes_dropped(BIG_TABLES):
            done = _step(built, "leases", say)
            with connection.cursor() as cursor:
                cursor.execute(
                    LEASES_SQL,
                    {
                        "leases": leases,
                        "projects": projects,
                        "live": live,
                        "pending": PENDING_PER_PROJECT * projects,
                        "queued": QUEUED_PER_PROJECT * projects,
                        "preempted": PREEMPTED,
                        "rejected": REJECTED,
                        "cancelled": CANCELLED,
                        "members": [user_id for ids in members for user_id in ids],
                        "per": len(members[0]),
                        "project_ids": [project.pk for project in created],
                        "offerings": [offering.pk for offering in offerings],
                        "models": [offering.gpu_model_id for offering in offerings],
                        "gpus": [offering.gpus_per_instance for offering in offerings],
                        "image": image.pk,
                        "empty": empty,
                        "now": now,
                        "first": first,
                        "latest": now - timedelta(minutes=2),
                    },
                )
                built.counts["leases"] = cursor.rowcount
                # Quotas and pools that hold what runs now: most of it within G, all of
                # it within L; committed capacity with a monthly cost (as
                # bench/close_month.py), so statements have share lines too.
                cursor.execute(QUOTAS_SQL)
            for pool in Pool.objects.all():
                quotas = Quota.objects.filter(gpu_model=pool.gpu_model)
                pool.capacity = sum(quotas.values_list("ceiling", flat=True))
                pool.committed_gpus = sum(quotas.values_list("guaranteed", flat=True)) + 4
                pool.committed_monthly_cost = Decimal("120000.00")
                pool.save()
            done()
            done = _step(built, "instances", say)
            with connection.cursor() as cursor:
                cursor.execute(
                    INSTANCES_SQL, {"currency": settings.PORTAL_CURRENCY, "empty": empty}
                )
                built.counts["instances"] = cursor.rowcount
                cursor.execute("SELECT count(*) FROM rental_instance WHERE state = 'terminated'")
                terminated = cursor.fetchone()[0]
            done()
            done = _step(built, "usage runs", say)
            with connection.cursor() as cursor:
                cursor.execute(OPEN_USAGE_SQL)
                opened = cursor.rowcount
                closed = usage - opened
                base, extra = divmod(closed, terminated)
                cursor.execute(CLOSED_USAGE_SQL, {"base": base, "extra": extra})
                built.counts["usage runs"] = opened + cursor.rowcount
                built.counts["open usage runs"] = opened
            done()
            done = _step(built, "audit events", say)
            with connection.cursor() as cursor:
                cursor.execute(AUDIT_SQL)
                built.counts["audit events (leases)"] = cursor.rowcount
            done()
            done = _step(built, "indexes made again", say)
        done()
        done = _step(built, "foreign keys checked", say)
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL session_replication_role = origin")
        _check_foreign_keys(BIG_TABLES)
        done()

    done = _step(built, "rollups rebuilt", say)
    # The closed runs went in marked rolled up; their rollups are built from them as an
    # operator's rebuild does (one aggregate a month), not 2M runs through the roll-up.
    built.counts["usage rollup rows"] = rebuild()
    done()

    done = _step(built, f"close {months} months", say)
    period = first
    while period < current:
        close_period(period=period, now=now)
        period = period_end(period)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*), (SELECT count(*) FROM billing_statementline) FROM billing_statement"
        )
        built.counts["statements"], built.counts["statement lines"] = cursor.fetchone()
    done()

    done = _step(built, "vacuum, analyze", say)
    with connection.cursor() as cursor:
        cursor.execute("VACUUM (ANALYZE)")
    done()
    total()

    user_model = get_user_model()
    built.projects = created
    built.manager = user_model.objects.get(pk=members[0][0])
    built.engineer = user_model.objects.get(pk=members[0][1])
    built.admin, built.finance = staff["admin"], staff["finance"]
    return built
