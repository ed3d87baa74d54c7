"""Own GPU servers in the admin: the private key is write-only (checked, stored
encrypted, shown only as "set", kept when left blank), every change is audited without the
key, only admins get in, an ssh account lists its hosts, and "Check now" looks at them."""

import subprocess
import tempfile
from datetime import date
from io import StringIO
from pathlib import Path

import pytest
from cryptography.fernet import Fernet
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.urls import reverse

from portal import crypto
from portal.models import AuditEvent
from rental.fleet import own_hosts
from rental.models import OwnHost, ProviderAccount
from rental.providers.base import HostGpu, HostReport
from tests import factories

pytestmark = pytest.mark.django_db


def private_key(passphrase: str = "") -> str:
    """A new ed25519 key in OpenSSH form, as ssh-keygen writes it."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "key"
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", passphrase, "-f", str(path)], check=True
        )
        return path.read_text()


@pytest.fixture
def site_admin(db):
    return get_user_model().objects.create_superuser(
        username="site-admin", email="site-admin@example.com", password=factories.PASSWORD
    )


@pytest.fixture
def admin_web(client, site_admin):
    client.force_login(site_admin)
    return client


@pytest.fixture
def ssh_account(db):
    return ProviderAccount.objects.create(name="Basement", driver="ssh", regions=["dc-1"])


def form_data(account: ProviderAccount, **overrides: str) -> dict[str, str]:
    data = {
        "account": str(account.pk),
        "name": "box-a",
        "address": "10.0.0.7",
        "port": "22",
        "username": "root",
        "private_key": "",
        "host_key": "",
        "purchase_price": "120000.00",
        "currency": "USD",
        "amortisation_months": "36",
        "in_service_since": "2026-01-01",
        "power_price_per_gpu_hour": "0.30",
        "is_active": "on",
        "_save": "Save",
    }
    data.update(overrides)
    return data


ADD_URL = "admin:rental_ownhost_add"


def test_it_stores_a_new_key_encrypted_and_never_shows_it(admin_web, ssh_account):
    key = private_key()
    response = admin_web.post(reverse(ADD_URL), form_data(ssh_account, private_key=key))
    assert response.status_code == 302
    host = OwnHost.objects.get(name="box-a")
    assert crypto.decrypt(host.private_key_encrypted)["private_key"].strip() == key.strip()
    assert host.in_service_since == date(2026, 1, 1)
    page = admin_web.get(reverse("admin:rental_ownhost_change", args=[host.pk]))
    html = page.content.decode()
    assert "●●●● set" in html
    body = key.strip().splitlines()[1]
    assert body not in html and host.private_key_encrypted[:40] not in html
    event = AuditEvent.objects.get(verb="own_host.saved", object_id=str(host.pk))
    assert event.after["private_key"] == "changed" and event.after["name"] == "box-a"
    assert body not in str(event.after)
    audit_page = admin_web.get(reverse("audit_log")).content.decode()
    assert "saved <a" in audit_page and "the own GPU server “box-a”</a>" in audit_page
    assert body not in audit_page


def test_it_keeps_the_stored_key_when_the_field_is_left_blank(admin_web, ssh_account):
    admin_web.post(reverse(ADD_URL), form_data(ssh_account, private_key=private_key()))
    host = OwnHost.objects.get(name="box-a")
    stored = host.private_key_encrypted
    response = admin_web.post(
        reverse("admin:rental_ownhost_change", args=[host.pk]),
        form_data(ssh_account, address="10.0.0.8"),
    )
    assert response.status_code == 302
    host.refresh_from_db()
    assert (host.address, host.private_key_encrypted) == ("10.0.0.8", stored)
    event = AuditEvent.objects.filter(verb="own_host.saved").latest("at")
    assert event.before == {"address": "10.0.0.7"} and event.after == {"address": "10.0.0.8"}


@pytest.mark.parametrize(
    ("key", "says"),
    [
        ("", "Enter the key the portal logs in with."),
        ("ssh-ed25519 AAAAC3Nza a-public-key", "Paste a private key in OpenSSH or PEM form"),
        (
            "-----BEGIN OPENSSH PRIVATE KEY-----\nbm90IGEga2V5\n-----END OPENSSH PRIVATE KEY-----",
            "This is not a private key the portal can read",
        ),
        (private_key("secret words"), "protected by a passphrase"),
    ],
)
def test_it_refuses_what_is_not_a_usable_private_key_on_its_field(
    admin_web, ssh_account, key, says
):
    response = admin_web.post(reverse(ADD_URL), form_data(ssh_account, private_key=key))
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert list(errors) == ["private_key"] and says in errors["private_key"][0]
    assert not OwnHost.objects.exists()
    html = response.content.decode()
    assert all(line not in html for line in key.strip().splitlines()[1:-1])  # never shown back
    assert "a-public-key" not in html


def test_it_offers_only_ssh_accounts_for_a_host(admin_web, ssh_account):
    cloud = factories.account(name="Cloud")
    response = admin_web.post(reverse(ADD_URL), form_data(cloud, private_key=private_key()))
    assert response.status_code == 200
    assert "account" in response.context["adminform"].form.errors


def test_only_admins_get_to_the_hosts(client, ssh_account):
    engineer = factories.user("eve")
    client.force_login(engineer)
    response = client.get(reverse("admin:rental_ownhost_changelist"))
    assert response.status_code == 302 and "/admin/login/" in response["Location"]


def test_an_ssh_account_lists_its_hosts_and_check_now_looks_at_them(
    admin_web, ssh_account, monkeypatch
):
    host = OwnHost(account=ssh_account, name="box-a", address="10.0.0.7")
    host.set_private_key(private_key())
    host.save()
    account_page = admin_web.get(
        reverse("admin:rental_provideraccount_change", args=[ssh_account.pk])
    )
    assert "box-a" in account_page.content.decode()

    class Driver:
        def inspect_hosts(self):
            gpu = HostGpu(index=0, name="NVIDIA L4", memory_mib=23034, uuid="GPU-0")
            return [HostReport(name="box-a", reachable=True, message="", gpus=(gpu,))]

    monkeypatch.setattr(own_hosts, "get_provider", lambda config: Driver())
    response = admin_web.post(
        reverse("admin:rental_ownhost_changelist"),
        {"action": "check_now", "_selected_action": [str(host.pk)]},
        follow=True,
    )
    assert "Checked: 1 answering, 0 not answering" in response.content.decode()
    host.refresh_from_db()
    assert host.state == OwnHost.State.OK and host.gpus[0]["name"] == "NVIDIA L4"
    page = admin_web.get(reverse("admin:rental_ownhost_change", args=[host.pk]))
    assert "GPU 0: NVIDIA L4, 23034 MiB (not in the catalog)" in page.content.decode()


def test_rotating_the_encryption_key_re_encrypts_the_servers_keys(settings, ssh_account):
    old_key, new_key = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    settings.PORTAL_ENCRYPTION_KEYS = [old_key]
    key = private_key()
    host = OwnHost(account=ssh_account, name="box-a", address="10.0.0.7")
    host.set_private_key(key)
    host.save()
    settings.PORTAL_ENCRYPTION_KEYS = [new_key, old_key]
    call_command("rotate_credentials", stdout=StringIO())
    settings.PORTAL_ENCRYPTION_KEYS = [new_key]  # the old key can go now
    host.refresh_from_db()
    assert host.config().private_key == key
