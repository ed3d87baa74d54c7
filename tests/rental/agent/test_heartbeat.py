"""The heartbeat endpoint: token, liveness, replays, throttling, validation, bulk writes."""

import json
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from portal.models import Notification
from rental.fleet import termination
from rental.models import Instance, UtilizationSample
from tests.notices import told
from tests.rental.agent.conftest import running_lease

URL = "/api/v1/agent/heartbeat"


def iso(moment):
    return moment.isoformat().replace("+00:00", "Z")


def sample(moment, *utilization, sessions=0):
    return {
        "at": iso(moment),
        "ssh_sessions": sessions,
        "gpus": [
            {
                "index": i,
                "utilization": u,
                "memory_used_mb": 1024.0,
                "memory_total_mb": 81920.0,
                "temperature_c": 41.0,
                "power_w": 70.5,
                "ecc_errors": 0,
                "throttle_reasons": "0x0000000000000000",
            }
            for i, u in enumerate(utilization)
        ],
    }


def send(client, token, body):
    return client.post(
        URL,
        data=json.dumps(body),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )


def now():
    return timezone.now().replace(microsecond=0)


def test_it_stores_the_samples_in_order(client, f0):
    run = running_lease(f0)
    start = now() - timedelta(minutes=5)
    body = {"samples": [sample(start + timedelta(minutes=m), 40.0) for m in range(3)]}

    response = send(client, run.token, body)

    assert response.status_code == 200, response.content
    assert response.json() == {"accepted": 3, "duplicates": 0}
    rows = list(UtilizationSample.objects.filter(instance=run.instance))
    assert [r.at for r in rows] == [start + timedelta(minutes=m) for m in range(3)]
    assert rows[0].gpu_utilization == [40.0]
    assert rows[0].memory_used_mb == [1024.0]
    assert rows[0].ssh_sessions == 0
    run.instance.refresh_from_db()
    assert run.instance.agent_last_sample_at == start + timedelta(minutes=2)
    assert run.instance.last_heartbeat_at is not None


def test_it_writes_a_hundred_samples_in_one_insert(client, f0):
    run = running_lease(f0)
    start = now() - timedelta(hours=3)
    body = {"samples": [sample(start + timedelta(minutes=m), 40.0, 50.0) for m in range(100)]}
    with CaptureQueriesContext(connection) as queries:
        assert send(client, run.token, body).status_code == 200
    inserts = [
        q
        for q in queries
        if q["sql"].lstrip().startswith("INSERT INTO") and "rental_utilizationsample" in q["sql"]
    ]
    assert len(inserts) == 1
    assert len(queries) <= 14
    assert UtilizationSample.objects.filter(instance=run.instance).count() == 100


@pytest.mark.parametrize(
    "token", ["", "nonsense", "999999.abc", "1.", "x" * 300, "².abc", "9" * 150 + ".abc"]
)
def test_it_refuses_unknown_tokens(client, f0, token):
    running_lease(f0)
    assert send(client, token, {"samples": []}).status_code == 401


def test_it_refuses_another_instances_token_shape(client, f0):
    run = running_lease(f0)
    forged = f"{run.instance.pk}.{'0' * 64}"
    assert send(client, forged, {"samples": []}).status_code == 401


def test_it_refuses_samples_for_an_instance_that_has_ended(client, f0):
    run = running_lease(f0)
    termination.mark_terminated(instance_id=run.instance.pk, at=now())

    response = send(client, run.token, {"samples": [sample(now(), 1.0)]})

    assert response.status_code == 401  # the token died with the instance
    assert not UtilizationSample.objects.exists()
    assert Instance.objects.get(pk=run.instance.pk).agent_token_hash == ""


def test_it_refuses_samples_for_a_stopping_instance(client, f0):
    run = running_lease(f0)
    Instance.objects.filter(pk=run.instance.pk).update(state=Instance.State.STOPPING)
    response = send(client, run.token, {"samples": [sample(now(), 1.0)]})
    assert (response.status_code, response.json()["code"]) == (409, "not_live")
    assert not UtilizationSample.objects.exists()


def test_it_refuses_a_replay_and_ignores_duplicates(client, f0):
    run = running_lease(f0)
    first = now() - timedelta(minutes=2)
    body = {"samples": [sample(first, 10.0), sample(first + timedelta(minutes=1), 10.0)]}
    assert send(client, run.token, body).status_code == 200

    replay = send(client, run.token, body)
    assert (replay.status_code, replay.json()["code"]) == (409, "replay")

    body["samples"].append(sample(first + timedelta(minutes=2), 10.0))
    retried = send(client, run.token, body)
    assert retried.json() == {"accepted": 1, "duplicates": 2}
    assert UtilizationSample.objects.count() == 3


def test_it_throttles_each_instance(client, f0, settings):
    settings.PORTAL_AGENT_MIN_INTERVAL_SECONDS = 10
    run, other = running_lease(f0), running_lease(f0)
    assert send(client, run.token, {"samples": [sample(now(), 1.0)]}).status_code == 200
    throttled = send(client, run.token, {"samples": [sample(now() + timedelta(seconds=1), 1.0)]})
    assert throttled.status_code == 429
    assert throttled["Retry-After"] == "10"
    assert send(client, other.token, {"samples": [sample(now(), 1.0)]}).status_code == 200


GOOD = {"at": None, "gpus": [{"index": 0, "utilization": 1.0, "memory_used_mb": 1.0}]}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ([], "body"),
        ({"samples": "many"}, "samples"),
        ({"samples": [7]}, "samples[0]"),
        ({"samples": [{**GOOD, "at": "yesterday"}]}, "samples[0].at"),
        ({"samples": [{**GOOD, "at": "2026-04-06T10:00:00"}]}, "samples[0].at"),
        ({"samples": [{**GOOD, "at": "1999-01-01T00:00:00Z"}]}, "samples[0].at"),
        ({"samples": [{**GOOD, "gpus": [{"index": 0, "utilization": 101}]}]}, "utilization"),
        ({"samples": [{**GOOD, "gpus": [{"index": 0, "utilization": "high"}]}]}, "utilization"),
        ({"samples": [{**GOOD, "gpus": [{"index": 0, "utilization": True}]}]}, "utilization"),
        ({"samples": [{**GOOD, "gpus": [{"utilization": 5, "memory_used_mb": -1}]}]}, "index"),
        ({"samples": [{**GOOD, "gpus": [{**GOOD["gpus"][0], "memory_used_mb": -1}]}]}, "memory"),
        ({"samples": [{**GOOD, "gpus": [{**GOOD["gpus"][0], "power_w": "hot"}]}]}, "power_w"),
        ({"samples": [{**GOOD, "gpus": [GOOD["gpus"][0]] * 17}]}, "gpus"),
        ({"samples": [{**GOOD, "ssh_sessions": -1}]}, "ssh_sessions"),
        ({"samples": [{**GOOD, "ssh_sessions": 1.5}]}, "ssh_sessions"),
        ({"samples": [{**GOOD, "gpus": [{**GOOD["gpus"][0], "index": 10**400}]}]}, "index"),
        ({"samples": [{**GOOD, "gpus": [{**GOOD["gpus"][0], "power_w": 10**400}]}]}, "power_w"),
        ({"health": {"gpus": [{"index": 0, "name": 5}]}}, "health.gpus[0].name"),
        # Words shown on the lease's page: no bidi control, NUL or other control character.
        ({"health": {"gpus": [{"index": 0, "name": "A100\u202e"}]}}, "health.gpus[0].name"),
        ({"health": {"driver_version": "550\x00"}}, "health.driver_version"),
        ({"samples": [{**GOOD, "error": "nvml\x07"}]}, "samples[0].error"),
        ({"health": {"frameworks": {"jax": {}}}}, "health.frameworks"),
        ({"burn": {"tflops": ["fast"]}}, "burn.tflops[0]"),
        ({"spot_notice": {"action": "explode"}}, "spot_notice.action"),
        ({"spot_notice": "soon"}, "spot_notice"),
    ],
)
def test_it_answers_every_bad_field_with_a_400_naming_it(client, f0, body, field):
    run = running_lease(f0)
    if isinstance(body, dict):
        body = json.loads(json.dumps(body).replace("null", json.dumps(iso(now()))))
    response = send(client, run.token, body)
    assert response.status_code == 400, response.content
    assert field in response.json()["field"]
    assert not UtilizationSample.objects.exists()


def test_it_refuses_samples_out_of_order(client, f0):
    run = running_lease(f0)
    moment = now()
    response = send(client, run.token, {"samples": [sample(moment, 1.0), sample(moment, 2.0)]})
    assert (response.status_code, response.json()["field"]) == (400, "samples[1].at")


@pytest.mark.parametrize(
    "raw",
    [
        b"{",
        b"\xff\xfe",
        b"null",
        b'"text"',
        b"[1, 2]",
        b"[" * 100_000 + b"]" * 100_000,
        b'{"samples": [{"at": NaN}]}',
        b'{"samples": [{"at": "2026-01-01T00:00:00Z", "gpus": [{"utilization": Infinity}]}]}',
    ],
)
def test_it_answers_garbage_with_a_400(client, f0, raw):
    run = running_lease(f0)
    response = client.post(
        URL, data=raw, content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {run.token}"
    )
    assert response.status_code == 400


def test_it_only_takes_posts(client, f0):
    assert client.get(URL).status_code == 405


HEALTH = {
    "gpus": [{"index": 0, "name": "NVIDIA A100-SXM4-80GB", "memory_total_mb": 81920}],
    "driver_version": "550.54.15",
    "cuda_version": "12.4",
    "frameworks": {"torch": {"installed": True, "cuda": True, "version": "2.5.1"}},
}


def test_it_marks_a_matching_instance_healthy(client, f0):
    run = running_lease(f0)
    assert send(client, run.token, {"health": HEALTH}).status_code == 200
    assert send(client, run.token, {"burn": {"tflops": [250.0], "dtype": "bfloat16"}}).json()
    run.instance.refresh_from_db()
    assert run.instance.health == Instance.Health.HEALTHY
    assert run.instance.agent_report["burn"]["tflops"] == [250.0]


@pytest.mark.parametrize(
    ("health", "burn", "reason"),
    [
        ({**HEALTH, "gpus": [{"index": 0, "name": "NVIDIA L4"}]}, None, "The card is NVIDIA L4"),
        ({**HEALTH, "gpus": []}, None, "0 GPUs found, 1 expected"),
        ({**HEALTH, "cuda_version": "12.2"}, None, "the image needs CUDA 12.4"),
        (
            {**HEALTH, "frameworks": {"torch": {"installed": True, "cuda": False}}},
            None,
            "torch does not see the GPU",
        ),
        (HEALTH, {"tflops": [150.0]}, "reached 150.0 TFLOPS, under 50 % of the rated 312.0"),
    ],
)
def test_it_marks_an_instance_that_is_not_what_it_claims_unhealthy(
    client, f0, health, burn, reason
):
    run = running_lease(f0)
    body = {"health": health, **({"burn": burn} if burn else {})}
    assert send(client, run.token, body).status_code == 200
    run.instance.refresh_from_db()
    assert run.instance.health == Instance.Health.UNHEALTHY
    assert reason in str(run.instance.health_message)
    people = set(Notification.objects.values_list("user__username", flat=True))
    assert people == {"alice", "root"}


def test_it_ignores_a_spot_notice_from_an_on_demand_instance(client, f0):
    run = running_lease(f0, market="on_demand")
    notice = {"action": "terminate", "time": iso(now() + timedelta(minutes=2))}
    assert send(client, run.token, {"spot_notice": notice}).status_code == 200
    run.lease.refresh_from_db()
    assert run.lease.status == "active"


def test_it_asks_again_for_the_remaining_time_after_a_spot_interruption(client, f0):
    from rental.models import Reservation, UsageRecord

    run = running_lease(f0, market="spot", priority="experiment")
    Reservation.objects.filter(pk=run.lease.pk).update(requeue_on_preemption=True)
    at = now() + timedelta(seconds=90)

    response = send(client, run.token, {"spot_notice": {"action": "terminate", "time": iso(at)}})

    assert response.status_code == 200
    old = Reservation.objects.get(pk=run.lease.pk)
    assert (old.status, old.end_reason, old.ended_at) == ("ending", "spot_interrupted", at)
    assert UsageRecord.objects.get(instance=run.instance).end == at
    retry = Reservation.objects.exclude(pk=old.pk).get()
    assert (retry.market, retry.gpu_count, retry.requeue_on_preemption) == ("spot", 1, True)
    # The lease had 5 hours left: the new one asks for them (to the hundredth of an hour).
    assert abs((retry.end - retry.start) - timedelta(hours=5)) <= timedelta(seconds=36)
    [notice] = told(f0.alice, starts="Spot")
    body = notice.body
    assert f"Lease #{retry.pk} asks for the remaining time again." in body


def test_it_withdraws_the_idle_warning_once_the_gpus_are_busy_again(client, f0):
    run = running_lease(f0)
    start = now() - timedelta(minutes=30)
    idle = [sample(start + timedelta(minutes=m), 1.0) for m in range(20)]
    assert send(client, run.token, {"samples": idle}).json()["accepted"] == 20
    warned = Instance.objects.get(pk=run.instance.pk).idle_warned_at
    assert warned == start + timedelta(minutes=19)

    busy = sample(start + timedelta(minutes=21), 75.0)
    assert send(client, run.token, {"samples": [busy]}).status_code == 200

    assert Instance.objects.get(pk=run.instance.pk).idle_warned_at is None
