"""Access-matrix rules for the chat channels (portal.messaging). ROLES order: engineer
(alice, alpha), other_engineer (bob, beta), manager (alma, alpha), admin, finance,
anonymous. A project's channels are its managers' and admins'; subscriptions are each
member's own, for the channels of their projects."""

from portal.messaging import services
from tests.access.rules_web import EVERYONE, MANAGERS, POST_ONLY
from tests.access.spec import Expect


def _channel_of(world, project, name: str):
    return world.once(
        name,
        lambda: services.add_channel(
            actor=None,
            project=project,
            name="team",
            kind="email",
            address="team@example.com",
        ),
    )


def channel(world) -> dict:
    made = _channel_of(world, world.project, "channel")
    return {"slug": world.project.slug, "pk": made.pk}


def other_channel(world) -> dict:
    made = _channel_of(world, world.other_project, "other_channel")
    return {"slug": world.other_project.slug, "pk": made.pk}


def project(world) -> dict:
    return {"slug": world.project.slug}


def other_project(world) -> dict:
    return {"slug": world.other_project.slug}


def subscribe(world) -> dict:
    return {"pk": channel(world)["pk"]}


def other_subscribe(world) -> dict:
    return {"pk": other_channel(world)["pk"]}


RULES: dict[str, Expect] = {
    "messaging:channels": Expect(
        get=MANAGERS,
        post=(404, 404, 400, 400, 404, 302),  # an empty form: its field errors
        kwargs=project,
        outsider_kwargs=other_project,
        note="A project's managers and admins; finance reads money, not chat addresses.",
    ),
    "messaging:channel_test": Expect(
        get=POST_ONLY,
        post=(404, 404, 302, 302, 404, 302),
        kwargs=channel,
        outsider_kwargs=other_channel,
    ),
    "messaging:channel_remove": Expect(
        get=POST_ONLY,
        post=(404, 404, 302, 302, 404, 302),
        kwargs=channel,
        outsider_kwargs=other_channel,
    ),
    "messaging:subscriptions": Expect(get=EVERYONE),
    "messaging:subscription_save": Expect(
        get=POST_ONLY,
        post=(302, 404, 302, 404, 404, 302),  # nothing chosen: said, and back to the page
        kwargs=subscribe,
        outsider_kwargs=other_subscribe,
        note="Members of the channel's project only, admins included only as members.",
    ),
}
