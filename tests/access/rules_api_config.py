"""Access-matrix rules for the project configuration endpoint."""

from tests.access.spec import Expect

# ROLES order: engineer, other_engineer, manager, admin, finance, anonymous.
RULES: dict[str, Expect] = {
    "api:project-config": Expect(
        get=(200, 404, 200, 200, 200, (401, 403)),
        # An empty JSON body: refused (400, or 415 as it is not YAML) for who may apply,
        # 403/404 for the rest.
        post=(403, 404, (400, 415), (400, 415), 403, (401, 403)),
        kwargs=lambda world: {"slug": world.project.slug},
        outsider_kwargs=lambda world: {"slug": world.other_project.slug},
        note="Members and finance read the configuration; managers and admins apply it.",
    ),
}
