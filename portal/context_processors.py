"""Navigation for the base layout, per role."""

from typing import Any

from django.http import HttpRequest

from portal import access


def navigation(request: HttpRequest) -> dict[str, Any]:
    user = request.user
    if not user.is_authenticated:
        return {}
    roles = access.roles(user)
    return {
        "nav": {
            "is_admin": access.is_admin(user),
            "is_finance": access.is_finance(user),
            "is_member": bool(roles),
            "is_manager": access.manages_any(user),
            "unread": unread_count(user),
        }
    }


def unread_count(user) -> int:
    """The user's unread notifications: as read with the session's user
    (``login_throttle.ThrottledModelBackend.get_user``), else counted here."""
    unread = getattr(user, "_portal_unread", None)
    if unread is None:
        unread = user.notifications.filter(read_at__isnull=True).count()
    return unread
