"""Four eyes on approvals: a manager does not approve their own request while someone else
could (another manager of the project, or an admin). When nobody else could, the approval
goes through and its audit event says so (``self_approved``)."""

from typing import Any

from django.utils.translation import gettext as _

from portal import access
from portal.errors import NotPermitted
from portal.models import Project


def self_approval(actor: Any, *, requester_id: int | None, project: Project | int) -> bool:
    """True when ``actor`` approves their own request and nobody else could (allowed, to be
    marked in the audit); False when it is someone else's request. Raises NotPermitted
    when it is their own and another manager or an admin can decide it."""
    if actor is None or requester_id is None or actor.pk != requester_id:
        return False
    if access.another_decider_exists(actor, project):
        raise NotPermitted(
            _(
                "You asked for this yourself: another manager of the project or an admin "
                "must approve it."
            ),
            code="self_approval",
        )
    return True
