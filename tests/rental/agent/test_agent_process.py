"""The real agent in a subprocess, with a fake nvidia-smi on the PATH and a fake metadata
service, talking HTTP to a live test server."""

import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.conf import settings

from rental.models import Instance, Reservation, UsageRecord, UtilizationSample
from tests import factories
from tests.notices import told
from tests.rental.agent.conftest import running_lease
from tests.rental.agent.fakes import FakeMachine, Gate, Metadata

AGENT = Path(settings.BASE_DIR) / "agent" / "gpu_portal_agent.py"


@pytest.fixture
def f0t(transactional_db):
    return factories.fixture_f0()


@pytest.fixture
def machine(tmp_path):
    return FakeMachine(tmp_path)


@pytest.fixture
def metadata():
    server = Metadata()
    yield server
    server.stop()


def agent(machine, url, token, *extra, metadata=None):
    return subprocess.Popen(
        [
            sys.executable,
            str(AGENT),
            "--url",
            url,
            "--token",
            token,
            "--python",
            machine.python,
            "--metadata-url",
            metadata.url if metadata else "",
            "--timeout",
            "5",
            *extra,
        ],
        env=machine.env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def heartbeat_url(live_server):
    return f"{live_server.url}/api/v1/agent/heartbeat"


def finish(process, timeout=60):
    _out, err = process.communicate(timeout=timeout)
    assert process.returncode == 0, err
    return err


def wait_for(condition, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)
    raise AssertionError("timed out")


def test_it_reports_a_healthy_card_and_its_samples(live_server, f0t, machine):
    run = running_lease(f0t)
    machine.set(gpus=[{"name": "NVIDIA A100-SXM4-80GB", "util": 87, "mem": 40960}])
    machine.burn = {"tflops": [281.4], "dtype": "bfloat16", "seconds": 1}

    finish(agent(machine, heartbeat_url(live_server), run.token, "--once", "--burn-seconds", "1"))

    [row] = UtilizationSample.objects.filter(instance=run.instance)
    assert (row.gpu_utilization, row.memory_used_mb) == ([87.0], [40960.0])
    instance = Instance.objects.get(pk=run.instance.pk)
    assert instance.health == Instance.Health.HEALTHY, str(instance.health_message)
    report = instance.agent_report
    assert report["health"]["driver_version"] == "550.54.15"
    assert report["health"]["cuda_version"] == "12.4"
    assert report["health"]["frameworks"]["torch"]["cuda"] is True
    assert report["burn"]["tflops"] == [281.4]
    assert report["gpus"][0]["power_w"] == 71.25
    assert report["gpus"][0]["throttle_reasons"] == "0x0000000000000000"


def test_it_reads_a_driver_that_renamed_the_throttle_reasons(live_server, f0t, machine):
    run = running_lease(f0t)
    machine.set(gpus=[{"name": "NVIDIA A100-SXM4-80GB", "util": 33}], event_reasons=True)

    finish(agent(machine, heartbeat_url(live_server), run.token, "--once", "--burn-seconds", "0"))

    [row] = UtilizationSample.objects.filter(instance=run.instance)
    assert row.gpu_utilization == [33.0]
    assert Instance.objects.get(pk=run.instance.pk).health == Instance.Health.HEALTHY


def test_it_marks_a_card_that_does_not_match_unhealthy(live_server, f0t, machine):
    run = running_lease(f0t, gpus=1)
    machine.set(gpus=[{"name": "NVIDIA L4"}, {"name": "NVIDIA L4"}])

    finish(agent(machine, heartbeat_url(live_server), run.token, "--once", "--burn-seconds", "0"))

    instance = Instance.objects.get(pk=run.instance.pk)
    assert instance.health == Instance.Health.UNHEALTHY
    assert "2 GPUs found, 1 expected." in str(instance.health_message)
    assert "The card is NVIDIA L4, not A100 80GB." in str(instance.health_message)
    assert told(f0t.admin, starts="Unhealthy")


def test_it_marks_a_burn_below_the_fraction_unhealthy(live_server, f0t, machine):
    run = running_lease(f0t)
    machine.burn = {"tflops": [120.5], "dtype": "bfloat16", "seconds": 1}

    finish(agent(machine, heartbeat_url(live_server), run.token, "--once", "--burn-seconds", "1"))

    instance = Instance.objects.get(pk=run.instance.pk)
    assert instance.health == Instance.Health.UNHEALTHY
    assert "120.5 TFLOPS, under 50 % of the rated 312.0" in str(instance.health_message)


def test_it_marks_an_old_driver_unhealthy(live_server, f0t, machine):
    run = running_lease(f0t)  # the image needs CUDA 12.4
    machine.set(gpus=[{"name": "NVIDIA A100 80GB PCIe"}], driver="535.104.05", cuda="12.2")

    finish(agent(machine, heartbeat_url(live_server), run.token, "--once", "--burn-seconds", "0"))

    instance = Instance.objects.get(pk=run.instance.pk)
    assert instance.health == Instance.Health.UNHEALTHY
    assert str(instance.health_message) == (
        "Driver 535.104.05 supports CUDA up to 12.2; the image needs CUDA 12.4."
    )


@pytest.mark.parametrize("mode", ["garbage", "fail"])
def test_it_sends_a_missing_sample_when_nvidia_smi_is_unreadable(live_server, f0t, machine, mode):
    run = running_lease(f0t)
    machine.set(mode=mode)

    err = finish(agent(machine, heartbeat_url(live_server), run.token, "--once"))

    [row] = UtilizationSample.objects.filter(instance=run.instance)
    assert row.gpu_utilization == []  # neither idle nor active (L6)
    assert "rejected" not in err
    instance = Instance.objects.get(pk=run.instance.pk)
    assert instance.health == Instance.Health.UNHEALTHY
    assert "0 GPUs found" in str(instance.health_message)


def test_it_buffers_while_the_portal_is_down_and_sends_in_order(live_server, f0t, machine):
    run = running_lease(f0t)
    gate = Gate(heartbeat_url(live_server))
    gate.down = True
    process = agent(machine, gate.url, run.token, "--interval", "1", "--burn-seconds", "0")
    try:
        wait_for(lambda: gate.refused >= 4)
        assert not UtilizationSample.objects.exists()
        gate.down = False
        wait_for(lambda: len(gate.forwarded) >= 2)
    finally:
        process.terminate()
        process.communicate(timeout=10)
        gate.stop()
    refused = gate.refused
    # Every sample taken while the portal was down arrived, in the first answered heartbeat.
    assert gate.forwarded[0] == refused + 1
    times = list(
        UtilizationSample.objects.filter(instance=run.instance).values_list("at", flat=True)
    )
    assert times == sorted(times) and len(set(times)) == len(times)
    assert len(times) >= refused + 2


def test_it_keeps_a_bounded_buffer(live_server, f0t, machine):
    run = running_lease(f0t)
    gate = Gate(heartbeat_url(live_server))
    gate.down = True
    process = agent(
        machine, gate.url, run.token, "--interval", "1", "--burn-seconds", "0", "--buffer", "3"
    )
    try:
        wait_for(lambda: gate.refused >= 5)
        gate.down = False
        wait_for(lambda: len(gate.forwarded) >= 1)
    finally:
        process.terminate()
        process.communicate(timeout=10)
        gate.stop()
    assert gate.forwarded[0] == 3  # the oldest samples made room for the newest


def test_it_relays_a_spot_interruption_notice(live_server, f0t, machine, metadata):
    run = running_lease(f0t, market="spot", priority="experiment")
    notice_time = Instance.objects.get(pk=run.instance.pk).running_at + timedelta(
        hours=3, minutes=2
    )
    metadata.notice = {"action": "terminate", "time": notice_time.strftime("%Y-%m-%dT%H:%M:%SZ")}

    finish(
        agent(
            machine,
            heartbeat_url(live_server),
            run.token,
            "--once",
            "--burn-seconds",
            "0",
            metadata=metadata,
        )
    )

    lease = Reservation.objects.get(pk=run.lease.pk)
    assert (lease.status, lease.end_reason) == (Reservation.Status.ENDING, "spot_interrupted")
    instance = Instance.objects.get(pk=run.instance.pk)
    assert (instance.state, instance.termination_reason) == (
        Instance.State.STOPPING,
        "spot_interrupted",
    )
    usage = UsageRecord.objects.get(instance=instance)
    assert usage.end is not None and usage.end_reason == "spot_interrupted"
    assert usage.end <= notice_time
    assert told(f0t.alice, starts="Spot")


def test_it_stops_when_the_instance_has_ended(live_server, f0t, machine):
    run = running_lease(f0t)
    Instance.objects.filter(pk=run.instance.pk).update(state=Instance.State.STOPPING)
    process = agent(
        machine, heartbeat_url(live_server), run.token, "--interval", "1", "--burn-seconds", "0"
    )
    err = finish(process, timeout=30)  # exits by itself
    assert "refuses this instance (409 not_live)" in err
