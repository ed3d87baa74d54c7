"""Access-matrix rules for projects, members, personal tokens and a project's service
tokens (API and pages) and the audit log's API."""

from datetime import timedelta

from django.utils import timezone

from portal import audit, service_tokens, tokens
from portal.models import Membership
from tests.access.spec import Expect


def _alice_token(world) -> int:
    """A token of the engineer (alice): only she may read or revoke it."""

    def make():
        row, _raw = tokens.create_token(
            actor=world.users["engineer"],
            name="matrix",
            expires_at=timezone.now() + timedelta(days=1),
        )
        return row

    return world.once("alice-token", make).pk


def _service_token(world, project) -> dict:
    """A service token of ``project``, made by an admin (any manager could)."""

    def make():
        row, _raw = service_tokens.create_service_token(
            actor=world.users["admin"],
            project=project,
            name="matrix",
            scopes=["read"],
            expires_at=timezone.now() + timedelta(days=1),
        )
        return row

    row = world.once(f"service-token-{project.slug}", make)
    return {"slug": project.slug, "pk": row.pk}


def _event(world) -> int:
    def make():
        return audit.record(
            actor=world.users["admin"], verb="matrix.probe", obj=world.project, source="web"
        )

    return world.once("audit-event", make).pk


def _membership(world, project) -> int:
    return Membership.objects.filter(project=project).order_by("pk").first().pk


# ROLES order: engineer, other_engineer, manager, admin, finance, anonymous.
ANON = (401, 403)
RULES: dict[str, Expect] = {
    "api:project-list": Expect(get=(200, 200, 200, 200, 200, ANON)),
    "api:project-detail": Expect(
        get=(200, 404, 200, 200, 200, ANON),
        kwargs=lambda world: {"slug": world.project.slug},
        outsider_kwargs=lambda world: {"slug": world.other_project.slug},
    ),
    "api:project-member-list": Expect(
        get=(200, 404, 200, 200, 200, ANON),
        post=(404, 404, 400, 400, 404, ANON),
        kwargs=lambda world: {"slug": world.project.slug},
        outsider_kwargs=lambda world: {"slug": world.other_project.slug},
        note="Whoever sees the project reads its members; managers and admins add them.",
    ),
    "api:project-member-detail": Expect(
        get=(200, 404, 200, 200, 200, ANON),
        kwargs=lambda world: {
            "slug": world.project.slug,
            "pk": _membership(world, world.project),
        },
        outsider_kwargs=lambda world: {
            "slug": world.other_project.slug,
            "pk": _membership(world, world.other_project),
        },
    ),
    "api:token-list": Expect(
        get=(200, 200, 200, 200, 200, ANON),
        post=(400, 400, 400, 400, 400, ANON),
        note="Everyone's own tokens; POST also takes a password (Basic), login-throttled.",
    ),
    "api:token-detail": Expect(
        get=(200, 404, 404, 404, 404, ANON),
        kwargs=lambda world: {"pk": _alice_token(world)},
        note="A token is its owner's alone, even for admins.",
    ),
    "api:token-revoke": Expect(
        post=(200, 404, 404, 404, 404, ANON),
        kwargs=lambda world: {"pk": _alice_token(world)},
    ),
    "api:project-service-token-list": Expect(
        get=(404, 404, 200, 200, 404, ANON),
        post=(404, 404, 400, 400, 404, ANON),
        kwargs=lambda world: {"slug": world.project.slug},
        outsider_kwargs=lambda world: {"slug": world.other_project.slug},
        note="A project's service tokens: its managers and admins only.",
    ),
    "api:project-service-token-detail": Expect(
        get=(404, 404, 200, 200, 404, ANON),
        kwargs=lambda world: _service_token(world, world.project),
        outsider_kwargs=lambda world: _service_token(world, world.other_project),
    ),
    "api:project-service-token-revoke": Expect(
        post=(404, 404, 200, 200, 404, ANON),
        kwargs=lambda world: _service_token(world, world.project),
        outsider_kwargs=lambda world: _service_token(world, world.other_project),
    ),
    "api:audit-event-list": Expect(get=(404, 404, 404, 200, 404, ANON)),
    "api:audit-event-detail": Expect(
        get=(404, 404, 404, 200, 404, ANON),
        kwargs=lambda world: {"pk": _event(world)},
    ),
    "tokens": Expect(
        get=(200, 200, 200, 200, 200, 302),
        post=(200, 200, 200, 200, 200, 302),  # an empty form: the page with its errors
    ),
    "service_tokens": Expect(
        get=(404, 404, 200, 200, 404, 302),
        post=(404, 404, 200, 200, 404, 302),  # an empty form: the page with its errors
        kwargs=lambda world: {"slug": world.project.slug},
        outsider_kwargs=lambda world: {"slug": world.other_project.slug},
    ),
    "service_token_revoke": Expect(
        post=(404, 404, 302, 302, 404, 302),
        kwargs=lambda world: _service_token(world, world.project),
        outsider_kwargs=lambda world: _service_token(world, world.other_project),
    ),
    "token_revoke": Expect(
        post=(302, 404, 404, 404, 404, 302),
        kwargs=lambda world: {"pk": _alice_token(world)},
    ),
}
