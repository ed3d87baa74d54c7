"""The API through outages (issue 18, point 1): with Redis down it serves reads and
writes, throttles let calls through, and the work the writes ask for waits in the outbox
until the broker is back; with the database down it answers 503 with Retry-After in the
API's error shape, never a server error."""

from django.db import OperationalError
from django.urls import reverse

from portal.api.throttling import PerUserRateThrottle
from rental import tasks
from rental.api.leases import LeaseViewSet
from rental.models import Instance, OutboxMessage, Reservation
from tests import factories
from tests.api.leases_world import client_for, running_lease
from tests.fixtures_outages import queued

LIST = reverse("api:lease-list")


def ask(f0) -> dict:
    return {
        "project": "alpha",
        "gpu_model": f0.model.pk,
        "gpu_count": 2,
        "duration_hours": "4",
        "purpose": "fine-tune the ranking model",
    }


def outages_logged(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "cannot be reached" in r.getMessage()]


def test_it_serves_reads_and_writes_while_redis_is_down_and_sends_the_work_once_it_is_back(
    f0, broker, cache_down, caplog, monkeypatch, django_capture_on_commit_callbacks
):
    monkeypatch.setattr(PerUserRateThrottle, "THROTTLE_RATES", {"user": "2/min"})
    broker.down()
    running = running_lease(f0)
    client = client_for(f0.alice)

    detail = reverse("api:lease-detail", kwargs={"pk": running.pk})
    reads = [client.get(LIST), client.get(detail), client.get("/api/v1/me")]
    assert [r.status_code for r in reads] == [200, 200, 200]  # 3 > 2/min: not counted
    with django_capture_on_commit_callbacks(execute=True):
        made = client.post(LIST, ask(f0), format="json")
    assert made.status_code == 201, made.content
    with django_capture_on_commit_callbacks(execute=True):
        ended = client.post(reverse("api:lease-end", kwargs={"pk": running.pk}), format="json")
    assert ended.status_code == 200 and ended.json()["status"] == "ending"

    lease = Reservation.objects.get(pk=made.json()["id"])
    assert lease.status == Reservation.Status.PROVISIONING
    launches = Instance.objects.filter(reservation=lease).order_by("pk")
    [stopping] = Instance.objects.filter(reservation=running)
    waiting = [(m.task, m.args) for m in OutboxMessage.objects.filter(sent_at__isnull=True)]
    assert waiting == [
        *[("rental.tasks.provision_instance_task", [i.pk]) for i in launches],
        ("rental.tasks.terminate_instance_task", [stopping.pk]),
        ("rental.tasks.admit_queued_task", [f0.model.pk]),
    ]
    logged = outages_logged(caplog)
    assert len(logged) == 2, logged  # one line each, however many calls failed
    assert any(line.startswith("The cache (Redis)") for line in logged)
    assert any(line.startswith("The Celery broker") for line in logged)

    broker.back()
    tasks.send_outbox_task()
    assert [(q.task, q.args) for q in queued()] == waiting
    assert not OutboxMessage.objects.filter(sent_at__isnull=True).exists()


def test_it_answers_503_with_retry_after_while_the_database_is_down(database, settings):
    settings.PORTAL_RETRY_AFTER_SECONDS = 7
    erik = factories.user("erik")
    client = client_for(erik)
    database.down()

    for answer in (
        client.get(LIST),
        client.post(LIST, {"project": "alpha", "gpu_count": 1}, format="json"),
        client.get("/api/v1/me"),
    ):
        assert answer.status_code == 503, answer.content
        assert answer["Retry-After"] == "7"
        assert answer.json() == {
            "code": "unavailable",
            "detail": "The portal cannot answer right now. Try again in a moment.",
        }

    database.back()
    assert not Reservation.objects.exists()
    assert client.get(LIST).status_code == 200


def test_a_submission_cut_before_its_answer_leaves_no_lease(f0, monkeypatch):
    """The database restarts after the lease is written and before it is read back: the
    answer is a 503, so the lease must not be there (a client asks again on a 503)."""

    def cut(self, lease, *, status=200):
        raise OperationalError("terminating connection due to administrator command")

    monkeypatch.setattr(LeaseViewSet, "_fresh", cut)
    answer = client_for(f0.alice).post(LIST, ask(f0), format="json")

    assert answer.status_code == 503 and answer["Retry-After"]
    assert not Reservation.objects.exists()
    assert not OutboxMessage.objects.exists()
