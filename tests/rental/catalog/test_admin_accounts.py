"""Provider accounts in the admin: credentials are write-only, encrypted, validated against
the (local) cloud, and never shown back. Plus every admin page of the portal renders, and
changelists run a fixed number of queries however many rows they list."""

import base64
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from io import StringIO

import pytest
from cryptography.fernet import Fernet
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.db import connection
from django.test import RequestFactory
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from billing.models import (
    Budget,
    BudgetAlert,
    GpuHourAlert,
    GpuHourAllocation,
    Statement,
    StatementLine,
)
from devcloud.server import LocalCloud
from portal import audit, crypto
from portal.messaging.models import Channel
from portal.models import AuditEvent, LoginLock, Membership, Notification
from portal.service_tokens import create_service_token
from portal.sso.models import GrantedMembership, GrantedRole, GroupRole, Identity, IdentityProvider
from rental.models import (
    AvailabilityWatch,
    DataVolume,
    ExchangeRate,
    GpuModel,
    Instance,
    LaunchAttempt,
    Orphan,
    Pool,
    ProviderAccount,
    Quota,
    QuotaRequest,
    Reservation,
    SshKey,
    UsageRecord,
    UtilizationSample,
)
from tests import factories

GOOD_KEY = "AKIDADMINGOOD0001"
SECRET = "wJalrXUtnFEMI-admin-secret-never-shown"
AUTH_FAILURE = "AWS was not able to validate the provided access credentials"
NOW = datetime(2026, 4, 6, 10, 0, tzinfo=UTC)

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


def ssh_public_key(seed: int) -> str:
    blob = b"\x00\x00\x00\x0bssh-ed25519\x00\x00\x00\x20" + bytes([seed]) * 32
    return f"ssh-ed25519 {base64.b64encode(blob).decode()} user{seed}@host"


def add_rows(tag: str, seed: int, actor) -> None:
    """One row (at least) of every model with an admin, linked the way the portal links them."""
    model = GpuModel.objects.create(
        name=f"Test GPU {tag}",
        vendor="nvidia",
        memory_gb=80,
        memory_bandwidth_gbps=2000,
        bf16_tflops=Decimal("300"),
        fp16_tflops=Decimal("300"),
        interconnect="nvlink",
    )
    Pool.objects.create(gpu_model=model, capacity=8)
    project = factories.project(f"proj-{tag}")
    engineer = factories.user(f"eng-{tag}")
    factories.member(engineer, project, Membership.Role.MANAGER)
    factories.user(f"fin-{tag}", finance=True)
    Quota.objects.create(project=project, gpu_model=model, guaranteed=2, ceiling=4)
    account = factories.account(name=f"Account {tag}")
    offering = factories.offering(account, model, instance_type=f"test.{tag}")
    image = factories.image(account, name=f"Image {tag}")
    lease = Reservation.objects.create(
        project=project,
        requester=engineer,
        gpu_model=model,
        gpu_count=1,
        offering=offering,
        image=image,
        start=NOW,
        end=NOW + timedelta(hours=4),
        tier="guaranteed",
        status=Reservation.Status.ACTIVE,
        approved_by=actor,
    )
    instance = Instance.objects.create(
        reservation=lease,
        account=account,
        offering=offering,
        region="us-east-1",
        external_id=f"i-{tag}",
        state=Instance.State.RUNNING,
        market="on_demand",
        gpu_count=1,
        rate_per_hour=Decimal("2.50"),
        launched_at=NOW,
        running_at=NOW,
    )
    UsageRecord.objects.create(
        instance=instance,
        project=project,
        gpu_model=model,
        tier="guaranteed",
        market="on_demand",
        gpu_count=1,
        start=NOW,
        rate=Decimal("2.50"),
    )
    UtilizationSample.objects.create(
        instance=instance, at=NOW, gpu_utilization=[50], memory_used_mb=[1000]
    )
    ExchangeRate.objects.create(
        currency="CNY",
        units_per_billing_unit=Decimal("7.25") + seed,
        valid_from=NOW + timedelta(days=seed),
        source=f"source {tag}",
    )
    LaunchAttempt.objects.create(
        instance=instance,
        offering=offering,
        account=account,
        region="us-east-1",
        zone="us-east-1a",
        instance_type=offering.instance_type,
        kind="capacity",
        message="InsufficientInstanceCapacity",
        at=NOW,
    )
    Orphan.objects.create(
        account=account,
        region="us-east-1",
        external_id=f"i-stray{seed:010d}",
        instance_type=offering.instance_type,
        tags={"gpu-portal:project": project.slug},
        launched_at=NOW,
        first_seen_at=NOW,
        last_seen_at=NOW,
    )
    SshKey.objects.create(user=engineer, name=f"laptop-{tag}", public_key=ssh_public_key(seed))
    DataVolume.objects.create(
        project=project,
        account=account,
        name=f"data-{tag}",
        zone="us-east-1a",
        size_gb=100,
        attached_instance=instance,
        created_at=NOW,
    )
    AvailabilityWatch.objects.create(user=engineer, gpu_model=model, count=2, created_at=NOW)
    QuotaRequest.objects.create(
        project=project,
        gpu_model=model,
        requested_by=engineer,
        ceiling=6,
        reason="more",
        decided_by=actor,
        created_at=NOW,
    )
    statement = Statement.objects.create(
        project=project, period=date(2026, 3, 1), total=Decimal("10.00"), decided_by=actor
    )
    StatementLine.objects.create(
        statement=statement, kind="usage", gpu_model=model, amount=Decimal("10.00"), description="x"
    )
    budget = Budget.objects.create(
        project=project,
        monthly_amount=Decimal("1000.00"),
        thresholds=[{"percent": 80, "kind": "actual"}],
    )
    BudgetAlert.objects.create(
        budget=budget,
        period=date(2026, 4, 1),
        percent=80,
        kind="actual",
        value=Decimal("900.00"),
        fired_at=NOW,
    )
    allocation = GpuHourAllocation.objects.create(
        project=project,
        gpu_model=model,
        monthly_hours=Decimal("100.00"),
        thresholds=[{"percent": 80, "kind": "actual"}],
    )
    GpuHourAlert.objects.create(
        allocation=allocation,
        period=date(2026, 4, 1),
        percent=80,
        kind="actual",
        value=Decimal("81.00"),
        fired_at=NOW,
    )
    IdentityProvider.objects.update_or_create(
        pk=IdentityProvider.ONLY,
        defaults={"name": "Company SSO", "issuer": "https://idp.example", "client_id": "portal"},
    )
    GroupRole.objects.create(group=f"team-{tag}", role="manager", project=project)
    Identity.objects.create(user=engineer, issuer="https://idp.example", subject=f"sub-{tag}")
    GrantedMembership.objects.create(
        membership=Membership.objects.get(user=engineer, project=project), groups=[f"team-{tag}"]
    )
    GrantedRole.objects.create(user=engineer, role="finance", groups=[f"money-{tag}"])
    create_service_token(
        actor=actor,
        project=project,
        name=f"ci-{tag}",
        scopes=["read"],
        expires_at=NOW + timedelta(days=30),
        now=NOW,
    )
    Notification.objects.create(user=engineer, subject=f"Hello {tag}", created_at=NOW)
    LoginLock.objects.create(
        username=f"erik-{tag}", failures=50, locked_at=NOW, until=NOW + timedelta(minutes=15)
    )
    audit.record(
        actor=actor, verb="test.touched", obj=lease, project=project, source="admin", at=NOW
    )


def registered() -> list[tuple[str, admin.ModelAdmin]]:
    return sorted(
        ((f"{m._meta.app_label}_{m._meta.model_name}", a) for m, a in admin.site._registry.items()),
        key=lambda item: item[0],
    )


def test_it_renders_every_admin_changelist_add_and_change_page(admin_web, site_admin) -> None:
    add_rows("a", 1, site_admin)
    request = RequestFactory().get("/")
    request.user = site_admin
    checked = 0

    for name, model_admin in registered():
        changelist = admin_web.get(reverse(f"admin:{name}_changelist"))
        assert changelist.status_code == 200, name
        if model_admin.has_add_permission(request):
            assert admin_web.get(reverse(f"admin:{name}_add")).status_code == 200, name
        obj = model_admin.get_queryset(request).first()
        assert obj is not None, name
        change = admin_web.get(reverse(f"admin:{name}_change", args=[obj.pk]))
        assert change.status_code == 200, name
        checked += 1

    assert checked >= 20


def test_it_keeps_audit_events_read_only_for_everyone(admin_web, site_admin) -> None:
    add_rows("a", 1, site_admin)
    event = AuditEvent.objects.get(verb="test.touched")

    add = admin_web.get(reverse("admin:portal_auditevent_add"))
    delete = admin_web.post(
        reverse("admin:portal_auditevent_delete", args=[event.pk]), {"post": "yes"}
    )
    change = admin_web.post(
        reverse("admin:portal_auditevent_change", args=[event.pk]), {"verb": "forged"}
    )

    assert add.status_code == 403
    assert delete.status_code == 403
    assert change.status_code == 403
    event.refresh_from_db()
    assert event.verb == "test.touched"


def test_it_lists_every_changelist_with_a_fixed_number_of_queries(admin_web, site_admin) -> None:
    def count_queries() -> dict[str, int]:
        counts = {}
        for name, _model_admin in registered():
            with CaptureQueriesContext(connection) as queries:
                assert admin_web.get(reverse(f"admin:{name}_changelist")).status_code == 200
            counts[name] = len(queries)
        return counts

    add_rows("a", 1, site_admin)
    with_one = count_queries()
    add_rows("b", 2, site_admin)
    add_rows("c", 3, site_admin)
    add_rows("d", 4, site_admin)

    assert count_queries() == with_one


def test_it_shows_each_pools_guarantees_from_one_annotation(admin_web, site_admin) -> None:
    add_rows("a", 1, site_admin)
    pool = Pool.objects.get(gpu_model__name="Test GPU a")
    Quota.objects.create(
        project=factories.project("extra"), gpu_model=pool.gpu_model, guaranteed=3, ceiling=3
    )

    response = admin_web.get(reverse("admin:rental_pool_changelist"))

    assert response.status_code == 200
    assert "5 / 8" in response.content.decode()


def test_it_checks_rule_q1_when_a_quota_is_saved_in_the_admin(admin_web, site_admin) -> None:
    add_rows("a", 1, site_admin)
    model = GpuModel.objects.get(name="Test GPU a")
    newcomer = factories.project("newcomer")
    data = {"project": newcomer.pk, "gpu_model": model.pk, "ceiling": 8, "weight": "1"}

    too_much = admin_web.post(reverse("admin:rental_quota_add"), {**data, "guaranteed": 7})
    fits = admin_web.post(reverse("admin:rental_quota_add"), {**data, "guaranteed": 6})

    assert too_much.status_code == 200
    assert "At most 6 can be guaranteed here." in too_much.content.decode()
    assert fits.status_code == 302
    quota = Quota.objects.get(project=newcomer)
    assert (quota.guaranteed, quota.ceiling) == (6, 8)
    assert AuditEvent.objects.filter(
        verb="quota.set", object_id=str(quota.pk), source="admin"
    ).exists()
