"""Who wants which event on which channel: each person's own choices, and for an event
they never chose for, the default of their role in the channel's project.

Managers hear about everything the portal tells them (requests to approve, budgets,
statements, and their own leases); engineers about their own leases. A person only ever
gets on a channel the messages the portal sends to them, and only while a member of the
channel's project.
"""

from collections.abc import Iterable
from typing import Any

from portal.messaging.models import Channel, Subscription
from portal.models import Membership
from portal.notifications import Event

Mode = Subscription.Mode

LEASE_EVENTS = frozenset(
    {
        Event.REQUEST_DECIDED,
        Event.LEASE_STARTED,
        Event.LEASE_ENDING,
        Event.IDLE_WARNING,
        Event.PREEMPTED,
        Event.BOOKING_STARTING,
    }
)
DEFAULTS: dict[str, frozenset[str]] = {
    Membership.Role.MANAGER: LEASE_EVENTS
    | {Event.APPROVAL_NEEDED, Event.BUDGET_THRESHOLD, Event.STATEMENT_READY},
    Membership.Role.ENGINEER: LEASE_EVENTS,
}


def default_mode(role: str | None, event: str) -> str:
    return Mode.INSTANT if event in DEFAULTS.get(role or "", frozenset()) else Mode.OFF


def choices_of(user: Any, channel: Channel, role: str | None) -> dict[str, str]:
    """Every event's mode for ``user`` on ``channel``: their choice, else their role's."""
    chosen = dict(
        Subscription.objects.filter(user=user, channel=channel).values_list("event", "mode")
    )
    return {event: chosen.get(event, default_mode(role, event)) for event in Event.values}


def wanted(*, project_id: int, event: str, users: Iterable[Any]) -> list[tuple[Channel, Any, str]]:
    """(channel, user, mode) for each of the project's channels and each of ``users``
    who wants ``event`` there, instantly or in the digest. Three queries."""
    people = {user.pk: user for user in users}
    if not people:
        return []
    channels = list(Channel.objects.filter(project_id=project_id).order_by("pk"))
    if not channels:
        return []
    role_of = dict(
        Membership.objects.filter(project_id=project_id, user_id__in=people).values_list(
            "user_id", "role"
        )
    )
    chosen = {
        (channel_id, user_id): mode
        for channel_id, user_id, mode in Subscription.objects.filter(
            channel__in=channels, event=event, user_id__in=people
        ).values_list("channel_id", "user_id", "mode")
    }
    found = []
    for channel in channels:
        for user_id, user in people.items():
            if user_id not in role_of:
                continue  # a project's channels are its members' (someone who left: none)
            mode = chosen.get((channel.pk, user_id), default_mode(role_of[user_id], event))
            if mode != Mode.OFF:
                found.append((channel, user, mode))
    return found
