"""Access-matrix rules for the lease side of the API: leases and their actions, a lease's
cost, instances, usage and availability watches.

In the world, ``lease`` is alice's request waiting for approval in alpha and
``other_lease`` gary's in gamma. An action the lease page does not offer to a role is a
404 as on the page (end, extend, watch: the requester and managers; approve, reject,
decide an extension: managers), or the service's 403 where the page leaves it to the
service (stop, resume, end-stopped, still-using, replace). A POST with an empty body by
who may act is refused by validation (400) or by the lease's state (409), except the
actions that need no body (approve, cancel, end, watch), which do what they say.
"""

from tests.access.spec import Expect
from tests.api.leases_world import running_lease

# ROLES order: engineer, other_engineer, manager, admin, finance, anonymous.
ANON = (401, 403)
READ = (200, 200, 200, 200, 200, ANON)
SEEN = (200, 404, 200, 200, 200, ANON)  # an object of alpha: not for beta's engineer
# A service token of alpha with the "leases" scope acts on the leases it asked for; alice's
# is a 404 to it, as to any engineer of alpha but her.
NOT_THE_TOKENS = {"post": 404}


def lease(world):
    return {"pk": world.lease.pk}


def other_lease(world):
    return {"pk": world.other_lease.pk}


def _instance(world, project_name: str):
    project = getattr(world.f0, project_name)
    made = world.once(f"running_{project_name}", lambda: running_lease(world.f0, project=project))
    return made.instances.get()


def instance(world):
    return {"pk": _instance(world, "alpha").pk}


def other_instance(world):
    return {"pk": _instance(world, "gamma").pk}


def usage(world):
    return {"pk": _instance(world, "alpha").usage.get().pk}


def other_usage(world):
    return {"pk": _instance(world, "gamma").usage.get().pk}


def _watch(world, who: str):
    from rental.models import AvailabilityWatch

    user = getattr(world.f0, who)
    return world.once(
        f"watch_{who}",
        lambda: AvailabilityWatch.objects.create(user=user, gpu_model=world.model, count=2),
    )


def watch(world):
    return {"pk": _watch(world, "alice").pk}


def other_watch(world):
    return {"pk": _watch(world, "gary").pk}


def action(post, note: str, **kwargs) -> Expect:
    return Expect(post=post, kwargs=lease, outsider_kwargs=other_lease, note=note, **kwargs)


RULES: dict[str, Expect] = {
    "api:lease-list": Expect(
        get=READ,
        post=(400, 400, 400, 400, 400, ANON),
        note="Everybody lists the leases they can see; an empty request is a 400.",
    ),
    "api:lease-detail": Expect(get=SEEN, kwargs=lease, outsider_kwargs=other_lease),
    "api:lease-cost": Expect(get=SEEN, kwargs=lease, outsider_kwargs=other_lease),
    "api:lease-approve": action(
        (404, 404, 200, 200, 404, ANON), "Managers of the project and admins decide."
    ),
    "api:lease-reject": action(
        (404, 404, 400, 400, 404, ANON), "A rejection without its comment is a 400."
    ),
    "api:lease-cancel": action(
        (200, 404, 200, 200, 404, ANON),
        "The requester and managers cancel a request.",
        service=NOT_THE_TOKENS,
    ),
    "api:lease-end": action(
        (200, 404, 200, 200, 404, ANON), "As the page's End button.", service=NOT_THE_TOKENS
    ),
    "api:lease-extend": action(
        (400, 404, 400, 400, 404, ANON), "No hours: a 400.", service=NOT_THE_TOKENS
    ),
    "api:lease-reschedule": action(
        (200, 404, 200, 200, 404, ANON), "Nothing to change given: the booking as it is."
    ),
    "api:lease-decide-extension": action(
        (404, 404, 400, 400, 404, ANON), "Managers decide; no decision given: a 400."
    ),
    "api:lease-stop": action(
        (409, 404, 409, 409, 403, ANON), "A waiting lease cannot stop; finance may not act."
    ),
    "api:lease-resume": action(
        (409, 404, 409, 409, 403, ANON), "Only a stopped lease resumes; finance may not act."
    ),
    "api:lease-end-stopped": action(
        (409, 404, 409, 409, 403, ANON), "Only a stopped lease; finance may not act."
    ),
    "api:lease-watch": action(
        (201, 404, 201, 403, 404, ANON), "Members watch; an admin who is no member may not."
    ),
    "api:instance-list": Expect(get=READ),
    "api:instance-detail": Expect(get=SEEN, kwargs=instance, outsider_kwargs=other_instance),
    "api:instance-still-using": Expect(
        post=(409, 404, 403, 403, 403, ANON),
        kwargs=instance,
        outsider_kwargs=other_instance,
        note="Only the requester answers an idle warning; there is none: a 409.",
    ),
    "api:instance-replace": Expect(
        post=(409, 404, 409, 409, 403, ANON),
        kwargs=instance,
        outsider_kwargs=other_instance,
        note="A healthy instance is not replaced (409); finance may not act.",
    ),
    "api:usage-list": Expect(get=READ),
    "api:usage-detail": Expect(get=SEEN, kwargs=usage, outsider_kwargs=other_usage),
    "api:availability-watch-list": Expect(
        get=READ, post=(400, 400, 400, 400, 400, ANON), note="Own watches only."
    ),
    "api:availability-watch-detail": Expect(
        get=(200, 404, 404, 404, 404, ANON),
        kwargs=watch,
        outsider_kwargs=other_watch,
        note="Nobody sees another person's watch, admins included.",
        service={"get": 404},  # alice's watch is not the token's
    ),
}
