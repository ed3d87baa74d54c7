"""Access-matrix rules for the project configuration endpoint."""

from tests.access.spec import Expect

# ROLES order: engineer, other_engineer, manager, admin, finance, anonymous.
RULES: dict[str, Expect] = {
    "api:project-config": Expect(
        get=(200, 404, 200, 200, 200, (401, 403)),
        # An empty body: refused by validation for who may apply, 403/404 for the rest.
        post=(403, 404, 400, 400, 403, (401, 403)),
        kwargs=lambda world: {"slug": world.project.slug},
        outsider_kwargs=lambda world: {"slug": world.other_project.slug},
        note="Members and finance read the configuration; managers and admins apply it.",
    ),
}
