"""The walk, one file per persona (tests/e2e/test_walk_<persona>.py): a persona walks
every page it can reach, in headless Chromium, in English and in Simplified Chinese, on
a desktop (1280 px) and a phone (390 px): no server error (the page's own or an HTMX
partial's), no console error, no Content-Security-Policy violation, no script error, no
raw code (an enum value, a dotted event name, True/False/None, an ISO timestamp) and no
page wider than the screen.

The pages are found, not listed: each persona's links are followed from the dashboard
with Django's test client (at most PER_PATTERN pages of one shape, such as /leases/N/),
over the demo's data plus live leases in every state an engineer meets."""

import os
import re
from collections import Counter
from datetime import timedelta
from decimal import Decimal
from io import StringIO
from pathlib import Path
from urllib.parse import urlsplit

from django.core.management import call_command
from django.db import connections
from django.test import Client
from django.utils import timezone

from portal.audit_log import vocabulary
from portal.models import Project
from rental.loans import admission
from rental.management.commands.seed_demo import DEMO_ACCOUNT
from rental.models import GpuModel, Instance, Offering, Reservation, UsageRecord
from tests import factories

VARIANTS = [("en", 1280), ("zh-hans", 390), ("zh-hans", 1280), ("en", 390)]
PER_PATTERN = 2
# PORTAL_WALK_SHOTS=<folder> keeps a whole-page screenshot of every page walked, to look at.
SHOTS = os.environ.get("PORTAL_WALK_SHOTS", "")
MOST_PAGES = 60
TIMEOUT_MS = 20_000  # what a page may take on a busy two-core machine
# Not pages a person reads in the portal's layout: files, the API and its docs (their own
# tests), Django's admin (tests/rental/catalog/test_admin_accounts.py), leaving.
SKIP = re.compile(r"^/(logout|i18n|api|admin|static)/|/(csv|pdf)/?$|[?&]format=")

# What a person should never read: codes and values meant for programs. A dotted name is
# an audit verb (lease.submitted) or an object type (rental.reservation); a user name such
# as li.wei is not one.
RAW = [
    (re.compile(r"\b[a-z]+(?:_[a-z]+)+\b"), "a code with underscores"),
    (re.compile(r"(?m)(?:^|=)\s*(?:True|False|None)\s*$"), "a Python value"),
    (re.compile(r"\b(?:rental|billing|portal|auth)\.[a-z]+\b"), "an object type"),
    (re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d"), "an ISO timestamp"),
    (re.compile(r"\d\d:\d\d:\d\d\.\d{3,}"), "microseconds"),
]
# Words of that shape that are real text: addresses and file names people read.
RAW_ALLOWED = re.compile(
    r"@|\.(?:com|org|io|net|py|txt|sh|json|yaml|csv|pdf)\b|^(?:e\.g|i\.e)$|example\.com"
)


def audit_verbs() -> re.Pattern:
    """Every verb the audit log knows, as a code a person should never see."""
    verbs = sorted(vocabulary().verbs, key=len, reverse=True)
    return re.compile(r"\b(?:" + "|".join(re.escape(verb) for verb in verbs) + r")\b")


def _demo_world() -> None:
    """The demo's people, pools, history and statements, plus leases in the states an
    engineer sees today: running, stopped, queued, waiting for a manager, booked."""
    factories.account(name=DEMO_ACCOUNT)
    call_command("load_catalog", "--account", DEMO_ACCOUNT, stdout=StringIO())
    call_command("seed_demo", stdout=StringIO(), stderr=StringIO())
    call_command("seed_demo_billing", stdout=StringIO())
    vision = Project.objects.get(slug="vision")
    erik = vision.memberships.get(user__username="erik").user
    now = timezone.now().replace(microsecond=0)
    for state in (Instance.State.RUNNING, Instance.State.STOPPED):
        _live_lease(vision, erik, state=state, since=now - timedelta(hours=2))
    model = GpuModel.objects.get(name="A10G 24GB")
    common = {"actor": erik, "project": vision, "gpu_model": model, "market": "on_demand"}
    later = now + timedelta(days=2)
    admission.submit_reservation(
        **common, gpu_count=1, duration_hours=4, priority="experiment", start=later
    )
    admission.submit_reservation(
        **common, gpu_count=1, duration_hours=48, priority="experiment", purpose="long run"
    )


def _live_lease(project, user, *, state: str, since) -> Reservation:
    offering = Offering.objects.filter(gpu_model__name="L4 24GB").order_by("pk").first()
    running = state == Instance.State.RUNNING
    lease = Reservation.objects.create(
        project=project,
        requester=user,
        gpu_model=offering.gpu_model,
        gpu_count=offering.gpus_per_instance,
        offering=offering,
        market="on_demand",
        priority="experiment",
        start=since,
        end=since + timedelta(hours=8),
        tier="guaranteed",
        status=Reservation.Status.ACTIVE if running else Reservation.Status.STOPPED,
        purpose="walk every page",
    )
    instance = Instance.objects.create(
        reservation=lease,
        account=offering.account,
        offering=offering,
        region=offering.region,
        external_id=f"i-{lease.pk:017x}",
        state=state,
        market="on_demand",
        gpu_count=offering.gpus_per_instance,
        rate_per_hour=offering.on_demand_price_per_hour * offering.gpus_per_instance,
        running_at=since,
        ssh_user="ubuntu",
        public_address="203.0.113.10" if running else "",
    )
    UsageRecord.objects.create(
        instance=instance,
        project=project,
        gpu_model=offering.gpu_model,
        tier="guaranteed",
        market="on_demand",
        gpu_count=instance.gpu_count,
        start=since,
        end=None if running else since + timedelta(hours=1),
        rate=Decimal(offering.on_demand_price_per_hour),
    )
    return lease


def _pattern(url: str) -> str:
    return re.sub(r"\d+", "N", url)


def crawl(username: str) -> list[str]:
    """The pages ``username`` reaches from the dashboard by links, at most PER_PATTERN of
    each shape; fails on any server error on the way."""
    client = Client()
    assert client.login(username=username, password=f"demo-{username}")
    queue, seen, shapes, pages = ["/"], {"/"}, Counter(), []
    while queue and len(pages) < MOST_PAGES:
        url = queue.pop(0)
        response = client.get(url, HTTP_ACCEPT_LANGUAGE="en")
        assert response.status_code < 500, (username, url, response.status_code)
        if response.status_code != 200 or "text/html" not in response.get("Content-Type", ""):
            continue
        pages.append(url)
        html = response.content.decode()
        for found in re.findall(r'href="([^"#]+)"', html):
            link = found.replace("&amp;", "&")
            parts = urlsplit(link)
            if parts.netloc or not parts.path.startswith("/") or SKIP.search(link):
                continue
            if link in seen or shapes[_pattern(link)] >= PER_PATTERN:
                continue
            seen.add(link)
            shapes[_pattern(link)] += 1
            queue.append(link)
    return pages


WATCH = """
window.__walk = [];
window.__inFlight = 0;
document.addEventListener('securitypolicyviolation', e =>
  window.__walk.push('CSP: ' + e.violatedDirective + ' ' + e.blockedURI));
document.addEventListener('htmx:beforeRequest', () => { window.__inFlight += 1; });
document.addEventListener('htmx:afterRequest', () => { window.__inFlight -= 1; });
"""
# What the walk reads of a page once it is loaded and no HTMX partial is on its way (the
# partials load right after the page), looked at every frame. One call, not Playwright's
# wait_for_function and then an evaluate: its polling cost a sixth of a walk's time. It
# fails, as wait_for_function did, when the page has not settled within ``timeout`` ms.
PAGE_FACTS = """timeout => new Promise((resolve, reject) => {
  const deadline = performance.now() + timeout;
  const facts = () => ({
    text: document.body.innerText,
    lang: document.documentElement.lang,
    wide: document.documentElement.scrollWidth,
    // One-line inputs drawn as tall boxes (a flex rule meant for a row, applied to a column).
    tall: [...document.querySelectorAll("input:not([type=checkbox]):not([type=radio]), select")]
      .filter(input => input.offsetHeight > 80).map(input => input.name || input.id),
    problems: window.__walk || [],
  });
  const look = () => {
    if (document.readyState === 'complete' && window.__inFlight === 0) resolve(facts());
    else if (performance.now() > deadline) reject(new Error(`not settled in ${timeout} ms`));
    else requestAnimationFrame(look);
  };
  look();
})"""


def raw_codes(text: str, verbs: re.Pattern) -> list[str]:
    found = []
    for pattern, what in [*RAW, (verbs, "an audit verb")]:
        for match in pattern.finditer(text):
            start = text.rfind(" ", 0, match.start()) + 1
            end = text.find(" ", match.end())
            word = text[start : end if end != -1 else len(text)]
            if not RAW_ALLOWED.search(word):
                found.append(f"{what}: {match.group(0)!r} in {word!r}")
    return found


def _watch(page, where: str, current: dict, problems: list[str]) -> None:
    """Console errors, script errors and server errors of the page and its partials."""

    def on_console(message) -> None:
        if message.type == "error":
            problems.append(f"{where} {current['url']}: console {message.text}")

    def on_response(response) -> None:
        if response.status >= 500:
            problems.append(f"{where}: {response.status} from {response.url}")

    page.on("console", on_console)
    page.on("pageerror", lambda error: problems.append(f"{where}: script {error}"))
    page.on("response", on_response)


def walk(username: str, live_server, browser) -> None:
    """One persona walks every page it reaches, in both languages at both widths; fails
    with every problem found (one file per persona, so the walks spread over the
    suite's workers)."""
    _demo_world()
    pages = crawl(username)
    verbs = audit_verbs()
    print({username: len(pages)})  # noqa: T201
    assert len(pages) >= 5, pages
    problems: list[str] = []
    for language, width in VARIANTS:
        where = f"{username} {language} {width}px"
        context = browser.new_context(
            viewport={"width": width, "height": 844 if width < 600 else 900},
            extra_http_headers={"Accept-Language": language},
        )
        context.add_init_script(WATCH)
        page = context.new_page()
        page.set_default_timeout(TIMEOUT_MS)
        current = {"url": ""}
        _watch(page, where, current, problems)
        page.goto(f"{live_server.url}/login/")
        page.fill("input[name=username]", username)
        page.fill("input[name=password]", f"demo-{username}")
        page.click("button[type=submit]")
        page.wait_for_url(re.compile(r"^(?!.*/login/)"))
        for url in pages:
            current["url"] = url
            response = page.goto(f"{live_server.url}{url}")
            facts = page.evaluate(PAGE_FACTS, TIMEOUT_MS)
            if response is None or response.status != 200:
                problems.append(f"{where} {url}: status {response and response.status}")
                continue
            problems += [f"{where} {url}: {p}" for p in facts["problems"]]
            if facts["lang"] != language:
                problems.append(f"{where} {url}: the page is in {facts['lang']!r}")
            if facts["wide"] > width:
                problems.append(f"{where} {url}: {facts['wide']} px wide")
            if facts["tall"]:
                problems.append(f"{where} {url}: inputs taller than a line: {facts['tall']}")
            problems += [f"{where} {url}: {raw}" for raw in raw_codes(facts["text"], verbs)]
            if SHOTS:
                name = re.sub(r"[^a-z0-9]+", "-", url.lower()).strip("-") or "home"
                folder = Path(SHOTS) / f"{username}-{language}-{width}"
                folder.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(folder / f"{name}.png"), full_page=True)
        context.close()
    connections.close_all()
    assert problems == [], "\n".join(sorted(set(problems)))
