"""Time every page a person uses, over HTTP, on production-sized data.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/gp_pages_bench \\
        .venv/bin/python bench/pages.py [--sizes 200000] [--requests 100] [--warmup 10]
            [--reset] [--keep] [--reuse]
            [--peer-base URL --peer-user U --peer-password P [--peer-login-path /user/login/]
             --peer-page NAME=PATH ... --pair OURS=NAME ...]

For each size (total leases) the database is made afresh and filled by
``bench.production.build`` (or, with ``--reuse``, a database a ``--keep`` run left is used
as it is), then served by gunicorn with two sync workers under the production settings
(``PORTAL_ENV=production``, DEBUG off, a Redis cache of its own). The bench logs in over
HTTP as an engineer, a manager (both of project ``bench-000``), an admin and a finance
user, and fetches every page in turn, round after round (``--warmup`` rounds first, not
counted), so that a slow minute of the machine costs every page alike. Each page's SQL
queries are counted once in this process with Django's test client as the same user.

Prints p50 and p95 (ms) and the queries of each page, marking with ``!`` a p95 over
100 ms or more than 12 queries. Exit status 1 when a page answers other than 200, or
(with several sizes) when a page's p95 grows more than 1.5× from the smallest size to
the largest; 2 when the database cannot be used.
"""

import argparse
import math
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402

from bench.run import Refused, drop_database, hardware_line, prepare_database  # noqa: E402
from bench.serving import (  # noqa: E402
    Browser,
    collect_static,
    free_port,
    production_env,
    start_gunicorn,
    stop,
)
from tests import servers  # noqa: E402

GOAL_P95_MS = 100.0
GOAL_QUERIES = 12
GROWTH_LIMIT = 1.5
# A p95 at the largest size within this many ms of the smallest's is not counted as
# growth, whatever the ratio: below that the figure is the machine's scheduling noise.
NOISE_MS = 5.0
MIN_SAMPLES = 5  # timed fetches a page gets whatever --page-budget says
# A page number past the end: Django's Paginator.get_page answers the last page for it.
LAST = "99999"
ROLES = ("engineer", "manager", "admin", "finance")
USERNAMES = {
    "engineer": "bench-000-eng1",
    "manager": "bench-000-manager",
    "admin": "bench-admin",
    "finance": "bench-finance",
}
SLUG = "bench-000"


def say(text: str = "") -> None:
    print(text, flush=True)


@dataclass(frozen=True)
class Page:
    name: str  # short, for --pair
    role: str  # one of ROLES, or "peer"
    path: str
    method: str = "GET"
    htmx: bool = False
    # A POST body (the CSRF token is added); not part of the page's identity.
    form: dict[str, str] | None = field(default=None, compare=False)


@dataclass
class Result:
    page: Page
    times: list[float] = field(default_factory=list)
    statuses: set[int] = field(default_factory=set)
    queries: int | None = None

    def p(self, share: float) -> float:
        if not self.times:
            return math.nan
        ordered = sorted(self.times)
        return ordered[min(len(ordered) - 1, math.ceil(share * len(ordered)) - 1)]

    @property
    def label(self) -> str:
        return f"{self.page.name} · {self.page.role}"


def targets() -> dict[str, object]:
    """What the pages point at, read from the database: the lease shown, the pool, the
    GPU model and months."""
    from django.contrib.auth import get_user_model  # Django is set up by main
    from django.test import Client
    from django.utils import timezone

    from billing.periods import period_start
    from portal.models import Project
    from rental.models import Pool, Reservation

    project = Project.objects.get(slug=SLUG)
    lease = (
        Reservation.objects.filter(project=project, status=Reservation.Status.ACTIVE)
        .order_by("pk")
        .first()
    )
    this_month = period_start(timezone.now())
    admin = Client()
    admin.force_login(get_user_model().objects.get(username=USERNAMES["admin"]))
    return {
        "leases last": deepest(admin, "/leases/"),
        "audit last": deepest(admin, "/audit/"),
        "project": project,
        "lease": lease,
        "pool": Pool.objects.order_by("pk").first(),
        "this": this_month.strftime("%Y-%m"),
        "last": period_start(this_month - timedelta(days=1)).strftime("%Y-%m"),
    }


def deepest(client: Any, path: str) -> str:
    """The query of a list's last page: ``page=last`` where the list offers it (keyset
    pages: its "Oldest" link), else a page number past the end, which Django's
    ``Paginator.get_page`` answers with the last page."""
    html = client.get(path).content.decode()
    return "page=last" if "page=last" in html else f"page={LAST}"


def our_pages(found: dict[str, object]) -> list[Page]:
    project, lease, pool = found["project"], found["lease"], found["pool"]
    estimate = {
        "project": str(project.pk),
        "gpu_model": str(pool.gpu_model_id),
        "gpu_count": "1",
        "offering": "",
        "duration_hours": "8",
        "priority": "experiment",
        "market": "on_demand",
        "image": "",
        "data_volume": "",
        "purpose": "fine-tune the ranking model",
        "allow_other_instance_types": "on",
        "start_mode": "now",
        "start_at": "",
    }
    statement = f"/billing/projects/{SLUG}/statement/?period="
    pages: list[Page] = []
    for role in ("engineer", "manager"):
        pages += [
            Page("dashboard", role, "/"),
            Page("request form", role, "/leases/new/"),
            Page("estimate", role, "/leases/estimate/", "POST", htmx=True, form=estimate),
            Page("my leases", role, "/leases/"),
            Page("my leases _list", role, "/leases/_list/", htmx=True),
            Page("my leases last page", role, f"/leases/?{found['leases last']}"),
        ]
    pages += [
        Page("panel leases", "engineer", "/panels/leases/", htmx=True),
        Page("approvals", "manager", "/approvals/"),
        Page("approvals _count", "manager", "/approvals/_count/", htmx=True),
        Page("panel approvals", "manager", "/panels/approvals/", htmx=True),
        Page("panel spend", "manager", "/billing/panels/spend/", htmx=True),
        Page("project", "manager", f"/projects/{SLUG}/"),
        Page(
            "project statement panel",
            "manager",
            f"/billing/projects/{SLUG}/statement/_lines/",
            htmx=True,
        ),
        Page("project volumes panel", "manager", f"/projects/{SLUG}/volumes/", htmx=True),
        Page("reports", "manager", f"/billing/projects/{SLUG}/reports/"),
        Page("lease", "manager", f"/leases/{lease.pk}/"),
        Page("lease _status", "manager", f"/leases/{lease.pk}/_status/", htmx=True),
        Page("lease cost panel", "manager", f"/billing/leases/{lease.pk}/_cost/", htmx=True),
    ]
    for role in ("manager", "finance"):
        pages += [
            Page("statement this month", role, statement + found["this"]),
            Page("statement last month", role, statement + found["last"]),
        ]
    pages += [
        Page("dashboard", "admin", "/"),
        Page("projects", "admin", "/projects/"),
        Page("all leases", "admin", "/leases/"),
        Page("all leases last page", "admin", f"/leases/?{found['leases last']}"),
        Page("queue (waiting leases)", "admin", "/leases/?status=waiting"),
        Page("pools", "admin", "/pools/"),
        Page("pool", "admin", f"/pools/{pool.pk}/"),
        Page("pool _queue", "admin", f"/pools/{pool.pk}/_queue/"),
        Page("audit log", "admin", "/audit/"),
        Page("audit log last page", "admin", f"/audit/?{found['audit last']}"),
        Page("dashboard", "finance", "/"),
        Page("panel spend", "finance", "/billing/panels/spend/", htmx=True),
        Page("finance", "finance", "/billing/finance/"),
    ]
    return pages


def count_queries(pages: list[Page], results: dict[Page, Result]) -> None:
    """Each page in this process, as the same user: its SQL queries and status, counted on
    a second fetch, as the timed fetches are made (after the warm-up has filled caches)."""
    from django.contrib.auth import get_user_model  # Django is set up first
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    clients = {}
    for role, username in USERNAMES.items():
        clients[role] = Client()
        clients[role].force_login(get_user_model().objects.get(username=username))
    for page in pages:
        client = clients[page.role]
        headers = {"HX-Request": "true"} if page.htmx else {}

        def fetch(page: Page = page, client: Any = client, headers: dict = headers) -> Any:
            if page.method == "POST":
                return client.post(page.path, page.form, headers=headers)
            return client.get(page.path, headers=headers)

        fetch()
        with CaptureQueriesContext(connection) as captured:
            response = fetch()
        results[page].queries = len(captured.captured_queries)
        if response.status_code != 200:
            results[page].statuses.add(response.status_code)


def time_rounds(
    pages: list[Page],
    browsers: dict[str, Browser],
    results: dict[Page, Result],
    *,
    warmup: int,
    rounds: int,
    budget_s: float = 0,
    between: Callable[[], None] | None = None,
) -> None:
    """Every page once a round, in turn; the warm-up rounds are not kept. With
    ``budget_s``, a page that has spent that long in timed fetches (and has at least
    ``MIN_SAMPLES``) is left out of the later rounds, so one very slow page cannot hold
    the run for an hour; the table shows how many fetches each page had."""
    tokens: dict[str, str] = {}
    for number in range(warmup + rounds):
        if between is not None:
            between()
        for page in pages:
            result = results[page]
            spent = sum(result.times) / 1000
            if budget_s and spent >= budget_s and len(result.times) >= MIN_SAMPLES:
                continue
            browser = browsers[page.role]
            headers = {"HX-Request": "true"} if page.htmx else {}
            form = None
            if page.form is not None:
                if page.role not in tokens:
                    tokens[page.role] = browser.csrf_token("/leases/new/")
                form = {**page.form, "csrfmiddlewaretoken": tokens[page.role]}
                headers["Referer"] = browser.base + "/leases/new/"
            status, _, ms = browser.request(page.method, page.path, form=form, headers=headers)
            if number >= warmup:
                result.times.append(ms)
            result.statuses.add(status)


class Beat:
    """The beat's spend refresh (``refresh-spend`` in ``CELERY_BEAT_SCHEDULE``), run here
    between rounds once its interval has passed, as the worker would run it: the pages read
    the month's kept draft lines and spend snapshots, which go stale without it. It runs
    outside the timed fetches; its own durations are reported."""

    def __init__(self) -> None:
        from django.conf import settings  # Django is set up first
        from django.utils.module_loading import import_string

        entry = settings.CELERY_BEAT_SCHEDULE["refresh-spend"]
        self.task = import_string(entry["task"])
        self.interval = float(entry["schedule"])
        self.last = -math.inf
        self.seconds: list[float] = []

    def __call__(self) -> None:
        if time.monotonic() - self.last < self.interval:
            return
        from django.db import connections  # Django is set up first

        began = time.monotonic()
        self.task()
        connections.close_all()
        self.last = time.monotonic()
        self.seconds.append(self.last - began)


def print_table(results: list[Result]) -> None:
    width = max(len(result.label) for result in results) + 2
    say(f"{'page · role':<{width}}{'p50 ms':>9}{'p95 ms':>9}{'queries':>9}{'n':>5}  HTTP")
    for result in results:
        slow = result.p(0.95) > GOAL_P95_MS
        many = result.queries is not None and result.queries > GOAL_QUERIES
        queries = "—" if result.queries is None else str(result.queries)
        statuses = ",".join(str(status) for status in sorted(result.statuses))
        say(
            f"{result.label:<{width}}{result.p(0.5):>9.1f}{result.p(0.95):>8.1f}"
            f"{'!' if slow else ' '}{queries:>8}{'!' if many else ' '}"
            f"{len(result.times):>5}  {statuses}"
        )


def print_pairs(results: list[Result], pairs: list[tuple[str, str]]) -> None:
    by_name: dict[str, Result] = {}
    for result in results:
        by_name.setdefault(result.page.name, result)
    say("\nOurs against the peer's (p95 ms; ratio = ours / theirs):")
    for ours, theirs in pairs:
        mine, peer = by_name.get(ours), by_name.get(theirs)
        if mine is None or peer is None:
            say(f"  {ours} / {theirs}: no such page")
            continue
        say(
            f"  {mine.label:<34} {mine.p(0.95):>8.1f}   {peer.label:<30} "
            f"{peer.p(0.95):>8.1f}   {mine.p(0.95) / peer.p(0.95):.2f}×"
        )


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def run_size(size: int, args: argparse.Namespace, env: dict[str, str], var: Path) -> list[Result]:
    """Build (or reuse) one size, serve it, count and time every page."""
    from django.core.management import call_command  # Django is set up first
    from django.db import connections

    from bench.generate import PASSWORD
    from bench.production import build

    if not args.reuse:
        connections.close_all()
        prepare_database(env["DATABASE_URL"], reset=True)
        began = time.perf_counter()
        call_command("migrate", interactive=False, verbosity=0)
        say(f"size {size:,}: migrated in {time.perf_counter() - began:.1f} s; building")
        built = build(
            leases=size,
            projects=args.projects,
            users=10 * args.projects,
            usage=10 * size,
            live=args.live,
            seed=args.seed,
            say=say,
        )
        say("  " + ", ".join(f"{key} {value:,}" for key, value in built.counts.items()))
    beat = Beat()
    beat()  # first: the pages are counted and timed with the kept lines fresh
    found = targets()
    pages = our_pages(found)
    results = {page: Result(page) for page in pages}
    count_queries(pages, results)
    connections.close_all()

    port = free_port(args.taken)
    server = start_gunicorn(port, env, var / "gunicorn.log")
    try:
        base = f"http://127.0.0.1:{port}"
        browsers = {role: Browser(base) for role in ROLES}
        for role, browser in browsers.items():
            browser.log_in("/login/", USERNAMES[role], PASSWORD)
        peer_pages = []
        if args.peer_base:
            browsers["peer"] = Browser(args.peer_base)
            browsers["peer"].log_in(args.peer_login_path, args.peer_user, args.peer_password)
            for item in args.peer_page:
                name, _, path = item.partition("=")
                peer_pages.append(Page(name, "peer", path))
                results[peer_pages[-1]] = Result(peer_pages[-1])
        before = loadavg()
        began = time.perf_counter()
        time_rounds(
            pages + peer_pages,
            browsers,
            results,
            warmup=args.warmup,
            rounds=args.requests,
            budget_s=args.page_budget,
            between=beat,
        )
        say(
            f"size {size:,}: the beat's spend refresh ran {len(beat.seconds)} times "
            f"(every {beat.interval:.0f} s, between rounds): "
            + ", ".join(f"{seconds:.1f}" for seconds in beat.seconds)
            + " s"
        )
        say(
            f"size {size:,}: {args.warmup} + {args.requests} rounds of {len(results)} pages in "
            f"{time.perf_counter() - began:.0f} s; load average {before} → {loadavg()}"
        )
    finally:
        stop(server)
    return list(results.values())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="200000", help="total leases, comma-separated")
    parser.add_argument("--requests", type=int, default=100, help="timed rounds")
    parser.add_argument("--warmup", type=int, default=10, help="rounds first, not kept")
    parser.add_argument(
        "--page-budget",
        type=float,
        default=60,
        help=f"seconds of timed fetches a page may use (at least {MIN_SAMPLES}); 0: no limit",
    )
    parser.add_argument("--projects", type=int, default=300)
    parser.add_argument("--live", type=int, default=10_000, help="running leases, any size")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--reset", action="store_true", help="drop a non-empty bench database")
    parser.add_argument("--keep", action="store_true", help="keep the database at the end")
    parser.add_argument("--reuse", action="store_true", help="serve a kept database as it is")
    parser.add_argument("--peer-base", default="", help="another Django site, e.g. ColdFront")
    parser.add_argument("--peer-user", default="")
    parser.add_argument("--peer-password", default="")
    parser.add_argument("--peer-login-path", default="/user/login/")
    parser.add_argument("--peer-page", action="append", default=[], help="NAME=PATH")
    parser.add_argument("--pair", action="append", default=[], help="OUR_PAGE=PEER_PAGE")
    args = parser.parse_args(argv)
    sizes = sorted({int(size) for size in args.sizes.split(",") if size.strip()})
    if not sizes:
        parser.error("give at least one size")
    if args.reuse and len(sizes) > 1:
        parser.error("--reuse serves one kept database: give one size")
    if args.peer_base and not (args.peer_user and args.peer_page):
        parser.error("--peer-base needs --peer-user, --peer-password and --peer-page")
    pairs = [tuple(item.split("=", 1)) for item in args.pair]
    if any(len(pair) != 2 for pair in pairs):
        parser.error("--pair takes OUR_PAGE=PEER_PAGE")

    url = os.environ.get("DATABASE_URL", "")
    if not url:
        say("Set DATABASE_URL to a PostgreSQL database for the bench.")
        return 2
    try:
        if args.reuse:
            with psycopg.connect(url) as kept:
                kept.execute("SELECT 1 FROM portal_project WHERE slug = %s", [SLUG]).fetchone()
        else:
            prepare_database(url, reset=args.reset)
    except (Refused, psycopg.Error) as error:
        say(f"bench: {error}")
        return 2

    # A TERM (a timeout, a kill) unwinds like an error: Redis, gunicorn and the folder go.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    var = Path(tempfile.mkdtemp(prefix="gp-pages-"))
    taken: set[int] = set()
    redis_port = free_port(taken)
    args.taken = taken
    redis = servers.redis_server(var, redis_port)
    env = production_env(
        database=url, redis=f"redis://127.0.0.1:{redis_port}/0", static=var / "static"
    )
    os.environ.update(env)

    import django  # after the environment above is in place

    django.setup()
    from django.conf import settings
    from django.db import connections

    # Closing the months mails each manager; keep the mail in this process.
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    by_size: dict[int, list[Result]] = {}
    try:
        collect_static(env)
        say(hardware_line())
        say(f"load average {loadavg()}")
        for size in sizes:
            by_size[size] = run_size(size, args, env, var)
            say()
            print_table(by_size[size])
            if pairs:
                print_pairs(by_size[size], pairs)
            say()
    finally:
        connections.close_all()
        servers.fast_stop(redis)
        if not args.keep and not args.reuse:
            drop_database(url)
        shutil.rmtree(var, ignore_errors=True)
    say(f"load average {loadavg()}")

    failed = False
    last = by_size[sizes[-1]]
    for results in by_size.values():
        for result in results:
            if result.statuses != {200}:
                say(f"! {result.label} answered {sorted(result.statuses)}")
                failed = True
    if len(sizes) > 1:
        say("\np95 ms at each size; growth from the smallest to the largest")
        width = max(len(result.label) for result in last) + 2
        say(f"{'page · role':<{width}}" + "".join(f"{size:>10,}" for size in sizes) + "  growth")
        for index, result in enumerate(last):
            p95s = [by_size[size][index].p(0.95) for size in sizes]
            growth = p95s[-1] / p95s[0]
            grew = growth > GROWTH_LIMIT and p95s[-1] - p95s[0] > NOISE_MS
            failed |= grew
            say(
                f"{result.label:<{width}}"
                + "".join(f"{p95:>10.1f}" for p95 in p95s)
                + f"  {growth:.2f}×{' !' if grew else ''}"
            )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
