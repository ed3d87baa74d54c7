"""The audit log in words: every verb the code records reads as a sentence in both
languages, objects are named and linked, before and after are labelled values (no codes,
no None/True/False, times to the minute), the filters combine and survive paging, and a
page costs the same queries at any size."""

import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import translation

from portal import audit
from portal.audit_log import AuditFilterForm, in_words, vocabulary
from portal.models import AuditEvent
from portal.views import AUDIT_PAGE_SIZE
from rental.loans import admission, pools, quotas
from rental.models import Quota, Reservation
from tests import factories

ROOT = Path(__file__).resolve().parents[2]
# audit.record(verb="…"), AuditEvent(verb="…"), {"verb": "…"} and the demo's
# record_worker("instance.…", …), literal or f-string.
RECORDED = re.compile(r"""(?:\bverb\b["']?\s*[=:]\s*|record_worker\(\s*)(f?)["']([a-z_.{}]+)["']""")
# The verbs an f-string makes, by its pattern (a new pattern must be listed here).
SPELLED_OUT = {
    "image.{state}": ["image.available", "image.failed"],
    "statement.{kind}": ["statement.adjustment", "statement.credit"],
}
RAW = re.compile(r"\bNone\b|\bTrue\b|\bFalse\b|rental\.reservation#|lease\.submitted|code=")


def recorded_verbs() -> set[str]:
    verbs: set[str] = set()
    for app in ("portal", "rental", "billing"):
        for path in (ROOT / app).rglob("*.py"):
            if "migrations" in path.parts:
                continue
            for is_f, verb in RECORDED.findall(path.read_text()):
                if is_f or "{" in verb:
                    assert verb in SPELLED_OUT, f"{path}: spell out the verbs of {verb!r}"
                    verbs.update(SPELLED_OUT[verb])
                elif "." in verb:
                    verbs.add(verb)
    return verbs


def test_every_verb_the_code_records_has_a_sentence():
    verbs = recorded_verbs()
    assert len(verbs) > 60  # the scan finds them (it cannot pass by finding none)
    missing = sorted(verbs - set(vocabulary().verbs))
    assert missing == [], f"verbs without a sentence in an audit vocabulary: {missing}"


PLACEHOLDER = re.compile(r"%\((\w+)\)s")
SAMPLES = {"status": "queued", "tier": "burst", "reason": "idle", "state": "degraded"}


@pytest.mark.django_db
@pytest.mark.parametrize("language", ["en", "zh-hans"])
def test_every_sentence_reads_without_codes_in_both_languages(language):
    """Each verb with a value for every placeholder its sentence names: the sentence is
    whole, each value has a label of its own, and nothing raw shows."""
    project = factories.project("alpha", name="Alpha")
    unlabelled = []
    for verb, said in vocabulary().verbs.items():
        # The sentence with a before (a change), and the first one's without (if any).
        for template, with_before in ((said.sentence, True), (said.first, False)):
            if not template:
                continue
            keys = set(PLACEHOLDER.findall(str(template))) - {"actor", "object", "in_project"}
            before = {k[4:]: SAMPLES.get(k[4:], "7") for k in keys if k.startswith("was_")}
            if with_before:
                before.setdefault("state", "ok")
            after = {k: SAMPLES.get(k, "7") for k in keys if not k.startswith("was_")}
            for key in {**before, **after}:
                known = vocabulary().values
                if key not in known and not any(k.endswith(f":{key}") for k in known):
                    unlabelled.append((verb, key))
            event = AuditEvent(
                at=datetime(2026, 12, 3, 16, 3, 27, tzinfo=UTC),
                verb=verb,
                object_type=next(iter(vocabulary().kinds)),
                object_id="1",
                project=project,
                before=before,
                after=after,
                source="web",
            )
            with translation.override(language):
                (line,) = in_words([event])
            text = str(line.sentence)
            assert "%(" not in text and not RAW.search(text), (verb, text)
            assert line.at == "2026-12-03 16:03"
            if language == "zh-hans":
                assert re.search(r"[\u4e00-\u9fff]", text), (verb, text)
    assert unlabelled == []


def submit(f0, **changes):
    return admission.submit_reservation(
        actor=f0.alice,
        project=f0.alpha,
        gpu_model=f0.model,
        gpu_count=changes.pop("gpu_count", 2),
        duration_hours=4,
        priority="experiment",
        market="on_demand",
        **changes,
    )


@pytest.mark.django_db
def test_real_events_read_as_sentences_with_named_links(f0, client):
    Quota.objects.filter(project=f0.alpha).update(max_gpus_per_lease=1)
    lease = submit(f0)
    assert lease.status == Reservation.Status.PENDING_APPROVAL
    quotas.set_quota(actor=f0.admin, project=f0.alpha, gpu_model=f0.model, guaranteed=1, ceiling=6)
    pools.configure_pool(actor=f0.admin, gpu_model=f0.model, committed_monthly_cost="1400")
    client.force_login(f0.admin)
    page = client.get(reverse("audit_log")).content.decode()
    table = page[page.index('id="audit-table"') :]
    assert (
        f'<strong>alice</strong> asked for <a href="/leases/{lease.pk}/">'
        f"lease #{lease.pk} (2 × A100 80GB)</a>"
    ) in table
    assert "beyond the quota&#x27;s auto-approve limits" in table
    assert "Waiting for approval" in table
    assert (
        "<strong>root</strong> set the quota of "
        '<a href="/projects/alpha/">Alpha on A100 80GB</a>: guarantee 1 GPU (was 2 GPUs), '
        "ceiling 6 GPUs (was 6 GPUs)"
    ) in table
    assert "<dt>Committed monthly cost</dt>" in table and "$1,400.00" in table
    assert not RAW.search(table), RAW.search(table)
    assert not re.search(r"\d\d:\d\d:\d\d", table)  # to the minute
    chinese = client.get(reverse("audit_log"), HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
    assert f"lease #{lease.pk}" not in chinese and f"租约 #{lease.pk}" in chinese


@pytest.fixture
def history(f0):
    """Events by alice (alpha) and bob (beta) on three days, and one by the portal."""
    day = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)
    made = []
    for offset, who, where in (
        (0, f0.alice, f0.alpha),
        (1, f0.bob, f0.beta),
        (1, f0.alice, f0.alpha),
        (2, f0.alice, f0.beta),
    ):
        quota = Quota.objects.get(project=where)
        made.append(
            audit.record(
                actor=who,
                verb="quota.set",
                obj=quota,
                project=where,
                source="web",
                at=day + timedelta(days=offset),
                after={"guaranteed": 1},
            )
        )
    made.append(
        audit.record(
            actor=None,
            verb="pool.state",
            obj=f0.pool,
            source="worker",
            at=day,
            after={"state": "degraded"},
        )
    )
    return made


def shown(client, **filters) -> list[int]:
    page = client.get(reverse("audit_log"), filters).content.decode()
    return [int(pk) for pk in re.findall(r'<tr id="audit-(\d+)"', page)]


@pytest.mark.django_db
def test_the_filters_combine(f0, client, history):
    client.force_login(f0.admin)
    by_alice = [e.pk for e in history if e.actor == f0.alice]
    assert sorted(shown(client, actor="alice")) == sorted(by_alice)
    assert shown(client, actor="alice", project="alpha") == [history[2].pk, history[0].pk]
    assert shown(client, actor="alice", since="2026-11-03", until="2026-11-03") == [history[2].pk]
    assert shown(client, actor="-") == [history[4].pk]
    assert shown(client, verb="pool.state") == [history[4].pk]
    quota = Quota.objects.get(project=f0.beta)
    assert sorted(shown(client, object_type="rental.quota", object_id=str(quota.pk))) == sorted(
        [history[1].pk, history[3].pk]
    )
    assert shown(client, project="gamma") == []


@pytest.mark.django_db
def test_paging_keeps_the_filters(f0, client):
    for _n in range(AUDIT_PAGE_SIZE + 5):
        audit.record(actor=f0.alice, verb="project.renamed", obj=f0.alpha, source="web")
    audit.record(actor=f0.bob, verb="project.renamed", obj=f0.beta, source="web")
    client.force_login(f0.admin)
    page = client.get(reverse("audit_log"), {"actor": "alice"}).content.decode()
    assert len(re.findall(r'<tr id="audit-', page)) == AUDIT_PAGE_SIZE
    older = re.search(r'href="\?([^"]+)" id="audit-older"', page)[1]
    assert "actor=alice" in older and "after=" in older
    second = client.get(f"{reverse('audit_log')}?{older.replace('&amp;', '&')}").content
    assert len(re.findall(rb'<tr id="audit-', second)) == 5
    assert b'id="audit-older"' not in second and b'id="audit-newer"' in second


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("filters", "field"),
    [
        ({"since": "yesterday"}, "since"),
        ({"until": "2026-13-01"}, "until"),
        ({"object_id": "x" * 65}, "object_id"),
        ({"object_id": "4\u202e2"}, "object_id"),
        ({"verb": "lease.teleported"}, "verb"),
        ({"actor": "nobody"}, "actor"),
        ({"object_type": "rental.teleport"}, "object_type"),
        ({"until": "9999-12-31"}, None),
    ],
)
def test_a_bad_filter_is_an_error_on_its_field_never_a_server_error(
    f0, client, history, filters, field
):
    client.force_login(f0.admin)
    answer = client.get(reverse("audit_log"), filters)
    assert answer.status_code == 200
    page = answer.content.decode()
    if field:
        assert f'id="error-{field}"' in page
    assert len(shown(client, **filters)) == len(history)  # the bad filter is left out


@pytest.mark.django_db
def test_a_range_that_ends_before_it_starts_is_an_error_on_its_end(f0, client, history):
    client.force_login(f0.admin)
    filters = {"since": "2026-11-04", "until": "2026-11-01"}
    page = client.get(reverse("audit_log"), filters).content.decode()
    assert 'id="error-until"' in page
    assert shown(client, **filters) == [history[3].pk]  # from the 4th on; the end left out


@pytest.mark.django_db
def test_a_nul_in_a_filter_gets_the_sites_own_bad_request_page(f0, client):
    client.force_login(f0.admin)
    answer = client.get(reverse("audit_log"), {"object_id": "4\x002"})
    assert answer.status_code == 400
    assert "error-page" in answer.content.decode()


@pytest.mark.django_db
def test_the_form_offers_every_verb_and_kind_by_label(f0):
    form = AuditFilterForm({})
    verbs = dict(form.fields["verb"].choices)
    assert verbs["lease.submitted"] == "Lease asked for"
    assert dict(form.fields["object_type"].choices)["rental.reservation"] == "Lease"


def events_of_four_kinds(f0, count: int) -> None:
    objects = [
        (f0.pool, None),
        (Quota.objects.get(project=f0.alpha), f0.alpha),
        (f0.alpha, f0.alpha),
        (f0.offering, None),
    ]
    for n in range(count):
        obj, project = objects[n % len(objects)]
        audit.record(
            actor=f0.admin if n % 2 else None,
            verb="pool.changed",
            obj=obj,
            project=project,
            source="web",
            before={"capacity": n},
            after={"capacity": n + 1, "committed_monthly_cost": Decimal("1.00")},
        )


@pytest.mark.django_db
@pytest.mark.parametrize("count", [10, 200])
def test_a_page_costs_the_same_queries_at_any_size(f0, client, count):
    events_of_four_kinds(f0, count)
    client.force_login(f0.admin)
    client.get(reverse("audit_log"))  # the session and the user, once
    with CaptureQueriesContext(connection) as queries:
        answer = client.get(reverse("audit_log"), {"until": "2100-01-01"})
    assert answer.status_code == 200
    assert len(re.findall(rb'<tr id="audit-', answer.content)) == min(count, AUDIT_PAGE_SIZE)
    # The session and the user (with whether it is in finance, its unread notifications
    # and its roles), the filter's projects (people are typed, not listed), the page (no
    # count: pages follow a cursor), one query per kind of object on it (pool, quota,
    # project, offering).
    assert len(queries) == 8, [q["sql"][:80] for q in queries]


@pytest.mark.django_db
def test_lists_are_stored_as_lists_and_read_as_lists(f0):
    event = audit.record(
        actor=f0.alice,
        verb="lease.ssh_keys_chosen",
        obj=f0.alpha,
        source="web",
        after={"keys": ("laptop", "desk")},
    )
    event.refresh_from_db()
    assert event.after == {"keys": ["laptop", "desk"]}
    old = AuditEvent.objects.create(
        verb="lease.ssh_keys_chosen",
        object_type="portal.project",
        object_id=str(f0.alpha.pk),
        after={"keys": "['laptop', 'desk']"},  # as events were written before
        source="web",
    )
    for line in in_words([event, old]):
        assert ": laptop, desk" in str(line.sentence)
