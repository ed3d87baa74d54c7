"""Access-matrix rules for the loan model's quota forms on the project page: the
auto-approve limits (managers of the project, admins) and their caps (admins)."""

from rental.models import Quota
from tests.access.spec import Expect


def _quota(project) -> dict:
    return {"slug": project.slug, "pk": Quota.objects.get(project=project).pk}


# ROLES order: engineer, other_engineer, manager, admin, finance, anonymous.
RULES: dict[str, Expect] = {
    "rental:quota_auto_approve": Expect(
        get=None,
        # Empty limits: a manager is refused (no limit is above the admin's caps, a field
        # error); an admin may clear them.
        post=(404, 404, 400, 302, 404, 302),
        kwargs=lambda world: _quota(world.project),
        outsider_kwargs=lambda world: _quota(world.other_project),
        note="Managers of the project set its auto-approve limits; admins too.",
    ),
    "rental:quota_auto_approve_caps": Expect(
        get=None,
        post=(404, 404, 404, 302, 404, 302),  # empty caps: an admin lifts them
        kwargs=lambda world: _quota(world.project),
        outsider_kwargs=lambda world: _quota(world.other_project),
        note="Only admins set the caps on a quota's auto-approve limits.",
    ),
}
