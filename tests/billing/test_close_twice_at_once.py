"""Two beats, or a beat and a redelivered task, closing the same month at the same moment
(P1, issue 18's "beat's work done once"): one closes every statement, the other finds
them closed and closes none; neither fails, and nothing is written twice."""

import threading
from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import connections

from billing import services
from billing.models import Statement, StatementLine
from portal.models import AuditEvent
from rental.models import Pool
from tests import factories
from tests.billing.helpers import at, lease, run

pytestmark = pytest.mark.django_db(transaction=True)

APRIL = at(2026, 4, 1)
CLOSE = at(2026, 5, 3)


def test_two_closes_at_once_close_each_statement_once():
    f0 = factories.fixture_f0()
    Pool.objects.filter(pk=f0.pool.pk).update(
        committed_gpus=6, committed_monthly_cost=Decimal("5400.00")
    )
    run(lease(f0, f0.alpha, tier="burst"), start=APRIL, hours=200)
    run(lease(f0, f0.beta, tier="guaranteed", gpus=4), start=APRIL, hours=500, gpus=4)
    start = threading.Barrier(2)
    closed: list[int] = []
    failed: list[BaseException] = []

    def close() -> None:
        try:
            start.wait(timeout=30)
            closed.append(services.close_period(period=APRIL, now=CLOSE + timedelta(hours=1)))
        except BaseException as error:  # reported by the test, in this thread's place
            failed.append(error)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=close) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not failed, failed
    statements = Statement.objects.count()
    assert sorted(closed) == [0, statements]
    assert not Statement.objects.filter(status=Statement.Status.DRAFT).exists()
    assert AuditEvent.objects.filter(verb="statement.close").count() == statements
    lines = StatementLine.objects.count()
    assert services.close_period(period=APRIL, now=CLOSE + timedelta(hours=2)) == 0
    assert StatementLine.objects.count() == lines
