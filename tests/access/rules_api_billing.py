"""Access-matrix rules for statements, their lines' disputes, budgets and GPU-hour
allocations (API)."""

from datetime import UTC, datetime, timedelta

from billing import allocations, budgets, services
from billing.models import Statement, StatementLine
from tests.access.spec import Expect
from tests.billing.helpers import lease, run

APRIL = datetime(2026, 4, 1, tzinfo=UTC)


def _closed(world) -> None:
    """April 2026 closed, with a usage line for alpha and for gamma."""

    def make():
        for project in (world.project, world.other_project):
            run(lease(world.f0, project, tier="burst"), start=APRIL, hours=10)
        services.close_period(period=APRIL, now=APRIL + timedelta(days=32))
        return True

    world.once("april-closed", make)


def _statement(world, project) -> int:
    _closed(world)
    return Statement.objects.get(project=project, period=APRIL.date()).pk


def _line(world, project) -> int:
    _closed(world)
    return StatementLine.objects.filter(statement__project=project).order_by("pk").first().pk


def _dispute(world, project) -> int:
    def make():
        return services.dispute_line(
            line_id=_line(world, project), actor=world.users["admin"], comment="matrix"
        )

    return world.once(f"dispute-{project.slug}", make).pk


def _budget(world, project) -> int:
    def make():
        return budgets.set_budget(
            project=project, actor=world.users["admin"], monthly_amount="100.00", thresholds=[]
        )

    return world.once(f"budget-{project.slug}", make).pk


def _allocation(world, project) -> int:
    def make():
        return allocations.set_allocation(
            project=project,
            actor=world.users["admin"],
            gpu_model=world.f0.model,
            monthly_hours="10",
            thresholds=[],
        )

    return world.once(f"allocation-{project.slug}", make).pk


# ROLES order: engineer, other_engineer, manager, admin, finance, anonymous.
ANON = (401, 403)
SEEN = (200, 404, 200, 200, 200, ANON)  # who sees alpha: its members, admins, finance
RULES: dict[str, Expect] = {
    "api:statement-list": Expect(get=(200, 200, 200, 200, 200, ANON)),
    "api:statement-detail": Expect(
        get=SEEN,
        kwargs=lambda world: {"pk": _statement(world, world.project)},
        outsider_kwargs=lambda world: {"pk": _statement(world, world.other_project)},
    ),
    "api:statement-preview": Expect(
        get=(400, 400, 400, 400, 400, ANON), note="Without ?project= it names the field."
    ),
    "api:statement-approve": Expect(
        post=(404, 404, 200, 200, 404, ANON),
        kwargs=lambda world: {"pk": _statement(world, world.project)},
        outsider_kwargs=lambda world: {"pk": _statement(world, world.other_project)},
        note="Managers (and admins) sign off; others get 404 as on the statement page.",
    ),
    "api:statement-export": Expect(
        get=(400, 404, 400, 400, 400, ANON),  # without ?format=csv|pdf
        kwargs=lambda world: {"pk": _statement(world, world.project)},
        outsider_kwargs=lambda world: {"pk": _statement(world, world.other_project)},
    ),
    "api:statement-line-dispute": Expect(
        post=(404, 404, 400, 400, 404, ANON),
        kwargs=lambda world: {"pk": _line(world, world.project)},
        outsider_kwargs=lambda world: {"pk": _line(world, world.other_project)},
    ),
    "api:dispute-list": Expect(get=(200, 200, 200, 200, 200, ANON)),
    "api:dispute-detail": Expect(
        get=SEEN,
        kwargs=lambda world: {"pk": _dispute(world, world.project)},
        outsider_kwargs=lambda world: {"pk": _dispute(world, world.other_project)},
    ),
    "api:dispute-answer": Expect(
        post=(404, 404, 404, 400, 404, ANON),
        kwargs=lambda world: {"pk": _dispute(world, world.project)},
        outsider_kwargs=lambda world: {"pk": _dispute(world, world.other_project)},
        note="Admins answer disputes.",
    ),
    "api:budget-list": Expect(
        get=(200, 200, 200, 200, 200, ANON),
        post=(400, 400, 400, 400, 400, ANON),  # an empty body names its fields first
    ),
    "api:gpu-hour-allocation-list": Expect(
        get=(200, 200, 200, 200, 200, ANON),
        post=(400, 400, 400, 400, 400, ANON),  # an empty body names its fields first
    ),
    "api:gpu-hour-allocation-detail": Expect(
        get=SEEN,
        kwargs=lambda world: {"pk": _allocation(world, world.project)},
        outsider_kwargs=lambda world: {"pk": _allocation(world, world.other_project)},
    ),
    "api:budget-detail": Expect(
        get=SEEN,
        kwargs=lambda world: {"pk": _budget(world, world.project)},
        outsider_kwargs=lambda world: {"pk": _budget(world, world.other_project)},
    ),
}
