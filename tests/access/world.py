"""The world every access-matrix rule is checked in.

Fixture F0 (pool A100 80GB, projects alpha, beta, gamma) with one user per role of
``spec.ROLES``: ``engineer`` (alice, engineer of alpha), ``other_engineer`` (bob, engineer
of beta only), ``manager`` (alma, manager of alpha), ``admin`` (staff), ``finance``
(the finance group) and ``anonymous``. ``project`` is alpha; ``other_project`` is gamma,
to which none of the non-site roles belongs, so every object of it must be a 404 for
them. ``lease`` is alice's pending request in alpha; ``other_lease`` is gary's pending
request in gamma, whose purpose (``SECRET``) must appear in no answer to a role that may
not see gamma.
"""

from dataclasses import dataclass, field
from typing import Any

from rental import services
from rental.models import Quota, Reservation
from tests import factories

SECRET = "train-the-secret-model"


@dataclass
class World:
    f0: factories.F0
    users: dict[str, Any]
    lease: Reservation
    other_lease: Reservation
    extra: dict[str, Any] = field(default_factory=dict)  # objects rules create, by name

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
    lease = services.submit_reservation(
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
    )
