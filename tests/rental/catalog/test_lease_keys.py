"""Per-lease SSH key choice: the form lists the engineer's keys (all by default), only
the chosen ones reach the user-data, and another user's key is a field error."""

import base64
import struct

import pytest
from django.urls import reverse

from rental.fleet.instances import launch_spec
from rental.models import Reservation, SshKey


def _string(value: bytes) -> bytes:
    return struct.pack(">I", len(value)) + value


def ed25519(seed: bytes, comment: str) -> str:
    blob = _string(b"ssh-ed25519") + _string((seed * 32)[:32])
    return f"ssh-ed25519 {base64.b64encode(blob).decode()} {comment}"


@pytest.fixture
def keys(f0):
    return {
        "laptop": SshKey.objects.create(
            user=f0.alice, name="laptop", public_key=ed25519(b"a", "l")
        ),
        "desktop": SshKey.objects.create(
            user=f0.alice, name="desktop", public_key=ed25519(b"b", "d")
        ),
        "bob": SshKey.objects.create(user=f0.bob, name="bob's", public_key=ed25519(b"c", "b")),
    }


def form(f0, **changes):
    return {
        "project": f0.alpha.pk,
        "gpu_model": f0.model.pk,
        "gpu_count": "1",
        "duration_hours": "2",
        "priority": "experiment",
        "market": "on_demand",
        "start_mode": "now",
        "allow_other_instance_types": "on",
        **changes,
    }


def test_it_offers_all_of_the_engineers_keys_checked_by_default(f0, keys, client):
    client.force_login(f0.alice)
    page = client.get(reverse("rental:lease_new")).content.decode()
    for name in ("laptop", "desktop"):
        key = keys[name]
        assert f'value="{key.pk}"' in page
        assert key.fingerprint in page
    # Not by its id: another field's option can carry the same number.
    assert keys["bob"].fingerprint not in page
    assert page.count('name="ssh_keys"') == 2
    assert page.count("checked") >= 2


def test_it_installs_only_the_chosen_keys(f0, keys, client):
    client.force_login(f0.alice)
    response = client.post(reverse("rental:lease_new"), form(f0, ssh_keys=[keys["laptop"].pk]))
    assert response.status_code == 302
    lease = Reservation.objects.get()
    assert list(lease.ssh_keys.all()) == [keys["laptop"]]
    user_data = launch_spec(lease.instances.get()).user_data
    assert keys["laptop"].public_key in user_data
    assert keys["desktop"].public_key not in user_data
    assert keys["bob"].public_key not in user_data
    page = client.get(lease.get_absolute_url()).content.decode()
    assert '<dd id="lease-ssh-keys">laptop</dd>' in page


def test_it_refuses_another_users_key_on_its_field(f0, keys, client):
    client.force_login(f0.alice)
    response = client.post(
        reverse("rental:lease_new"), form(f0, ssh_keys=[keys["laptop"].pk, keys["bob"].pk])
    )
    assert response.status_code == 400
    assert 'id="error-ssh_keys"' in response.content.decode()
    assert "Only your own SSH keys" in response.content.decode()
    assert not Reservation.objects.exists()


def test_it_asks_for_at_least_one_key(f0, keys, client):
    client.force_login(f0.alice)
    response = client.post(reverse("rental:lease_new"), form(f0))
    assert response.status_code == 400
    assert 'id="error-ssh_keys"' in response.content.decode()
    assert not Reservation.objects.exists()


def test_it_refuses_a_foreign_key_in_the_service_too(f0, keys):
    from portal.errors import InvalidInput
    from rental.loans.lease_request import submit_lease

    with pytest.raises(InvalidInput) as error:
        submit_lease(
            actor=f0.alice,
            ssh_keys=[keys["bob"]],
            project=f0.alpha,
            gpu_model=f0.model,
            gpu_count=1,
            duration_hours=2,
            priority="experiment",
            market="on_demand",
        )
    assert error.value.field == "ssh_keys"
    assert not Reservation.objects.exists()


def test_it_installs_all_keys_of_a_lease_without_a_choice(f0, keys, t0):
    from rental.loans import admission

    lease = admission.submit_reservation(
        actor=f0.alice,
        project=f0.alpha,
        gpu_model=f0.model,
        gpu_count=1,
        duration_hours=2,
        priority="experiment",
        market="on_demand",
        now=t0,
    )
    user_data = launch_spec(lease.instances.get()).user_data
    assert keys["laptop"].public_key in user_data and keys["desktop"].public_key in user_data
    assert keys["bob"].public_key not in user_data
