"""portal.batch compiles a model's INSERT once per process and reuses its text: every
later row must be written exactly as ``save()`` would write it, and a row whose value is
an expression must not be squeezed into the cached text."""

from datetime import UTC, datetime

import pytest
from django.db.models.functions import Now

from portal import audit
from portal.batch import draw_ids, insert_together, prepare_insert
from portal.models import AuditEvent, Project
from tests import factories

pytestmark = pytest.mark.django_db


def columns(event: AuditEvent) -> dict:
    return {field.attname: getattr(event, field.attname) for field in AuditEvent._meta.fields}


def event(pk: int, where: Project, **changes) -> AuditEvent:
    values = {
        "actor": factories.user(f"writer{pk}"),
        "verb": "lease.submitted",
        "obj": where,
        "project": where,
        "source": "api",
        "after": {"gpus": pk},
        "at": datetime(2026, 4, 6, 10, pk % 60, tzinfo=UTC),
    }
    return audit.build(pk=pk, **(values | changes))


def test_every_row_is_written_as_save_would_write_it():
    alpha, beta = factories.project("alpha"), factories.project("beta")
    ids = draw_ids((AuditEvent, 3))[0]
    rows = [
        event(ids[0], alpha),
        event(ids[1], beta, verb="lease.ended", before={"status": "active"}, after={}),
        event(ids[2], alpha, actor=None, project=None, source="worker"),
    ]
    for row in rows:  # one statement each: the first compiles, the others reuse its text
        insert_together([row])
    for row in rows:
        assert columns(AuditEvent.objects.get(pk=row.pk)) == columns(row)


def test_a_row_with_an_expression_is_not_put_in_the_cached_text():
    alpha = factories.project("alpha")
    first, second = draw_ids((AuditEvent, 2))[0]
    insert_together([event(first, alpha)])  # the text is cached now
    row = event(second, alpha, at=Now())
    assert prepare_insert([row]) is None  # saved one by one instead
    insert_together([row])
    assert AuditEvent.objects.get(pk=second).at.year >= 2026
