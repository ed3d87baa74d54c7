"""Every admin page of the portal renders for an admin, audit events stay read-only, and
changelists run a fixed number of queries however many rows they list."""

import base64
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest
from django.contrib import admin
from django.contrib.auth import get_user_model
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
from portal import audit
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
    OwnHost,
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
    own_site = ProviderAccount.objects.create(name=f"Site {tag}", driver="ssh", regions=["dc-1"])
    OwnHost.objects.create(
        account=own_site,
        name=f"box-{tag}",
        address="10.0.0.1",
        gpus=[
            {"index": 0, "name": "H100", "memory_mib": 81559, "uuid": "G", "gpu_model": model.pk}
        ],
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
