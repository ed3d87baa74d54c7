"""The demo cloud's simulated machines (devcloud.machines): an instance the portal launches
runs the real agent its user-data carries, on simulated GPUs, and reports to the portal's
real heartbeat endpoint until the instance is terminated."""

import base64
import json
import time
from decimal import Decimal

import pytest

from devcloud import gpu_sim
from devcloud import server as localcloud
from devcloud.machines import Machines, read_user_data
from rental.fleet import instances
from rental.fleet.agent_install import cloud_config
from rental.fleet.cloud import provider_for
from rental.loans import admission
from rental.models import Image, Instance, Pool, Quota, UtilizationSample
from tests import factories


def wait_for(condition, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def user_data_of_a_lease(f0) -> tuple[Instance, str]:
    """Alice's one-GPU lease in F0: its instance and the user-data the portal launches it
    with (base64, as EC2 takes it)."""
    lease = admission.submit_reservation(
        actor=f0.alice,
        project=f0.alpha,
        gpu_model=f0.model,
        gpu_count=1,
        duration_hours=1,
        priority="experiment",
        market="on_demand",
    )
    instance = lease.instances.get()
    return instance, base64.b64encode(cloud_config(instance, ssh_keys=[]).encode()).decode()


@pytest.mark.django_db
def test_it_reads_the_agent_and_its_config_from_the_portals_user_data(settings):
    settings.PORTAL_AGENT_URL = "http://portal.example"
    f0 = factories.fixture_f0()
    f0.image.frameworks = "JupyterLab 4, PyTorch 2.5"
    f0.image.save()
    instance, user_data = user_data_of_a_lease(f0)

    plan = read_user_data(user_data)

    assert plan is not None and plan.jupyter
    assert plan.config["url"] == "http://portal.example/api/v1/agent/heartbeat"
    assert plan.config["token"].startswith(f"{instance.pk}.")
    assert plan.agent_source.startswith(b"#!/usr/bin/env python3")
    assert read_user_data(base64.b64encode(b"#cloud-config\nusers: [default]\n").decode()) is None
    assert read_user_data("not base64 at all!") is None


def test_no_agent_starts_once_every_agent_was_stopped(db, settings, tmp_path):
    """A launch answered while the demo stops (after halt_all took its list) must not
    leave an agent running past the demo."""
    settings.PORTAL_AGENT_URL = "http://127.0.0.1:9"
    f0 = factories.fixture_f0()
    _instance, user_data = user_data_of_a_lease(f0)
    machines = Machines(tmp_path / "machines")
    machines.halt_all()
    try:
        booted = machines.boot("i-late", instance_type="g6.xlarge", user_data=user_data)
        machines.resume("i-late")
        assert (booted, machines.running()) == (False, [])
    finally:
        machines.halt_all()


def test_a_training_run_rises_and_falls_and_a_notebook_goes_idle():
    training = {"id": "i-1", "workload": "training"}
    notebook = {"id": "i-2", "workload": "notebook"}
    busy = [gpu_sim.utilization(training, 0, s) for s in range(60, 3600, 10)]
    assert min(busy) >= 30 and max(busy) - min(busy) > 30  # never idle; it moves
    early = [gpu_sim.utilization(notebook, 0, s) for s in range(0, 120, 10)]
    later = [gpu_sim.utilization(notebook, 0, s) for s in range(120, 3600, 10)]
    assert min(early) >= 30
    assert max(later) < 5  # under the idle threshold (L6) from two minutes on


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_a_launched_instance_reports_through_its_agent_until_terminated(
    live_server, tmp_path, settings
):
    settings.PORTAL_AGENT_URL = live_server.url
    settings.PORTAL_AGENT_HEARTBEAT_SECONDS = 1
    settings.PORTAL_AGENT_MIN_INTERVAL_SECONDS = 0
    machines = Machines(tmp_path / "machines")
    cloud = localcloud.start(machines=machines)
    try:
        f0 = factories.fixture_f0(endpoint_url=cloud.url)
        l4 = factories.gpu_model("L4 24GB")
        l4.memory_gb, l4.bf16_tflops = 24, Decimal("121")
        l4.save()
        Pool.objects.create(gpu_model=l4, capacity=4)
        factories.offering(f0.account, l4, instance_type="g6.xlarge", on_demand="0.80")
        Quota.objects.create(
            project=f0.alpha, gpu_model=l4, guaranteed=1, ceiling=2, weight=Decimal(1)
        )
        notebook = Image.objects.create(
            name="Jupyter Lab",
            account=f0.account,
            region="us-east-1",
            image_id="ami-0a9c4e2b7d1f6c303",
            cuda_version="12.4",
            frameworks="JupyterLab 4, PyTorch 2.5",
        )
        lease = admission.submit_reservation(
            actor=f0.alice,
            project=f0.alpha,
            gpu_model=l4,
            gpu_count=1,
            duration_hours=1,
            priority="experiment",
            market="on_demand",
            image=notebook,
        )
        instance = lease.instances.get()
        instances.provision_instance(instance_id=instance.pk)
        instance.refresh_from_db()
        assert machines.running() == [instance.external_id]

        def reported() -> bool:
            instance.refresh_from_db()
            return (
                UtilizationSample.objects.filter(instance=instance).count() >= 2
                and "burn" in instance.agent_report
            )

        wait_for(reported, "the agent's first heartbeats")
        assert instance.health == Instance.Health.HEALTHY, instance.health_message
        assert instance.agent_report["health"]["gpus"][0]["name"] == "NVIDIA L4"
        sample = UtilizationSample.objects.filter(instance=instance).latest("at")
        assert len(sample.gpu_utilization) == 1
        described = json.loads(
            (tmp_path / "machines" / instance.external_id / "machine.json").read_text()
        )
        assert described["workload"] == "notebook"  # the image runs JupyterLab

        provider_for(instance).terminate([instance.external_id], region="us-east-1")
        assert machines.running() == []
    finally:
        machines.halt_all()
        cloud.stop()
