"""The lease page's connection details, health, idle warning and chart; the SSH key page;
what the launch installs (user-data)."""

import base64
import gzip
import re
import struct
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from rental.fleet import instances as instance_services
from rental.fleet.agent_install import agent_token, lease_token, token_hash
from rental.models import Instance, SshKey, UtilizationSample
from tests import factories
from tests.rental.agent.conftest import running_lease


def _string(data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + data


def ed25519_key(comment="alice@laptop", seed=b"k"):
    blob = _string(b"ssh-ed25519") + _string((seed * 32)[:32])
    return f"ssh-ed25519 {base64.b64encode(blob).decode()} {comment}"


def rsa_key(bits):
    modulus = (1 << (bits - 1)) | 1
    n = modulus.to_bytes((bits + 7) // 8 + 1, "big")
    blob = _string(b"ssh-rsa") + _string(b"\x01\x00\x01") + _string(n)
    return f"ssh-rsa {base64.b64encode(blob).decode()} rsa@host"


def login(client, user):
    client.login(username=user.get_username(), password=factories.PASSWORD)


def test_it_shows_the_ssh_jupyter_and_tensorboard_commands(client, f0):
    f0.image.frameworks = "PyTorch 2.5, JupyterLab 4.2, TensorBoard 2.17"
    f0.image.save()
    run = running_lease(f0)
    login(client, f0.alice)

    page = client.get(run.lease.get_absolute_url()).content.decode()

    assert "ssh ubuntu@203.0.113.10" in page
    assert "ssh -N -L 8888:localhost:8888 ubuntu@203.0.113.10" in page
    assert f"http://localhost:8888/lab?token={lease_token(run.lease)}" in page
    assert "ssh -N -L 6006:localhost:6006 ubuntu@203.0.113.10" in page


def test_it_offers_no_jupyter_for_an_image_without_it(client, f0):
    run = running_lease(f0)  # PyTorch 2.5 only
    login(client, f0.alice)
    page = client.get(run.lease.get_absolute_url()).content.decode()
    assert "ssh ubuntu@203.0.113.10" in page
    assert "8888" not in page


def test_it_shows_why_an_instance_is_unhealthy(client, f0):
    run = running_lease(f0)
    Instance.objects.filter(pk=run.instance.pk).update(
        health="unhealthy", health_message="The card is NVIDIA L4, not A100 80GB."
    )
    login(client, f0.alice)
    page = client.get(run.lease.get_absolute_url()).content.decode()
    assert "The card is NVIDIA L4, not A100 80GB." in page


def test_it_embeds_the_utilization_chart_data(client, f0):
    run = running_lease(f0, gpus=2)
    start = timezone.now().replace(microsecond=0) - timedelta(minutes=3)
    UtilizationSample.objects.bulk_create(
        UtilizationSample(
            instance=run.instance,
            at=start + timedelta(minutes=m),
            gpu_utilization=[10.0 * m, 50.0],
            memory_used_mb=[2048.0, 1024.0],
        )
        for m in range(3)
    )
    Instance.objects.filter(pk=run.instance.pk).update(
        agent_last_sample_at=start + timedelta(minutes=2)
    )
    login(client, f0.alice)
    response = client.get(run.lease.get_absolute_url())
    page = response.content.decode()
    assert "vendor/uplot/uPlot.iife.min.js" in page
    assert "cdn" not in page.lower()
    data = re.search(r'id="utilization-data-\d+" type="application/json">(.*?)</script>', page)
    assert data is not None
    assert '"utilization": [[0.0, 10.0, 20.0], [50.0, 50.0, 50.0]]' in data.group(1)
    assert '"memory_gb": [[2.0, 2.0, 2.0], [1.0, 1.0, 1.0]]' in data.group(1)


def test_it_lets_the_requester_answer_an_idle_warning_once(client, f0):
    run = running_lease(f0)
    warned = timezone.now().replace(microsecond=0) - timedelta(minutes=1)
    Instance.objects.filter(pk=run.instance.pk).update(idle_warned_at=warned)
    login(client, f0.alice)
    assert "still-using-" in client.get(run.lease.get_absolute_url()).content.decode()
    url = reverse("rental:still_using", args=[run.lease.pk, run.instance.pk])

    response = client.post(url, follow=True)

    assert "starts again from now" in response.content.decode()
    instance = Instance.objects.get(pk=run.instance.pk)
    assert instance.idle_reset_at is not None and instance.idle_reset_at >= warned
    again = client.post(url, follow=True).content.decode()
    assert "There is no idle warning to answer." in again
    assert "still-using-" not in again


def test_it_refuses_the_still_using_click_to_others(client, f0):
    run = running_lease(f0)
    Instance.objects.filter(pk=run.instance.pk).update(idle_warned_at=timezone.now())
    url = reverse("rental:still_using", args=[run.lease.pk, run.instance.pk])
    login(client, f0.outsider)
    assert client.post(url).status_code == 404
    login(client, f0.alpha_manager)
    assert "Only the engineer" in client.post(url, follow=True).content.decode()
    assert Instance.objects.get(pk=run.instance.pk).idle_reset_at is None


def test_it_adds_a_key_and_shows_its_fingerprint(client, f0):
    login(client, f0.alice)
    response = client.post(
        reverse("rental:ssh_keys"), {"name": "laptop", "public_key": ed25519_key()}, follow=True
    )
    key = SshKey.objects.get(user=f0.alice)
    page = response.content.decode()
    assert key.fingerprint.startswith("SHA256:")
    assert key.fingerprint in page
    assert "ssh-ed25519" in page


@pytest.mark.parametrize(
    ("public_key", "message"),
    [
        (rsa_key(1024), "at least 2048 bits; this one has 1024"),
        ("-----BEGIN OPENSSH PRIVATE KEY-----\nb3Blbn\n", "That is a private key"),
        ("ssh-ed25519 not-base64!", "base64 part is not valid"),
        ("ssh-dss AAAAB3NzaC1kc3M= old", "Paste an OpenSSH public key"),
        (ed25519_key().replace("ssh-ed25519 ", "ssh-rsa ", 1), "does not match its type"),
    ],
)
def test_it_refuses_keys_that_are_not_good_public_keys(client, f0, public_key, message):
    login(client, f0.alice)
    response = client.post(reverse("rental:ssh_keys"), {"name": "k", "public_key": public_key})
    assert response.status_code == 200
    assert message in response.content.decode()
    assert not SshKey.objects.exists()


def test_it_takes_a_2048_bit_rsa_key_and_refuses_a_duplicate(client, f0):
    login(client, f0.alice)
    url = reverse("rental:ssh_keys")
    client.post(url, {"name": "rsa", "public_key": rsa_key(2048)})
    page = client.get(url).content.decode()
    assert "2048 bits" in page
    again = client.post(url, {"name": "rsa2", "public_key": rsa_key(2048)}).content.decode()
    assert "You have added this key already." in again
    assert SshKey.objects.count() == 1


def test_it_lets_only_the_owner_remove_a_key(client, f0):
    key = SshKey.objects.create(user=f0.alice, name="laptop", public_key=ed25519_key())
    url = reverse("rental:ssh_key_delete", args=[key.pk])
    login(client, f0.bob)
    assert client.post(url).status_code == 404
    login(client, f0.alice)
    client.post(url)
    assert not SshKey.objects.exists()


def test_it_installs_the_keys_and_the_agent_with_its_token_at_launch(f0):
    f0.image.frameworks = "PyTorch 2.5, JupyterLab 4.2"
    f0.image.save()
    SshKey.objects.create(user=f0.alice, name="laptop", public_key=ed25519_key())
    run = running_lease(f0)
    instance = Instance.objects.get(pk=run.instance.pk)

    user_data = instance_services.launch_spec(instance).user_data

    assert user_data.startswith("#cloud-config\n")
    assert f"      - {ed25519_key()}" in user_data
    token = agent_token(instance)
    assert token in user_data
    assert Instance.objects.get(pk=instance.pk).agent_token_hash == token_hash(token)
    assert "gpu-portal-agent.service" in user_data
    assert f"--ServerApp.token={lease_token(run.lease)}" in user_data
    encoded = re.search(r"encoding: gz\+b64\n    content: (\S+)", user_data).group(1)
    assert b"def parse_query" in gzip.decompress(base64.b64decode(encoded))
    assert len(user_data.encode()) < 16 * 1024  # EC2's user-data limit
    # A retried launch installs the same token (the idempotent launch finds the first).
    assert token in instance_services.launch_spec(instance).user_data
