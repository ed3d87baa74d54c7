"""Provider accounts in the admin: credentials are write-only, encrypted, validated against
the (local) cloud, and never shown back. Every admin page's rendering is held in
test_admin_pages.py."""

import json
from io import StringIO

import pytest
from cryptography.fernet import Fernet
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.urls import reverse

from devcloud.server import LocalCloud
from portal import crypto
from portal.messaging.models import Channel
from portal.models import AuditEvent
from portal.sso.models import IdentityProvider
from rental.models import (
    ProviderAccount,
)
from tests import factories

GOOD_KEY = "AKIDADMINGOOD0001"
SECRET = "wJalrXUtnFEMI-admin-secret-never-shown"
AUTH_FAILURE = "AWS was not able to validate the provided access credentials"

pytestmark = pytest.mark.django_db


@pytest.fixture
def site_admin(db):
    return get_user_model().objects.create_superuser(
        username="site-admin", email="site-admin@example.com", password=factories.PASSWORD
    )


@pytest.fixture
def admin_web(client, site_admin):
    client.force_login(site_admin)
    return client


def add_url() -> str:
    return reverse("admin:rental_provideraccount_add")


def change_url(account: ProviderAccount) -> str:
    return reverse("admin:rental_provideraccount_change", args=[account.pk])


def changelist_url() -> str:
    return reverse("admin:rental_provideraccount_changelist")


def form_data(account: ProviderAccount | None = None, **overrides: str) -> dict[str, str]:
    data = {
        "name": account.name if account else "Main AWS",
        "driver": "aws",
        "regions": ", ".join(account.regions) if account else "us-east-1",
        "endpoint_url": account.endpoint_url if account else "",
        "is_active": "on",
        "access_key_id": "",
        "secret_access_key": "",
        "session_token": "",
        "_save": "Save",
    }
    data.update(overrides)
    return data


def assert_no_secret(html: str, account: ProviderAccount) -> None:
    assert SECRET not in html
    assert GOOD_KEY not in html
    assert account.credentials_encrypted not in html
    assert account.credentials_encrypted[:40] not in html


@pytest.mark.django_db(transaction=True)
def test_it_stores_new_credentials_encrypted_and_never_shows_them(
    admin_web, cloud: LocalCloud
) -> None:
    cloud.require_access_keys({GOOD_KEY})

    response = admin_web.post(
        add_url(),
        form_data(
            regions="US-East-1, us-west-2,us-east-1",
            endpoint_url=cloud.url,
            access_key_id=GOOD_KEY,
            secret_access_key=SECRET,
        ),
        follow=True,
    )

    assert response.status_code == 200
    account = ProviderAccount.objects.get(name="Main AWS")
    assert account.regions == ["us-east-1", "us-west-2"]
    assert SECRET not in account.credentials_encrypted
    assert GOOD_KEY not in account.credentials_encrypted
    assert crypto.decrypt(account.credentials_encrypted) == {
        "access_key_id": GOOD_KEY,
        "secret_access_key": SECRET,
        "session_token": "",
    }
    # Validated on save, against the endpoint, after the transaction.
    assert account.status == ProviderAccount.Status.OK
    assert account.checked_at is not None
    assert cloud.count("DescribeAvailabilityZones") == 1
    assert "work" in response.content.decode()
    credentials_set = AuditEvent.objects.get(verb="provider_account.credentials_set")
    assert credentials_set.after == {"access_key_id": "…0001"}
    assert credentials_set.source == AuditEvent.Source.ADMIN

    pages = {
        "after save": response,
        "change": admin_web.get(change_url(account)),
        "changelist": admin_web.get(changelist_url()),
        "history": admin_web.get(
            reverse("admin:rental_provideraccount_history", args=[account.pk])
        ),
        "audit log": admin_web.get(reverse("admin:portal_auditevent_changelist")),
        "audit event": admin_web.get(
            reverse("admin:portal_auditevent_change", args=[credentials_set.pk])
        ),
    }
    for name, page in pages.items():
        assert page.status_code == 200, name
        assert_no_secret(page.content.decode(), account)
    assert "●●●● set" in pages["change"].content.decode()
    assert "●●●● set" in pages["changelist"].content.decode()
    assert 'name="secret_access_key"' in pages["change"].content.decode()


def test_it_keeps_the_stored_credentials_when_the_fields_are_left_blank(admin_web) -> None:
    account = factories.account(access_key_id=GOOD_KEY, secret=SECRET)
    token = account.credentials_encrypted

    response = admin_web.post(change_url(account), form_data(account, name="Renamed"))

    assert response.status_code == 302
    account.refresh_from_db()
    assert account.name == "Renamed"
    assert account.credentials_encrypted == token
    assert crypto.decrypt(account.credentials_encrypted)["secret_access_key"] == SECRET
    assert not AuditEvent.objects.filter(verb="provider_account.credentials_set").exists()


def test_it_replaces_the_credentials_when_new_ones_are_entered(admin_web) -> None:
    account = factories.account(access_key_id=GOOD_KEY, secret=SECRET)

    response = admin_web.post(
        change_url(account),
        form_data(
            account,
            access_key_id="AKIDREPLACED0002",
            secret_access_key="replaced-secret",
            session_token="temporary-token",
        ),
    )

    assert response.status_code == 302
    account.refresh_from_db()
    assert crypto.decrypt(account.credentials_encrypted) == {
        "access_key_id": "AKIDREPLACED0002",
        "secret_access_key": "replaced-secret",
        "session_token": "temporary-token",
    }
    assert account.status == ProviderAccount.Status.UNVERIFIED
    assert AuditEvent.objects.filter(
        verb="provider_account.credentials_set", object_id=str(account.pk)
    ).exists()


def test_it_refuses_half_credentials_without_echoing_them(admin_web) -> None:
    account = factories.account(access_key_id=GOOD_KEY, secret=SECRET)
    token = account.credentials_encrypted

    response = admin_web.post(
        change_url(account), form_data(account, secret_access_key="half-typed-secret")
    )

    assert response.status_code == 200
    html = response.content.decode()
    assert "Enter the access key ID that goes with the secret." in html
    assert "half-typed-secret" not in html
    assert_no_secret(html, account)
    account.refresh_from_db()
    assert account.credentials_encrypted == token


def test_it_refuses_a_region_that_is_not_a_region_name(admin_web) -> None:
    response = admin_web.post(add_url(), form_data(regions="us-east-1, Frankfurt am Main"))

    assert response.status_code == 200
    assert "Not a region name: frankfurt am main" in response.content.decode()
    assert not ProviderAccount.objects.exists()


ALIBABA_OPTIONS = {
    "security_group_id": "sg-bp1admin01",
    "vswitch_ids": {"cn-hangzhou-h": "vsw-bp1hzh"},
}


def alibaba_form(options: str) -> dict[str, str]:
    return form_data(name="Ali", driver="alibaba", regions="cn-hangzhou", options=options)


def test_it_lists_every_drivers_options_under_the_options_field(admin_web) -> None:
    html = admin_web.get(add_url()).content.decode()

    assert 'name="options"' in html
    assert "<code>security_group_id</code> (required)" in html
    assert "<code>vswitch_ids</code> (optional)" in html


def test_it_saves_a_drivers_options_and_gives_them_to_the_driver(admin_web) -> None:
    response = admin_web.post(add_url(), alibaba_form(json.dumps(ALIBABA_OPTIONS)))

    assert response.status_code == 302, response.content.decode()[:2000]
    account = ProviderAccount.objects.get(name="Ali")
    assert account.options == ALIBABA_OPTIONS
    assert account.config().option("security_group_id") == "sg-bp1admin01"
    page = admin_web.get(change_url(account)).content.decode()
    assert "sg-bp1admin01" in page and "vsw-bp1hzh" in page


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ("", "options.security_group_id: This option is required for this driver."),
        (
            '{"security_group_id": "sg-1", "vswitch_ids": {"cn-hangzhou-h": "subnet-1"}}',
            "options.vswitch_ids.cn-hangzhou-h: “subnet-1” does not match",
        ),
        ('{"security_group_id": "sg-1", "subnet": "x"}', "options.subnet: This driver takes"),
        ("[1, 2", "Enter a valid JSON."),
    ],
)
def test_it_refuses_bad_options_naming_the_option(admin_web, options, words) -> None:
    response = admin_web.post(add_url(), alibaba_form(options))

    assert response.status_code == 200
    assert words in response.content.decode()
    assert not ProviderAccount.objects.exists()


def test_it_refuses_options_for_a_driver_that_takes_none(admin_web) -> None:
    account = factories.account()

    response = admin_web.post(
        change_url(account), form_data(account, options='{"security_group_id": "sg-1"}')
    )

    assert response.status_code == 200
    assert "options.security_group_id: This driver takes no such option" in (
        response.content.decode()
    )
    account.refresh_from_db()
    assert account.options == {}


def test_it_validates_good_credentials_from_the_changelist_action(
    admin_web, cloud: LocalCloud
) -> None:
    cloud.require_access_keys({GOOD_KEY})
    account = factories.account(endpoint_url=cloud.url, access_key_id=GOOD_KEY, secret=SECRET)

    response = admin_web.post(
        changelist_url(),
        {"action": "validate_credentials", "_selected_action": [account.pk]},
        follow=True,
    )

    assert response.status_code == 200
    account.refresh_from_db()
    assert account.status == ProviderAccount.Status.OK
    assert account.status_message == ""
    assert account.checked_at is not None
    assert "The credentials of “Test cloud” work." in response.content.decode()
    event = AuditEvent.objects.get(verb="provider_account.validated")
    assert (event.source, event.after["status"]) == ("admin", "ok")
    assert_no_secret(response.content.decode(), account)


def test_it_records_the_providers_message_when_validation_fails(
    admin_web, cloud: LocalCloud
) -> None:
    cloud.require_access_keys({GOOD_KEY})
    account = factories.account(
        endpoint_url=cloud.url, access_key_id="AKIDWRONGKEY0009", secret=SECRET
    )

    response = admin_web.post(
        changelist_url(),
        {"action": "validate_credentials", "_selected_action": [account.pk]},
        follow=True,
    )

    account.refresh_from_db()
    assert account.status == ProviderAccount.Status.FAILED
    assert AUTH_FAILURE in account.status_message
    assert account.status_message.startswith("auth")
    html = response.content.decode()
    assert "failed validation" in html
    assert AUTH_FAILURE in html
    assert "AKIDWRONGKEY0009" not in html


def test_it_validates_from_the_change_pages_button(admin_web, cloud: LocalCloud) -> None:
    account = factories.account(endpoint_url=cloud.url, access_key_id=GOOD_KEY, secret=SECRET)
    validate_url = reverse("admin:rental_provideraccount_validate", args=[account.pk])
    assert f'formaction="{validate_url}"' in admin_web.get(change_url(account)).content.decode()

    refused = admin_web.get(validate_url)
    response = admin_web.post(validate_url)

    assert refused.status_code == 405
    assert response.status_code == 302
    assert response["Location"] == change_url(account)
    account.refresh_from_db()
    assert account.status == ProviderAccount.Status.OK
    assert cloud.count("DescribeAvailabilityZones") == 1


def test_it_sends_a_non_staff_user_to_the_admin_login(client, cloud: LocalCloud) -> None:
    account = factories.account(endpoint_url=cloud.url, access_key_id=GOOD_KEY, secret=SECRET)
    engineer = factories.user("erin")
    client.force_login(engineer)

    pages = [
        client.get(changelist_url()),
        client.get(change_url(account)),
        client.post(reverse("admin:rental_provideraccount_validate", args=[account.pk])),
        client.post(
            add_url(), form_data(name="Sneaky", access_key_id="AKIDX", secret_access_key="x")
        ),
    ]

    for response in pages:
        assert response.status_code == 302
        assert response["Location"].startswith(reverse("admin:login"))
    account.refresh_from_db()
    assert account.status == ProviderAccount.Status.UNVERIFIED
    assert cloud.count("DescribeAvailabilityZones") == 0
    assert not ProviderAccount.objects.filter(name="Sneaky").exists()


def test_it_rotates_credentials_to_the_first_key(settings) -> None:
    old_key, new_key = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    settings.PORTAL_ENCRYPTION_KEYS = [old_key]
    account = factories.account(access_key_id=GOOD_KEY, secret=SECRET)
    ProviderAccount.objects.create(name="No credentials", driver="aws", regions=["us-east-1"])
    old_token = account.credentials_encrypted
    provider = IdentityProvider(name="SSO", issuer="https://idp.example", client_id="portal")
    provider.set_client_secret("oidc-secret")
    provider.save()
    channel = Channel.objects.create(
        project=factories.project("chatty"),
        name="team",
        kind="webhook",
        secrets_encrypted=crypto.encrypt({"url": "https://hooks.example/x", "secret": "s" * 16}),
    )
    settings.PORTAL_ENCRYPTION_KEYS = [new_key, old_key]
    out = StringIO()

    call_command("rotate_credentials", stdout=out)

    assert "1 provider account" in out.getvalue()
    assert "Re-encrypted 2 other secret(s)" in out.getvalue()
    account.refresh_from_db()
    assert account.credentials_encrypted != old_token
    settings.PORTAL_ENCRYPTION_KEYS = [new_key]  # the old key can go now
    assert crypto.decrypt(account.credentials_encrypted)["secret_access_key"] == SECRET
    provider.refresh_from_db()
    channel.refresh_from_db()
    assert provider.client_secret() == "oidc-secret"
    assert crypto.decrypt(channel.secrets_encrypted)["url"] == "https://hooks.example/x"
    event = AuditEvent.objects.get(verb="provider_account.credentials_rotated")
    assert (event.object_id, event.source, event.actor) == (str(account.pk), "command", None)


def test_it_reports_credentials_no_key_can_read(settings) -> None:
    settings.PORTAL_ENCRYPTION_KEYS = [Fernet.generate_key().decode()]
    factories.account(name="Orphaned")
    settings.PORTAL_ENCRYPTION_KEYS = [Fernet.generate_key().decode()]

    with pytest.raises(CommandError, match="Orphaned"):
        call_command("rotate_credentials", stdout=StringIO())

    assert not AuditEvent.objects.filter(verb="provider_account.credentials_rotated").exists()


# Every admin page of the portal, and their query counts.
