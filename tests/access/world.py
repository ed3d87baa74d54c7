"""The world every access-matrix rule is checked in.

Fixture F0 (pool A100 80GB, projects alpha, beta, gamma) with one user per role of
``spec.ROLES``: ``engineer`` (alice, engineer of alpha), ``other_engineer`` (bob, engineer
of beta only), ``manager`` (alma, manager of alpha), ``admin`` (staff), ``finance``
(the finance group) and ``anonymous``. ``project`` is alpha; ``other_project`` is gamma,
to which none of the non-site roles belongs, so every object of it must be a 404 for
them. ``lease`` is alice's pending request in alpha; ``other_lease`` is gary's pending
request in gamma, whose purpose (``SECRET``) must appear in no answer to a role that may
not see gamma. ``service_tokens`` are alpha's service tokens of ``spec.SERVICE_ROLES``.
"""

from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

from django.utils import timezone

from billing.models import LineDispute, Statement, StatementLine
from portal import service_tokens
from rental.loans import admission
from rental.models import DataVolume, Instance, Quota, QuotaRequest, Reservation, SshKey
from tests import factories
from tests.access.spec import SERVICE_ROLES

SECRET = "train-the-secret-model"


@dataclass
class World:
    f0: factories.F0
    users: dict[str, Any]
    lease: Reservation
    other_lease: Reservation
    extra: dict[str, Any] = field(default_factory=dict)  # objects rules create, by name
    # Service tokens of alpha by role (spec.SERVICE_ROLES): the token each sends.
    service_tokens: dict[str, str] = field(default_factory=dict)

    @property
    def project(self):
        return self.f0.alpha

    @property
    def other_project(self):
        return self.f0.gamma

    @property
    def model(self):
        return self.f0.model

    def once(self, name: str, make) -> Any:
        """An object a rule needs, made once per world (``make()`` on first use)."""
        if name not in self.extra:
            self.extra[name] = make()
        return self.extra[name]


def _pending(actor, project, purpose: str) -> Reservation:
    Quota.objects.filter(project=project).update(max_hours_per_lease=8)
    lease = admission.submit_reservation(
        actor=actor,
        project=project,
        gpu_model=Quota.objects.get(project=project).gpu_model,
        gpu_count=1,
        duration_hours=12,
        priority="experiment",
        market="on_demand",
        purpose=purpose,
    )
    assert lease.status == Reservation.Status.PENDING_APPROVAL
    return lease


def build() -> World:
    f0 = factories.fixture_f0()
    users = {
        "engineer": f0.alice,
        "other_engineer": f0.bob,
        "manager": f0.alpha_manager,
        "admin": f0.admin,
        "finance": factories.user("fiona", finance=True),
        "anonymous": None,
    }
    return World(
        f0=f0,
        users=users,
        lease=_pending(f0.alice, f0.alpha, "train-the-alpha-model"),
        other_lease=_pending(f0.gary, f0.gamma, SECRET),
        service_tokens={
            role: service_tokens.create_service_token(
                actor=f0.alpha_manager,
                project=f0.alpha,
                name=role,
                scopes=list(scopes),
                expires_at=timezone.now() + timedelta(days=1),
            )[1]
            for role, scopes in SERVICE_ROLES.items()
        },
    )


# Objects the rules need, made on demand (a rule calls them from its kwargs).


def instance_of(lease: Reservation) -> Instance:
    return Instance.objects.create(
        reservation=lease,
        account=lease.offering.account,
        offering=lease.offering,
        region=lease.offering.region,
        market=lease.market,
        gpu_count=lease.gpu_count,
        rate_per_hour=lease.offering.on_demand_price_per_hour,
        idempotency_key=f"world-{lease.pk}",
    )


def ssh_key_of(user) -> SshKey:
    return SshKey.objects.create(
        user=user,
        name="laptop",
        public_key="ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGJ0b3J0Y2hjb21wdXRlcmtleTAwMDAwMDAw me",
    )


def volume_of(project) -> DataVolume:
    return DataVolume.objects.create(
        project=project,
        account=Quota.objects.get(project=project).gpu_model.offerings.first().account,
        name=f"{project.slug}-data",
        region="us-east-1",
        zone="us-east-1a",
        size_gb=100,
        volume_id=f"vol-{project.pk:08d}",
        state=DataVolume.State.AVAILABLE,
    )


def quota_request_of(project, user) -> QuotaRequest:
    return QuotaRequest.objects.create(
        project=project,
        gpu_model=Quota.objects.get(project=project).gpu_model,
        requested_by=user,
        ceiling=7,
        reason="a deadline",
    )


def statement_of(project) -> tuple[Statement, StatementLine, LineDispute]:
    """A closed March statement with one usage line, and an open dispute of it."""
    statement = Statement.objects.create(
        project=project,
        period=date(2026, 3, 1),
        status=Statement.Status.CLOSED,
        total=Decimal("12.50"),
        closed_at=datetime(2026, 4, 3, tzinfo=UTC),
    )
    line = StatementLine.objects.create(
        statement=statement,
        kind=StatementLine.Kind.USAGE,
        amount=Decimal("12.50"),
        description=f"{project.slug} usage",
        locked=True,
    )
    dispute = LineDispute.objects.create(
        line=line, comment="too much", raised_by=factories.user(f"{project.slug}-disputer")
    )
    return statement, line, dispute
